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
  it("reject sliding-window geometries whose products overflow", function()
    local big = 2 ^ 54  -- (fuzz_ops: col2im's {big, big} output size made Ho * Wo overflow)
    S.errors(function() return T.col2im(T.randn(1, 4, 1), { big, big }, { 1, 1 }) end,
      "col2im: the spatial size {18014398509481984,18014398509481984} is too large")
    S.errors(function() return T.im2col(T.randn(1, 1, 4, 4), { 1, 1 }, nil, { 2 ^ 62, 1 }) end,
      "im2col: the height %(4%), kernel %(1%), dilation %(1%) and padding %(4611686018427387904%) are too large")
    S.errors(function() return T.F.conv2d(T.randn(1, 1, 4, 4), T.randn(1, 1, 2, 2), nil, 1, big) end,
      "conv2d: {36028797018963971,36028797018963971} sliding blocks %(padding {18014398509481984,18014398509481984}")
    S.eq(T.im2col(T.randn(1, 1, 4, 4), { 2, 2 }).shape, { 1, 4, 9 })
  end)
  it("reject an integer addcmul value out of the dtype's range", function()
    local i = T.ones(2, { dtype = "int64" })
    S.errors(function() return T.addcmul(i, i, i, -1 / 0) end, "addcmul: value %-inf cannot be converted to int64 without overflow")
    S.errors(function() return T.addcmul(i:int(), i:int(), i:int(), 2 ^ 40) end, "addcmul: value 1099511627776 cannot be converted to int32")
    S.eq(T.addcmul(i, i, i, -3):totable(), { -2, -2 })
  end)
  it("reject other number operands out of the dtype they compute in, as PyTorch's checked conversion", function()
    local x, big = T.tensor({ 1, 2, -3 }):int(), 2 ^ 40
    local cases = {
      { "clamp", function() return x:clamp(-big, big) end, "-1099511627776", "int32" },
      { "clamp", function() return x:clamp(nil, big) end, "1099511627776", "int32" },
      { "add", function() return x:add(5, { alpha = big }) end, "1099511627776", "int32" },
      { "masked_fill", function() return x:masked_fill(x:gt(0), big) end, "1099511627776", "int32" },
      { "where", function() return T.where(x:gt(0), x, big) end, "1099511627776", "int32" },
      { "hardtanh", function() return T.F.hardtanh(x, -big, big) end, "-1099511627776", "int32" },
      { "clamp", function() return T.ones(2):clamp(-1e300) end, "-1e%+300", "float32" },
      { "where", function() return T.where(T.ones(2):gt(0), T.ones(2):half(), 1e5) end, "1e%+05", "float16" },
    }
    for _, c in ipairs(cases) do
      S.errors(c[2], c[1] .. ": value " .. c[3]:gsub("^%-", "%%-") .. " cannot be converted to " .. c[4] .. " without overflow")
    end
    -- in range, or promoting to a floating dtype: no error
    S.eq(x:clamp(-2 ^ 31, 2 ^ 31 - 1):totable(), { 1, 2, -3 })
    S.eq(x:clamp(-1 / 0, 1.5):totable(), { 1, 1.5, -3 })
    S.eq((x + big):totable(), { 1, 2, -3 })  -- (an operand of add wraps, as PyTorch's)
  end)
  -- graph/keys.cpp fit_mask: a number that varied once is a kernel argument, unchecked there; the
  -- dtypes it fits are in the key, so an out-of-range one records again and raises as eager
  S.native_it("reject them in compiled code once the number varies, naming the number given", function()
    local saved = T.config.sync_compile
    T.config.sync_compile = true
    local ok, err = pcall(function()
      for _, mode in ipairs({ "default", "reduce-overhead" }) do
        local x, y, z = T.tensor({ 1, -3 }):int(), T.tensor({ 1.5, -3 }), T.tensor({ 1, 2 })
        local f = T.compile(function(a, n) return a:clamp(nil, n) end, { mode = mode })
        local g = T.compile(function(a, n) return T.where(a:gt(0), a, n), a:add(a, { alpha = n }) end, { mode = mode })
        local h = T.compile(function(a, n) return a:add(a, { alpha = n }) end, { mode = mode })
        for _, n in ipairs({ 1, 2, 3 }) do f(x, n); g(y, n); h(z, n) end
        for _ = 1, 2 do
          S.errors(function() return f(x, 2 ^ 31) end, "clamp: value 2147483648 cannot be converted to int32 without overflow")
          S.errors(function() return g(y, 1e39) end, "where: value 1e%+39 cannot be converted to float32 without overflow")
        end
        S.eq(f(x, 5):totable(), { 1, -3 }, mode)
        S.eq(select(2, g(y, 3)):totable(), { 6, -12 }, mode)
        for _, n in ipairs({ 0.1, 0.25 }) do
          S.errors(function() return h(z, n) end, "add: alpha must be an integer for int64 inputs, got " .. n)
        end
        S.eq(h(z, 4):totable(), { 5, 10 }, mode)
      end
    end)
    T.config.sync_compile = saved
    if not ok then error(err, 0) end
  end)
end)

describe("booleans are no sizes, dims or counts (issue 32)", function()
  -- PyTorch: "eye(): argument 'n' (position 1) must be int, not bool"; a boolean stays a number
  -- where a number is a value (full's value, add's alpha for bools, clamp's bounds)
  local x = T.ones(2, 3)
  local cases = {
    { "eye", function() return T.eye(true) end, "argument 1 (n)" },
    { "eye", function() return T.eye(2, false) end, "argument 2 (m)" },
    { "zeros", function() return T.zeros(true) end, "argument 1 (size)" },
    { "ones", function() return T.ones(2, true) end, "argument 1 (size)" },
    { "randint", function() return T.randint(true, 5, { 2 }) end, "argument 1 (low)" },
    { "linspace", function() return T.linspace(0, 1, true) end, "argument 3 (steps)" },
    { "view", function() return x:view(true, 6) end, "argument 2 (size)" },
    { "reshape", function() return x:reshape({ 6, true }) end, "argument 2 (shape)" },
    { "expand", function() return x:expand(true, 2, 3) end, "argument 2 (size)" },
    { "permute", function() return x:permute(true, 1) end, "argument 2 (dims)" },
    { "sum", function() return x:sum(true) end, "argument 2 (dim)" },
    { "amax", function() return x:amax({ 1, true }) end, "argument 2 (dim)" },
    { "argmax", function() return x:argmax(true) end, "argument 2 (dim)" },
    { "softmax", function() return x:softmax(true) end, "argument 2 (dim)" },
    { "cumsum", function() return x:cumsum(false) end, "argument 2 (dim)" },
    { "select", function() return x:select(true, 1) end, "argument 2 (dim)" },
    { "narrow", function() return x:narrow(1, true, 1) end, "argument 3 (start)" },
    { "slice", function() return x:slice(2, 1, 2, true) end, "argument 5 (step)" },
    { "transpose", function() return x:transpose(1, true) end, "argument 3 (dim1)" },
    { "unsqueeze", function() return x:unsqueeze(true) end, "argument 2 (dim)" },
    { "squeeze", function() return x:squeeze(true) end, "argument 2 (dim)" },
    { "flatten", function() return x:flatten(true) end, "argument 2 (start)" },
    { "chunk", function() return x:chunk(true) end, "argument 2 (chunks)" },
    { "split", function() return x:split(true) end, "argument 2 (size)" },
    { "topk", function() return x:topk(true) end, "argument 2 (k)" },
    { "tril", function() return x:tril(true) end, "argument 2 (diagonal)" },
    { "cat", function() return T.cat({ x, x }, true) end, "argument 2 (dim)" },
    { "stack", function() return T.stack({ x, x }, true) end, "argument 2 (dim)" },
    { "index_select", function() return x:index_select(true, T.tensor({ 1 })) end, "argument 2 (dim)" },
    { "gather", function() return x:gather(true, T.ones(2, 3):long()) end, "argument 2 (dim)" },
    { "as_strided", function() return x:as_strided({ 2 }, { 1 }, true) end, "argument 4 (offset)" },
  }
  it("raise naming the op and the argument, in eager and compiled code", function()
    for _, c in ipairs(cases) do
      local want = c[1] .. ": " .. S.plain(c[3]) .. " expected an? [%w ]*integer"
      S.errors(c[2], want, "got boolean")
      local f = T.compile(c[2])
      for _ = 1, 3 do S.errors(f, want, "got boolean") end
    end
  end)
  it("stay numbers where a number is a value", function()
    S.eq({ T.full({ 2 }, true).dtype, T.full({ 2 }, true):totable() }, { "bool", { true, true } })
    S.eq(T.clamp(T.tensor({ -1, 2 }), true):totable(), { 1, 2 })
    S.eq(T.linspace(true, 5, 3):totable(), { 1, 3, 5 })
    S.eq((x * true):totable(), x:totable())
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
  it("wraps around in sums and cumulative sums", function()
    local q = T.tensor({ 2 ^ 62, 2 ^ 62, 2 ^ 62 }, { dtype = "int64" })
    S.eq(q:sum():item(), -2 ^ 62)
    S.eq(q:view(1, 3):sum(2):totable(), { -2 ^ 62 })
    S.eq(q:view(3, 1):sum(1):totable(), { -2 ^ 62 })
    S.eq(q:cumsum(1):totable(), { 2 ^ 62, -2 ^ 63, -2 ^ 62 })
    -- found by fuzz_ops: NaN converts to -2^63, and four of them sum to 0 (mod 2^64)
    S.eq(T.tensor({ 0 / 0, 0 / 0, 0 / 0, 0 / 0 }):sum({ dtype = "int64" }):item(), 0)
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
