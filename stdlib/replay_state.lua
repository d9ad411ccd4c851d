-- crescent.replay_state: the Lua state a reduce-overhead replay depends on (stdlib/replay.lua).
--
-- A replay skips the function's Lua code, so everything that code could read must be as it was
-- when the plan was made. walk() lists it, starting from the function: the upvalues of every Lua
-- function reachable through upvalues, tables and metatables, the globals it read, and the
-- entries of the tables among them, MAX_DEPTH levels down (every module below a module, with its
-- `training` flag). Each non-tensor value becomes a guard (same object, same number bits); keys a
-- probe read while absent become guards too (recorded by watch_absent through a temporary
-- __index), and so do each table's length (#t, ipairs) and, for the tables a probe iterated with
-- pairs or next, their entry counts: a table that gains a key is seen. Tensors are candidates
-- instead: fetched again at every replay, the C++ plan checks them (vm/graph/replay.cpp).
-- checker() turns a walk into straight-line Lua that LuaJIT compiles: upvalues are read through
-- debug.upvaluejoin, never through debug.getupvalue.
local core = require "crescent.core"
local ffi = core.ffi
local is_tensor = core.is_tensor

local M = {}

M.MAX_DEPTH = 3      -- table levels below an upvalue or a global: t.a.b.c
M.MAX_VALUES = 4096  -- values a replay may have to check; more and the function is not replayed

-- Tables of the standard libraries and of crescent itself: their contents are never walked.
local LIBRARY = {}
local function mark_library(t)
  if type(t) ~= "table" or LIBRARY[t] then return end
  LIBRARY[t] = true
  for _, v in next, t do mark_library(v) end
  mark_library(debug.getmetatable(t))
end
for _, name in ipairs { "_G", "string", "table", "math", "io", "os", "debug", "coroutine", "bit", "jit", "package" } do
  local t = rawget(_G, name)
  if type(t) == "table" then LIBRARY[t] = true end
end
LIBRARY[ffi] = true
for name, mod in pairs(package.loaded) do
  if name == "crescent" or name:sub(1, 9) == "crescent." then mark_library(mod) end
end
M.LIBRARY = LIBRARY

local function is_lua_function(f)
  if type(f) ~= "function" then return false end
  local info = debug.getinfo(f, "S")
  return info.what ~= "C" and info.source:sub(1, 11) ~= "=[crescent]"
end
M.is_lua_function = is_lua_function

local function is_module(t)
  local mt = debug.getmetatable(t)
  return type(mt) == "table" and rawget(mt, "__module") == true
end
-- a module's own bookkeeping (stdlib/nn.lua): new public fields show in #_order
local BOOKKEEPING = { _order = true, _known = true, _buffers = true }

local function where(f)
  local info = debug.getinfo(f, "S")
  return info.short_src .. ":" .. info.linedefined
end

