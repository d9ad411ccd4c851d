-- crescent.replay: mode = "reduce-overhead" (API.md section 5, DESIGN.md execution model step 6).
--
-- A call is replayed without running Lua - guard checks and the compiled graph only - when the
-- function is proven free of graph breaks and of Lua side effects. The first calls (until its
-- graph is compiled) are probes, run normally but watched:
--   * globals: the function and every Lua function it can reach run with a proxy environment;
--     writing a global, or reading print/io/os/debug/require/load*/setfenv/rawset/
--     setmetatable/collectgarbage or math.random/randomseed, makes it impure;
--   * the Lua state it can read (crescent.replay_state: upvalues of the functions it reaches,
--     the globals it read, tables below them, modules) must be the same after the call (a table
--     that gained or lost entries included); any difference makes it impure;
--   * the call must be one graph with no break, take only tensors, numbers, booleans, strings
--     and nil, return only tensors and such values, and every graph input must be an argument
--     or a tensor of that state (model weights: looked up again at each call, so reassigning
--     one is seen).
-- A replay then requires the same non-tensor arguments (numbers bit for bit: -0 is not 0), the
-- same Lua state (every value of the walk, tables' lengths, the entry counts of the tables the
-- probe iterated, and every key the probe read while absent still absent), the same T.autocast
-- state, and the recorded tensor guards (vm/graph/replay.cpp: metadata, aliasing, which
-- arguments and state tensors are the same tensor and which distinct, their autograd state). A
-- changed argument or tensor runs the normal compiled path; a changed Lua state probes again,
-- and after MAX_STATE_CHANGES the function is not replayed.
local core = require "crescent.core"
local state = require "crescent.replay_state"
local ffi, api, ctx = core.ffi, core.api, core.ctx
local is_tensor, wrap, ptr = core.is_tensor, core.wrap, core.ptr

local M = {}

M.MAX_STATE_CHANGES = 8

local IMPURE = { print = 1, io = 1, os = 1, debug = 1, require = 1, collectgarbage = 1, dofile = 1, load = 1,
                 loadfile = 1, loadstring = 1, setfenv = 1, getfenv = 1, rawset = 1, setmetatable = 1, module = 1 }
-- library functions with hidden state (a replay would freeze their results): while a probe runs
-- they are wrappers in their own tables that note a call (watch_impure_fields)
local IMPURE_FIELDS = { [math] = { "math", { "random", "randomseed" } } }

