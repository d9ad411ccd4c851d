-- Per-op call recipes for the differential test against PyTorch (tests/diff/diff_torch.lua).
--
-- RECIPES[name] = { gen = function(c) ... end, [reduce = true], [shape_only = true] }: gen gets a
-- case builder (gen.lua), asks it for inputs and returns
--   call(I)  the crescent call over the materialised inputs I (its results: tensors, or a table
--            of tensors), and
--   expr     the PyTorch equivalent over the inputs' names (Python; helpers in tests/torch_bridge/crescent_ops.py),
--   extra    optional: { inplace = operand } to compare that operand's base after the call too.
-- reduce: float results are compared with a tolerance scaled by the inputs (sums round
-- differently); shape_only: only dtype and shape are compared (random or uninitialised values).
--
-- SKIPPED[name] = reason, for registry ops with no PyTorch equivalent to compare against.
-- EXCUSES: known differences that do not fail the test, each with its reason (see the list at
-- the end of this file).
local T = require "crescent"
local G = require "gen"
local py, pd, pi = G.py, G.pd, G.pi

local M = { RECIPES = {}, SKIPPED = {} }
local R = M.RECIPES

local ANY = { "float32", "float32", "float64", "int64", "bool" }
local NUM = { "float32", "float32", "float64", "int64" }
local FLOAT = { "float32", "float64" }
local CREATE = { "float32", "float64", "int64", "int32", "bool", "float16", "bfloat16" }
-- CRESCENT_DIFF_HALF=1: op inputs may also be float16 / bfloat16 (the GPU run: torch 1.13's CPU
-- kernels lack many 16-bit ops, so the CI run leaves them out)
if os.getenv("CRESCENT_DIFF_HALF") == "1" then
  for _, list in ipairs({ ANY, NUM, FLOAT }) do
    list[#list + 1], list[#list + 2] = "float16", "bfloat16"
  end
end

-- The crescent function for op `name`: T.name, else the method (in-place ops are methods).
local function op(name)
  if type(T[name]) == "function" then return T[name] end  -- T.bool is a dtype, T.cuda a table
  return function(x, ...) return x[name](x, ...) end
end
local function dt(d) return d and ("torch." .. d) or "None" end
-- a dtype option (or nil) for ops that take {dtype = ...}
local function maybe_dtype(c, list, p)
  return c.r:chance(p or 0.2) and c:dtype(list or CREATE) or nil
end

-- ---- pointwise ----------------------------------------------------------------------------------

local UNARY = {
  abs = "torch.abs", ceil = "torch.ceil", cos = "torch.cos", erf = "torch.erf", erfinv = "torch.erfinv", exp = "torch.exp",
  exp2 = "torch.exp2", expm1 = "torch.expm1", floor = "torch.floor", isinf = "torch.isinf",
  isnan = "torch.isnan", log = "torch.log", log1p = "torch.log1p", log2 = "torch.log2",
  logical_not = "torch.logical_not", neg = "torch.neg", reciprocal = "torch.reciprocal",
  relu = "torch.relu", round = "torch.round", rsqrt = "torch.rsqrt", sigmoid = "torch.sigmoid",
  sign = "torch.sign", silu = "F.silu", mish = "F.mish", logsigmoid = "F.logsigmoid", hardsigmoid = "F.hardsigmoid",
  hardswish = "F.hardswish", sin = "torch.sin", sqrt = "torch.sqrt", square = "torch.square",
  tan = "torch.tan", tanh = "torch.tanh", trunc = "torch.trunc",
}
for name, f in pairs(UNARY) do
  R[name] = { gen = function(c)
    local a = c:tensor(c:shape(), c:dtype(ANY))
    return function(I) return op(name)(a(I)) end, f .. "(a)"
  end }
end

-- leaky_relu / elu / softplus: their number (negative_slope, alpha, beta)
for name, f in pairs({ leaky_relu = "F.leaky_relu", elu = "F.elu", softplus = "F.softplus" }) do
  R[name] = { gen = function(c)
    local a = c:tensor(c:shape(), c:dtype(FLOAT))
    local k = c.r:pick({ 0.01, 0.2, 1.0, 1.5 })
    return function(I) return T[name](a(I), k) end, ("%s(a, %s)"):format(f, k)
  end }
end

-- hardtanh: bounds from a few, some at the values (zero gradient there), integer tensors too
R.hardtanh = { gen = function(c)
  local a = c:tensor(c:shape(), c:dtype(NUM))
  local lo, hi = unpack(c.r:pick({ { -1, 1 }, { 0, 6 }, { -0.5, 2.5 }, { 0.25, 0.25 } }))
  return function(I) return T.hardtanh(a(I), lo, hi) end, ("F.hardtanh(a, %s, %s)"):format(lo, hi)
end }

R.gelu = { gen = function(c)
  local a = c:tensor(c:shape(), c:dtype(ANY))
  local approx = c.r:pick({ false, "tanh", "none" })
  if not approx then return function(I) return T.gelu(a(I)) end, "F.gelu(a)" end
  return function(I) return T.gelu(a(I), { approximate = approx }) end, ("F.gelu(a, approximate=%q)"):format(approx)
end }

-- gelu's gradient (its backward rule's one op): aten's gelu_backward(grad_output, self, approximate)
for name, approx in pairs({ _gelu_backward = "none", _gelu_tanh_backward = "tanh" }) do
  R[name] = { gen = function(c)
    local s, d = c:shape(), c:dtype(FLOAT)
    local g, x = c:tensor(s, d), c:tensor(s, d)
    return function(I) return T[name](g(I), x(I)) end,
      ("torch.ops.aten.gelu_backward(%s, %s, approximate=%q)"):format(g.py, x.py, approx)
  end }
