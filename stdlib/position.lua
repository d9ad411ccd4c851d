-- crescent.position: the user's file:line for errors and graph nodes. The first Lua frame above
-- the library's own frames is the user's. A user function that tail-calls (`return self.fc2(x)`)
-- leaves no frame; when a library entry that called it (nn.Module's __call, a compiled
-- function's call) finds another function below itself, the position is that function's
-- tail-call line, read from its bytecode (jit.util) when it has one such line. A plain user
-- function that tail-called an op is found from its caller: the call instruction at the caller's
-- line whose callee LuaJIT names as it names the op's frame (`local 'f'`) gives f.
local getinfo, getlocal, getupvalue, getmetatable = debug.getinfo, debug.getlocal, debug.getupvalue, debug.getmetatable
local band, rshift = bit.band, bit.rshift
local jutil = require "jit.util"
local funcbc, funck, funcinfo = jutil.funcbc, jutil.funck, jutil.funcinfo

local M = {}

-- library function -> index of its local that holds the user function it calls; and how many
-- of that function's parameters come before the entry's varargs (`self`: 1)
local entries, shifts = setmetatable({}, { __mode = "k" }), setmetatable({}, { __mode = "k" })
function M.entry(f, slot, shift) entries[f], shifts[f] = slot, shift or 0 end

local function library(source) return source:sub(1, 11) == "=[crescent]" end

-- The opcodes of CALLT and CALLMT: the last instruction of two probes.
local tail_ops = {}
for _, probe in ipairs({ function(g) return g() end, function(g, ...) return g(...) end }) do
  tail_ops[band(jutil.funcbc(probe, jutil.funcinfo(probe).bytecodes - 1), 0xff)] = true
end

-- The line of f's tail calls, or false when f has none or several lines of them.
local tail_lines = setmetatable({}, { __mode = "k" })
local function tail_line(f)
  if tail_lines[f] ~= nil then return tail_lines[f] end
  local line = false
  for pc = 1, jutil.funcinfo(f).bytecodes - 1 do
    if tail_ops[band(jutil.funcbc(f, pc), 0xff)] then
      local l = jutil.funcinfo(f, pc).currentline
      if line and l ~= line then line = false; break end
      line = l
    end
  end
  tail_lines[f] = line
  return line
end

-- "file:line" of a user function f whose frame a tail call replaced, or nil.
local function dropped(f)
  if type(f) ~= "function" then return nil end
  local info = getinfo(f, "S")
  if info.what == "C" or library(info.source) then return nil end
  local line = tail_line(f)
  return line and info.short_src .. ":" .. line or nil
end

-- Opcodes, from probes' bytecode: MOV, GGET, UGET, TGETS, and the calls CALL and CALLM.
local function op(f, pc) return band(funcbc(f, pc), 0xff) end
local upvalue
local OP = {
  MOV = op(function(a) local b = a; return b end, 1),
  GGET = op(function() return global_probe end, 1),
  UGET = op(function() return upvalue end, 1),
  TGETS = op(function(t) return t.k end, 1),
  CALL = op(function(g) g() end, 2),
  CALLM = op(function(g, ...) g(...) end, 3),
}
local BCM_DST, BCM_BASE = 1, 2  -- an instruction's A: the slot it writes / the base of the slots it clobbers

-- t[key] through tables and __index tables only (no metamethod runs).
local function lookup(t, key)
  for _ = 1, 64 do
    if type(t) == "table" and rawget(t, key) ~= nil then return rawget(t, key) end
    local mt = getmetatable(t)
    t = mt and rawget(mt, "__index")
    if type(t) ~= "table" then return nil end
  end
end

-- What slot `slot` of the frame at `level` (running f) held at instruction pc, named as LuaJIT
-- names it (lj_debug_slotname, whose backward scan this is): namewhat, name, value.
local function slot_source(level, f, pc, slot)
  local lname, v = getlocal(level + 1, slot + 1)
  if lname and lname:sub(1, 1) ~= "(" then return "local", lname, v end
  for p = pc - 1, 1, -1 do
    local ins, m = funcbc(f, p)
    local o, a, d = band(ins, 0xff), band(rshift(ins, 8), 0xff), rshift(ins, 16)
    if band(m, 7) == BCM_BASE and slot >= a then return nil end
    if band(m, 7) == BCM_DST and a == slot then
      if o == OP.MOV then  -- (not a tail call: the levels count this frame)
        local what, name, v = slot_source(level + 1, f, p, d)
        return what, name, v
      end
      if o == OP.GGET then return "global", funck(f, -d - 1), rawget(getfenv(f), funck(f, -d - 1)) end
      if o == OP.UGET then return "upvalue", getupvalue(f, d + 1) end
      if o ~= OP.TGETS then return nil end
      local b, key = rshift(ins, 24), funck(f, -band(d, 0xff) - 1)
      local prev = p > 1 and funcbc(f, p - 1)
      local method = prev and band(prev, 0xff) == OP.MOV and rshift(prev, 16) == b and band(rshift(prev, 8), 0xff) > a
      local _, _, t = slot_source(level + 1, f, p, b)
      return method and "method" or "field", key, lookup(t, key)
    end
  end
end

-- f's call instructions by line.
local calls = setmetatable({}, { __mode = "k" })
local function calls_at(f, line)
  if not calls[f] then
    local by_line = {}
    for pc = 1, funcinfo(f).bytecodes - 1 do
      local o = op(f, pc)
      if o == OP.CALL or o == OP.CALLM then
        local l = funcinfo(f, pc).currentline
        by_line[l] = by_line[l] or {}
        table.insert(by_line[l], pc)
      end
    end
    calls[f] = by_line
  end
  return calls[f][line]
end

-- "file:line" of the user function that the user's frame at `level` called and that left by a
-- tail call into the library's frame at level - 1; nil when it called the library directly.
local function tail_caller(level)
  local callee = getinfo(level, "nf")
  local info = getinfo(level + 1, "lf")
  if not callee or not callee.name or info.currentline <= 0 then return nil end
  local found
  for _, pc in ipairs(calls_at(info.func, info.currentline) or {}) do
    local what, name, v = slot_source(level + 1, info.func, pc, band(rshift(funcbc(info.func, pc), 8), 0xff))
    if what == callee.namewhat and name == callee.name then
      if found ~= nil and found ~= v then return nil end  -- several calls of that name: which one is unknown
      found = v
    end
  end
  return found ~= callee.func and dropped(found) or nil
end

-- The Lua frames from `level` up (levels as the loop's own function counts them): level, its
-- getinfo "Sf", whether it is the user's.
local function lua_frames(level)
  level = level - 1
  return function()
    while true do
      level = level + 1
      local info = getinfo(level + 1, "Sf")  -- (+ 1: this function's frame)
      if info == nil then return nil end
      if info.what ~= "C" then return level, info, not library(info.source) end
    end
  end
end

-- For the frame at `level` (as the caller counts) running f: when f is a library entry, the user
-- function it called, and true.
local function entry_callee(level, f)
  if not entries[f] then return nil, false end
  local _, callee = getlocal(level + 1, entries[f])
  return callee, true
end

-- The name of a local or upvalue of the first user frame at or above `level` whose value
-- `holds` accepts; or, for a user function a library entry called and whose frame is gone (a
-- tail call), the parameter that received it. nil when none.
function M.name_of(level, holds)
  for lv, info, user in lua_frames(level) do
    if user then
      for i = 1, 255 do
        local name, v = getlocal(lv, i)
        if name == nil then break end
        if name:sub(1, 1) ~= "(" and holds(v) then return name end
      end
      for i = 1, 255 do
        local name, v = getupvalue(info.func, i)
        if name == nil then break end
        if holds(v) then return name end
      end
      return nil
    end
    local callee, entry = entry_callee(lv, info.func)
    if entry then
      for i = 1, 255 do
        local name, v = getlocal(lv, -i)
        if name == nil then break end
        if holds(v) then return type(callee) == "function" and getlocal(callee, i + shifts[info.func]) or nil end
      end
    end
  end
end

-- The frames pcall adds between its caller and the function it calls.
local PCALL_FRAMES = select(2, pcall(function() return getinfo(2, "f").func == pcall and 1 or 0 end))

-- The stack level of the user's frame at or above `level` (levels as debug.getinfo counts them
-- here: 1 is find itself), or nil and the "file:line" of a tail-calling user function, or nil.
function M.find(level)
  local inner  -- the function of the nearest Lua frame below
  for lv, info, user in lua_frames(level) do
    if user then
      if lv > level then
        local ok, pos = pcall(tail_caller, lv + PCALL_FRAMES)
        if ok and pos then return nil, pos end
      end
      return lv
    end
    local callee, entry = entry_callee(lv, info.func)
    if entry then
      local pos = callee ~= inner and dropped(callee)
      if pos then return nil, pos end
    end
    inner = info.func
  end
end

return M
