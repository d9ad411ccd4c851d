-- crescent.replay: mode = "reduce-overhead" (API.md section 5, DESIGN.md execution model step 6).
--
-- A call is replayed without running Lua - guard checks and the compiled graph only - when the
-- function is proven free of graph breaks and of Lua side effects. The first calls (until its
-- graph is compiled) are probes, run normally but watched:
--   * globals: the function and every Lua function it reaches run with a proxy environment;
--     writing a global, or reading print/io/os/debug/require/load*/setfenv/rawset/
--     setmetatable/collectgarbage or math.random/randomseed, makes it impure;
--   * upvalues: those of the function and of every Lua function reachable from it (upvalues,
--     globals it read, tables one level down) are snapshot before and after each probe, tables
--     shallowly; any difference makes it impure;
--   * the call must be one graph with no break, take only tensors, numbers, booleans, strings
--     and nil, return only tensors and such values, and every graph input must be an argument
--     or a tensor reachable from an upvalue (model weights: they are looked up again at each
--     call, so reassigning one is seen).
-- Replays then require the same non-tensor arguments (they may steer control flow) and the
-- recorded tensor guards; anything else runs the normal compiled path. When unsure, no replay:
-- deep writes into tables (t.a.b = v), side effects of C functions and of coroutines are not seen,
-- so such functions are refused only when one of the rules above catches them.
local core = require "crescent.core"
local ffi, api, ctx = core.ffi, core.api, core.ctx
local is_tensor, wrap, ptr = core.is_tensor, core.wrap, core.ptr

local M = {}

local IMPURE = { print = 1, io = 1, os = 1, debug = 1, require = 1, collectgarbage = 1, dofile = 1, load = 1,
                 loadfile = 1, loadstring = 1, setfenv = 1, getfenv = 1, rawset = 1, setmetatable = 1, module = 1 }
-- library functions with hidden state (a replay would freeze their results): read through the
-- proxy, their tables are watched
local IMPURE_FIELDS = { math = { random = true, randomseed = true } }
local LIBRARY = {}  -- tables whose contents are never snapshot
for _, name in ipairs { "_G", "string", "table", "math", "io", "os", "debug", "coroutine", "bit", "jit", "package" } do
  local t = rawget(_G, name)
  if t then LIBRARY[t] = true end
end
LIBRARY[ffi] = true

local function is_lua_function(f)
  return type(f) == "function" and debug.getinfo(f, "S").what ~= "C" and
         debug.getinfo(f, "S").source:sub(1, 11) ~= "=[crescent]"
end