end

-- Binary ops over two operands (a tensor and a tensor or a number, either way round).
-- first / second: torch takes a number in that position (else it is wrapped by W, in
-- tests/torch_bridge/crescent_ops.py).
local BINARY = {
  add = { "torch.add", first = true, second = true }, sub = { "torch.sub", first = true, second = true },
  mul = { "torch.mul", first = true, second = true }, div = { "torch.div", first = true, second = true },
  pow = { "torch.pow", first = true, second = true }, remainder = { "torch.remainder", first = true, second = true },
  fmod = { "torch.fmod", second = true }, maximum = { "torch.maximum" }, minimum = { "torch.minimum" },
  atan2 = { "torch.atan2" }, hypot = { "torch.hypot" }, eq = { "torch.eq", second = true }, ne = { "torch.ne", second = true },
  lt = { "torch.lt", second = true }, le = { "torch.le", second = true }, gt = { "torch.gt", second = true },
  ge = { "torch.ge", second = true },
  logical_and = { "torch.logical_and" }, logical_or = { "torch.logical_or" }, logical_xor = { "torch.logical_xor" },
  -- div's rounding modes (T.div(a, b, {rounding_mode =}) calls these)
  _div_floor = { "(lambda a, b: torch.div(a, b, rounding_mode='floor'))", first = true, second = true },
  _div_trunc = { "(lambda a, b: torch.div(a, b, rounding_mode='trunc'))", first = true, second = true },
}

-- two operands of broadcastable shapes, mostly the same dtype; a number in one place sometimes
local function binary_operands(c)
  local s = c:shape()
  local da = c:dtype(ANY)
  local db = c.r:chance(0.7) and da or c:dtype(ANY)
  local form = c.r:weighted({ { "tt", 7 }, { "tn", 2 }, { "nt", 1 } })
  if form == "tt" then
    local a = c:tensor(s, da)
    return a, c:tensor(c:bshape(s, 0.05), db), form
  elseif form == "tn" then
    return c:tensor(s, da), c:number(db == "bool" and "int64" or db), form
  end
  local n = c:number(da == "bool" and "int64" or da)
  return n, c:tensor(s, db), form
end

local function alpha_opt(c, name)
  if (name == "add" or name == "sub" or name == "add_" or name == "sub_") and c.r:chance(0.3) then
    local al = c:number(c.r:pick({ "float32", "int64" }))
    return { alpha = al.value }, ", alpha=" .. al.py
  end
  return nil, ""
end

for name, spec in pairs(BINARY) do
  R[name] = { gen = function(c)
    local a, b, form = binary_operands(c)
    local opts, pyopts = alpha_opt(c, name)
    local pa, pb = a.py, b.py
    if form == "nt" and not spec.first then pa = ("W(%s, %s)"):format(a.py, b.py) end
    if form == "tn" and not spec.second then pb = ("W(%s, %s)"):format(b.py, a.py) end
    local call = opts and function(I) return T[name](a(I), b(I), opts) end or function(I) return T[name](a(I), b(I)) end
    return call, ("%s(%s, %s%s)"):format(spec[1], pa, pb, pyopts)
  end }
end

