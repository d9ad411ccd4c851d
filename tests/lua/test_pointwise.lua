-- Specs of the pointwise ops (vm/ops/pointwise.cpp): values against PyTorch 1.13 (one python
-- process for all references, see torch_ref.lua), type promotion with weak Lua scalars,
-- broadcasting, every dtype, non-contiguous and zero-size inputs, NaN rules, integer division,
-- in-place semantics and misuse. Creation and conversion ops: test_creation.lua.
local T = require "crescent"
local R = require "torch_ref"

expect.covers("_div_floor", "_div_trunc")  -- (div's rounding modes, below)
local unpack = unpack or table.unpack

expect.covers(
  -- unary
  "neg", "abs", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
  "tanh", "sigmoid", "relu", "gelu", "silu", "erf", "erfinv", "floor", "ceil", "round", "trunc", "sign",
  "reciprocal", "square", "isnan", "isinf", "logical_not", "leaky_relu", "elu", "softplus", "mish", "logsigmoid",
  "hardsigmoid", "hardswish", "hardtanh",
  -- binary, ternary, in-place
  "add", "sub", "mul", "div", "pow", "fmod", "remainder", "maximum", "minimum", "atan2", "hypot", "eq", "ne",
  "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "where", "clamp", "lerp",
  "addcmul", "add_", "sub_", "mul_", "div_", "clamp_")

local errs, HERE = expect.error_checker("test_pointwise.lua")  -- errors carry the caller's line in this file
local DTYPES, FLOATS = expect.DTYPES, expect.FLOATS
local INT, FLOAT = expect.INT, expect.FLOAT

-- random values of dtype: floats uniform in [lo, hi), integers in [ceil(lo), floor(hi)]
local function gen(shape, dtype, lo, hi)
  if dtype == "bool" then return T.rand(shape):lt(0.5) end
  if INT[dtype] then return T.randint(math.ceil(lo), math.floor(hi) + 1, shape, { dtype = dtype }) end
  return (T.rand(shape, { dtype = "float64" }) * (hi - lo) + lo):to(dtype)
end
-- the same values in a non-contiguous (transposed) layout; x is 2-d
local function noncontig(x)
  local y = x:t():contiguous():t()
  assert(not y:is_contiguous())
  return y
end
local vals = R.flat_values

-- Reference cases (torch_ref.lua): all evaluated by one python process, checked per group.
local suite = R.suite()
local function case(...) suite:case(...) end
-- Known, deliberate differences from torch 1.13 (asserted in their own specs below)
local DEVIATION = {}
T.manual_seed(20240601)

-- ---- unary ops ----------------------------------------------------------------------------------
-- op, float domain [lo, hi) (integers use the integers inside it), torch expression
local UNARY = {
  { "neg", -5, 5 }, { "abs", -5, 5 }, { "exp", -5, 5 }, { "exp2", -5, 5 }, { "log", 0.1, 10 },
  { "log2", 0.1, 10 }, { "log1p", -0.9, 10 }, { "expm1", -3, 3 }, { "sqrt", 0, 10 }, { "rsqrt", 0.1, 10 },
  { "sin", -6, 6 }, { "cos", -6, 6 }, { "tan", -1.4, 1.4 }, { "tanh", -4, 4 }, { "sigmoid", -8, 8 },
  { "relu", -5, 5, "torch.relu(%s)" }, { "gelu", -5, 5, "F.gelu(%s)" }, { "silu", -5, 5, "F.silu(%s)" },
  { "erf", -3, 3 }, { "erfinv", -0.999, 0.999 }, { "floor", -5, 5 }, { "ceil", -5, 5 }, { "round", -5, 5 }, { "trunc", -5, 5 },
  { "sign", -5, 5 }, { "reciprocal", 0.5, 5 }, { "square", -5, 5 }, { "isnan", -5, 5 }, { "isinf", -5, 5 },
  { "logical_not", -2, 2 },
}
-- sign / square of a bool tensor: torch returns bool / int64, crescent rejects bool input
DEVIATION["sign bool"] = "rejects bool"
DEVIATION["square bool"] = "rejects bool"

local LAYOUTS = {
  { "contiguous", { 4, 5 } }, { "non-contiguous", { 4, 5 } }, { "zero-size", { 0, 3 } }, { "0-d", {} },
}
for _, u in ipairs(UNARY) do
  local op, lo, hi, texpr = u[1], u[2], u[3], u[4] or ("torch." .. u[1] .. "(%s)")
  for _, dt in ipairs(DTYPES) do
    for _, lay in ipairs(LAYOUTS) do
      local x = gen(lay[2], dt, lo, hi)
      if lay[1] == "non-contiguous" then x = noncontig(x) end
      local key = string.format("%s %s %s", op, dt, lay[1])
      -- (integer gelu / silu raise in both, as PyTorch's activations do)
      if not DEVIATION[op .. " " .. dt] then
        case("unary " .. op, key, string.format(texpr, "a"), { a = x }, function() return T[op](x) end)
      end
    end
  end
end
-- special values: infinities, signed zeros, NaN, halves (round to even)
local SPECIAL = { -math.huge, -2.5, -1.5, -1, -0.5, -0.0, 0, 0.5, 1, 1.5, 2.5, 3, math.huge, 0 / 0 }
for _, u in ipairs(UNARY) do
  local op, texpr = u[1], u[4] or ("torch." .. u[1] .. "(%s)")
  for _, dt in ipairs(FLOATS) do
    local x = T.tensor(SPECIAL, { dtype = dt })
    case("unary " .. op, op .. " " .. dt .. " special values", string.format(texpr, "a"), { a = x },
      function() return T[op](x) end)
  end
end
for _, dt in ipairs(FLOATS) do
  local x = gen({ 3, 4 }, dt, -4, 4)
  case("unary gelu", "gelu tanh " .. dt, "F.gelu(a, approximate='tanh')", { a = x },
    function() return T.gelu(x, { approximate = "tanh" }) end)
  case("unary gelu", "gelu none " .. dt, "F.gelu(a, approximate='none')", { a = x },
    function() return x:gelu({ approximate = "none" }) end)
end

-- leaky_relu / elu and their number (F.selu, F.celu: elu's scaled forms), special values included
for _, dt in ipairs(FLOATS) do
  local xs = { gen({ 3, 4 }, dt, -4, 4), noncontig(gen({ 4, 3 }, dt, -4, 4)), T.tensor(SPECIAL, { dtype = dt }) }
  for i, x in ipairs(xs) do
    for _, k in ipairs({ 0.01, 0.5, 2 }) do
      local key = ("%s %s %d"):format(dt, k, i)
      case("unary leaky_relu", "leaky_relu " .. key, ("F.leaky_relu(a, %s)"):format(k), { a = x },
        function() return T.leaky_relu(x, k) end)
      case("unary elu", "elu " .. key, ("F.elu(a, %s)"):format(k), { a = x }, function() return T.F.elu(x, k) end)
      case("unary celu", "celu " .. key, ("F.celu(a, %s)"):format(k), { a = x }, function() return T.F.celu(x, k) end)
    end
    case("unary selu", ("selu %s %d"):format(dt, i), "F.selu(a)", { a = x }, function() return T.F.selu(x) end)
    for _, beta in ipairs({ 1, 0.5, 3 }) do
      case("unary softplus", ("softplus %s %s %d"):format(dt, beta, i), ("F.softplus(a * 8, %s)"):format(beta),
        { a = x }, function() return T.F.softplus(x * 8, beta) end)
    end
    for _, th in ipairs({ 5, 40 }) do  -- (a threshold other than 20: PyTorch's formula in ops)
      case("unary softplus", ("softplus %s threshold %s %d"):format(dt, th, i), ("F.softplus(a * 8, 2, %s)"):format(th),
        { a = x }, function() return T.F.softplus(x * 8, 2, th) end)
    end
    for _, b in ipairs({ { -1, 1 }, { -0.5, 2.5 } }) do
      case("unary hardtanh", ("hardtanh %s %s %d"):format(dt, b[1], i), ("F.hardtanh(a, %s, %s)"):format(b[1], b[2]),
        { a = x }, function() return T.F.hardtanh(x, b[1], b[2]) end)
    end
    case("unary relu6", ("relu6 %s %d"):format(dt, i), "F.relu6(a * 4)", { a = x },
      function() return T.F.relu6(x * 4) end)
    for _, op in ipairs({ "mish", "logsigmoid", "hardsigmoid", "hardswish" }) do
      case("unary " .. op, ("%s %s %d"):format(op, dt, i), ("F.%s(a * 2)"):format(op), { a = x },
        function() return T.F[op](x * 2) end)
    end
  end
end

-- ---- binary ops ---------------------------------------------------------------------------------
local BINARY = { "add", "sub", "mul", "div", "pow", "fmod", "remainder", "maximum", "minimum", "atan2", "hypot",
                 "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor" }
-- operands: halves in [-3, 3] (ties for comparisons, exact fmod), no integer zero divisors,
-- positive float bases and small exponents for pow
local function operand(op, which, shape, dt)
  if op == "pow" then
    if which == "a" then return FLOAT[dt] and gen(shape, dt, 0.25, 3) or gen(shape, dt, -3, 3) end
    return FLOAT[dt] and gen(shape, dt, -2, 2) or gen(shape, dt, 0, 4)
  end
  if dt == "bool" or INT[dt] then
    local x = gen(shape, dt, -5, 5)
    if which == "b" and (op == "fmod" or op == "remainder") and INT[dt] then x = T.where(x:eq(0), 3, x) end
    return x
  end
  return (T.round(gen(shape, "float64", -6, 6)) * 0.5):to(dt)
end
local PAIRS = {}
for _, dt in ipairs(DTYPES) do PAIRS[#PAIRS + 1] = { dt, dt } end
for _, p in ipairs({ { "float16", "float32" }, { "bfloat16", "float16" }, { "int32", "int64" }, { "bool", "int32" },
                     { "int64", "float32" }, { "int32", "float64" }, { "bool", "float16" }, { "bfloat16", "float64" },
                     { "int32", "bfloat16" } }) do
  PAIRS[#PAIRS + 1] = p
end
local SCALARS = { 3, 2.5, true }

for _, op in ipairs(BINARY) do
  local g = "binary " .. op
  local texpr = "torch." .. op .. "(%s, %s)"
  for _, p in ipairs(PAIRS) do
    local a, b = operand(op, "a", { 3, 4 }, p[1]), operand(op, "b", { 3, 4 }, p[2])
    case(g, string.format("%s %s,%s", op, p[1], p[2]), texpr:format("a", "b"), { a = a, b = b },
      function() return T[op](a, b) end)
  end
  for _, dt in ipairs({ "float32", "int64", "float16" }) do
    local a, b = operand(op, "a", { 3, 1, 4 }, dt), operand(op, "b", { 2, 4 }, dt)
    case(g, op .. " broadcast " .. dt, texpr:format("a", "b"), { a = a, b = b }, function() return a[op](a, b) end)
    local c, d = operand(op, "a", { 4, 5 }, dt), operand(op, "b", { 4, 5 }, dt)
    c = noncontig(c)
    case(g, op .. " non-contiguous " .. dt, texpr:format("a", "b"), { a = c, b = d }, function() return T[op](c, d) end)
    case(g, op .. " non-contiguous both " .. dt, texpr:format("a", "a"), { a = c }, function() return T[op](c, c) end)
    local z, o = operand(op, "a", { 0, 3 }, dt), operand(op, "b", { 1, 3 }, dt)
    case(g, op .. " zero-size " .. dt, texpr:format("a", "b"), { a = z, b = o }, function() return T[op](z, o) end)
    local s0, s1 = operand(op, "a", {}, dt), operand(op, "b", { 3 }, dt)
    case(g, op .. " 0-d " .. dt, texpr:format("a", "b"), { a = s0, b = s1 }, function() return T[op](s0, s1) end)
  end
  -- Lua numbers are weak scalars; torch sees them as 0-d tensors of the default dtypes, which
  -- promote exactly like Python scalars against a dimensioned tensor
  for _, dt in ipairs(DTYPES) do
    local a = operand(op, "a", { 2, 3 }, dt)
    for _, s in ipairs(SCALARS) do
      local key = string.format("%s %s,scalar %s", op, dt, tostring(s))
      case(g, key, texpr:format("a", "torch.tensor(s)"), { a = a, s = s }, function() return T[op](a, s) end)
      case(g, key .. " (scalar first)", texpr:format("torch.tensor(s)", "a"), { a = a, s = s },
        function() return T[op](s, a) end)
    end
  end
end
-- special values: NaN propagation of maximum / minimum, infinities, signed zeros
do
  local xs, ys = {}, {}
  local V = { -math.huge, -1.5, -0.0, 0, 2, math.huge, 0 / 0 }
  for _, x in ipairs(V) do for _, y in ipairs(V) do xs[#xs + 1] = x; ys[#ys + 1] = y end end
  for _, dt in ipairs(FLOATS) do
    local a, b = T.tensor(xs, { dtype = dt }), T.tensor(ys, { dtype = dt })
    for _, op in ipairs(BINARY) do
      case("binary " .. op, op .. " " .. dt .. " special values", "torch." .. op .. "(a, b)", { a = a, b = b },
        function() return T[op](a, b) end)
    end
  end
end
-- alpha, and the Lua operators
for _, dt in ipairs({ "float32", "float64", "float16", "int64", "int32" }) do
  local a, b = operand("add", "a", { 3, 4 }, dt), operand("add", "b", { 4 }, dt)
  case("binary add", "add alpha " .. dt, "torch.add(a, b, alpha=2)", { a = a, b = b },
    function() return T.add(a, b, { alpha = 2 }) end)
  case("binary sub", "sub alpha " .. dt, "torch.sub(a, b, alpha=-3)", { a = a, b = b },
    function() return a:sub(b, { alpha = -3 }) end)
  case("binary add", "add alpha scalar " .. dt, "torch.add(a, 3, alpha=2)", { a = a },
    function() return T.add(a, 3, { alpha = 2 }) end)
end
do
  local a, b = gen({ 2, 3 }, "float32", 0.5, 2), gen({ 3 }, "float32", 0.5, 2)
  local i = gen({ 2, 3 }, "int64", 1, 5)
  local ops = {
    { "a + b", function() return a + b end }, { "a - b", function() return a - b end },
    { "a * b", function() return a * b end }, { "a / b", function() return a / b end },
    { "a ** b", function() return a ^ b end }, { "-a", function() return -a end },
    { "torch.remainder(a, b)", function() return a % b end },
    { "2 - a", function() return 2 - a end }, { "2 / a", function() return 2 / a end },
    { "torch.pow(2, a)", function() return 2 ^ a end }, { "a * 2.5", function() return a * 2.5 end },
    { "i / 2", function() return i / 2 end }, { "i + 2.5", function() return i + 2.5 end },
    { "i * 3", function() return i * 3 end }, { "torch.remainder(-7, i)", function() return -7 % i end },
    { "i ** 2", function() return i ^ 2 end }, { "-i", function() return -i end },
  }
  for _, o in ipairs(ops) do
    case("binary operators", "operator " .. o[1], o[1], { a = a, b = b, i = i }, o[2])
  end
end

-- ---- where, clamp, lerp, addcmul ----------------------------------------------------------------
do
  local cond = T.rand({ 3, 1 }):lt(0.5)
  for _, p in ipairs({ { "float32", "float32" }, { "int32", "int64" }, { "float16", "float32" },
                       { "bool", "bool" }, { "int64", "float64" }, { "bfloat16", "int32" } }) do
    local a, b = gen({ 1, 4 }, p[1], -5, 5), gen({ 3, 4 }, p[2], -5, 5)
    case("where", "where " .. p[1] .. "," .. p[2], "torch.where(c, a, b)", { c = cond, a = a, b = b },
      function() return T.where(cond, a, b) end)
  end
  local c2, x = T.rand({ 4, 5 }):lt(0.5), gen({ 4, 5 }, "float32", -5, 5)
  local xi = gen({ 4, 5 }, "int32", -5, 5)
  local cases = {
    { "scalars 1, 2.5", "torch.where(c, 1, 2.5)", function() return T.where(c2, 1, 2.5) end },
    { "scalars 1, 2", "torch.where(c, 1, 2)", function() return T.where(c2, 1, 2) end },
    { "int32 tensor, 2", "torch.where(c, xi, 2)", function() return T.where(c2, xi, 2) end },
    { "int32 tensor, 2.5", "torch.where(c, xi, 2.5)", function() return T.where(c2, xi, 2.5) end },
    { "2.5, float16 tensor", "torch.where(c, 2.5, x.half())", function() return T.where(c2, 2.5, x:half()) end },
    { "non-contiguous", "torch.where(c, x, xi)", function() return T.where(noncontig(c2), noncontig(x), xi) end },
    { "zero-size", "torch.where(torch.zeros(0, 5, dtype=torch.bool), x[0], 1.5)",
      function() return T.where(T.zeros(0, 5, { dtype = "bool" }), x[1], 1.5) end },
    { "0-d condition", "torch.where(torch.tensor(True), x, xi)", function() return T.where(T.tensor(true), x, xi) end },
  }
  for _, w in ipairs(cases) do
    case("where", "where " .. w[1], w[2], { c = c2, x = x, xi = xi }, w[3])
  end
end

for _, dt in ipairs(DTYPES) do
  local x = gen({ 3, 4 }, dt, -5, 5)
  local g = "clamp"
  case(g, "clamp " .. dt .. " -1,2", "torch.clamp(a, min=-1, max=2)", { a = x }, function() return T.clamp(x, -1, 2) end)
  case(g, "clamp " .. dt .. " min only", "torch.clamp(a, min=-1)", { a = x }, function() return x:clamp(-1) end)
  case(g, "clamp " .. dt .. " max only", "torch.clamp(a, max=2)", { a = x }, function() return x:clamp(nil, 2) end)
  case(g, "clamp " .. dt .. " min > max", "torch.clamp(a, min=2, max=-1)", { a = x }, function() return x:clamp(2, -1) end)
  case(g, "clamp " .. dt .. " 2.5", "torch.clamp(a, min=-2.5, max=2.5)", { a = x }, function() return x:clamp(-2.5, 2.5) end)
  if dt ~= "bool" then
    local lo, hi = gen({ 4 }, dt, -3, 0), gen({ 3, 1 }, dt, 0, 3)
    case(g, "clamp " .. dt .. " tensor bounds", "torch.clamp(a, min=lo, max=hi)", { a = x, lo = lo, hi = hi },
      function() return x:clamp(lo, hi) end)
    case(g, "clamp " .. dt .. " tensor min, float max", "torch.clamp(a, min=lo, max=torch.tensor(2.5))",
      { a = x, lo = lo }, function() return x:clamp(lo, 2.5) end)
    local nc = noncontig(gen({ 4, 5 }, dt, -5, 5))
    case(g, "clamp " .. dt .. " non-contiguous", "torch.clamp(a, min=-1, max=2)", { a = nc }, function() return nc:clamp(-1, 2) end)
  end
  local z = gen({ 0, 2 }, dt, -5, 5)
  case(g, "clamp " .. dt .. " zero-size", "torch.clamp(a, min=0)", { a = z }, function() return z:clamp(0) end)
end
do
  local x = T.tensor({ 0.5, 0 / 0, -2, 3 })
  local nan = 0 / 0
  case("clamp", "clamp NaN input", "torch.clamp(a, min=0, max=1)", { a = x }, function() return x:clamp(0, 1) end)
  case("clamp", "clamp NaN min", "torch.clamp(a, min=nan, max=1)", { a = x }, function() return x:clamp(nan, 1) end)
  case("clamp", "clamp NaN max", "torch.clamp(a, min=0, max=nan)", { a = x }, function() return x:clamp(0, nan) end)
  local lo = T.tensor({ nan, 0, 0, nan })
  case("clamp", "clamp NaN in a tensor bound", "torch.clamp(a, min=lo)", { a = x, lo = lo }, function() return x:clamp(lo) end)
end

for _, dt in ipairs(FLOATS) do
  local a, b = gen({ 3, 4 }, dt, -5, 5), gen({ 4 }, dt, -5, 5)
  local w = gen({ 3, 1 }, dt, 0, 1)
  local g = "lerp"
  case(g, "lerp " .. dt .. " 0.25", "torch.lerp(a, b, 0.25)", { a = a, b = b }, function() return T.lerp(a, b, 0.25) end)
  case(g, "lerp " .. dt .. " 0.75", "torch.lerp(a, b, 0.75)", { a = a, b = b }, function() return a:lerp(b, 0.75) end)
  case(g, "lerp " .. dt .. " tensor weight", "torch.lerp(a, b, w)", { a = a, b = b, w = w }, function() return a:lerp(b, w) end)
  local nc = noncontig(gen({ 4, 3 }, dt, -5, 5))
  local nb = gen({ 4, 3 }, dt, -5, 5)
  case(g, "lerp " .. dt .. " non-contiguous", "torch.lerp(a, b, 0.5)", { a = nc, b = nb }, function() return nc:lerp(nb, 0.5) end)
  local z = gen({ 0, 4 }, dt, -1, 1)
  case(g, "lerp " .. dt .. " zero-size", "torch.lerp(a, b, 0.5)", { a = z, b = b }, function() return z:lerp(b, 0.5) end)
end

for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" }) do
  local x, a, b = gen({ 3, 4 }, dt, -3, 3), gen({ 3, 1 }, dt, -3, 3), gen({ 4 }, dt, -3, 3)
  local g = "addcmul"
  case(g, "addcmul " .. dt, "torch.addcmul(x, a, b)", { x = x, a = a, b = b }, function() return T.addcmul(x, a, b) end)
  case(g, "addcmul " .. dt .. " value 2", "torch.addcmul(x, a, b, value=2)", { x = x, a = a, b = b },
    function() return x:addcmul(a, b, 2) end)
  if FLOAT[dt] then
    case(g, "addcmul " .. dt .. " value -0.5", "torch.addcmul(x, a, b, value=-0.5)", { x = x, a = a, b = b },
      function() return x:addcmul(a, b, -0.5) end)
    local nc = noncontig(gen({ 4, 4 }, dt, -3, 3))
    case(g, "addcmul " .. dt .. " non-contiguous", "torch.addcmul(x, x, x)", { x = nc }, function() return T.addcmul(nc, nc, nc) end)
  end
end
do
  local x, a, b = gen({ 2, 2 }, "float16", -1, 1), gen({ 2, 2 }, "float32", -1, 1), gen({ 2 }, "int64", -2, 2)
  case("addcmul", "addcmul float16,float32,int64", "torch.addcmul(x, a, b)", { x = x, a = a, b = b },
    function() return T.addcmul(x, a, b) end)
  local z, w = gen({ 0, 2 }, "float32", -1, 1), gen({ 2 }, "float32", -1, 1)
  case("addcmul", "addcmul zero-size", "torch.addcmul(z, z, w)", { z = z, w = w }, function() return T.addcmul(z, z, w) end)
end

-- a * b + c rounded once where torch's kernels have an FMA (sm::fma_): exact on random operands,
-- where two roundings differ in about a fifth of the elements
for _, dt in ipairs({ "float32", "float64" }) do
  local x, a, b, w = gen({ 2, 1024 }, dt, -3, 3), gen({ 2, 1024 }, dt, -3, 3), gen({ 1024 }, dt, -3, 3), gen({ 2, 1 }, dt, 0, 1)
  local io = { x = x, a = a, b = b, w = w }
  local g = "one rounding"
  case(g, "addcmul once " .. dt, "torch.addcmul(x, a, b, value=0.3)", io, function() return T.addcmul(x, a, b, 0.3) end, 0, 0)
  case(g, "addcmul 1 once " .. dt, "torch.addcmul(x, a, b)", io, function() return T.addcmul(x, a, b) end, 0, 0)
  case(g, "lerp 0.3 once " .. dt, "torch.lerp(x, a, 0.3)", io, function() return T.lerp(x, a, 0.3) end, 0, 0)
  case(g, "lerp 0.7 once " .. dt, "torch.lerp(x, a, 0.7)", io, function() return T.lerp(x, a, 0.7) end, 0, 0)
  case(g, "lerp tensor once " .. dt, "torch.lerp(x, a, w)", io, function() return T.lerp(x, a, w) end, 0, 0)
  case(g, "add alpha once " .. dt, "torch.add(x, a, alpha=0.3)", io, function() return T.add(x, a, { alpha = 0.3 }) end, 0, 0)
  case(g, "sub alpha once " .. dt, "torch.sub(x, b, alpha=0.3)", io, function() return T.sub(x, b, { alpha = 0.3 }) end, 0, 0)
  case(g, "add number alpha once " .. dt, "torch.add(x, 1.7, alpha=0.3)", io,
    function() return T.add(x, 1.7, { alpha = 0.3 }) end, 0, 0)
end

-- ---- in-place ----------------------------------------------------------------------------------
for _, p in ipairs({ { "float32", "float32" }, { "float16", "float32" }, { "float64", "int64" }, { "int64", "int32" },
                     { "int32", "float32" }, { "bfloat16", "bfloat16" } }) do
  local g = "in-place"
  local a, b = gen({ 3, 4 }, p[1], -4, 4), gen({ 4 }, p[2], 1, 4)
  for _, op in ipairs({ "add_", "sub_", "mul_", "div_" }) do
    local key = string.format("%s %s,%s", op, p[1], p[2])
    case(g, key, string.format("a.clone().%s(b)", op), { a = a, b = b }, function()
      local x = a:clone()
      local r = x[op](x, b)
      assert(rawequal(r, x), op .. " must return self")
      return x
    end)
    case(g, key .. " scalar", string.format("a.clone().%s(2)", op), { a = a }, function() return a:clone()[op](a:clone(), 2) end)
  end
  case(g, "clamp_ " .. p[1], "a.clone().clamp_(-1, 2)", { a = a }, function()
    local x = a:clone()
    return x:clamp_(-1, 2)
  end)
  case(g, "add_ alpha " .. p[1], "a.clone().add_(b, alpha=3)", { a = a, b = b }, function() return a:clone():add_(b, { alpha = 3 }) end)
  case(g, "add_ broadcast into smaller " .. p[1], "b.clone().add_(a)", { a = a, b = b }, function() return b:clone():add_(a) end)
end
for _, op in ipairs({ "add_", "sub_", "mul_", "div_" }) do
  local a = gen({ 3, 3 }, "float32", -2, 2)
  case("in-place", op .. " aliasing a transposed self", string.format("a.clone().%s(a.t())", op), { a = a }, function()
    local x = a:clone()
    x[op](x, x:t())
    return x
  end)
end

-- Rows longer than the stack block (256) that a row-broadcast operand is repeated into
-- (vm/kernels/loop.hpp): a scalar, a column (stride 0 along the row), both sides, three operands.
for _, dt in ipairs({ "float32", "float64", "float16", "int32", "int64" }) do
  local a = gen({ 3, 1000 }, dt, -4, 4)
  local col = gen({ 3, 1 }, dt, 1, 4)
  local g = "row broadcast " .. dt
  case(g, "a + 3 " .. dt, "a + 3", { a = a }, function() return a + 3 end)
  case(g, "a - col " .. dt, "a - col", { a = a, col = col }, function() return a - col end)
  case(g, "col * a " .. dt, "col * a", { a = a, col = col }, function() return col * a end)
  case(g, "where(a > 0, col, a) " .. dt, "torch.where(a > 0, col, a)", { a = a, col = col }, function() return T.where(a:gt(0), col, a) end)
  case(g, "narrowed a - col " .. dt, "a[:, 100:900] - col", { a = a, col = col }, function() return a:narrow(2, 101, 800) - col end)
end

-- div's rounding modes (floor: PyTorch's fmod-based float floor; integers stay integers) and
-- round's decimals (round(x * 10^d) / 10^d in x's dtype)
do
  local a = T.tensor({ 7, -7, 7, -7, 0, 9, -9, 5 }, { dtype = "int64" })
  local b = T.tensor({ 2, 2, -2, -2, 3, -4, 4, 5 }, { dtype = "int64" })
  local V = { -7.5, -0.5, -0.0, 0, 0.3, 2.5, 1e10, math.huge, -math.huge, 0 / 0 }
  local xs, ys = {}, {}
  for _, x in ipairs(V) do for _, y in ipairs({ -2.5, -1, -0.0, 0, 0.1, 3, math.huge, 0 / 0 }) do xs[#xs + 1] = x; ys[#ys + 1] = y end end
  for _, mode in ipairs({ "floor", "trunc" }) do
    local g = "div rounding_mode " .. mode
    for _, dt in ipairs({ "int64", "int32", "float32", "float64" }) do
      local x, y = a:to(dt), b:to(dt)
      case(g, "div " .. mode .. " " .. dt, ("torch.div(a, b, rounding_mode='%s')"):format(mode), { a = x, b = y },
        function() return T.div(x, y, { rounding_mode = mode }) end)
      case(g, "div " .. mode .. " " .. dt .. ",scalar", ("torch.div(a, 2.5, rounding_mode='%s')"):format(mode), { a = x },
        function() return x:div(2.5, { rounding_mode = mode }) end)
      case(g, "div " .. mode .. " scalar," .. dt, ("torch.div(-7, b, rounding_mode='%s')"):format(mode), { b = y },
        function() return T.div(-7, y, { rounding_mode = mode }) end)
    end
    for _, dt in ipairs({ "float32", "float64" }) do
      local x, y = T.tensor(xs, { dtype = dt }), T.tensor(ys, { dtype = dt })
      case(g, "div " .. mode .. " " .. dt .. " special values", ("torch.div(a, b, rounding_mode='%s')"):format(mode), { a = x, b = y },
        function() return T.div(x, y, { rounding_mode = mode }) end)
    end
    case(g, "div " .. mode .. " int64,float32", ("torch.div(a, b, rounding_mode='%s')"):format(mode), { a = a, b = b:float() },
      function() return T.div(a, b:float(), { rounding_mode = mode }) end)
    case(g, "div " .. mode .. " in place", ("a.clone().div_(b, rounding_mode='%s')"):format(mode), { a = a, b = b },
      function() return a:clone():div_(b, { rounding_mode = mode }) end)
  end
  local r = T.tensor({ 1.2345, -2.5551, 1234.5, 0.125, -0.005, 15, 25, 1e-9 }, { dtype = "float64" })
  for _, dt in ipairs({ "float32", "float64" }) do
    for _, d in ipairs({ 2, 1, -1, -2, 3 }) do
      case("round decimals", ("round %s decimals %d"):format(dt, d), ("torch.round(a, decimals=%d)"):format(d), { a = r:to(dt) },
        function() return T.round(r:to(dt), { decimals = d }) end)
    end
    case("round decimals", "round " .. dt .. " decimals positional", "torch.round(a, decimals=2)", { a = r:to(dt) },
      function() return r:to(dt):round(2) end)
  end
end

suite:check()

describe("div's rounding_mode and round's decimals", function()
  it("refuse modes and decimals PyTorch refuses", function()
    local x = T.tensor({ 7, -7 })
    errs(function() local _ = T.div(x, 2, { rounding_mode = "x" }) end, "div", "rounding_mode", "'trunc', or 'floor'", "'x'")
    errs(function() local _ = x:div(2, { rounding_mode = 1 }) end, "div", "rounding_mode", "number")
    errs(function() x:clone():div_(2, { rounding_mode = "round" }) end, "div_", "rounding_mode", "'round'")
    errs(function() x:clone():div_(2.5, { rounding_mode = "floor" }) end, "div_", "float32 cannot be written into int64")
    errs(function() local _ = T.div(x, T.tensor({ 1, 0 }), { rounding_mode = "floor" }) end, "div (rounding_mode = \"floor\")", "integer division by zero")
    errs(function() local _ = T.div(x:bool(), x:bool(), { rounding_mode = "trunc" }) end, "div (rounding_mode = \"trunc\")", "bool")
    errs(function() local _ = T.round(x, { decimals = 1 }) end, "round", "decimals expected a floating tensor", "int64")
    errs(function() local _ = T.round(T.ones(2), 1.5) end, "round", "decimals expected an integer", "1.5")
    errs(function() local _ = T.round(T.ones(2), { digits = 1 }) end, "round", "unknown option 'digits'")
    expect.eq(T.round(T.tensor({ 1.5, 2.5 }), { decimals = 0 }):totable(), { 2, 2 })
  end)
  it("rounded quotients have zero gradients (as PyTorch's)", function()
    local x = T.tensor({ 3.5, -2.5 }, { requires_grad = true })
    local y = T.tensor({ 2, 2 }, { dtype = "float32", requires_grad = true })
    T.div(x, y, { rounding_mode = "floor" }):sum():backward()
    expect.eq({ x.grad:totable(), y.grad:totable() }, { { 0, 0 }, { 0, 0 } })
  end)
  it("compiled == eager", function()
    local f = T.compile(function(a, b)
      return T.div(a, b, { rounding_mode = "floor" }) + a:div(b, { rounding_mode = "trunc" }), (a * 3):round({ decimals = 2 })
    end)
    for k = 1, 4 do
      local a, b = T.randn(5, 3 + k % 2) * 10, T.randn(5, 3 + k % 2)
      local q, r = f(a, b)
      expect.eq(q:totable(), (T.div(a, b, { rounding_mode = "floor" }) + a:div(b, { rounding_mode = "trunc" })):totable())
      expect.eq(r:totable(), (a * 3):round({ decimals = 2 }):totable())
    end
  end)
end)

describe("options of ops without them", function()
  -- Lua drops an argument past a function's last: each op refuses it, as T.add refuses a misspelt option
  local x, i = T.rand(2, 3) + 0.5, T.tensor({ { 1, 2, 1 } })
  local calls = {
    abs = function(o) local _ = T.abs(x, o) end, neg = function(o) return x:neg(o) end, exp = function(o) return T.exp(x, o) end,
    clamp = function(o) local _ = T.clamp(x, 0, 1, o) end, mul = function(o) return T.mul(x, 2, o) end,
    pow = function(o) local _ = x:pow(2, o) end, fmod = function(o) return T.fmod(x, 2, o) end,
    remainder = function(o) local _ = T.remainder(x, 2, o) end, maximum = function(o) return T.maximum(x, x, o) end,
    roll = function(o) local _ = T.roll(x, 1, 1, o) end, logsumexp = function(o) return T.logsumexp(x, 1, false, o) end,
    cumprod = function(o) local _ = T.cumprod(x, 1, o) end, kthvalue = function(o) return T.kthvalue(x, 1, 1, false, o) end,
    argsort = function(o) local _ = T.argsort(x, 1, false, o) end, gather = function(o) return T.gather(x, 1, i, o) end,
    index_select = function(o) local _ = x:index_select(1, T.tensor({ 1 }), o) end,
    take_along_dim = function(o) local _ = T.take_along_dim(x, i, 1, o) end, round = function(o) return T.round(x, o) end,
    lerp = function(o) local _ = T.lerp(x, x, 0.5, o) end, atan2 = function(o) return T.atan2(x, x, o) end,
    eq = function(o) local _ = T.eq(x, x, o) end, div = function(o) return T.div(x, 2, o) end,
  }
  for op, call in pairs(calls) do
    it(op .. " refuses an unknown option", function()
      errs(function() local _ = call({ bogus_option = 1 }) end, op, "unknown option 'bogus_option'")
    end)
  end
  it("an argument past the last is refused, naming the op and the count", function()
    errs(function() local _ = T.abs(x, 3) end, "abs", "expected at most 1 argument", "number")
    errs(function() local _ = x:add(x, { alpha = 2 }, 5) end, "add", "expected at most 3 arguments")
    errs(function() local _ = T.roll(x, 1, 1, 5) end, "roll", "expected at most 3 arguments")
    expect.eq(T.abs(x, nil):totable(), x:totable())  -- (a trailing nil is no argument)
  end)
end)

-- ---- explicit specs (no torch needed) -----------------------------------------------------------
describe("type promotion", function()
  local i32 = function(t) return T.tensor(t, { dtype = "int32" }) end
  local f16 = function(t) return T.tensor(t, { dtype = "float16" }) end
  local rules = {
    { "int64 tensor + float scalar -> float32", function() return T.tensor({ 1, 2 }) + 2.5 end, "float32" },
    { "int32 tensor + int scalar stays int32 (weak scalar)", function() return i32({ 1, 2 }) + 3 end, "int32" },
    { "int32 tensor + 2.5 -> float32", function() return i32({ 1, 2 }) + 2.5 end, "float32" },
    { "float16 tensor + float32 tensor -> float32", function() return f16({ 1 }) + T.ones(1) end, "float32" },
    { "float16 tensor + float scalar stays float16", function() return f16({ 1 }) * 0.1 end, "float16" },
    { "bfloat16 + float16 -> float32", function() return f16({ 1 }) + T.ones(1, { dtype = "bfloat16" }) end, "float32" },
    { "bool tensor + int32 tensor -> int32", function() return T.tensor({ true }) + i32({ 2 }) end, "int32" },
    { "bool tensor + int scalar -> int64", function() return T.tensor({ true }) + 1 end, "int64" },
    { "bool tensor + float scalar -> float32", function() return T.tensor({ true }) + 1.5 end, "float32" },
    { "bool tensor + true stays bool", function() return T.tensor({ true }) + true end, "bool" },
    { "int32 tensor + int64 tensor -> int64", function() return i32({ 1 }) + T.tensor({ 1 }) end, "int64" },
    { "float16 tensor + 0-d float64 stays float16", function() return f16({ 1 }) + T.tensor(1, { dtype = "float64" }) end, "float16" },
    { "int32 tensor + 0-d float32 -> float32", function() return i32({ 1 }) + T.tensor(1.5) end, "float32" },
    { "int32 tensor + 0-d int64 stays int32", function() return i32({ 1 }) + T.tensor(7) end, "int32" },
    { "0-d float64 + 0-d float32 -> float64", function() return T.tensor(1, { dtype = "float64" }) + T.tensor(1.5) end, "float64" },
    { "0-d int32 + float scalar -> float32", function() return T.tensor(1, { dtype = "int32" }) + 0.5 end, "float32" },
    { "int / int -> float32", function() return T.tensor({ 1 }) / T.tensor({ 2 }) end, "float32" },
    { "int tensor + inf -> float32 (inf is not an integer)", function() return T.tensor({ 1 }) + math.huge end, "float32" },
    { "int tensor + 1e300 -> float32 (beyond int64)", function() return T.tensor({ 1 }) + 1e300 end, "float32" },
    { "int comparison with float -> bool", function() return T.tensor({ 1 }):lt(1.5) end, "bool" },
    { "exp of int64 -> float32", function() return T.tensor({ 1 }):exp() end, "float32" },
    { "neg of int32 stays int32", function() return i32({ 1 }):neg() end, "int32" },
  }
  for _, r in ipairs(rules) do
    it(r[1], function() expect.eq(r[2]().dtype, r[3]) end)
  end
  it("a weak scalar keeps its value in the tensor's dtype", function()
    expect.eq((i32({ 7, -7 }) + 2):totable(), { 9, -5 })
    expect.eq((T.tensor({ 1, 2 }) + 2.5):totable(), { 3.5, 4.5 })
    expect.eq((T.tensor({ true, false }) + 2):totable(), { 3, 2 })
  end)
  it("an int64 scalar beyond int32 wraps like torch's int64 -> int32 cast", function()
    expect.eq((i32({ 1 }) + 2 ^ 32):totable(), { 1 })
    expect.eq((i32({ 0 }) + (2 ^ 31)):totable(), { -2 ^ 31 })
  end)
end)

describe("NaN rules", function()
  local nan = 0 / 0
  it("maximum / minimum propagate NaN from either side", function()
    local a, b = T.tensor({ 1, nan, nan, -1 }), T.tensor({ nan, 2, nan, 3 })
    expect.eq(vals(T.maximum(a, b):isnan()), { true, true, true, false })
    expect.eq(vals(T.minimum(b, a):isnan()), { true, true, true, false })
    expect.eq(T.maximum(a, b)[4]:item(), 3)
  end)
  it("clamp gives NaN for a NaN input or bound", function()
    expect.eq(vals(T.tensor({ nan, 5 }):clamp(0, 1):isnan()), { true, false })
    expect.eq(vals(T.tensor({ 0.5, 5 }):clamp(nan, 1):isnan()), { true, true })
    expect.eq(vals(T.tensor({ 0.5, 5 }):clamp(nil, nan):isnan()), { true, true })
  end)
  it("relu / abs / neg keep NaN, sign(NaN) is 0 as in torch", function()
    for _, op in ipairs({ "relu", "abs", "neg", "floor", "round" }) do
      expect.truthy(T[op](T.tensor({ nan })):isnan():item(), op)
    end
    expect.eq(T.tensor({ nan }):sign():item(), 0)
  end)
  it("NaN compares unequal to everything, itself included", function()
    local x = T.tensor({ nan })
    expect.eq(x:eq(x):item(), false)
    expect.eq(x:ne(x):item(), true)
    expect.eq(x:lt(1):item(), false)
    expect.eq(x:ge(1):item(), false)
  end)
  it("NaN converts to true as a bool", function() expect.eq(T.tensor({ nan }):bool():item(), true) end)
end)

describe("integer division", function()
  for _, dt in ipairs({ "int32", "int64" }) do
    it("fmod / remainder of " .. dt .. " by zero raise", function()
      local x = T.tensor({ 5, -5, 7 }, { dtype = dt })
      local z = T.tensor({ 1, 0, 2 }, { dtype = dt })
      errs(function() local _ = x:fmod(0) end, "fmod", "integer division by zero")
      errs(function() local _ = T.remainder(x, 0) end, "remainder", "integer division by zero")
      errs(function() local _ = x:fmod(z) end, "fmod", "integer division by zero")
      errs(function() local _ = x % z end, "remainder", "integer division by zero")
      errs(function() local _ = 3 % x:sub(x) end, "remainder", "integer division by zero")
    end)
  end
  it("float fmod / remainder by zero give NaN, division gives inf", function()
    expect.truthy(T.tensor({ 1.5 }):fmod(0):isnan():item())
    expect.truthy(T.tensor({ 1.5 }):remainder(0):isnan():item())
    expect.eq((T.tensor({ 1, -1, 0 }) / 0):totable()[1], math.huge)
    expect.eq((T.tensor({ 1, -1 }) / 0):totable()[2], -math.huge)
    expect.truthy((T.tensor({ 0 }) / 0):isnan():item())
  end)
  it("remainder takes the divisor's sign, fmod the dividend's", function()
    expect.eq(T.tensor({ 5, -5, 5, -5 }):remainder(T.tensor({ 3, 3, -3, -3 })):totable(), { 2, 1, -1, -2 })
    expect.eq(T.tensor({ 5, -5, 5, -5 }):fmod(T.tensor({ 3, 3, -3, -3 })):totable(), { 2, -2, 2, -2 })
    expect.eq(T.tensor({ -7 }, { dtype = "int64" }):remainder(-1):totable(), { 0 })
  end)
  it("integer powers", function()
    local x = T.tensor({ -2, -1, 0, 1, 2, 3 })
    expect.eq(x:pow(2):totable(), { 4, 1, 0, 1, 4, 9 })
    expect.eq((x ^ 0):totable(), { 1, 1, 1, 1, 1, 1 })
    expect.eq(x:pow(T.tensor({ -1, -1, -1, -1, -1, -1 })):totable(), { 0, -1, 0, 1, 0, 0 })
    expect.eq(T.tensor({ 3 }):pow(40).dtype, "int64")
    errs(function() local _ = x:pow(-1) end, "pow", "negative integer powers", "-1")
    expect.eq(x:pow(-1.0 + 0.5).dtype, "float32")
    -- an exponent past the dtype raises (torch's checked conversion), not wraps to 0 ^ 0 = 1
    errs(function() local _ = x:int() ^ (2 ^ 32) end, "pow", "4294967296 cannot be converted to int32")
    errs(function() local _ = x:to("int8") end, "to", "expected a dtype (float32,", "or a device", "\"int8\"")
  end)
end)

describe("in-place ops", function()
  it("return self and write through views to the base", function()
    local base = T.zeros(3, 4)
    local row = base:select(1, 2)
    expect.truthy(rawequal(row:add_(5), row))
    expect.eq(base:totable(), { { 0, 0, 0, 0 }, { 5, 5, 5, 5 }, { 0, 0, 0, 0 } })
    local col = base:t():select(1, 3)  -- a strided view: column 3
    col:mul_(2):sub_(1)
    expect.eq(base:totable(), { { 0, 0, -1, 0 }, { 5, 5, 9, 5 }, { 0, 0, -1, 0 } })
    base:slice(2, 1, 2):clamp_(0, 1)
    expect.eq(base:totable(), { { 0, 0, -1, 0 }, { 1, 1, 9, 5 }, { 0, 0, -1, 0 } })
    base:t():div_(2)
    expect.eq(base:totable(), { { 0, 0, -0.5, 0 }, { 0.5, 0.5, 4.5, 2.5 }, { 0, 0, -0.5, 0 } })
  end)
  it("read the old values when the operand aliases self", function()
    local x = T.tensor({ { 1, 2 }, { 3, 4 } })
    x:add_(x:t())
    expect.eq(x:totable(), { { 2, 5 }, { 5, 8 } })
  end)
  it("keep self's dtype and convert the result into it", function()
    local h = T.ones(3, { dtype = "float16" })
    h:add_(T.tensor({ 0.5, 1, 2 }, { dtype = "float64" }))
    expect.eq(h.dtype, "float16")
    expect.eq(h:totable(), { 1.5, 2, 3 })
    local i = T.tensor({ 1, 2 }, { dtype = "int32" })
    i:add_(T.tensor({ 1, 1 }), { alpha = 3 })
    expect.eq(i:totable(), { 4, 5 })
    expect.eq(T.tensor({ true, false }):add_(true):totable(), { true, true })
  end)
  it("reject a result type of a higher category", function()
    errs(function() local _ = T.tensor({ 1, 2 }):add_(0.5) end, "add_", "float32", "int64")
    errs(function() local _ = T.tensor({ 1, 2 }):div_(2) end, "div_", "float32", "int64")
    errs(function() local _ = T.tensor({ true }):mul_(2) end, "mul_", "int64", "bool")
    errs(function() local _ = T.tensor({ 1, 2 }):clamp_(0.5) end, "clamp_", "float32")
  end)
  it("reject a result of another shape (self does not broadcast)", function()
    errs(function() local _ = T.zeros(3):add_(T.zeros(2, 3)) end, "add_", "{2,3}", "{3}")
    errs(function() local _ = T.zeros(3):sub_(T.zeros(4)) end, "sub_", "cannot be broadcast")
  end)
  it("work on zero-size and 0-d tensors", function()
    local z = T.zeros(0, 3)
    expect.eq(z:add_(1).shape, { 0, 3 })
    local s = T.tensor(2.5)
    s:mul_(2)
    expect.eq(s:item(), 5)
  end)
  it("are methods only", function()
    expect.eq(T.add_, nil)
    expect.eq(T.clamp_, nil)
  end)
end)

describe("argument errors of pointwise ops", function()
  for _, u in ipairs(UNARY) do
    it(u[1] .. " names itself, the argument and what was given", function()
      errs(function() local _ = T[u[1]]("x") end, u[1], "argument 1 (self)", "expected a tensor", 'string "x"')
      errs(function() local _ = T[u[1]](2) end, u[1], "expected a tensor", "number")
    end)
  end
  it("bool inputs to ops that need numbers are rejected", function()
    for _, op in ipairs({ "neg", "abs", "relu", "floor", "ceil", "round", "trunc" }) do
      errs(function() local _ = T[op](T.tensor({ true })) end, op, "numeric", "bool")
    end
  end)
  it("sign / square of bool as torch: sign is bool, square (pow(x, 2)) int64 (issue 32)", function()
    local b = T.tensor({ true, false })
    expect.eq({ b:sign().dtype, b:sign():totable() }, { "bool", { true, false } })
    expect.eq({ b:square().dtype, b:square():totable() }, { "int64", { 1, 0 } })
    local f = T.compile(function(x) return x:sign(), x:square() + 1 end)
    for _ = 1, 3 do
      local s, q = f(b)
      expect.eq({ s.dtype, s:totable(), q.dtype, q:totable() }, { "bool", { true, false }, "int64", { 2, 1 } })
    end
  end)
  it("gelu checks its approximate option", function()
    errs(function() local _ = T.ones(2):gelu({ approximate = "fast" }) end, "gelu", 'approximate expected "none" or "tanh"', '"fast"')
    errs(function() local _ = T.ones(2):gelu({ approximate = 1 }) end, "gelu", "approximate", "string")
    errs(function() local _ = T.ones(2):gelu({ approx = "tanh" }) end, "gelu", "unknown option 'approx'")
  end)
  for _, op in ipairs(BINARY) do
    it(op .. " rejects two numbers, strings and shapes that do not broadcast", function()
      errs(function() local _ = T[op](1, 2) end, op, "at least one tensor")
      errs(function() local _ = T[op](T.ones(2), "a") end, op, "argument 2 (other)", "a tensor or a number", "string")
      errs(function() local _ = T[op]({}, T.ones(2)) end, op, "argument 1 (self)", "table")
      errs(function() local _ = T[op](T.ones(2, 3), T.ones(4)) end, op, "{2,3} and {4} cannot be broadcast")
    end)
  end
  it("sub rejects bool operands, as torch", function()
    errs(function() local _ = T.tensor({ true }) - T.tensor({ true }) end, "sub", "bool")
    errs(function() local _ = T.ones(2):sub(true) end, "sub", "bool")
    errs(function() local _ = 1 - T.tensor({ false }) end, "sub", "bool", "logical_not")
  end)
  it("add / sub check alpha", function()
    errs(function() local _ = T.tensor({ 1 }):add(T.tensor({ 1 }), { alpha = 2.5 }) end, "add", "alpha", "integer", "2.5")
    errs(function() local _ = T.ones(1):add(1, { alpha = "x" }) end, "add", "alpha", "number")
    expect.eq(T.ones(2):sub(T.ones(2), { alpha = 0.5 }):totable(), { 0.5, 0.5 })
  end)
  it("alpha as torch checks it against the result dtype: a fraction for floats, a boolean for bools (issue 32)", function()
    local b, i = T.tensor({ true, false }), T.tensor({ 1, 2 })
    errs(function() local _ = T.add(b, b, { alpha = 0.0678 }) end, "add", "alpha must be an integer for bool inputs", "0.0678")
    errs(function() local _ = T.sub(i, i, { alpha = 0.5 }) end, "sub", "alpha must be an integer for int64 inputs", "0.5")
    errs(function() local _ = i:add_(i, { alpha = 0.5 }) end, "add_", "alpha must be an integer")
    errs(function() local _ = T.add(i, i, { alpha = true }) end, "add", "alpha expected a number", "int64", "got true")
    errs(function() local _ = T.add(T.ones(2), 1, { alpha = false }) end, "add", "alpha expected a number", "float32")
    expect.eq(T.add(b, b, { alpha = true }):totable(), { true, false })
    expect.eq(T.add(b, T.tensor({ false, true }), { alpha = false }):totable(), { true, false })
    expect.eq(T.add(b, 1, { alpha = 2 }):totable(), { 3, 2 })
    expect.eq(T.add(i, 2.5, { alpha = 0.5 }):totable(), { 2.25, 3.25 })
    -- compiled: a fraction that arrives once the number varies is refused at the op too
    local alpha = 2
    local f = T.compile(function(x) return T.add(x, x, { alpha = alpha }) end)
    for k = 1, 3 do alpha = k; expect.eq(f(i):totable(), { 1 + k, 2 + 2 * k }) end
    alpha = 0.5
    errs(function() local _ = f(i) end, "add", "alpha must be an integer for int64 inputs")
  end)
  it("where wants a bool condition and broadcastable operands", function()
    errs(function() local _ = T.where(T.tensor({ 1, 0 }), 1, 2) end, "where", "condition", "bool", "int64")
    errs(function() local _ = T.where(T.tensor({ true, false }), T.ones(3), 2) end, "where", "cannot be broadcast")
    errs(function() local _ = T.where(true, 1, 2) end, "where", "argument 1 (condition)", "tensor")
    expect.errors(function() return T.ones(2).where end, 'no method "where": T.where is a function, not a method')
  end)
  it("clamp needs a bound and numeric input", function()
    errs(function() local _ = T.ones(2):clamp() end, "clamp", "at least one of min and max")
    errs(function() local _ = T.ones(2):clamp("a") end, "clamp", "argument 2 (min)", "string")
    errs(function() local _ = T.ones(2):clamp(T.ones(3)) end, "clamp", "cannot be broadcast")
  end)
  it("lerp and addcmul check their operands", function()
    errs(function() local _ = T.ones(2):lerp(1, 0.5) end, "lerp", "argument 2 (end)", "tensor")
    errs(function() local _ = T.ones(2):lerp(T.ones(3), 0.5) end, "lerp", "cannot be broadcast")
    errs(function() local _ = T.tensor({ true }):lerp(T.tensor({ false }), true) end, "lerp", "floating")
    errs(function() local _ = T.tensor({ 1 }):addcmul(T.tensor({ 1 }), T.tensor({ 1 }), 0.5) end, "addcmul", "value", "integer", "0.5")
    errs(function() local _ = T.tensor({ true }):addcmul(T.tensor({ true }), T.tensor({ true })) end, "addcmul", "numeric", "bool")
    errs(function() local _ = T.addcmul(T.ones(2), T.ones(2), 3) end, "addcmul", "argument 3 (tensor2)", "tensor")
  end)
  it("lerp and the activations refuse integer tensors, as torch (a float weight or slope too)", function()
    errs(function() local _ = T.tensor({ 1, 2 }):lerp(T.tensor({ 3, 6 }), 0.25) end, "lerp", "floating tensors", "int64")
    for _, f in ipairs { "gelu", "silu", "mish", "hardswish", "logsigmoid", "softplus" } do
      errs(function() local _ = T.F[f](T.tensor({ 1, 2 })) end, f, "expected a floating tensor, got an int64 tensor")
    end
    errs(function() local _ = T.F.leaky_relu(T.tensor({ 1, 2 }, { dtype = "int32" }), 0.5) end, "leaky_relu", "int32")
  end)
end)

describe("deliberate differences from torch 1.13", function()
  it("maximum / minimum / atan2 / logical ops take a number (torch needs a tensor)", function()
    expect.eq(T.tensor({ 1, 5 }):maximum(3):totable(), { 3, 5 })
    expect.eq(T.minimum(2.5, T.tensor({ 1, 5 })):totable(), { 1, 2.5 })
    expect.eq(T.tensor({ 0, 2 }):logical_and(true):totable(), { false, true })
  end)
  it("addcmul rejects a fractional value for integer inputs (torch truncates it)", function()
    errs(function() local _ = T.addcmul(T.tensor({ 1 }), T.tensor({ 1 }), T.tensor({ 1 }), 2.5) end, "addcmul", "2.5")
  end)
  it("eye and arange support bfloat16 (torch 1.13 lacks bfloat16 eye)", function()
    expect.eq(T.eye(2, { dtype = "bfloat16" }):totable(), { { 1, 0 }, { 0, 1 } })
  end)
end)

describe("lerp's number weight", function()
  it("stays in the compute type (float for 16-bit), as PyTorch's opmath", function()
    local b16 = T.lerp(T.tensor({ 0 }, { dtype = "bfloat16" }), T.tensor({ 100 }, { dtype = "bfloat16" }), 0.3)
    expect.eq(b16:float():totable(), { 30 })  -- (a bfloat16 weight 0.30078125 gave 30.125)
    local h = T.lerp(T.tensor({ 3 }, { dtype = "float16" }), T.tensor({ 0.1 }, { dtype = "float16" }), 0.3)
    expect.eq(h:double():totable(), { 2.130859375 })
  end)
end)

expect.covers("neg_", "abs_", "exp_", "exp2_", "log_", "log2_", "log1p_", "expm1_", "sqrt_", "rsqrt_", "sin_", "cos_",
  "tan_", "tanh_", "sigmoid_", "relu_", "erf_", "floor_", "ceil_", "trunc_", "sign_", "reciprocal_", "square_", "pow_",
  "fmod_", "remainder_", "atan2_", "hypot_", "lerp_", "addcmul_")
describe("in-place forms", function()
  local x = T.rand(3, 4, { dtype = "float64" }) + 0.25  -- (in every domain below)
  local w = T.rand(4, { dtype = "float64" }) + 0.5
  local forms = {
    neg = {}, abs = {}, exp = {}, exp2 = {}, log = {}, log2 = {}, log1p = {}, expm1 = {}, sqrt = {}, rsqrt = {},
    sin = {}, cos = {}, tan = {}, tanh = {}, sigmoid = {}, relu = {}, erf = {}, floor = {}, ceil = {}, trunc = {},
    sign = {}, reciprocal = {}, square = {}, pow = { 2.5 }, fmod = { w }, remainder = { 0.3 }, atan2 = { w },
    lerp = { w, 0.3 }, addcmul = { w, x, 0.5 },
  }
  it("write the op's result into x and return x; their gradient is the op's", function()
    for name, args in pairs(forms) do
      local y = x:clone()
      expect.truthy(rawequal(y[name .. "_"](y, unpack(args)), y), name .. "_ returns self")
      expect.eq(y:totable(), x[name](x, unpack(args)):totable(), name .. "_")
      local a = x:clone():requires_grad_()
      local b = a * 1
      b[name .. "_"](b, unpack(args))
      b:sum():backward()
      local c = x:clone():requires_grad_()
      c[name](c, unpack(args)):sum():backward()
      expect.eq(a.grad:totable(), c.grad:totable(), name .. "_ gradient")
    end
  end)
  it("refuse a leaf requiring grad and a result x cannot hold", function()
    errs(function() x:clone():requires_grad_():exp_() end, "exp_", "a leaf Variable that requires grad")
    errs(function() T.tensor({ 1, 2 }):sqrt_() end, "sqrt_", "float32 cannot be written into int64")
  end)
end)
