-- The tests' pseudo-random numbers (xorshift32; math.random would change with the host's libc):
-- the differential test's cases (tests/diff/gen.lua) and the compile fuzzer's programs
-- (fuzz_gen.lua) draw from it, so a seed names the same case on every machine.
--   local rng = require("rng").new(seed); rng:int(1, 6); rng:pick(list)
local M = {}

local Rng = {}
Rng.__index = Rng
function M.new(seed)
  local s = bit.tobit(seed)
  local r = setmetatable({ s = s ~= 0 and s or 0x2545F491 }, Rng)
  for _ = 1, 4 do r:u32() end
  return r
end
function Rng:u32()
  local s = bit.bxor(self.s, bit.lshift(self.s, 13)); s = bit.bxor(s, bit.rshift(s, 17)); self.s = bit.bxor(s, bit.lshift(s, 5))
  return self.s % 4294967296
end
function Rng:float() return self:u32() / 4294967296 end
function Rng:int(a, b) return a + self:u32() % (b - a + 1) end
function Rng:chance(p) return self:float() < p end
function Rng:pick(t) return t[self:int(1, #t)] end
function Rng:shuffle(t) for i = #t, 2, -1 do local j = self:int(1, i); t[i], t[j] = t[j], t[i] end; return t end
function Rng:normal()  -- Box-Muller
  local u = math.max(self:float(), 1e-12)
  return math.sqrt(-2 * math.log(u)) * math.cos(2 * math.pi * self:float())
end
function Rng:weighted(t)  -- t = { {value, weight}, ... }
  local sum = 0
  for _, e in ipairs(t) do sum = sum + e[2] end
  local x = self:float() * sum
  for _, e in ipairs(t) do x = x - e[2]; if x < 0 then return e[1] end end
  return t[#t][1]
end

return M
