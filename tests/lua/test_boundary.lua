-- Regressions found by the fuzz_ops target (tests/fuzz/, scripts/fuzz.sh), which calls registry
-- ops with arguments of random kinds: each call must give a result or a Lua error naming the op,
-- with no undefined behaviour on the way (the sanitizer build checks that part).
local T = require "crescent"
local S = expect

describe("op arguments at the Lua boundary", function()
  it("reject an options argument that is not a table, naming the op", function()
    S.errors(function() local _ = T.gelu(T.ones(2), "tanh") end,  -- no tail call: the line is this one
      "test_boundary.lua:%d+: gelu: options expected a table %(keys: approximate%), got string \"tanh\"")
    S.errors(function() return T.zeros_like(T.ones(2), T.ones(2)) end, "zeros_like: options expected a table", "got float32 tensor")
    S.errors(function() return T.add(T.ones(2), T.ones(2), true) end, "add: options expected a table %(keys: alpha%), got boolean")
    S.errors(function() return T.sum(T.ones(2), 1, false, "float64") end, "sum: options expected a table", "got string")
    S.errors(function() return T.eye(2, 2, 3) end, "eye: options expected a table %(keys: device, dtype%), got number")
    S.errors(function() return T.tensor({ 1 }, T.ones(1)) end, "tensor: options expected a table")
  end)
  it("reject sizes whose strides overflow even when a zero size leaves no elements", function()
    S.errors(function() return T.rand(0, 2 ^ 46, 2 ^ 31 - 1) end, "rand: tensor of shape {0,70368744177664,2147483647} is too large")
    S.errors(function() return T.zeros(2 ^ 40, 0, 2 ^ 40) end, "zeros: tensor of shape .* is too large")
    S.eq(T.zeros(0, 2 ^ 40).shape, { 0, 2 ^ 40 })
  end)
  it("reject as_strided layouts whose reach overflows", function()
    local x = T.zeros(4, 3)
    S.errors(function() return x:as_strided({ 2 ^ 40 }, { 2 ^ 40 }, 3) end,
      "as_strided: size {1099511627776}, stride {1099511627776} and offset 3 reach beyond element 2%^63")
    S.errors(function() return x:as_strided({ 2 ^ 62, 3 }, { 2, 2 ^ 62 }) end, "as_strided: .* reach beyond element 2%^63")
    -- no elements, but a product of sizes (numel's running product) beyond int64
    S.errors(function() return T.arange(5):as_strided({ 2 ^ 46, 2 ^ 46, 0, 0 }, { 0, 0, 2, 1 }) end,
      "as_strided: tensor of shape {70368744177664,70368744177664,0,0} is too large")
    S.eq(x:as_strided({ 2, 2 }, { 1, 2 }, 1).shape, { 2, 2 })
  end)
  it("reject an integer addcmul value out of the dtype's range", function()
    local i = T.ones(2, { dtype = "int64" })
    S.errors(function() return T.addcmul(i, i, i, -1 / 0) end, "addcmul: value %-inf cannot be converted to int64 without overflow")
    S.errors(function() return T.addcmul(i:int(), i:int(), i:int(), 2 ^ 40) end, "addcmul: value 1099511627776 cannot be converted to int32")
    S.eq(T.addcmul(i, i, i, -3):totable(), { -2, -2 })
  end)
end)

describe("integer arithmetic", function()
  it("wraps around on overflow as PyTorch does", function()
    local max32, min32 = 2 ^ 31 - 1, -2 ^ 31
    local big = T.tensor({ max32, min32 }, { dtype = "int32" })
    S.eq(T.add(max32, T.ones(2, 2, { dtype = "int32" }))[1]:totable(), { min32, min32 })
    S.eq((big + 1):totable(), { min32, min32 + 1 })
    S.eq((big - 1):totable(), { max32 - 1, max32 })
    S.eq((big * 2):totable(), { -2, 0 })
    S.eq(big:square():totable(), { 1, 0 })
    S.eq(T.addcmul(big, big, T.ones(2, { dtype = "int32" }), 1):totable(), { -2, 0 })
    local l = T.tensor({ 2 ^ 62 }, { dtype = "int64" })
    S.eq((l * 4):item(), 0)
    S.eq((l + l + l):item(), -2 ^ 62)
  end)
  it("converts NaN, infinities and out-of-range floats to the type's minimum, as PyTorch on x86", function()
    local x = T.tensor({ 0 / 0, 1 / 0, -1 / 0, 3e9, -3e9, 2.7, -2.7, 1e19 })
    local min32, min64 = -2 ^ 31, -2 ^ 63
    S.eq(x:int():totable(), { min32, min32, min32, min32, min32, 2, -2, min32 })
    S.eq(x:long():totable(), { min64, min64, min64, 3e9, -3e9, 2, -2, min64 })
    S.eq(x:double():int():totable(), x:int():totable())
    S.eq(x:half():int():totable(), { min32, min32, min32, min32, min32, 2, -2, min32 })
  end)
end)