local function field(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return "." .. k end
  return "[" .. (type(k) == "string" and string.format("%q", k) or tostring(k)) .. "]"
end

-- Numbers are the same when their bits are (-0 is not 0; a NaN is the NaN it was).
local bits = ffi.new("union { double d; uint64_t u; }[2]")
local function same_number(a, b)
  if type(a) ~= "number" then return false end
  if a == b then return a ~= 0 or 1 / a == 1 / b end
  if a == a or b == b then return false end
  bits[0].d, bits[1].d = a, b
  return bits[0].u == bits[1].u
end
M.same_number = same_number
local function tricky(v) return type(v) == "number" and (v == 0 or v ~= v) end
M.tricky = tricky

local function show(v) return type(v) == "string" and string.format("%q", v) or tostring(v) end

local function same(a, b)
  if tricky(b) then return same_number(a, b) end
  return rawequal(a, b)
end

local function count(t)
  local n = 0
  for _ in next, t do n = n + 1 end
  return n
end

-- Where a value lives (a ref): upvalue i of f | t[k] raw | env[k] (a global) | #t |
-- getmetatable(t) | t's entry count.
local function read(ref)
  if ref.f then return select(2, debug.getupvalue(ref.f, ref.i)) end
  if ref.env then return ref.env[ref.k] end
  if ref.len then return #ref.len end
  if ref.meta then return getmetatable(ref.meta) end
  if ref.count then return count(ref.count) end
  return rawget(ref.t, ref.k)
end
M.read = read

-- walk(roots, globals[, iterated]) -> state, or nil and why. roots: a set of Lua functions;
-- globals: a list of { env =, k = } the function read; iterated: a set of the tables a probe
-- iterated with pairs or next (their entry counts become guards). state.guards: { ref, v, what };
-- state.cands: tensors { ref, what } in a fixed order; state.fns: the Lua functions;
-- state.tables: the tables walked (with their entry counts, for the purity check).
function M.walk(roots, globals, iterated)
  local st = { guards = {}, cands = {}, fns = {}, tables = {}, counts = {}, seen = {}, depth = {} }
  local add_value
  local function add_fn(f, root)
    if st.seen[f] or not (root or is_lua_function(f)) then return end
    st.seen[f] = true
    st.fns[#st.fns + 1] = f
    for i = 1, math.huge do
      local name, v = debug.getupvalue(f, i)
      if name == nil then break end
      add_value({ f = f, i = i }, v, 0, name, "an upvalue of the function at " .. where(f))
    end
  end
  -- (a table met again nearer a root is walked again from there: its deeper entries count too)
  local function add_table(t, depth, path, origin)
    if LIBRARY[t] then return end
    local module = is_module(t)
    if module then depth = 0 elseif depth > M.MAX_DEPTH then return end
    local at = st.depth[t]
    if at and at <= depth then return end
    st.depth[t] = depth
    if not at then st.tables[#st.tables + 1] = t end
    local n = 0
    for k, v in next, t do
      n = n + 1
      if not (module and BOOKKEEPING[k]) then add_value({ t = t, k = k }, v, depth + 1, path .. field(k), origin) end
    end
    st.counts[t] = n
    if module and type(rawget(t, "_order")) == "table" then
      add_value({ len = rawget(t, "_order") }, #rawget(t, "_order"), depth, "the field count of " .. path, origin)
    elseif not module then
      -- (the entry guards see keys removed, not added: t[#t + 1] = v changes #t, and ipairs stops
      -- at the first absent index, which #t covers unless the table has holes)
      local len, seq = #t, 0
      add_value({ len = t }, len, depth, "the length of " .. path, origin)
      while rawget(t, seq + 1) ~= nil do seq = seq + 1 end
      if seq ~= len then add_value({ t = t, k = seq + 1 }, nil, depth + 1, path .. field(seq + 1), origin) end
      if iterated and iterated[t] then add_value({ count = t }, n, depth, "the entry count of " .. path, origin) end
    end
    local mt = debug.getmetatable(t)
    if mt ~= nil then
      add_value({ meta = t }, getmetatable(t), depth, "the metatable of " .. path, origin)
      if type(mt) == "table" then add_table(mt, depth, "the metatable of " .. path, origin) end
    end
  end
  function add_value(ref, v, depth, path, origin)
    local what = path .. " (" .. origin .. ")"
    if is_tensor(v) then
      st.cands[#st.cands + 1] = { ref = ref, what = what }
      return
    end
    st.guards[#st.guards + 1] = { ref = ref, v = v, what = what }
    if #st.guards > M.MAX_VALUES then error(st, 0) end
    if type(v) == "function" then add_fn(v)
    elseif type(v) == "table" then add_table(v, depth, path, origin) end
  end
  local ok, err = pcall(function()
    for f in pairs(roots) do add_fn(f, true) end
    for _, g in ipairs(globals) do add_value({ env = g.env, k = g.k }, g.env[g.k], 0, tostring(g.k), "a global") end
  end)
  if not ok then
    if err == st then return nil, "it can read more Lua state than a replay checks (over " .. M.MAX_VALUES .. " values)" end
    error(err, 0)
  end
  st.seen, st.depth = nil, nil
  return st
end

-- The first guard of `st` that no longer holds, as a sentence; nil when all hold. With
-- `entries`, a table that gained or lost entries counts too (the probes' purity check).
function M.first_change(st, entries)
  for _, g in ipairs(st.guards) do
    local now = read(g.ref)
    if not same(now, g.v) then return g.what .. " changed (" .. show(g.v) .. " -> " .. show(now) .. ")" end
  end
  for _, a in ipairs(st.absent or {}) do
    if rawget(a.t, a.k) ~= nil then return "a table it read now has a field " .. field(a.k) end
  end
  if entries then
    for t, n in pairs(st.counts) do
      local m = 0
      for _ in next, t do m = m + 1 end
      if m ~= n then return "a table it can read gained or lost entries (" .. n .. " -> " .. m .. ")" end
    end
  end
end

-- While a probe runs: the keys it reads from the walked tables while they are absent (through a
-- temporary __index: a table without a metatable gets one, a metatable of the program's own gets
-- its __index wrapped). Returns the list { t =, k = } it fills and the function that undoes it.
local NOTE = {}
local TMP = { __index = function(t, k) NOTE[#NOTE + 1] = { t = t, k = k } end }
function M.watch_absent(st)
  local absent, undo = {}, {}
  NOTE = absent
  for _, t in ipairs(st.tables) do
    local mt = debug.getmetatable(t)
    if mt == nil then
      setmetatable(t, TMP)
      undo[#undo + 1] = function() if debug.getmetatable(t) == TMP then setmetatable(t, nil) end end
    elseif type(mt) == "table" and not LIBRARY[mt] and not undo[mt] then
      local orig = rawget(mt, "__index")
      local function index(u, k)
        absent[#absent + 1] = { t = u, k = k }
        if type(orig) == "table" then return orig[k] elseif orig ~= nil then return orig(u, k) end
      end
      rawset(mt, "__index", index)
      undo[mt] = true
      undo[#undo + 1] = function() if rawget(mt, "__index") == index then rawset(mt, "__index", orig) end end
    end
  end
  return absent, function()
    for i = #undo, 1, -1 do undo[i]() end
  end
end

-- checker(st, first) -> a function(cands) that checks every guard of st (and its absent keys),
-- puts its tensors into cands[first], cands[first + 1], ... and returns 0; or returns the
-- 1-based index of the first guard that failed (among st.guards, then st.absent), or -k when
-- candidate k is no longer a tensor. Generated in chunks (LuaJIT: <= 60 upvalues a function).
local CHUNK_ITEMS, CHUNK_UPVALUES = 60, 40

local function key_expr(k, K)
  if type(k) == "string" then return string.format("%q", k) end
  if type(k) == "number" and k == math.floor(k) and math.abs(k) < 2 ^ 52 then return string.format("%d", k) end
  K[#K + 1] = k
  return "K[" .. #K .. "]"
end

function M.checker(st, first)
  local items = {}
  for i, g in ipairs(st.guards) do items[#items + 1] = { ref = g.ref, guard = i, v = g.v } end
  for i, a in ipairs(st.absent or {}) do items[#items + 1] = { ref = { t = a.t, k = a.k }, guard = #st.guards + i, absent = true } end
  for k, c in ipairs(st.cands) do items[#items + 1] = { ref = c.ref, cand = k } end
  local chunks = {}
  local i = 1
  while i <= #items do
    local L, S, K, V, joins, nv = {}, {}, {}, {}, {}, 0  -- (nv: V's count; a value may be nil)
    local body = {}
    local j = i
    while j <= #items and j - i < CHUNK_ITEMS and #joins < CHUNK_UPVALUES do
      local it, ref, expr = items[j], items[j].ref, nil
      if ref.f then
        joins[#joins + 1] = ref
        expr = "p" .. #joins
      else
        local t = ref.t or ref.env or ref.len or ref.meta or ref.count
        S[#S + 1] = t
        local s = "S[" .. #S .. "]"
        if ref.len then expr = "#" .. s
        elseif ref.meta then expr = "getmetatable(" .. s .. ")"
        elseif ref.count then expr = "count(" .. s .. ")"
        elseif ref.env then expr = s .. "[" .. key_expr(ref.k, K) .. "]"
        else expr = "rawget(" .. s .. ", " .. key_expr(ref.k, K) .. ")" end
      end
      if it.cand then
        body[#body + 1] = string.format("do local v = %s; if not is_tensor(v) then return %d end; cands[%d] = ptr(v) end",
                                        expr, -it.cand, first + it.cand - 1)
      elseif it.absent then
        body[#body + 1] = string.format("if %s ~= nil then return %d end", expr, it.guard)
      else
        nv = nv + 1
        V[nv] = it.v
        local cmp = tricky(it.v) and "same_number" or "rawequal"
        body[#body + 1] = string.format("if not %s(%s, V[%d]) then return %d end", cmp, expr, nv, it.guard)
      end
      j = j + 1
    end
    L[#L + 1] = "local S, K, V, is_tensor, ptr, same_number, count = ..."
    if #joins > 0 then
      local names = {}
      for n = 1, #joins do names[n] = "p" .. n end
      L[#L + 1] = "local " .. table.concat(names, ", ")
    end
    L[#L + 1] = "return function(cands)"
    for _, b in ipairs(body) do L[#L + 1] = b end
    L[#L + 1] = "return 0"
    L[#L + 1] = "end"
    local make = assert(loadstring(table.concat(L, "\n"), "=[crescent] replay guards"))
    local fn = make(S, K, V, is_tensor, core.ptr, same_number, count)
    for u = 1, math.huge do  -- join each placeholder to the upvalue it stands for
      local name = debug.getupvalue(fn, u)
      if name == nil then break end
      local n = tonumber(name:match("^p(%d+)$"))
      if n then debug.upvaluejoin(fn, u, joins[n].f, joins[n].i) end
    end
    chunks[#chunks + 1] = fn
    i = j
  end
  if #chunks == 0 then return function() return 0 end end
  if #chunks == 1 then return chunks[1] end
  local L = { "local C = ...", "return function(cands)", "local r" }
  for n = 1, #chunks do L[#L + 1] = string.format("r = C[%d](cands); if r ~= 0 then return r end", n) end
  L[#L + 1] = "return 0"
  L[#L + 1] = "end"
  return assert(loadstring(table.concat(L, "\n"), "=[crescent] replay guards"))(chunks)
end

-- What item r of checker()'s answer refers to, as a sentence.
function M.describe(st, r)
  if r < 0 then return st.cands[-r].what .. " is no longer a tensor" end
  local g = st.guards[r]
  if g then return g.what .. " changed (" .. show(g.v) .. " -> " .. show(read(g.ref)) .. ")" end
  local a = st.absent[r - #st.guards]
  return "a table it read now has a field " .. field(a.k)
end

return M