-- (recipe.shown: the name errors give, where it is not the registry's: vm/registry.hpp OpDef::shown)
R._div_floor.shown, R._div_trunc.shown = 'div (rounding_mode = "floor")', 'div (rounding_mode = "trunc")'

-- In-place binary ops: self is a tensor (maybe an expanded view), other a tensor or a number.
for _, name in ipairs({ "add_", "sub_", "mul_", "div_" }) do
  R[name] = { gen = function(c)
    local s = c:shape()
    local a = c:tensor(s, c:dtype(ANY))
    local b = c:operand(c:bshape(s, 0.05), c:dtype(ANY))
    local opts, pyopts = alpha_opt(c, name)
    local call = opts and function(I) return op(name)(a(I), b(I), opts) end or function(I) return op(name)(a(I), b(I)) end
    return call, ("a.%s(%s%s)"):format(name, b.py, pyopts), { inplace = a }
  end }
end

-- The other in-place pointwise forms (CR_INPLACE_OPS): a floating self, the op's operands.
for _, name in ipairs({ "neg", "abs", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
  "tanh", "sigmoid", "relu", "erf", "floor", "ceil", "trunc", "sign", "reciprocal", "square" }) do
  R[name .. "_"] = { gen = function(c)
    local a = c:tensor(c:shape(), c:dtype(FLOAT))
    return function(I) return op(name .. "_")(a(I)) end, ("a.%s_()"):format(name), { inplace = a }
  end }
end
for _, name in ipairs({ "pow", "fmod", "remainder", "atan2", "hypot" }) do
  R[name .. "_"] = { gen = function(c)
    local s = c:shape()
    local a = c:tensor(s, c:dtype(FLOAT))
    local b = (name == "atan2" or name == "hypot") and c:tensor(c:bshape(s, 0.05), c:dtype(FLOAT)) or c:operand(c:bshape(s, 0.05), c:dtype(FLOAT))
    return function(I) return op(name .. "_")(a(I), b(I)) end, ("a.%s_(%s)"):format(name, b.py), { inplace = a }
  end }
end
R.lerp_ = { gen = function(c)
  local s = c:shape()
  local d = c:dtype(FLOAT)
  local a, b = c:tensor(s, d), c:tensor(c:bshape(s), d)
  local w = c.r:chance(0.5) and c:number("float32") or c:tensor(c:bshape(s), d)
  return function(I) return op("lerp_")(a(I), b(I), w(I)) end, ("a.lerp_(b, %s)"):format(w.py), { inplace = a }
end }
R.addcmul_ = { gen = function(c)
  local s = c:shape()
  local d = c:dtype(FLOAT)
  local x, a, b = c:tensor(s, d), c:tensor(c:bshape(s), d), c:tensor(c:bshape(s), d)
  local v = c:number("float32")
  return function(I) return op("addcmul_")(x(I), a(I), b(I), v.value) end, ("a.addcmul_(b, c, value=%s)"):format(v.py),
    { inplace = x }
end }

R.where = { gen = function(c)
  local s = c:shape()
  local cond = c:tensor(c:bshape(s, 0.03), "bool")
  local d = c:dtype(ANY)
  local x, y = c:operand(c:bshape(s), d, 0.2), c:operand(s, c.r:chance(0.7) and d or c:dtype(ANY), 0.2)
  if x.value and y.value then y = c:tensor(s, d) end
  local px, py_ = x.py, y.py
  return function(I) return T.where(cond(I), x(I), y(I)) end, ("torch.where(%s, %s, %s)"):format(cond.py, px, py_)
end }

-- clamp(x, lo, hi): lo and hi both numbers or both tensors (torch 1.13 takes no mix), either nil
local function clamp_gen(name, inplace)
  return function(c)
    local s = c:shape()
    local d = c:dtype(NUM)
    local a = c:tensor(s, d)
    local tensors = c.r:chance(0.3)
    local function bound()
      if c.r:chance(0.2) then return nil end
      if tensors then return c:tensor(c:bshape(s), d) end
      return c:number(d)
    end
    local lo, hi = bound(), bound()
    local function v(o, I) return o and o(I) end
    local pyargs = ("min=%s, max=%s"):format(lo and lo.py or "None", hi and hi.py or "None")
    local call = function(I) return op(name)(a(I), v(lo, I), v(hi, I)) end
    if inplace then return call, ("a.clamp_(%s)"):format(pyargs), { inplace = a } end
    return call, ("torch.clamp(a, %s)"):format(pyargs)
  end
end
R.clamp = { gen = clamp_gen("clamp") }
R.clamp_ = { gen = clamp_gen("clamp_", true) }

R.lerp = { gen = function(c)
  local s = c:shape()
  local d = c:dtype(FLOAT)
  local a, b = c:tensor(s, d), c:tensor(c:bshape(s), c.r:chance(0.9) and d or c:dtype(ANY))
  local w = c.r:chance(0.5) and c:number("float32") or c:tensor(c:bshape(s), d)
  return function(I) return T.lerp(a(I), b(I), w(I)) end, ("torch.lerp(a, b, %s)"):format(w.py)
end }

R.addcmul = { gen = function(c)
  local s = c:shape()
  local d = c:dtype(NUM)
  local x, a, b = c:tensor(s, d), c:tensor(c:bshape(s), d), c:tensor(c:bshape(s), c.r:chance(0.9) and d or c:dtype(NUM))
  if c.r:chance(0.5) then
    return function(I) return T.addcmul(x(I), a(I), b(I)) end, "torch.addcmul(a, b, c)"
  end
  local v = c:number(c.r:pick({ "float32", "int64" }))
  return function(I) return T.addcmul(x(I), a(I), b(I), v.value) end, ("torch.addcmul(a, b, c, value=%s)"):format(v.py)
end }

-- masked_fill(x, mask, value): value a number or a 0-d tensor
local function masked_fill_gen(name, inplace)
  return function(c)
    local s = c:shape()
    local d = c:dtype(ANY)
    local a = c:tensor(s, d)
    local mask = c:tensor(c:bshape(s, 0.03), "bool")
    local v = c.r:chance(0.7) and c:number(d == "bool" and "int64" or d) or c:tensor({}, c:dtype(ANY))
    local call = function(I) return op(name)(a(I), mask(I), v(I)) end
    if inplace then return call, ("a.masked_fill_(b, %s)"):format(v.py), { inplace = a } end
    return call, ("torch.masked_fill(a, b, %s)"):format(v.py)
  end
end
R.masked_fill = { gen = masked_fill_gen("masked_fill") }
R.masked_fill_ = { gen = masked_fill_gen("masked_fill_", true) }

R.fill_ = { gen = function(c)
  local a = c:tensor(c:shape(), c:dtype(ANY))
  local v = c.r:chance(0.7) and c:number(c:dtype(NUM)) or c:tensor({}, c:dtype(ANY))
  return function(I) return a(I):fill_(v(I)) end, ("a.fill_(%s)"):format(v.py), { inplace = a }
end }

R.zero_ = { gen = function(c)
  local a = c:tensor(c:shape(), c:dtype(ANY))
  return function(I) return a(I):zero_() end, "a.zero_()", { inplace = a }
end }

-- copy_(src): src broadcasts to self (any dtype); a number fills (torch: fill_)
R.copy_ = { gen = function(c)
  local s = c:shape()
  local a = c:tensor(s, c:dtype(ANY))
  if c.r:chance(0.2) then
    local v = c:number(c:dtype(NUM))
    return function(I) return a(I):copy_(v.value) end, ("a.fill_(%s)"):format(v.py), { inplace = a }
  end
  local bs = c:bshape(s, 0.05)
  while #bs > #s do table.remove(bs, 1) end
  local b = c:tensor(bs, c:dtype(ANY))
  return function(I) return a(I):copy_(b(I)) end, "a.copy_(b)", { inplace = a }
end }

-- ---- reductions (recipes_reduce.lua) ------------------------------------------------------------

require("recipes_reduce")(R, { ANY = ANY, FLOAT = FLOAT, dt = dt, maybe_dtype = maybe_dtype })

-- ---- views and copies ----------------------------------------------------------------------------

-- a random shape with numel n (one size maybe -1): for view / reshape
local function factor_shape(c, n)
  local sz, left = {}, n
  for _ = 1, c.r:int(0, 3) do
    local divs = {}
    for q = 1, math.max(1, math.min(left, 64)) do if left % q == 0 then divs[#divs + 1] = q end end
    if left == 0 then divs = { 0, 1, 2 } end
    sz[#sz + 1] = c.r:pick(divs)
    left = sz[#sz] == 0 and 0 or left / sz[#sz]
  end
  if n == 0 and #sz > 0 then left = 0 end
  sz[#sz + 1] = left
  if n > 0 and c.r:chance(0.3) then sz[c.r:int(1, #sz)] = -1 end
  if c.r:chance(0.05) then sz[#sz] = sz[#sz] + 1 end  -- a wrong size: both raise
  return sz
end

for _, name in ipairs({ "view", "reshape" }) do
  R[name] = { gen = function(c)
    local s = c:shape()
    local a = c:tensor(s, c:dtype(ANY))
    local sz = factor_shape(c, G.numel(s))
    if c.r:chance(0.5) then return function(I) return T[name](a(I), sz) end, ("a.%s(%s)"):format(name, py(sz)) end
    return function(I) return T[name](a(I), unpack(sz)) end, ("a.%s(%s)"):format(name, py(sz))
  end }
end

R.expand = { gen = function(c)
  local s = c:shape(0, 3)
  local a = c:tensor(s, c:dtype(ANY))
  local sz = {}
  for _ = 1, c.r:int(0, 1) do sz[#sz + 1] = c.r:int(0, 3) end
  for i = 1, #s do
    if s[i] == 1 then sz[#sz + 1] = c.r:pick({ 1, 2, 3, 0, -1 })
    else sz[#sz + 1] = c.r:chance(0.3) and -1 or s[i] end
  end
  if #sz > 0 and c.r:chance(0.05) then sz[#sz] = sz[#sz] + 2 end
  return function(I) return T.expand(a(I), sz) end, ("a.expand(%s)"):format(py(sz))
end }

R.flatten = { gen = function(c)
  local s = c:shape()
  local a = c:tensor(s, c:dtype(ANY))
  if c.r:chance(0.3) then return function(I) return T.flatten(a(I)) end, "torch.flatten(a)" end
  local st, en = c:dim(#s), c:dim(#s)
  return function(I) return T.flatten(a(I), st, en) end, ("torch.flatten(a, %s, %s)"):format(pd(st), pd(en))
end }

R.narrow = { gen = function(c)
  local s = c:shape(1, 4)
  local a = c:tensor(s, c:dtype(ANY))
  local d = c:dim(#s)
  local n = s[d > 0 and d or #s + d + 1]
  local start = c.r:int(1, n + 1)
  local len = c.r:int(0, n - start + 1)
  if c.r:chance(0.3) and start <= n then start = start - n - 1 end  -- the same element, counted from the end
  if c.r:chance(0.05) then len = len + 1 end
  return function(I) return T.narrow(a(I), d, start, len) end,
    ("torch.narrow(a, %s, %s, %d)"):format(pd(d), pi(start), len)
end }

R.select = { gen = function(c)
  local s = c:shape(1, 4)
  local a = c:tensor(s, c:dtype(ANY))
  local d = c:dim(#s)
  local n = s[d > 0 and d or #s + d + 1]
  local i = c.r:int(1, math.max(n, 1))
  if c.r:chance(0.3) then i = i - n - 1 end
  if c.r:chance(0.05) then i = n + 1 end
  return function(I) return T.select(a(I), d, i) end, ("a.select(%s, %s)"):format(pd(d), pi(i))
end }

-- slice(d, start, stop, step): 1-based, inclusive stop; starts and stops inside the dim
R.slice = { gen = function(c)
  local s = c:shape(1, 4)
  local a = c:tensor(s, c:dtype(ANY))
  local d = c:dim(#s)
  local n = s[d > 0 and d or #s + d + 1]
  local r = c.r
  local start = n > 0 and r:int(1, n) or nil
  local stop = start and r:int(start - 1, n) or nil
  if start and r:chance(0.3) then start = start - n - 1 end
  if stop and stop > 0 and r:chance(0.3) then stop = stop - n - 1 end
  if r:chance(0.2) then start = nil end
  if r:chance(0.2) then stop = nil end
  local step = r:pick({ nil, 1, 2, 3 })
  return function(I) return T.slice(a(I), d, start, stop, step) end,
    ("lslice(a, %s, %s, %s, %s)"):format(pd(d), py(start), py(stop), py(step))
end }

R.squeeze = { gen = function(c)
  local s = c:shape()
  for i = 1, #s do if c.r:chance(0.4) then s[i] = 1 end end
  local a = c:tensor(s, c:dtype(ANY))
  local k = c.r:pick({ "none", "one", "many" })
  if k == "none" then return function(I) return T.squeeze(a(I)) end, "a.squeeze()" end
  if k == "one" then
    local d = c:dim(#s)
    return function(I) return T.squeeze(a(I), d) end, ("a.squeeze(%s)"):format(pd(d))
  end
  local ds = c:dims(#s)
  return function(I) return T.squeeze(a(I), ds) end, ("squeeze_dims(a, %s)"):format(pd(ds))
end }

R.unsqueeze = { gen = function(c)
  local s = c:shape()
  local a = c:tensor(s, c:dtype(ANY))
  local d = c:dim(#s, 1)
  return function(I) return T.unsqueeze(a(I), d) end, ("a.unsqueeze(%s)"):format(pd(d))
end }

R.permute = { gen = function(c)
  local s = c:shape()
  local a = c:tensor(s, c:dtype(ANY))
  local p = {}
  for i = 1, #s do p[i] = i end
  for i = #p, 2, -1 do local j = c.r:int(1, i); p[i], p[j] = p[j], p[i] end
  for i = 1, #p do if c.r:chance(0.2) then p[i] = p[i] - #s - 1 end end
  if #p > 0 and c.r:chance(0.05) then p[1] = p[#p] end  -- a repeated dim: both raise
  if c.r:chance(0.5) then return function(I) return T.permute(a(I), p) end, ("a.permute(%s)"):format(pd(p)) end
  return function(I) return T.permute(a(I), unpack(p)) end, ("a.permute(%s)"):format(pd(p))
end }

R.t = { gen = function(c)
  local a = c:tensor(c:shape(0, c.r:chance(0.9) and 2 or 3), c:dtype(ANY))
  return function(I) return T.t(a(I)) end, "a.t()"
end }

R.transpose = { gen = function(c)
  local s = c:shape()
  local a = c:tensor(s, c:dtype(ANY))
  local d0, d1 = c:dim(#s), c:dim(#s)
  return function(I) return T.transpose(a(I), d0, d1) end, ("a.transpose(%s, %s)"):format(pd(d0), pd(d1))
end }

-- as_strided on a contiguous input (the storage is then the same on both sides); sometimes out
-- of the storage's bounds, which both must reject
R.as_strided = { gen = function(c)
  local s = c:shape(1, 3, { nonzero = true })
  local a = c:tensor(s, c:dtype(ANY), { layout = false })
  local n = G.numel(s)
  local size, stride = {}, {}
  for i = 1, c.r:int(0, 3) do size[i], stride[i] = c.r:int(0, 4), c.r:int(0, 3) end
  local offset = c.r:chance(0.5) and c.r:int(0, 2) or nil
  local last = offset or 0
  for i = 1, #size do last = last + math.max(size[i] - 1, 0) * stride[i] end
  if last >= n and c.r:chance(0.8) then size, stride, offset = { 1 }, { 1 }, 0 end
  return function(I) return T.as_strided(a(I), size, stride, offset) end,
    ("torch.as_strided(a, %s, %s, %s)"):format(py(size), py(stride), py(offset or 0))
end }

-- ops giving a's elements (a copy, or a itself): any shape and dtype
local function same_elements(op) return { gen = function(c)
  local a = c:tensor(c:shape(), c:dtype(ANY))
  return function(I) return T[op](a(I)) end, "a." .. op .. "()"
end } end
R.contiguous, R.clone, R.detach = same_elements("contiguous"), same_elements("clone"), same_elements("detach")

-- ---- joining and splitting -----------------------------------------------------------------------

-- n tensors equal in shape but along dim d (sizes along it random, 0 included)
R.cat = { gen = function(c)
  local s = c:shape(c.r:chance(0.05) and 0 or 1, 4)
  local d = c:dim(#s)
  local di = d > 0 and d or #s + d + 1
  local dtype = c:dtype(ANY)
  local ts, names = {}, {}
  for i = 1, c.r:int(1, 3) do
    local si = { unpack(s) }
    if #si > 0 then si[di] = c.r:int(0, 4) end
    if c.r:chance(0.05) then si = { 0 } end  -- torch skips legacy empty 1-d tensors in cat
    ts[i] = c:tensor(si, c.r:chance(0.85) and dtype or c:dtype(ANY))
    names[i] = ts[i].py
  end
  local use_dim = c.r:chance(0.8) or d ~= 1
  local pylist = "[" .. table.concat(names, ", ") .. "]"
  return function(I)
    local l = {}
    for i, t in ipairs(ts) do l[i] = t(I) end
    if use_dim then return T.cat(l, d) end
    return T.cat(l)
  end, ("torch.cat(%s, %s)"):format(pylist, use_dim and pd(d) or "0")
end }

R.stack = { gen = function(c)
  local s = c:shape(0, 3)
  local d = c:dim(#s, 1)
  local dtype = c:dtype(ANY)
  local ts, names = {}, {}
  for i = 1, c.r:int(1, 3) do
    local si = s
    if c.r:chance(0.03) then si = c:bshape(s, 1) end
    ts[i] = c:tensor(si, c.r:chance(0.85) and dtype or c:dtype(ANY))
    names[i] = ts[i].py
  end
  return function(I)
    local l = {}
    for i, t in ipairs(ts) do l[i] = t(I) end
    return T.stack(l, d)
  end, ("torch.stack([%s], %s)"):format(table.concat(names, ", "), pd(d))
end }

R.split = { gen = function(c)
  local s = c:shape(1, 4)
  local a = c:tensor(s, c:dtype(ANY))
  local d = c:dim(#s)
  local n = s[d > 0 and d or #s + d + 1]
  local size
  if c.r:chance(0.6) then size = c.r:int(n == 0 and 0 or 1, math.max(n, 1) + 1)
  else
    size = {}
    local left = n
    while left > 0 do size[#size + 1] = c.r:int(0, left); left = left - size[#size] end
    if c.r:chance(0.1) then size[#size + 1] = 1 end  -- sizes that do not add up: both raise
  end
  local sizes_py = type(size) == "table" and ("[" .. table.concat(size, ", ") .. "]") or py(size)
  return function(I) return T.split(a(I), size, d) end, ("torch.split(a, %s, %s)"):format(sizes_py, pd(d))
end }

R.chunk = { gen = function(c)
  local s = c:shape(1, 4)
  local a = c:tensor(s, c:dtype(ANY))
  local d = c:dim(#s)
  local k = c.r:int(c.r:chance(0.05) and 0 or 1, 6)
  return function(I) return T.chunk(a(I), k, d) end, ("torch.chunk(a, %d, %s)"):format(k, pd(d))
end }

-- ---- indexing ------------------------------------------------------------------------------------

-- index values in 1..n, sometimes in 0..n + 1 (out of range: both must raise)
local function index_range(c, n)
  if c.r:chance(0.05) then return { lo = 0, hi = n + 1 } end
  return { lo = 1, hi = math.max(n, 1) }
end

R.gather = { gen = function(c)
  local s = c:shape(0, 3, { nonzero = c.r:chance(0.9) })
  local a = c:tensor(s, c:dtype(ANY))
  local d = c:dim(#s)
  local di = d > 0 and d or #s + d + 1
  local is = {}
  for i = 1, #s do is[i] = i == di and c.r:int(0, 4) or c.r:int(math.min(s[i], 1), s[i]) end
  local idx = c:tensor(is, "int64", index_range(c, #s == 0 and 1 or s[di]))
  return function(I) return T.gather(a(I), d, idx(I)) end, ("torch.gather(a, %s, b - 1)"):format(pd(d))
end }

R.index_select = { gen = function(c)
  local s = c:shape(0, 3, { nonzero = c.r:chance(0.9) })
  local a = c:tensor(s, c:dtype(ANY))
  local d = c:dim(#s)
  local n = #s == 0 and 1 or s[d > 0 and d or #s + d + 1]
  -- a 0-d input takes one index: torch 1.13 writes past its result for more (a heap overflow
  -- that aborted the torch side), crescent raises
  local is = (c.r:chance(0.2) or #s == 0) and {} or { c.r:int(0, 5) }
  local idx = c:tensor(is, "int64", index_range(c, n))
  return function(I) return T.index_select(a(I), d, idx(I)) end, ("torch.index_select(a, %s, b - 1)"):format(pd(d))
end }

R.embedding = { gen = function(c)
  local n, dm = c.r:int(1, 10), c.r:int(0, 6)
  local idx = c:tensor(c:shape(0, 3), "int64", index_range(c, n))
  local w = c:tensor({ n, dm }, c:dtype(c.r:chance(0.9) and FLOAT or ANY))
  if c.r:chance(0.3) then  -- padding_idx: 1-based or from the end (the gradient mode tells)
    local p = c.r:pick({ 1, n, -1 })
    return function(I) return T.embedding(idx(I), w(I), { padding_idx = p }) end,
      ("F.embedding(a - 1, b, padding_idx=%d)"):format(p > 0 and p - 1 or p)
  end
  return function(I) return T.embedding(idx(I), w(I)) end, "F.embedding(a - 1, b)"
end }

-- ---- linear algebra ------------------------------------------------------------------------------

local MM = { "float32", "float32", "float64", "float64", "int64", "bool" }
local function mdim(c) return c.r:weighted({ { 0, 1 }, { 1, 3 }, { 2, 3 }, { 3, 4 }, { 5, 3 }, { 17, 2 }, { 40, 1 } }) end
local function off(c, k) return c.r:chance(0.04) and k + 1 or k end  -- a wrong inner size now and then

R.mm = { reduce = true, gen = function(c)
  local n, k, m = mdim(c), mdim(c), mdim(c)
  local d = c:dtype(MM)
  local a, b = c:tensor({ n, k }, d), c:tensor({ off(c, k), m }, c.r:chance(0.9) and d or c:dtype(MM))
  return function(I) return T.mm(a(I), b(I)) end, "torch.mm(a, b)"
end }

R.bmm = { reduce = true, gen = function(c)
  local bt, n, k, m = c.r:int(0, 4), mdim(c), mdim(c), mdim(c)
  local d = c:dtype(MM)
  local a, b = c:tensor({ bt, n, k }, d), c:tensor({ bt, off(c, k), m }, c.r:chance(0.9) and d or c:dtype(MM))
  return function(I) return T.bmm(a(I), b(I)) end, "torch.bmm(a, b)"
end }

R.matmul = { reduce = true, gen = function(c)
  local k = mdim(c)
  local function operand_shape(last_is_k)
    local rank = c.r:int(1, 4)
    local s = {}
    for i = 1, rank - 2 do s[i] = c.r:pick({ 1, 2, 3 }) end
    if rank == 1 then return { k } end
    if last_is_k then s[#s + 1] = mdim(c); s[#s + 1] = k else s[#s + 1] = k; s[#s + 1] = mdim(c) end
    return s
  end
  local sa, sb = operand_shape(true), operand_shape(false)
  sb[math.max(#sb - 1, 1)] = off(c, sb[math.max(#sb - 1, 1)])
  local d = c:dtype(MM)
  local a, b = c:tensor(sa, d), c:tensor(sb, c.r:chance(0.9) and d or c:dtype(MM))
  return function(I) return T.matmul(a(I), b(I)) end, "torch.matmul(a, b)"
end }

R.linear = { reduce = true, gen = function(c)
  local s = c:shape(1, 3)
  local fin, fout = s[#s], mdim(c)
  local d = c:dtype(c.r:chance(0.9) and FLOAT or MM)
  local x, w = c:tensor(s, d), c:tensor({ fout, off(c, fin) }, d)
  if c.r:chance(0.4) then return function(I) return T.linear(x(I), w(I)) end, "F.linear(a, b)" end
  local b = c:tensor({ fout }, d)
  return function(I) return T.linear(x(I), w(I), b(I)) end, "F.linear(a, b, c)"
end }

for _, name in ipairs({ "tril", "triu" }) do
  R[name] = { gen = function(c)
    local a = c:tensor(c:shape(c.r:chance(0.95) and 2 or 0, 4), c:dtype(ANY))
    if c.r:chance(0.3) then return function(I) return T[name](a(I)) end, ("torch.%s(a)"):format(name) end
    local k = c.r:int(-3, 3)
    return function(I) return T[name](a(I), k) end, ("torch.%s(a, %d)"):format(name, k)
  end }
end

-- ---- conversions ---------------------------------------------------------------------------------

-- float -> int of NaN, inf or out-of-range values is undefined in C++ and differs between
-- libraries: the inputs stay finite and small for conversions
local CONVERT = { float = "float", double = "double", half = "half", bfloat16 = "bfloat16", int = "int",
                  long = "long", bool = "bool", cpu = "cpu", cuda = "cuda" }
for name, method in pairs(CONVERT) do
  R[name] = { gen = function(c)
    local a = c:tensor(c:shape(), c:dtype(ANY), { finite = true })
    return function(I) return op(name)(a(I)) end, ("a.%s()"):format(method)
  end }
end

R.to = { gen = function(c)
  local a = c:tensor(c:shape(), c:dtype(ANY), { finite = true })
  local d = c:dtype(CREATE)
  local form = c.r:pick({ "dtype", "opts", "device" })
  if form == "dtype" then return function(I) return a(I):to(d) end, ("a.to(%s)"):format(dt(d)) end
  if form == "opts" then return function(I) return a(I):to({ dtype = d }) end, ("a.to(dtype=%s)"):format(dt(d)) end
  return function(I) return a(I):to(c.device) end, "a.to(DEV)"
end }

-- attention(q, k, v[, scale[, causal]]): torch 1.13 has no scaled_dot_product_attention, so the
-- reference is its composite (on CUDA crescent runs fused kernels, which keep the scores in
-- float32 and fold the softmax online: reduce-tolerance differences)
R.attention = { reduce = true, gen = function(c)
  local batch = {}
  for i = 1, c.r:int(0, 2) do batch[i] = c.r:int(1, 3) end
  local L, S = c.r:pick({ 0, 1, 5, 17, 70, 150 }), c.r:pick({ 0, 1, 9, 64, 130 })
  local E, Ev = c.r:pick({ 1, 16, 64, 7, 20 }), nil
  Ev = c.r:chance(0.8) and E or c.r:pick({ 3, 16, 48 })
  local function shape(n, e)
    local s = { unpack(batch) }
    s[#s + 1], s[#s + 2] = n, e
    return s
  end
  local d = c:dtype(FLOAT)
  -- (finite values: the composite's 0 * inf at a masked key is NaN; attention never reads the
  -- masked keys of a row, as PyTorch's fused kernels)
  local q, k, v = c:tensor(shape(L, E), d), c:tensor(shape(S, E), d), c:tensor(shape(S, Ev), d, { finite = true })
  local scale = c.r:chance(0.5) and (c.r:int(1, 8) / 8) or nil
  local causal = c.r:chance(0.5)
  local sc = scale or 1 / math.sqrt(E)
  local mask = causal and (".masked_fill(torch.ones(%d, %d, dtype=torch.bool, device=a.device).triu(1), float('-inf'))"):format(L, S) or ""
  -- the reference accumulates as attention does: float64 for float64, else float32 (16-bit
  -- extremes overflow a float32 score to inf / NaN there as in every float32-accumulating kernel)
  local acc = d == "float64" and "double" or "float"
  return function(I) return T.attention(q(I), k(I), v(I), scale, causal) end,
    ("torch.matmul(torch.softmax((torch.matmul(a.%s(), b.%s().transpose(-2, -1)) * %s)%s, -1), c.%s()).to(a.dtype)")
      :format(acc, acc, py(sc), mask, acc)
end }

-- ---- creation (recipes_creation.lua) -------------------------------------------------------------

require("recipes_creation")(R, { op = op, dt = dt, maybe_dtype = maybe_dtype, ANY = ANY, NUM = NUM, FLOAT = FLOAT, CREATE = CREATE })

require("recipes_scatter")(R, { ANY = ANY, FLOAT = FLOAT })
require("recipes_conv")(R, { FLOAT = FLOAT })

-- ---- not compared -----------------------------------------------------------------------------------

M.SKIPPED = {
  _conv2d_input_grad = "conv2d's input gradient: test_cuda_conv.lua compares it with conv2d's, CPU and CUDA",
  _conv2d_weight_grad = "conv2d's weight gradient: test_cuda_conv.lua compares it with conv2d's, CPU and CUDA",
  _fused_sgd = "an optimizer update; tests/lua/test_optim.lua compares T.optim.SGD with torch.optim.SGD",
  _fused_adam = "an optimizer update; tests/lua/test_optim.lua compares T.optim.Adam / AdamW with torch.optim",
  _layer_norm = "F.layer_norm's fused op; tests/lua/test_layer_norm.lua compares it and its gradients with torch",
  _layer_norm_backward = "layer_norm's gradient; tests/lua/test_layer_norm.lua compares it with torch's",
  _cross_entropy = "F.cross_entropy's fused op; tests/lua/test_losses.lua compares it and its gradient with torch",
  _cross_entropy_backward = "cross_entropy's gradient; tests/lua/test_losses.lua compares it with torch's",
  _binary_cross_entropy = "F.binary_cross_entropy's op (probabilities in [0, 1]); tests/lua/test_losses.lua compares it "
    .. "and its gradients with torch",
  _binary_cross_entropy_backward = "binary_cross_entropy's gradient; tests/lua/test_losses.lua compares it with torch's",
  _addmm_epilogue = "compiled graphs' fused product + bias + activation: tests/lua/test_epilogue.lua compares it",
  _int8_quantize = "int8 packing, no torch op: tests/lua/test_quant.lua checks every byte and scale",
  _int8_weight_mm = "int8 weight-only product, no torch op: tests/lua/test_quant.lua compares it with float64",
  _attention_cache = "a static KV cache's write and attention, no torch op: test_cuda_attention_decode.lua compares "
    .. "it with index_put_ then attention",
  _unique_counted = "unique's counting of integers, no torch op: tests/lua/test_selection.lua checks it, and its "
    .. "unique cases compare unique with torch.unique",
  _value_counts = "unique's counting of integers, no torch op: tests/lua/test_selection.lua checks it, and its "
    .. "unique cases compare unique with torch.unique",
}
local FUSED, COLL = "attention's fused ops: test_cuda_attention_grad.lua compares them", "a collective: test_dist_compiled.lua"
for op, why in pairs({ _attention = FUSED, _attention_backward = FUSED, _dist_all_reduce = COLL, _dist_all_gather = COLL,
  _dist_reduce_scatter = COLL, _dist_broadcast = COLL, _dist_bucket_start = COLL, _dist_bucket_wait = COLL }) do M.SKIPPED[op] = why end

-- ---- known differences (excuses.lua) -------------------------------------------------------------

local E = require "excuses"
M.EXCUSES, M.excuse = E.EXCUSES, E.excuse

return M
