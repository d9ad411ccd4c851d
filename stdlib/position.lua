-- crescent.position: the user's file:line for errors and graph nodes. The first Lua frame above
-- the library's own frames is the user's. A user function that tail-calls (`return self.fc2(x)`)
-- leaves no frame; when a library entry that called it (nn.Module's __call, a compiled
-- function's call) finds another function below itself, the position is that function's
-- tail-call line, read from its bytecode (jit.util) when it has one such line.
local getinfo, getlocal, band = debug.getinfo, debug.getlocal, bit.band
local jutil = require "jit.util"

local M = {}

-- library function -> index of its local that holds the user function it calls
local entries = setmetatable({}, { __mode = "k" })
function M.entry(f, slot) entries[f] = slot end

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

-- The stack level of the user's frame at or above `level` (levels as debug.getinfo counts them
-- here: 1 is find itself), or nil and the "file:line" of a tail-calling user function, or nil.
function M.find(level)
  local inner  -- the function of the nearest Lua frame below
  while true do
    local info = getinfo(level, "Sf")
    if info == nil then return nil end
    if info.what ~= "C" then
      if not library(info.source) then return level end
      local slot = entries[info.func]
      if slot then
        local _, callee = getlocal(level, slot)
        local pos = callee ~= inner and dropped(callee)
        if pos then return nil, pos end
      end
      inner = info.func
    end
    level = level + 1
  end
end

return M
