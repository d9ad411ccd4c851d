-- Native CPU code generation (jit/): graphs of T.compile lowered to loop IR, fused into kernels and
-- compiled with libgccjit give the results of eager execution - every pointwise op over dtypes and
-- layouts (special values included), reductions, the fusion decisions (kernel counts), the disk
-- kernel cache across processes, an injected compile failure, background compiles, and in-place
-- ops / views of computed values.
local T = require "crescent"
local S = expect
local it = S.native_it  -- every spec here runs native CPU code (it skips where libgccjit is missing)

local saved = { sync = T.config.sync_compile, dir = T.config.cache_dir }
T.config.sync_compile = true  -- compile in line: the second call (hot = 0) runs native code
T.config.cache_dir = "0"      -- no disk cache (memory cache only), except in the disk cache test

-- ---- helpers ---------------------------------------------------------------------------------

local pack = S.pack
local function stats() return T.compiler.stats() end

local function flat(v, out)
  out = out or {}
  if type(v) ~= "table" then out[#out + 1] = v else for _, x in ipairs(v) do flat(x, out) end end
  return out
end

-- Pointwise tolerances (the code is meant to be bit-exact) and reduction tolerances: { rtol, atol }.
local PW = { float32 = { 0, 0 }, float64 = { 0, 0 } }
local RED = { float32 = { 1e-5, 1e-6 }, float64 = { 1e-12, 1e-13 } }

-- got == want: dtype, shape and every element (NaN where NaN, infinities exact, finite numbers
-- within |a - b| <= atol + rtol * |b|; integers and booleans exact).
local function match(got, want, what, tol)
  S.truthy(T.is_tensor(got), what .. ": expected a tensor, got " .. type(got))
  S.eq(got.dtype, want.dtype, what .. ": dtype")
  S.eq(got.shape, want.shape, what .. ": shape")
  local rtol, atol = 0, 0
  if tol and tol[want.dtype] then rtol, atol = tol[want.dtype][1], tol[want.dtype][2] end
  local g, w = flat(got:totable()), flat(want:totable())
  S.eq(#g, #w, what .. ": element count")
  for i = 1, #w do
    local a, b = g[i], w[i]
    local ok = a == b or (a ~= a and b ~= b)
    if not ok and type(a) == "number" and type(b) == "number" and a == a and b == b
       and math.abs(b) ~= math.huge then
      ok = math.abs(a - b) <= atol + rtol * math.abs(b)
    end
    if not ok then
      error(string.format("%s: element %d of %s: got %.17g, expected %.17g", what, i, S.fmt(want.shape),
        tonumber(a) or (a and 1 or 0), tonumber(b) or (b and 1 or 0)), 2)
    end
  end
end

-- Compares results (tensors inside tables too); with strides = true tensors' strides as well.
local function match_all(got, want, what, tol, strides)
  if T.is_tensor(want) then
    match(got, want, what, tol)
    if strides then S.eq(got:stride(), want:stride(), what .. ": strides") end
  elseif type(want) == "table" then
    S.eq(type(got), "table", what)
    for k, v in pairs(want) do match_all(got[k], v, what .. "." .. tostring(k), tol, strides) end
    for k in pairs(got) do S.truthy(want[k] ~= nil, what .. ": extra key " .. tostring(k)) end
  else
    S.eq(got, want, what)
  end
end

-- Runs fn eagerly and compiled (hot = 0: the second call runs native code) on fresh arguments from
-- args(call) and compares results and the arguments afterwards (in-place writes). Requires that a
-- graph was compiled natively and nothing fell back to eager.
local function check(what, fn, args, tol, opts)
  opts = opts or {}
  local cf = T.compile(fn, { hot = 0, backend = "cpu" })
  T.compiler.reset()
  for call = 1, 3 do
    local ea, ca = pack(args(call)), pack(args(call))
    local want = pack(fn(unpack(ea, 1, ea.n)))
    local got = pack(cf(unpack(ca, 1, ca.n)))
    match_all(got, want, what .. " (call " .. call .. ")", tol, opts.strides)
    match_all(ca, ea, what .. " arguments after call " .. call, tol)
  end
  local s = stats()
  S.truthy(s.graphs_compiled >= 1, what .. ": no graph was compiled")
  S.eq(s.eager_fallbacks, 0, what .. ": eager fallbacks")
  return s
end

-- Tensors with special values: rows x cols of dtype, from seed.
local SPECIAL = { 0 / 0, 1 / 0, -1 / 0, 0, -0.0, 90, -90, 0.5, -2.5, 1.5, 1e-40, -3 }
local function data(dt, rows, cols, seed, nonzero)
  T.manual_seed(seed)
  local v = (T.randn(rows, cols, { dtype = "float64" }) * 3):totable()
  local n = 0
  for r = 1, rows do
    for c = 1, cols do
      n = n + 1
      local x = v[r][c]
      if dt == "bool" then
        x = x > 0
      elseif dt == "int32" or dt == "int64" then
        x = math.floor(x + 0.5) % 15 - 7  -- -7 .. 7
        if nonzero and x == 0 then x = 3 end
      elseif (n + seed) % 3 == 0 then
        x = SPECIAL[(n + seed) % #SPECIAL + 1]
      end
      v[r][c] = x
    end
  end
  if rows == 0 then return T.zeros(0, cols, { dtype = dt }) end
  return T.tensor(v, { dtype = dt })
end

-- ---- 1. pointwise ops ------------------------------------------------------------------------

local UNARY_NAMES = { "neg", "abs", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin",
  "cos", "tan", "tanh", "sigmoid", "relu", "silu", "erf", "floor", "ceil", "round", "trunc", "sign",
  "reciprocal", "square", "isnan", "isinf", "logical_not" }
local UNARY = {}
for _, n in ipairs(UNARY_NAMES) do UNARY[#UNARY + 1] = { n, T[n] } end
UNARY[#UNARY + 1] = { "gelu none", function(x) return T.gelu(x, { approximate = "none" }) end }
UNARY[#UNARY + 1] = { "gelu tanh", function(x) return T.gelu(x, { approximate = "tanh" }) end }

local BINARY_NAMES = { "add", "sub", "mul", "div", "pow", "fmod", "remainder", "maximum", "minimum", "atan2",
  "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor" }
local BINARY = {}
for _, n in ipairs(BINARY_NAMES) do BINARY[#BINARY + 1] = { n, T[n] } end
BINARY[#BINARY + 1] = { "add alpha", function(a, b) return T.add(a, b, { alpha = 3 }) end }
BINARY[#BINARY + 1] = { "sub alpha", function(a, b) return T.sub(a, b, { alpha = -2 }) end }

local DTYPES = { "float32", "float64", "int32", "int64", "bool" }
local FLOATS = { float32 = true, float64 = true }

-- unary layouts: {3,5} contiguous, transposed, a step-2 slice, an expanded column, zero-size, and
-- {37,1030} transposed (more than one block of the vectorised inner loop, a partial last block)
local UNARY_LAYOUTS = {
  { "contiguous", function(dt) return data(dt, 3, 5, 1) end },
  { "transposed", function(dt) return data(dt, 5, 3, 2):t() end },
  { "slice step 2", function(dt) return data(dt, 3, 10, 3):slice(2, 1, 10, 2) end },
  { "expanded", function(dt) return data(dt, 3, 1, 4):expand(3, 5) end },
  { "zero-size", function(dt) return data(dt, 0, 4, 5) end },
  { "large transposed", function(dt) return data(dt, 1030, 37, 6):t() end },
}
-- binary layouts: pairs of operands (b nonzero for integers: integer fmod by zero is an error)
local BINARY_LAYOUTS = {
  { "contiguous", function(dt) return data(dt, 3, 5, 11), data(dt, 3, 5, 12, true) end },
  { "transposed", function(dt) return data(dt, 5, 3, 13):t(), data(dt, 3, 5, 14, true) end },
  { "slice and transposed", function(dt) return data(dt, 3, 10, 15):slice(2, 1, 10, 2), data(dt, 5, 3, 16, true):t() end },
  { "broadcast {3,1} {1,5}", function(dt) return data(dt, 3, 1, 17), data(dt, 1, 5, 18, true) end },
  { "tensor and number", function(dt) return data(dt, 3, 5, 19), dt == "bool" and 1 or (FLOATS[dt] and 1.75 or 3) end },
  { "number and tensor", function(dt) return FLOATS[dt] and -2.5 or 2, data(dt, 3, 5, 20, true) end },
  { "zero-size", function(dt) return data(dt, 0, 4, 21), data(dt, 1, 4, 22, true) end },
  { "large broadcast", function(dt) return data(dt, 1030, 37, 23):t(), data(dt, 1, 1030, 24, true) end },
}

-- The ops of `ops` that eager mode accepts for these arguments; for floats, all must be accepted.
local function supported(ops, dt, ...)
  local ok_ops, refused = {}, {}
  for _, op in ipairs(ops) do
    if pcall(op[2], ...) then ok_ops[#ok_ops + 1] = op else refused[#refused + 1] = op[1] end
  end
  if FLOATS[dt] then S.eq(refused, {}, dt .. ": ops refused by eager mode") end
  return ok_ops
end

-- All ops of one dtype and layout in one compiled graph (fused into few kernels).
local function check_ops(ops, dt, layout, make)
  local args = pack(make(dt))
  local list = supported(ops, dt, unpack(args, 1, args.n))
  local fn = function(...)
    local r = {}
    for i, op in ipairs(list) do r[i] = op[2](...) end
    return r
  end
  local cf = T.compile(fn, { hot = 0, backend = "cpu" })
  T.compiler.reset()
  local want = fn(unpack(args, 1, args.n))
  for call = 1, 3 do
    local got = cf(unpack(args, 1, args.n))
    for i, op in ipairs(list) do
      match(got[i], want[i], string.format("%s %s %s (call %d)", op[1], dt, layout, call), PW)
    end
  end
  local s = stats()
  S.eq({ s.graphs_compiled, s.eager_fallbacks }, { 1, 0 }, dt .. " " .. layout .. ": graphs compiled, eager fallbacks")
  return #list
end

describe("native CPU code: pointwise ops equal eager", function()
  -- every op of `ops` x every dtype x every layout; at least the float dtypes must run them all
  local function sweep(ops, layouts)
    local n = 0
    for _, dt in ipairs(DTYPES) do
      for _, lay in ipairs(layouts) do n = n + check_ops(ops, dt, lay[1], lay[2]) end
    end
    S.truthy(n >= #ops * 2 * #layouts, "only " .. n .. " op / dtype / layout cases ran")
  end
  it("every unary op, all dtypes, contiguous / transposed / sliced / expanded / zero-size", function()
    sweep(UNARY, UNARY_LAYOUTS)
  end)
  it("every binary op, all dtypes, with strided, broadcast, scalar and zero-size operands", function()
    sweep(BINARY, BINARY_LAYOUTS)
  end)
  it("where with a computed or a given condition, mixed dtypes and scalars", function()
    for _, dt in ipairs({ "float32", "float64", "int64" }) do
      check("where " .. dt, function(c, x, y)
        return T.where(x:gt(0), x, y), T.where(c, x, y:t():t()), T.where(c, x, 0), T.where(c:t(), y:t(), x:t()),
          T.where(c, x:double(), y), T.where(x:ne(x), -1, x) * 2
      end, function() return data("bool", 3, 5, 31), data(dt, 3, 5, 32), data(dt, 3, 5, 33) end, PW)
      check("where broadcast " .. dt, function(c, x, y) return T.where(c, x, y) end,
        function() return data("bool", 3, 1, 34), data(dt, 1, 5, 35), data(dt, 3, 5, 36) end, PW)
    end
  end)
end)

-- eager rounds a * b + c once where torch does (sm::fma_); the generated code must too (EOp::Arith
-- "fma"): random operands, where two roundings differ from one in about a fifth of the elements
describe("native CPU code: one rounding where eager has one", function()
  it("addcmul, lerp and add / sub with alpha equal eager bit for bit", function()
    for _, dt in ipairs({ "float32", "float64" }) do
      check("fma " .. dt, function(x, a, b, w)
        return T.addcmul(x, a, b), T.addcmul(x, a, b, 0.3), T.lerp(x, a, 0.3), T.lerp(x, a, 0.7), T.lerp(x, a, w),
          T.add(x, a, { alpha = 0.3 }), T.sub(x, a, { alpha = 0.3 }), T.add(x, 1.7, { alpha = 0.3 })
      end, function(call)
        T.manual_seed(call)  -- (the same operands for both runs of a call)
        return T.randn(7, 300, { dtype = dt }), T.randn(7, 300, { dtype = dt }), T.randn(300, { dtype = dt }),
          T.rand(7, 1, { dtype = dt })
      end, PW)
    end
  end)
end)

-- ---- 2. reductions -----------------------------------------------------------------------------

local REDUCE_OPS = {
  { "sum", function(x, d, k) return x:sum(d, k) end },
  { "mean", function(x, d, k) return x:mean(d, k) end },
  { "amax", function(x, d, k) return x:amax(d, k) end },
  { "amin", function(x, d, k) return x:amin(d, k) end },
  { "prod", function(x, d, k) return x:prod(d, k) end },
  { "var", function(x, d, k) return x:var(d, k) end },
  { "std", function(x, d, k) return x:std(d, k, { correction = 0 }) end },
  { "logsumexp", function(x, d, k) return x:logsumexp(d, k) end },
  { "norm", function(x, d, k) return x:norm(d, k) end },
  { "any", function(x, d, k) return x:gt(0.75):any(d, k) end },
  { "all", function(x, d, k) return x:all(d, k), (x - x:amin()):all(d, k) end },
  { "aminmax", function(x, d, k) if type(d) ~= "table" then return x:aminmax({ dim = d, keepdim = k }) end end },
}

-- inputs and the dims to reduce: 2-d {7,33} (contiguous and transposed), 3-d {4,5,6} (contiguous
-- and permuted)
local function red_inputs(dt)
  T.manual_seed(7)
  local function r(...) return (T.rand(...) + 0.5):to(dt) * T.randn(...):sign():to(dt) end
  return {
    { "{7,33}", r(7, 33), { 1, 2, { 1, 2 } } },
    { "{33,7}:t()", r(33, 7):t(), { 1, 2, { 1, 2 } } },
    { "{4,5,6}", r(4, 5, 6), { 1, 2, 3, { 1, 3 }, { 1, 2, 3 } } },
    { "{6,5,4}:permute(3,2,1)", r(6, 5, 4):permute(3, 2, 1), { 1, 2, 3, { 1, 3 } } },
  }
end

describe("native CPU code: reductions equal eager", function()
  for _, dt in ipairs({ "float32", "float64" }) do
    it("sum mean amax amin prod var std logsumexp norm any all softmax log_softmax, " .. dt, function()
      for _, input in ipairs(red_inputs(dt)) do
        local name, x, dims = input[1], input[2], input[3]
        check(name .. " " .. dt, function(a)
          local out = { all = { a:sum(), a:mean(), a:amax(), a:prod(), a:var(), a:logsumexp(), a:norm() } }
          for di, d in ipairs(dims) do
            for _, keep in ipairs({ false, true }) do
              for _, op in ipairs(REDUCE_OPS) do
                for _, r in ipairs({ op[2](a, d, keep) }) do out[#out + 1] = r end
              end
            end
            if type(d) == "number" then
              out[#out + 1] = T.softmax(a, d)
              out[#out + 1] = T.log_softmax(a * 3, d)
              out[#out + 1] = a:softmax(d) * a + a:sum(d, true)  -- a pointwise epilogue
            end
            out["rows" .. di] = a:exp():sum(d) / a:amax(d)       -- prologue and two reductions
          end
          return out
        end, function() return x end, RED)
      end
    end)
  end
  it("reductions over size-1 and expanded dims (a value constant along the reduced dims)", function()
    check("size-1 dims", function(a, b, c)
      return a:sum(1), a:amax(1, true), a:softmax(1), a:var(1), b:sum(2), b:mean({ 2, 3 }), c:expand(3, 4):sum(2),
        (c + 1):expand(3, 4):amin(2, true), c:expand(3, 4):logsumexp(2)
    end, function() T.manual_seed(43); return T.randn(1, 3), T.randn(2, 1, 1, 4), T.randn(3, 1) end, RED)
  end)
  it("var and std of a constant input are exactly 0, as eager's (the rounded mean's error taken back)", function()
    local f = T.compile(function(a, b) return a:var(2), b:std(1), a:var({ 1, 2 }, true), T.fmod(a:var(2), a:var(2)) end, { hot = 0 })
    T.manual_seed(45)
    for _, dt in ipairs({ "float32", "float64" }) do
      for _, n in ipairs({ 3, 5, 7, 100, 1001 }) do
        local c = T.randn(4, 1, { dtype = dt })  -- (constants whose rounded mean is not themselves)
        local a, b = c:expand(4, n):contiguous(), c:t():expand(n, 4):contiguous()
        for _ = 1, 2 do
          local v, s, all, nan = f(a, b)
          S.eq(v:totable(), { 0, 0, 0, 0 }, dt .. " rows of " .. n)
          S.eq(s:totable(), { 0, 0, 0, 0 }, dt .. " columns of " .. n)
          S.truthy(all:item() > 0 and nan:isnan():all():item(), dt .. " " .. n)
        end
      end
    end
  end)
  it("an empty dim list reduces every dim, as eager (it reduced none, and amax returned element 1)", function()
    check("dims {}", function(a)
      return a:sum({}), a:mean({}, true), a:amax({}, true), a:amin({}), a:logsumexp({}), a:var({}), a:norm({})
    end, function() T.manual_seed(44); return T.randn(4, 2) end, RED)
  end)
  -- Compiled softmax folds as the eager kernel does (a row: blocks of the generated loop summed in
  -- float64; columns: in order in the input dtype; the same exp and log), so it gives eager's bits:
  -- along every dim, rows longer than a block, an input laid out transposed, and special values.
  it("softmax and log_softmax give eager's bits along every dim of 2-d and 3-d inputs", function()
    local SHAPES = { { 4, 2 }, { 2, 4 }, { 7, 33 }, { 3, 1030 }, { 1030, 3 }, { 5, 1 }, { 4, 5, 6 }, { 3, 700, 2 }, { 2, 1, 3 } }
    for _, dt in ipairs({ "float32", "float64" }) do
      for _, sh in ipairs(SHAPES) do
        local rev, perm = {}, {}  -- b: dims reversed in memory, permuted back to shape sh
        for i = #sh, 1, -1 do rev[#rev + 1], perm[#perm + 1] = sh[i], i end
        for d = 1, #sh do
          check(string.format("softmax %s {%s} dim %d", dt, table.concat(sh, ","), d), function(a, b)
            return T.softmax(a, d), T.log_softmax(a, d), T.softmax(b, d), T.log_softmax(b * 3, d)
          end, function(call)
            T.manual_seed(100 * call + d)
            return (T.randn(unpack(sh)) * 4):to(dt), (T.randn(unpack(rev)) * 4):to(dt):permute(unpack(perm))
          end)
        end
      end
      for d = 1, 2 do
        check("softmax special values " .. dt .. " dim " .. d, function(a) return T.softmax(a, d), T.log_softmax(a, d) end,
          function(call) return data(dt, 9, 17, 60 + call) end)
      end
    end
  end)
  -- Eager logsumexp takes the compiled one's passes (max, Σ exp(x - max) summed as sum sums, log in
  -- float64), so both give the same bits where sum does: along the last dim of a contiguous input
  -- (a row folded in blocks on both sides). Over other dims or layouts sum itself folds in another
  -- order (columns in float64 element by element in eager, float lanes per block compiled; eager
  -- merges contiguous dims into one run): there they agree within rounding.
  it("logsumexp gives eager's bits along the last dim, and its values over any dims", function()
    local SHAPES = { { 4, 2 }, { 7, 33 }, { 3, 1030 }, { 1030, 3 }, { 5, 1 }, { 4, 5, 6 }, { 3, 700, 2 } }
    for _, dt in ipairs({ "float32", "float64" }) do
      for _, sh in ipairs(SHAPES) do
        local rev, perm = {}, {}
        for i = #sh, 1, -1 do rev[#rev + 1], perm[#perm + 1] = sh[i], i end
        local dimsets = { {}, { 1, #sh } }
        for d = 1, #sh do dimsets[#dimsets + 1] = { d } end
        for _, dims in ipairs(dimsets) do
          local trailing = #dims == 1 and dims[1] == #sh
          local what = string.format("logsumexp %s {%s} dims {%s}", dt, table.concat(sh, ","), table.concat(dims, ","))
          check(what, function(a) return a:logsumexp(dims), a:logsumexp(dims, true), (a - a:amax()):logsumexp(dims) end,
            function(call) T.manual_seed(200 * call + #dims); return (T.randn(unpack(sh)) * 4):to(dt) end,
            not trailing and RED or nil)
          check(what .. " transposed", function(b) return b:logsumexp(dims, true) end, function(call)
            T.manual_seed(300 * call + #dims)
            return (T.randn(unpack(rev)) * 4):to(dt):permute(unpack(perm))
          end, RED)
        end
      end
      for d = 1, 2 do
        check("logsumexp special values " .. dt .. " dim " .. d, function(a) return a:logsumexp(d), a:logsumexp(d, true) end,
          function(call) return data(dt, 9, 17, 80 + call) end, d == 2 and nil or RED)
      end
    end
  end)
  it("integer reductions are exact: int32 and int64 sums (int64 results), amax, amin, prod", function()
    for _, dt in ipairs({ "int32", "int64" }) do
      for _, x in ipairs({ data(dt, 7, 33, 41), data(dt, 33, 7, 42):t() }) do
        check("integer " .. dt, function(a)
          return a:sum(1), a:sum(2, true), a:sum(), (a * 2 + 1):sum({ 1, 2 }), a:amax(1), a:amin(2, true),
            (a:abs():clamp(nil, 2) - 1):prod(1), a:float():mean(2)
        end, function() return x end)
        S.eq(x:sum().dtype, "int64", "the sum of " .. dt)
      end
    end
  end)
end)

-- ---- 3. fusion -----------------------------------------------------------------------------------

-- The number of kernels compiled for fn's graph (constants differ from every other test: a kernel
-- already in the memory cache is not compiled again).
local function kernels(what, fn, args, tol)
  local s = check(what, fn, args, tol or RED)
  S.eq(s.graphs_compiled, 1, what .. ": graphs compiled")
  return s.kernels_compiled
end

describe("native CPU code: fusion", function()
  it("fuses a pointwise chain into one kernel", function()
    S.eq(kernels("sin chain", function(x) return T.sin((x + 1.0625) * 2.125) end,
      function() T.manual_seed(51); return T.randn(1000) end), 1)
  end)
  it("fuses bias + relu into one kernel", function()
    S.eq(kernels("bias relu", function(x, b) return T.relu(x + b) end,
      function() T.manual_seed(52); return T.randn(64, 128), T.randn(128) end), 1)
  end)
  it("fuses masked_fill into its neighbours (an attention mask), eager where a fractional value meets ints", function()
    S.eq(kernels("masked scores", function(s, m) return (s * 0.1875):masked_fill(m, -math.huge):softmax(2) end,
      function() T.manual_seed(57); return T.randn(16, 24), T.randn(1, 24):gt(0) end), 1)
    S.eq(kernels("masked ints", function(x, m) return x:masked_fill(m, 3) + 1 end,
      function() T.manual_seed(58); return T.randint(-9, 9, { 5, 6 }), T.randn(5, 1):gt(0) end), 1)
    check("masked ints, fractional value", function(x, m) return x:masked_fill(m, 2.5) + 1 end,
      function() T.manual_seed(59); return T.randint(-9, 9, { 5, 6 }), T.randn(5, 6):gt(0) end)
  end)
  it("fuses clamp into its neighbours: number, tensor and missing bounds, NaN, every numeric dtype", function()
    -- eager's rule: a NaN in x or in a bound gives NaN; lo > hi gives hi
    local nan = 0 / 0
    S.eq(kernels("clamp chain", function(x, lo, hi)
      return (x * 1.5):clamp(-1, 1) + 1, x:clamp(lo, hi), x:clamp(nil, hi) * 2, x:clamp(lo) - 1, x:clamp(0.75, -0.25)
    end, function(call)
      T.manual_seed(60 + call)
      local x = T.randn(7, 9)
      x[1][1], x[2][3] = nan, math.huge
      local lo, hi = T.randn(9) - 1, T.randn(7, 1) + 1
      lo[2], hi[3][1] = nan, nan
      return x, lo, hi
    end), 1)
    for _, dt in ipairs({ "float64", "int32", "int64" }) do
      check("clamp " .. dt, function(x, b) return x:clamp(-3, b) * 2, x:clamp(b, 4) end, function()
        T.manual_seed(66)
        return (T.randn(5, 6) * 6):to(dt), (T.randn(6) * 3):to(dt)
      end)
    end
  end)
  it("fuses lerp and addcmul (eager's formulas) into their neighbours", function()
    S.eq(kernels("lerp addcmul", function(a, b, w)
      return T.lerp(a * 2, b, w) + 1, T.lerp(a, b, 0.75) - T.addcmul(a, b, w, 0.5), T.addcmul(a:double(), w:double(), a:double(), -2)
    end, function(call)
      T.manual_seed(70 + call)
      local w = T.randn(4, 9)
      w[1][1], w[1][2], w[1][3] = 0.5, -0.5, 0 / 0  -- both branches of lerp's formula, and NaN
      return T.randn(4, 9), T.randn(9), w
    end), 1)
    for _, dt in ipairs({ "int32", "int64" }) do  -- integer addcmul wraps as eager's sm::add_ / sm::mul_
      check("addcmul " .. dt, function(x, y) return T.addcmul(x, y, x, -3), T.addcmul(y, x, x) end, function()
        T.manual_seed(74)
        return T.randint(-2 ^ 20, 2 ^ 20, { 6, 5 }):to(dt), T.randint(-9, 9, { 5 }):to(dt)
      end)
    end
  end)
  it("fuses tril / triu (an element's row and column as data) into their neighbours", function()
    -- diagonals inside, on and beyond the matrix; non-square, batched, transposed; every dtype
    S.eq(kernels("tril triu", function(x)
      return (T.tril(x, 1) * 2 + T.triu(x, -2)):sin(), T.tril(x, 9) - T.triu(x, -9), T.tril(x, -9) + T.triu(x:transpose(2, 3))
    end, function(call) T.manual_seed(80 + call); return T.randn(2, 5, 5) end), 1)
    check("tril of a non-square matrix", function(x) return T.tril(x) + 1, T.triu(x, 2) * x end,
      function() T.manual_seed(82); return T.randn(4, 7) end)
    for _, dt in ipairs({ "float64", "int32", "int64", "bool" }) do
      check("tril / triu " .. dt, function(x) return T.tril(x, -1), T.triu(x, 1) end, function()
        T.manual_seed(83)
        return (T.randn(3, 6, 4) * 5):to(dt)
      end)
    end
  end)
  it("makes softmax one kernel", function()
    S.eq(kernels("softmax", function(x) return T.softmax(x, 2) end,
      function() T.manual_seed(53); return T.randn(64, 127) end), 1)
  end)
  it("makes a layer_norm written in Lua one kernel", function()
    S.eq(kernels("layer_norm", function(x, w, b)
      local mean = x:mean(-1, true)
      local d = x - mean
      local var = (d * d):mean(-1, true)
      return d * T.rsqrt(var + 1.25e-5) * w + b
    end, function() T.manual_seed(54); return T.randn(64, 128), T.randn(128), T.randn(128) end), 1)
  end)
  it("fuses a full reduction with its pointwise prologue into one kernel", function()
    S.eq(kernels("sum of (x+y)*2", function(x, y) return ((x + y) * 2.375):sum() end,
      -- 8192 terms of about 3 summing to about -5: eager's float32 sum is off by 1e-4 (the
      -- kernel's is closer to the float64 sum), hence atol 1e-3
      function() T.manual_seed(55); return T.randn(64, 128), T.randn(64, 128) end, { float32 = { 1e-5, 1e-3 } }), 1)
  end)
  it("splits large whole-tensor reductions in two kernels so that the threads share them", function()
    -- 2-d with a prologue: partial sums per row (one kernel with the prologue), then their sum
    S.eq(kernels("big sum of (x+y)*2", function(x, y) return ((x + y) * 2.625):sum() end,
      function() T.manual_seed(57); return T.randn(512, 256), T.randn(512, 256) end, { float32 = { 1e-5, 1e-2 } }), 2)
    -- 1-d inputs in memory: cut into slices; max with a NaN, int64 sum, keepdim, mean, prod:
    -- the slices' partials of all six in one kernel, their folds in another (a partial kernel
    -- reads nothing of the folds: it joins the first's, fusion/schedule.cpp last_read_group)
    local function ones_nan(call)
      T.manual_seed(58 + call)
      local x = T.randn(131072)
      local i = (x * 4):floor():long()
      if call == 2 then x[77777] = 0 / 0 end
      return x, i, T.rand(131072) * 0.01 + 0.995
    end
    S.eq(kernels("big 1-d reductions", function(x, i, p)
      return x:amax(), i:sum(), x:sum(1, true), x:mean(), p:prod(), x:amin(1)
    end, ones_nan, { float32 = { 1e-4, 1e-3 } }), 2)
    -- one result with a prologue (1-d, one long row): cut into slices, the prologue in the
    -- partials' kernel (fusion/schedule.cpp cut_space), the slices summed in parallel; e is
    -- stored there. A few rows with a prologue stay whole (the rows share the threads).
    S.eq(kernels("big 1-d sum of (x-y)^2", function(x, y)
      local d = x - y
      local e = d * 1.5
      return (d * d):sum(), e, ((x + 0.5) * y):mean()
    end, function() T.manual_seed(60); return T.randn(2 ^ 18), T.randn(2 ^ 18) end, { float32 = { 1e-5, 1e-2 } }), 4)
    S.eq(kernels("one long row of exp(x)", function(x) return (x * 0.25):exp():sum(2, true) end,
      function() T.manual_seed(61); return T.randn(1, 2 ^ 17) end, { float32 = { 1e-5, 1e-2 } }), 2)
    S.eq(kernels("few long rows of exp(x)", function(x) return (x * 0.25):exp():sum(2, true) end,
      function() T.manual_seed(62); return T.randn(3, 2 ^ 17) end, { float32 = { 1e-5, 1e-2 } }), 1)
    -- a few results (2 rows of 2^16): split along the reduced dims; a transposed input (the two
    -- partial reductions in one kernel, their folds in another)
    S.eq(kernels("sum over dims 2, 3", function(x) return x:sum({ 2, 3 }), x:transpose(2, 3):amax({ 2, 3 }) end,
      function() T.manual_seed(59); return T.randn(2, 256, 256) end, { float32 = { 1e-5, 1e-3 } }), 2)
  end)
  it("gives correct results with a matmul between pointwise ops", function()
    local n = kernels("matmul inside", function(x, w, b)
      local h = (x * 1.5 + b):tanh()
      local y = h:matmul(w)
      return (y - 0.75):relu():sum(2), h
    end, function() T.manual_seed(56); return T.randn(16, 32), T.randn(32, 8), T.randn(32) end)
    S.truthy(n >= 2, "expected a kernel on each side of the matmul, got " .. n)
  end)
end)

-- ---- 4. / 5. child processes: the disk cache, an injected failure ----------------------------------

local SH = require "shell"

-- Runs `text` as a script of the crescent executable; returns its stdout (stderr is dropped).
local function run_child(text, env) return (S.crescent({}, { script = text, env = env })) end

-- A child script: compiles a function, calls it three times, prints stats and results.
local CHILD = [[
local T = require "crescent"
T.config.sync_compile = true
T.config.cache_dir = %q
local fn = function(x) return (x * 1.4375 + 0.3125):tanh():sum(1), (x - 0.5):exp() end
local f = T.compile(fn, { hot = 0 })
local x = T.arange(12):float():view(3, 4) / 7
local r, e
for _ = 1, 3 do r, e = f(x) end
local w1, w2 = fn(x)
local s = T.compiler.stats()
local vals = {}
for _, v in ipairs(r:totable()) do vals[#vals + 1] = string.format("%%.9g", v) end
print(s.kernels_compiled, s.disk_cache_hits, s.eager_fallbacks, s.graphs_compiled,
  tostring(r:eq(w1):all():item() and e:eq(w2):all():item()), table.concat(vals, ","))
]]
local function parse(out)
  local k, d, f, g, eq, vals = out:match("^(%S+)\t(%S+)\t(%S+)\t(%S+)\t(%S+)\t(%S+)\n")
  S.truthy(k, "unexpected child output: " .. out)
  return { kernels = tonumber(k), disk = tonumber(d), fallbacks = tonumber(f), graphs = tonumber(g), eq = eq, vals = vals }
end

describe("native CPU code in child processes", function()
  it("loads kernels from the disk cache in a second process", function()
    SH.with_dir(function(dir)
      local first = parse(run_child(CHILD:format(dir)))
      local files = table.concat(SH.ls(dir), " ")
      local second = parse(run_child(CHILD:format(dir)))
      S.truthy(first.kernels >= 1, "first run: kernels compiled " .. first.kernels)
      S.eq({ first.disk, first.fallbacks, first.eq }, { 0, 0, "true" }, "first run: disk hits, fallbacks, eager equal")
      S.truthy(files:find("%.so"), "no .so in the cache directory: " .. files)
      S.eq({ second.kernels, second.fallbacks, second.eq }, { 0, 0, "true" }, "second run: kernels, fallbacks, eager equal")
      S.truthy(second.disk >= 1, "second run: disk cache hits " .. second.disk)
      S.eq(second.vals, first.vals, "printed results")
    end)
  end)
  it("runs a graph eagerly, with correct results, when compiling fails (CRESCENT_JIT_FAIL=1)", function()
    local r = parse(run_child(CHILD:format("0"), "CRESCENT_JIT_FAIL=1"))
    S.eq(r.eq, "true", "results equal eager")
    S.truthy(r.fallbacks >= 1, "eager fallbacks " .. r.fallbacks)
    S.eq(r.kernels, 0, "kernels compiled")
    local plain = parse(run_child(CHILD:format("0")))
    S.eq(r.vals, plain.vals, "results with and without the failure")
  end)
end)

-- ---- 6. background compilation ---------------------------------------------------------------------

describe("native CPU code compiled in the background", function()
  it("gives eager results on every call while the kernels compile, then runs them", function()
    S.background_compile(function(t) return t end, function(got, want, what) match(got, want, what, RED) end)
  end)
  -- The process ends while graphs compile: the end of the script (the VM's end) and os.exit wait
  -- for the compile in progress; exit destroyed what it used under it (an ASan use-after-free).
  it("lets a program end, or call os.exit, while graphs compile", function()
    -- (not a plain os.exit(0): it leaves every tensor alive, which the ASan run reports as leaks)
    for _, ending in ipairs { "", "os.exit(0, true)" } do
      SH.with_dir(function(dir)
        local out, _, status = S.crescent({}, { merge = true, script = string.format([[
local T = require "crescent"
T.config.sync_compile = false
T.config.cache_dir = %q
local x = T.randn(64, 64)
for k = 1, 4 do
  local f = T.compile(function(a) return T.relu(T.matmul(a, x) * k + 1):sum(1) end, { hot = 1 })
  for _ = 1, 2 do f(x) end
end
io.write("done\n")
%s
]], dir, ending) })
        S.eq({ out, status }, { "done\n", 0 }, "output and exit status ending with '" .. ending .. "'")
      end)
    end
  end)
end)

-- ---- 7. in-place ops, views of computed values ----------------------------------------------------

-- fresh random inputs of the given shapes for each call
local function xs(seed, ...)
  local shapes = { ... }
  return function(call)
    T.manual_seed(seed + call)
    local r = {}
    for i, sh in ipairs(shapes) do r[i] = T.randn(unpack(sh)) end
    return unpack(r, 1, #shapes)
  end
end

describe("native CPU code: in-place ops and views", function()
  it("in-place ops on intermediates and on inputs", function()
    check("in-place", function(x, y)
      local z = x * 2.0625
      z:add_(y):mul_(0.5)
      z:narrow(2, 2, 2):sub_(1)
      z:t()[1]:fill_(-1)
      x:add_(z:exp())
      y:mul_(3):clamp_(-1, 1)
      return z, z:sin(), x * 1, y:sum(1)
    end, xs(70, { 3, 5 }, { 3, 5 }), RED, { strides = true })
  end)
  it("views of computed values as outputs", function()
    check("views", function(x)
      local a = x + 1.1875
      return a:t(), (x * 2.1875):view(15), (x + 1.3125):unsqueeze(1), a:narrow(2, 2, 3), (x * 3):view(5, 3):t(),
        a:t():sum(1), a
    end, xs(80, { 3, 5 }), RED, { strides = true })
  end)
  it("reshape / flatten of a non-contiguous computed value (a copy), as an output and read", function()
    check("reshape copy", function(x)
      return (x * 2):t():reshape(15), (x + 1):t():flatten(), (x + 1):unsqueeze(2):expand(3, 2, 5):reshape(6, 5)
    end, xs(85, { 3, 5 }), RED, { strides = true })
    check("reshape copy read", function(x)
      return (x * 2):t():reshape(15) * 3, (x + 1):unsqueeze(2):expand(3, 2, 5):reshape(6, 5):sum(1)
    end, xs(86, { 3, 5 }), RED)
  end)
  it("an expanded reduction added to its input", function()
    check("expand", function(x)
      return x + x:sum(2, true):expand(3, 5), x - x:mean(1, true):expand(3, 5) * 1.5625,
        x:amax(2):unsqueeze(2):expand(3, 5) / x
    end, xs(90, { 3, 5 }), RED, { strides = true })
  end)
  it("a value used inside a kernel, by an extern op and as an output", function()
    check("shared", function(x, w)
      local y = (x * 1.6875):exp()
      local m = y:matmul(w)
      return y * 2 + m:sum(), y, m:relu(), y:sum(2) + m:sum(2)
    end, xs(100, { 4, 6 }, { 6, 6 }), RED, { strides = true })
  end)
end)

T.config.sync_compile, T.config.cache_dir = saved.sync, saved.dir