-- Every Lua function reachable from the roots through upvalues and tables one level down.
local function reachable(roots)
  local seen, list = {}, {}
  local function visit(f, depth)
    if seen[f] or depth > 4 then return end
    seen[f] = true
    list[#list + 1] = f
    for i = 1, math.huge do
      local name, v = debug.getupvalue(f, i)
      if name == nil then break end
      if is_lua_function(v) then visit(v, depth + 1)
      elseif type(v) == "table" and not LIBRARY[v] and not is_tensor(v) then
        for _, x in pairs(v) do if is_lua_function(x) then visit(x, depth + 1) end end
      end
    end
  end
  for f in pairs(roots) do visit(f, 0) end
  return list
end

local function snapshot(fns)
  local snap = {}
  for _, f in ipairs(fns) do
    for i = 1, math.huge do
      local name, v = debug.getupvalue(f, i)
      if name == nil then break end
      local copy
      if type(v) == "table" and not LIBRARY[v] and not is_tensor(v) then
        copy = {}
        for k, x in pairs(v) do copy[k] = x end
      end
      snap[#snap + 1] = { f = f, i = i, v = v, copy = copy }
    end
  end
  return snap
end

local function changed(snap)
  for _, s in ipairs(snap) do
    local name, v = debug.getupvalue(s.f, s.i)
    if not rawequal(v, s.v) then return "upvalue '" .. name .. "' was reassigned" end
    if s.copy then
      for k, x in pairs(v) do if not rawequal(s.copy[k], x) then return "table upvalue '" .. name .. "' was modified" end end
      for k in pairs(s.copy) do if rawget(v, k) == nil then return "table upvalue '" .. name .. "' was modified" end end
    end
  end
end

local function proxy_env(env, watch)
  return setmetatable({}, {
    __index = function(_, k)
      if IMPURE[k] then watch.impure = watch.impure or ("it uses the global '" .. tostring(k) .. "'") end
      local v = env[k]
      local fields = IMPURE_FIELDS[k]
      if fields and type(v) == "table" then
        return setmetatable({}, { __index = function(_, f)
          if fields[f] then watch.impure = watch.impure or ("it uses " .. k .. "." .. tostring(f)) end
          return v[f]
        end })
      end
      if is_lua_function(v) and not watch.roots[v] then watch.roots[v] = true; watch.grew = true end
      return v
    end,
    __newindex = function(_, k, v)
      watch.impure = watch.impure or ("it writes the global '" .. tostring(k) .. "'")
      env[k] = v
    end,
  })
end

-- Tensors reachable from the function's upvalues (weights), with how to find them again.
local function upvalue_tensors(fn)
  local paths = {}
  for i = 1, math.huge do
    local name, v = debug.getupvalue(fn, i)
    if name == nil then break end
    if is_tensor(v) then paths[#paths + 1] = { i }
    elseif type(v) == "table" and not LIBRARY[v] then
      for k, x in pairs(v) do
        if is_tensor(x) then paths[#paths + 1] = { i, k }
        elseif type(x) == "table" and not is_tensor(x) then
          for k2, y in pairs(x) do if is_tensor(y) then paths[#paths + 1] = { i, k, k2 } end end
        end
      end
    end
  end
  return paths
end

local function follow(fn, path)
  local _, v = debug.getupvalue(fn, path[1])
  for j = 2, #path do
    if type(v) ~= "table" or is_tensor(v) then return nil end
    v = v[path[j]]
  end
  return v
end

local VALUE = { number = true, boolean = true, string = true, ["nil"] = true }
local OUTCAP = 64
local OUTS = ffi.new("cr_tensor*[?]", OUTCAP)

function M.wrap(fn, id, call)
  local st = { roots = { [fn] = true } }
  local cands = ffi.new("cr_tensor*[?]", 256)

  local specialise  -- (defined with the plan's helpers below)
  local function refuse(why)
    st.refused = why
    if os.getenv("CRESCENT_LOGS") then io.stderr:write("[crescent recompiles] reduce-overhead: no replay: ", why, "\n") end
  end

  -- Puts the call's tensors (arguments, then upvalue tensors) into cands; false on a mismatch.
  local function gather(n, ...)
    if n ~= st.nargs then return false end
    for i = 1, n do
      local v = (select(i, ...))
      if st.kinds[i] == "tensor" then
        if not is_tensor(v) then return false end
        cands[i - 1] = ptr(v)
      elseif v ~= st.values[i] then
        return false
      end
    end
    for k, path in ipairs(st.paths) do
      local v = follow(fn, path)
      if not is_tensor(v) then return false end
      cands[n + k - 1] = ptr(v)
    end
    return true
  end

  local function results(m)
    local out, k = {}, 0
    for j, r in ipairs(st.rets) do
      if r == "tensor" then out[j] = wrap(OUTS[k]); k = k + 1 else out[j] = st.retvals[j] end
    end
    return unpack(out, 1, #st.rets)
  end

  -- The replay of this plan as straight-line Lua (generated source, as crescent.binding's op
  -- wrappers): its argument count, kinds and results are known, and the loops of gather() /
  -- results() over one or two items made LuaJIT give up on tracing the call (loop unrolling
  -- limits), so every replay ran in the interpreter. Upvalue tensors are still looked up through
  -- debug.getupvalue (which LuaJIT does not compile). Anything unexpected goes to `slow`.
  local slow, refused  -- the general path, and what a failed replay does (set below)
  function specialise()
    local n, np = st.nargs, #st.paths
    local L = { "local is_tensor, cands, values, paths, follow, fn, api, ctx, id, OUTS, OUTCAP, wrap, retvals, core, slow, refused, ptr = ...",
                "return function(...)" }
    local names = {}
    for i = 1, n do names[i] = "a" .. i end
    if n > 0 then L[#L + 1] = "local " .. table.concat(names, ", ") .. " = ..." end
    L[#L + 1] = string.format("if select('#', ...) ~= %d then return slow(...) end", n)
    for i = 1, n do
      if st.kinds[i] == "tensor" then
        L[#L + 1] = string.format("if not is_tensor(a%d) then return slow(...) end; cands[%d] = ptr(a%d)", i, i - 1, i)
      else
        L[#L + 1] = string.format("if a%d ~= values[%d] then return slow(...) end", i, i)
      end
    end
    for k = 1, np do
      L[#L + 1] = string.format("local u%d = follow(fn, paths[%d]); if not is_tensor(u%d) then return slow(...) end; cands[%d] = ptr(u%d)",
                                k, k, k, n + k - 1, k)
    end
    L[#L + 1] = string.format("local m = api.cap_replay(ctx, id, cands, %d, OUTS, OUTCAP)", n + np)
    L[#L + 1] = "if m < 0 then return refused(m, ...) end"
    L[#L + 1] = "if ctx.service ~= 0 then core.service() end"
    local outs, k = {}, 0
    for j, r in ipairs(st.rets) do
      if r == "tensor" then outs[j] = string.format("wrap(OUTS[%d])", k); k = k + 1
      else outs[j] = string.format("retvals[%d]", j) end
    end
    L[#L + 1] = "return " .. table.concat(outs, ", ")
    L[#L + 1] = "end"
    local chunk = assert(loadstring(table.concat(L, "\n"), "=[crescent] replay of a compiled function"))
    return chunk(is_tensor, cands, st.values, st.paths, follow, fn, api, ctx, id, OUTS, OUTCAP, wrap, st.retvals, core, slow, refused, ptr)
  end

  local function try_plan(n, rets, ...)
    st.nargs, st.kinds, st.values = n, {}, {}
    for i = 1, n do
      local v = (select(i, ...))
      if is_tensor(v) then st.kinds[i] = "tensor"
      elseif VALUE[type(v)] then st.kinds[i] = "value"; st.values[i] = v
      else return refuse("argument " .. i .. " is a " .. type(v)) end
    end
    st.rets, st.retvals = {}, {}
    for j = 1, rets.n do
      local v = rets[j]
      if is_tensor(v) then st.rets[j] = "tensor"
      elseif VALUE[type(v)] then st.rets[j] = "value"; st.retvals[j] = v
      else return refuse("it returns a " .. type(v)) end
    end
    st.paths = upvalue_tensors(fn)
    if n + #st.paths > 256 then return refuse("too many tensors") end
    gather(n, ...)
    local rc = api.cap_plan(ctx, id, cands, n + #st.paths)
    if rc < 0 then return refuse(ffi.string(api.last_error(ctx))) end
    st.plan = rc == 1
    st.fast = st.plan and specialise() or nil
  end

  local function probe(...)
    local fns = reachable(st.roots)
    local snap = snapshot(fns)
    local watch = { roots = st.roots, grew = false }
    local envs = {}
    for _, f in ipairs(fns) do envs[f] = getfenv(f); setfenv(f, proxy_env(envs[f], watch)) end
    local rets = { n = 0 }
    local ok, err = pcall(function(...) rets = { n = select("#", ...), ... } end, call(...))
    for f, e in pairs(envs) do setfenv(f, e) end
    if not ok then error(err, 0) end
    local why = watch.impure or changed(snap)
    if why then refuse(why)
    elseif not watch.grew then try_plan(select("#", ...), rets, ...) end
    return unpack(rets, 1, rets.n)
  end

  -- (the generated replay falls back here; a failed replay runs the function normally, as the
  -- checks in gather() and cap_replay() decide)
  -- cap_replay said m < 0: a guard failed (-3: the call runs normally), the plan is gone (-4,
  -- T.compiler.reset(): probe again), or an error
  function refused(m, ...)
    if m == -4 then st.plan = false; return probe(...) end
    if m ~= -3 then core.raise(m) end
    return call(...)
  end
  slow = function(...)
    if st.plan then
      local n = select("#", ...)
      if gather(n, ...) then
        local m = api.cap_replay(ctx, id, cands, n + #st.paths, OUTS, OUTCAP)
        if m >= 0 then
          if ctx.service ~= 0 then core.service() end
          return results(m)
        end
        return refused(m, ...)
      end
      return call(...)
    end
    if st.refused then return call(...) end
    return probe(...)
  end
  return function(...)
    local fast = st.fast
    if fast and st.plan then return fast(...) end
    return slow(...)
  end
end

return M