local function watch_impure_fields(watch)
  local saved = {}
  for t, spec in pairs(IMPURE_FIELDS) do
    for _, f in ipairs(spec[2]) do
      local real = rawget(t, f)
      if type(real) == "function" then
        saved[#saved + 1] = { t, f, real }
        t[f] = function(...)
          watch.impure = watch.impure or ("it uses " .. spec[1] .. "." .. f)
          return real(...)
        end
      end
    end
  end
  return function()
    for _, s in ipairs(saved) do
      if rawget(s[1], s[2]) ~= nil then s[1][s[2]] = s[3] end
    end
  end
end

-- pairs and next as a probe's code finds them (globals through its proxy environment, upvalues
-- holding them switched for the probe) note the tables iterated, whose entry counts a replay
-- checks (crescent.replay_state). (Tail calls: an error names the caller's line, as eager.)
local ITERATORS = { [pairs] = "pairs", [next] = "next" }
local function noting(watch, real)
  return function(t, ...)
    if not watch.done and type(t) == "table" then watch.iterated[t] = true end
    return real(t, ...)
  end
end
local function watch_iteration(before, watch)
  watch.iterators = { [pairs] = noting(watch, pairs), [next] = noting(watch, next) }
  local switched = {}
  for _, g in ipairs(before.guards) do
    local ref = g.ref
    if ref.f and ITERATORS[g.v] and rawequal(select(2, debug.getupvalue(ref.f, ref.i)), g.v) then
      debug.setupvalue(ref.f, ref.i, watch.iterators[g.v])
      switched[#switched + 1] = g
    end
  end
  return function()
    for _, g in ipairs(switched) do
      local ref = g.ref
      if rawequal(select(2, debug.getupvalue(ref.f, ref.i)), watch.iterators[g.v]) then
        debug.setupvalue(ref.f, ref.i, g.v)
      end
    end
  end
end

-- The standard library tables a function may add to or change (string.hits = ...,
-- package.loaded.m = ...): their contents are not walked, so a probe compares them before and after.
local LIBRARY_TABLES = { string = string, table = table, math = math, coroutine = coroutine, bit = bit, package = package,
                         ["package.loaded"] = package.loaded, ["package.preload"] = package.preload }
local function library_snapshot()
  local snap = {}
  for name, t in pairs(LIBRARY_TABLES) do
    local copy = {}
    for k, v in next, t do copy[k] = v end
    snap[name] = copy
  end
  return snap
end
local function library_change(snap)
  for name, t in pairs(LIBRARY_TABLES) do
    local copy = snap[name]
    for k, v in next, t do
      if copy[k] ~= v then return "it writes " .. name .. "." .. tostring(k) end
    end
    for k in next, copy do
      if rawget(t, k) == nil then return "it writes " .. name .. "." .. tostring(k) end
    end
  end
end

-- A proxy for a function's environment during a probe: it records the globals read (each once)
-- and notes reads of values the walk before the call did not reach (`grew`: probe again). The
-- environment itself (`_G`) reads as the proxy, so that writes through it are seen; after the
-- probe (watch.done) the proxy only forwards, for closures the probe made, which keep it.
local function proxy_env(env, watch)
  local proxy
  proxy = setmetatable({}, {
    __index = function(_, k)
      local v = env[k]
      if watch.done then return v end
      if IMPURE[k] then watch.impure = watch.impure or ("it uses the global '" .. tostring(k) .. "'") end
      if not watch.read[env] then watch.read[env] = {} end
      if not watch.read[env][k] then
        watch.read[env][k] = true
        watch.globals[#watch.globals + 1] = { env = env, k = k }
      end
      if rawequal(v, env) then return proxy end
      if ITERATORS[v] then return watch.iterators[v] end
      if state.is_lua_function(v) and not watch.roots[v] then watch.roots[v] = true; watch.grew = true end
      if type(v) == "table" and not watch.known[v] and not state.LIBRARY[v] then watch.grew = true end
      return v
    end,
    __newindex = function(_, k, v)
      if not watch.done then watch.impure = watch.impure or ("it writes the global '" .. tostring(k) .. "'") end
      env[k] = v
    end,
    __pairs = function() return pairs(env) end,
  })
  return proxy
end

local VALUE = { number = true, boolean = true, string = true, ["nil"] = true }
local pack = core.pack
local OUTCAP = 64
local OUTS = ffi.new("cr_tensor*[?]", OUTCAP)

local function log(msg)
  if core.setting("CRESCENT_LOGS") then io.stderr:write("[crescent recompiles] reduce-overhead: ", msg, "\n") end
end

function M.wrap(fn, id, call)
  local st = { roots = { [fn] = true }, globals = {}, changes = 0 }
  local probe, slow, refused, changed  -- (defined below)

  local function refuse(why)
    st.refused, st.plan, st.fast = why, false, nil
    log("no replay: " .. why)
  end

  -- The replay of this plan as straight-line Lua (generated source, as crescent.binding's op
  -- wrappers), so LuaJIT compiles it: the argument checks, the Lua state's guards and tensors
  -- (state.checker), the C++ replay, the results. Anything unexpected goes to `slow`.
  local function specialise(check, ncands)
    local n = st.nargs
    local L = { "local is_tensor, cands, values, api, ctx, id, OUTS, OUTCAP, wrap, retvals, core, slow, refused, changed, ptr, check, same_number, mode, autocast, retobjs = ...",
                "return function(...)" }
    local names = {}
    for i = 1, n do names[i] = "a" .. i end
    if n > 0 then L[#L + 1] = "local " .. table.concat(names, ", ") .. " = ..." end
    L[#L + 1] = string.format("if select('#', ...) ~= %d then return slow(...) end", n)
    L[#L + 1] = "if mode(" .. ffi.C.CR_AG_AUTOCAST_BOTH .. ", -1) ~= autocast then return slow(...) end"  -- (the plan's casts are the probe's)
    for i = 1, n do
      if st.kinds[i] == "tensor" then
        L[#L + 1] = string.format("if not is_tensor(a%d) then return slow(...) end; cands[%d] = ptr(a%d)", i, i - 1, i)
      elseif state.tricky(st.values[i]) then
        L[#L + 1] = string.format("if not same_number(a%d, values[%d]) then return slow(...) end", i, i)
      else
        L[#L + 1] = string.format("if a%d ~= values[%d] then return slow(...) end", i, i)
      end
    end
    L[#L + 1] = "local r = check(cands); if r ~= 0 then return changed(r, ...) end"
    L[#L + 1] = string.format("local m = api.cap_replay(ctx, id, cands, %d, OUTS, OUTCAP)", ncands)
    L[#L + 1] = "if m < 0 then return refused(m, ...) end"
    L[#L + 1] = "if ctx.service ~= 0 then core.service() end"
    -- (a result that is an argument, an earlier result or a tensor of the Lua state is that object,
    -- as the plain call returns it; the others are new handles. Every output is wrapped: wrap
    -- claims the references the replay handed, in order.)
    local outs, k = {}, 0
    for j, r in ipairs(st.rets) do
      if r == "tensor" then
        local src = st.retsrc[j]
        outs[j] = string.format("wrap(OUTS[%d])", k)
        if src and src.arg then outs[j] = string.format("(%s and a%d)", outs[j], src.arg)
        elseif src and src.dup then outs[j] = string.format("(%s and r%d)", outs[j], src.dup)
        elseif src then outs[j] = string.format("(%s and retobjs[%d])", outs[j], j) end
        k = k + 1
      else
        outs[j] = string.format("retvals[%d]", j)
      end
      L[#L + 1] = string.format("local r%d = %s", j, outs[j])
      outs[j] = "r" .. j
    end
    L[#L + 1] = "return " .. table.concat(outs, ", ")
    L[#L + 1] = "end"
    local chunk = assert(loadstring(table.concat(L, "\n"), "=[crescent] replay of a compiled function"))
    return chunk(is_tensor, st.cands, st.values, api, ctx, id, OUTS, OUTCAP, wrap, st.retvals, core, slow, refused,
                 changed, ptr, check, state.same_number, api.autograd.mode, st.autocast, st.retobjs)
  end

  -- After a clean probe: the plan for this call's arguments, results and Lua state (`walked`).
  local function try_plan(n, rets, walked, ...)
    st.nargs, st.kinds, st.values = n, {}, {}
    st.autocast = api.autograd.mode(ffi.C.CR_AG_AUTOCAST_BOTH, -1)  -- T.autocast's states (crescent.amp)
    for i = 1, n do
      local v = (select(i, ...))
      if is_tensor(v) then st.kinds[i] = "tensor"
      elseif VALUE[type(v)] then st.kinds[i] = "value"; st.values[i] = v
      else return refuse("argument " .. i .. " is a " .. type(v)) end
    end
    st.rets, st.retvals, st.retsrc, st.retobjs = {}, {}, {}, {}
    local state_tensors = {}
    for _, c in ipairs(walked.cands) do state_tensors[state.read(c.ref)] = true end
    for j = 1, rets.n do
      local v = rets[j]
      if is_tensor(v) then
        st.rets[j] = "tensor"
        for i = 1, n do
          if not st.retsrc[j] and rawequal(v, (select(i, ...))) then st.retsrc[j] = { arg = i } end
        end
        for e = 1, j - 1 do
          if not st.retsrc[j] and rawequal(v, rets[e]) then st.retsrc[j] = { dup = e } end
        end
        if not st.retsrc[j] and state_tensors[v] then st.retsrc[j], st.retobjs[j] = { state = true }, v end
      elseif VALUE[type(v)] then st.rets[j] = "value"; st.retvals[j] = v
      else return refuse("it returns a " .. type(v)) end
    end
    local ncands = n + #walked.cands
    local cands = ffi.new("cr_tensor*[?]", math.max(ncands, 1))
    for i = 1, n do
      if st.kinds[i] == "tensor" then cands[i - 1] = ptr((select(i, ...))) end
    end
    for k, c in ipairs(walked.cands) do cands[n + k - 1] = ptr(state.read(c.ref)) end
    local rc = api.cap_plan(ctx, id, cands, ncands, n)
    if rc < 0 then return refuse(ffi.string(api.last_error(ctx))) end
    if rc == 1 then
      st.plan, st.cands, st.walked = true, cands, walked
      st.fast = specialise(state.checker(walked, n), ncands)
    end
  end

  function probe(...)
    if type(fn) == "function" and debug.getinfo(fn, "S").what == "C" then
      refuse("it is a C function (its side effects are not seen)")
      return call(...)
    end
    local before, why = state.walk(st.roots, st.globals)
    if not before then refuse(why); return call(...) end
    local known = {}
    for _, t in ipairs(before.tables) do known[t] = true end
    local watch = { roots = st.roots, grew = false, globals = {}, read = {}, known = known, iterated = {} }
    local envs = {}
    for _, f in ipairs(before.fns) do envs[f] = getfenv(f); setfenv(f, proxy_env(envs[f], watch)) end
    local absent, undo = state.watch_absent(before)
    local library = library_snapshot()
    local undo_fields = watch_impure_fields(watch)
    local undo_iteration = watch_iteration(before, watch)
    local rets = { n = 0 }
    -- (the call inside the pcall: an error must not leave the watch in place)
    local ok, err = pcall(function(...) rets = pack(call(...)) end, ...)
    watch.done = true
    undo_iteration()
    undo_fields()
    undo()
    for f, e in pairs(envs) do setfenv(f, e) end
    if not ok then error(err, 0) end
    st.globals = watch.globals
    why = watch.impure or library_change(library) or state.first_change(before, true)
    if why then
      refuse(why)
    elseif not watch.grew then
      local after, too_big = state.walk(st.roots, st.globals, watch.iterated)
      if not after then refuse(too_big)
      else
        after.absent = absent
        try_plan(select("#", ...), rets, after, ...)
      end
    end
    return unpack(rets, 1, rets.n)
  end

  -- The generated replay's exits. changed: a guard of the Lua state failed (r: which one).
  function changed(r, ...)
    local why = state.describe(st.walked, r)
    st.changes = st.changes + 1
    st.plan, st.fast = false, nil
    if st.changes >= M.MAX_STATE_CHANGES then
      refuse("the Lua state it reads keeps changing (the last change: " .. why .. ")")
      return call(...)
    end
    log("the Lua state changed, probing again: " .. why)
    return slow(...)
  end
  -- refused: cap_replay said m < 0: a tensor guard failed (-3: the call runs normally), the plan
  -- is gone (-4, T.compiler.reset(): probe again), or an error
  function refused(m, ...)
    if m == -4 then st.plan, st.fast = false, nil; return slow(...) end
    if m ~= -3 then core.raise(m) end
    return call(...)
  end
  -- slow: no plan yet (probe), none ever (run normally), or other arguments than the plan's.
  -- Inside another capture (a compiled caller, T.explain) the call runs plainly, unprobed: it
  -- records into that capture, not a call of its own.
  function slow(...)
    if st.refused or api.cap_active(ctx) ~= 0 then return call(...) end
    if not st.plan then return probe(...) end
    return call(...)
  end
  return function(...)
    local fast = st.fast
    if fast then return fast(...) end
    return slow(...)
  end
end

return M
