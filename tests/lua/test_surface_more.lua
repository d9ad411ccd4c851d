-- logcumsumexp, mode and multinomial (crescent.surface_more) and the shape conveniences
-- (crescent.surface_views): values and gradients against
-- PyTorch 1.13 (1-based indices: torch's + 1), extreme inputs, PyTorch's tie rule, the sampling
-- laws of multinomial with and without replacement, seeds, errors; compiled == eager.
local T = require "crescent"
local R = require "torch_ref"

T.manual_seed(37)
local errs = expect.error_checker("test_surface_more.lua")
local L = R.list()

-- the gradient of sum(f(x) * g) for x, as a crescent tensor and as a Python expression of x and g
local function grad(f, x, g)
  local xl = x:clone():requires_grad_()
  ;(f(xl) * g):sum():backward()
  return xl.grad
end
local PYGRAD = "(lambda x: torch.autograd.grad((%s * g).sum(), x)[0])(x.clone().requires_grad_())"

-- ---- logcumsumexp -----------------------------------------------------------------------------------
local extreme = T.tensor({ { -1000, 0, 1, -math.huge, 1000, 3 }, { -math.huge, -math.huge, 2, 2, -30, 1e-3 } },
  { dtype = "float64" })
for i, c in ipairs({
  { x = T.randn(7, { dtype = "float64" }), dim = 1 },
  { x = T.randn(3, 5, 4, { dtype = "float64" }) * 10, dim = 2 },
  { x = T.randn(3, 17, { dtype = "float64" }), dim = -1 },
  { x = T.randn(4, 3, { dtype = "float64" }):t(), dim = 1 },
  { x = extreme, dim = 2 },
  { x = T.randn(5, 9), dim = 2 },
  { x = T.tensor(2.5, { dtype = "float64" }), dim = 1 },
  { x = T.zeros(2, 0, { dtype = "float64" }), dim = 2 },
}) do
  local x, d = c.x, c.dim
  local pyd = d > 0 and d - 1 or d
  L:case(("logcumsumexp %d"):format(i), function() return x:logcumsumexp(d) end,
    ("torch.logcumsumexp(x, %d)"):format(pyd), { x = x })
  if x.dtype == "float64" and x:numel() > 0 then
    local g = T.randn(x.shape, { dtype = "float64" })
    L:case(("logcumsumexp grad %d"):format(i), function() return grad(function(v) return v:logcumsumexp(d) end, x, g) end,
      PYGRAD:format(("torch.logcumsumexp(x, %d)"):format(pyd)), { x = x, g = g })
  end
end

-- ---- mode: rows of up to 16 (where torch's sort keeps equal values in order: its index is the
-- last occurrence), many ties ---------------------------------------------------------------------------
local function mode_pair(x, d, keepdim)
  local v, i = x:mode(d, keepdim)
  return T.stack({ v:double(), i:double() })
end
local MODE_PY = "(lambda r: torch.stack([r[0].double(), r[1].double() + 1]))(torch.mode(x, %d, %s))"
for i, c in ipairs({
  { x = T.randint(0, 4, { 5, 12 }), dim = 2 },
  { x = T.randint(0, 3, { 9, 4 }):double(), dim = 1, keepdim = true },
  { x = T.randint(-2, 2, { 3, 6, 5 }):float(), dim = 2 },
  { x = T.randint(0, 5, { 4, 7 }, { dtype = "int32" }), dim = -1 },
  { x = T.tensor({ { 1, 2, 2, 3, 3, 1 }, { 5, 5, 4, 4, 4, 1 } }), dim = 2 },
  { x = T.tensor({ 7.5 }, { dtype = "float64" }), dim = 1 },
}) do
  local x, d = c.x, c.dim
  local pyd = d > 0 and d - 1 or d
  L:case(("mode %d"):format(i), function() return mode_pair(x, d, c.keepdim) end,
    MODE_PY:format(pyd, c.keepdim and "True" or "False"), { x = x })
  if x.dtype == "float64" then
    local g = T.randn(x:mode(d, c.keepdim).shape, { dtype = "float64" })
    L:case(("mode grad %d"):format(i), function() return grad(function(v) return (v:mode(d, c.keepdim)) end, x, g) end,
      PYGRAD:format(("torch.mode(x, %d, %s)[0]"):format(pyd, c.keepdim and "True" or "False")), { x = x, g = g })
  end
end
local long_rows = T.randint(0, 4, { 6, 40 })
L:case("mode values of long rows", function() return (long_rows:mode()) end, "torch.mode(x)[0]", { x = long_rows })

-- shape conveniences, two-tensor max / min, mv, var_mean / std_mean, count_nonzero (surface_views,
-- surface_linalg)
local x3 = T.randn(2, 3, 4, { dtype = "float64" })
local y3 = T.randn(2, 3, 4, { dtype = "float64" })
L:case("movedim", function() return x3:movedim(1, 3):contiguous() end, "x.movedim(0, 2).contiguous()", { x = x3 })
L:case("movedim lists", function() return x3:movedim({ 1, 2 }, { 3, 1 }):contiguous() end,
  "x.movedim((0, 1), (2, 0)).contiguous()", { x = x3 })
L:case("swapaxes", function() return x3:swapaxes(1, 3):contiguous() end, "x.swapaxes(0, 2).contiguous()", { x = x3 })
L:case("diagonal", function() return x3:diagonal():contiguous() end, "x.diagonal().contiguous()", { x = x3 })
L:case("diagonal offsets", function() return T.cat({ x3:diagonal(1, 2, 3), x3:diagonal(-1, 3, 1):t() }, 2) end,
  "torch.cat([x.diagonal(1, 1, 2), x.diagonal(-1, 2, 0).t()], 1)", { x = x3 })
L:case("diagonal grad", function() return grad(function(v) return v:narrow(3, 2, 3):diagonal(0, 1, 3) end, x3, T.ones(3, 2, { dtype = "float64" })) end,
  PYGRAD:format("x[:, :, 1:4].diagonal(0, 0, 2)"), { x = x3, g = T.ones(3, 2, { dtype = "float64" }) })
L:case("unfold", function() return x3:unfold(3, 2, 1):contiguous() end, "x.unfold(2, 2, 1).contiguous()", { x = x3 })
L:case("unfold steps", function() return x3:narrow(3, 2, 3):unfold(-1, 2, 2):contiguous() end,
  "x[:, :, 1:4].unfold(-1, 2, 2).contiguous()", { x = x3 })
L:case("unfold grad", function() return grad(function(v) return v:unfold(2, 2, 1) end, x3, T.ones(2, 2, 4, 2, { dtype = "float64" })) end,
  PYGRAD:format("x.unfold(1, 2, 1)"), { x = x3, g = T.ones(2, 2, 4, 2, { dtype = "float64" }) })
L:case("mT and T", function() return T.cat({ x3.mT:reshape(-1), x3.T:reshape(-1), x3.mH:reshape(-1) }) end,
  "torch.cat([x.mT.reshape(-1), x.permute(2, 1, 0).reshape(-1), x.mH.reshape(-1)])", { x = x3 })
local odd = T.tensor({ { 0 / 0, math.huge, -math.huge, 1.5 }, { -2, 0 / 0, 3, -math.huge } }, { dtype = "float64" })
L:case("nan_to_num", function() return odd:nan_to_num() end, "x.nan_to_num()", { x = odd })
L:case("nan_to_num values", function() return odd:float():nan_to_num(1, 2, -3) end, "x.float().nan_to_num(1, 2, -3)", { x = odd })
L:case("nan_to_num grad", function() return grad(function(v) return v:nan_to_num({ posinf = 7 }) end, odd, T.ones(2, 4, { dtype = "float64" })) end,
  PYGRAD:format("x.nan_to_num(posinf=7)"), { x = odd, g = T.ones(2, 4, { dtype = "float64" }) })
L:case("msort", function() return x3:msort() end, "torch.msort(x)", { x = x3 })
L:case("unbind", function() return T.stack(x3:unbind(2)) end, "torch.stack(x.unbind(1))", { x = x3 })
L:case("max of two", function() return T.max(x3, y3) end, "torch.max(x, y)", { x = x3, y = y3 })
L:case("min of two", function() return x3:min(y3) end, "x.min(y)", { x = x3, y = y3 })
L:case("mv", function() return T.mv(x3[1], y3[1][1]) end, "torch.mv(x[0], y[0][0])", { x = x3, y = y3 })
L:case("var_mean", function() return T.stack({ T.var_mean(x3, 2, true, { correction = 0 }) }) end,
  "torch.stack(torch.var_mean(x, 1, unbiased=False, keepdim=True))", { x = x3 })
L:case("std_mean", function() return T.stack({ T.std_mean(x3) }) end, "torch.stack(torch.std_mean(x))", { x = x3 })
L:case("count_nonzero", function() return x3:gt(0):count_nonzero({ 1, 3 }) end, "torch.count_nonzero(x > 0, (0, 2))", { x = x3 })

L:check("logcumsumexp and mode vs PyTorch", function(got)
  if got.dtype == "float32" then return 1e-5, 1e-5 end
  return 1e-10, 1e-12
end)

describe("logcumsumexp", function()
  it("stays finite where exp would overflow or underflow", function()
    local y = T.tensor({ 1000, 1000, -1000 }, { dtype = "float64" }):logcumsumexp(1)
    expect.close(y, T.tensor({ 1000, 1000 + math.log(2), 1000 + math.log(2) }, { dtype = "float64" }))
  end)
  it("raises on integer tensors and a missing dim", function()
    errs(function() T.logcumsumexp(T.tensor({ 1, 2 }), 1) end, "logcumsumexp", "expected a floating tensor")
    errs(function() T.logcumsumexp(T.randn(3)) end, "logcumsumexp", "expected a dim")
    errs(function() T.randn(3):logcumsumexp(2) end, "logcumsumexp")
  end)
  it("is captured by T.compile with the eager results", function()
    local f = T.compile(function(x) return x:logcumsumexp(2) * 2 end, { backend = "cpu" })
    local x = T.randn(3, 9)
    for _ = 1, 3 do expect.close(f(x), x:logcumsumexp(2) * 2) end
  end)
end)

describe("mode", function()
  it("gives an index of the mode along longer rows", function()
    local v, i = long_rows:mode(2)
    expect.eq(long_rows:gather(2, i:unsqueeze(2)):squeeze(2):totable(), v:totable())
  end)
  it("takes 0-d tensors and raises on an empty dim", function()
    local v, i = T.tensor(4.0):mode()
    expect.eq({ v:item(), i:item(), i.dtype }, { 4, 1, "int64" })
    errs(function() T.zeros(2, 0):mode(2) end, "mode", "expected reduction dim 2 to have non-zero size")
  end)
  it("is captured by T.compile with the eager results", function()
    local f = T.compile(function(x) local v, i = x:mode(1); return v + 1, i end, { backend = "cpu" })
    local x = T.randint(0, 3, { 8, 5 }):float()
    local v, i = x:mode(1)
    for _ = 1, 3 do
      local fv, fi = f(x)
      expect.eq({ fv:totable(), fi:totable() }, { (v + 1):totable(), i:totable() })
    end
  end)
end)

-- ---- multinomial --------------------------------------------------------------------------------------
-- counts[c] of each category among the values of idx (1-based), over n categories
local function freq(idx, n)
  return T.zeros(n, { dtype = "float64" }):index_add(1, idx:reshape(-1), T.ones(idx:numel(), { dtype = "float64" })) / idx:numel()
end
local function near(got, want, draws, what)
  for c = 1, #want do
    local sigma = math.sqrt(want[c] * (1 - want[c]) / draws)
    if math.abs(got[c] - want[c]) > 5 * sigma + 1e-12 then
      error(("%s: category %d frequency %.4f, expected %.4f (5 sigma = %.4f)"):format(what, c, got[c], want[c], 5 * sigma), 2)
    end
  end
end

describe("shape conveniences", function()
  it("view_as / expand_as / reshape_as and the misuse of movedim and max", function()
    local a = T.arange(6):float()
    expect.eq(a:view_as(T.zeros(2, 3)).shape, { 2, 3 })
    expect.eq(T.ones(3, 1):expand_as(T.zeros(3, 4)).shape, { 3, 4 })
    expect.eq(a:reshape_as(T.zeros(3, 2)).shape, { 3, 2 })
    errs(function() a:view(2, 3):movedim({ 1, 2 }, { 1 }) end, "movedim", "same number of dims")
    errs(function() a:view(2, 3):movedim({ 1, 1 }, { 1, 2 }) end, "movedim", "repeated dim in source")
    errs(function() T.tensor(1):unbind() end, "unbind", "no dimensions")
    expect.eq(T.zeros(4, 5):narrow(2, 3, 2):storage_offset(), 2)
    local y = T.zeros(3, 3)
    y:diagonal():fill_(1)  -- (a view: the write reaches y)
    expect.eq(y:totable(), T.eye(3):totable())
    errs(function() y:diagonal(0, 2, 2) end, "diagonal", "cannot be the same dim")
    errs(function() T.max(a, a, 1) end, "max", "the elementwise form takes two tensors")
    errs(function() a:unfold(1, 7, 1) end, "unfold", "maximum size for tensor at dimension 1 is 6 but size is 7")
    errs(function() a:unfold(1, 2, 0) end, "unfold", "step expected a positive integer, got 0")
    errs(function() local _ = a.mT end, "mT", "a matrix or a batch of matrices, got a 1-d tensor")
    errs(function() local _ = T.zeros(2, 3, 4).H end, "H", "expected a matrix (a 2-D tensor), got a 3-d tensor")
    errs(function() T.quantile(T.tensor({ 1.5, 2.5 }), T.tensor({ 0 / 0 })) end, "quantile", "q values must be in the range [0, 1]")
    errs(function() T.zeros(2, 0):nanmedian(2) end, "nanmedian", "reduction dim 2 to have non-zero size")
    errs(function() T.zeros(2, 0):median(2) end, "median", "reduction dim 2 to have non-zero size")
    expect.eq(T.quantile(T.tensor(2.5), 0.3, 1, true).shape, {})
    expect.eq(T.bernoulli(T.zeros(2), { p = 1 }):totable(), { 1, 1 })
    expect.eq(T.unfold, nil)  -- (Tensor.unfold is a method; T.F.unfold is im2col)
    expect.eq(a:unfold(1, 4, 2):totable(), { { 0, 1, 2, 3 }, { 2, 3, 4, 5 } })
    expect.eq(T.tensor(5):unfold(1, 1, 1):totable(), { 5 })
    expect.eq(a.T:totable(), a:totable())
  end)
  it("norm's p may be \"fro\": the 2-norm", function()
    local m = T.tensor({ { 3, 4 }, { 6, 8 } }, { dtype = "float32" })
    expect.close(m:norm({ p = "fro" }), math.sqrt(125))
    expect.close(m:norm(2, false, "fro"), { 5, 10 })
    expect.close(m:norm("fro", 2), { 5, 10 })  -- (torch's order: a string order first)
    errs(function() m:norm({ p = "nuc" }) end, "norm", "nuclear norm")
    errs(function() m:norm({ p = "frob" }) end, "norm", 'expected a number or "fro", got string "frob"')
  end)
end)

describe("multinomial", function()
  local p = T.tensor({ 0.1, 0, 0.5, 0.4 }, { dtype = "float64" })
  it("with replacement draws each category with its probability, never a zero weight", function()
    local idx = T.multinomial(p * 3, 20000, true)  -- (weights need not sum to 1)
    expect.eq({ idx.dtype, idx.shape }, { "int64", { 20000 } })
    near(freq(idx, 4):totable(), { 0.1, 0, 0.5, 0.4 }, 20000, "with replacement")
    local rows = T.multinomial(T.tensor({ { 0, 0, 1 }, { 1, 0, 0 } }, { dtype = "float32" }), 5, { replacement = true })
    expect.eq(rows:totable(), { { 3, 3, 3, 3, 3 }, { 1, 1, 1, 1, 1 } })
  end)
  it("without replacement draws distinct categories with the sequential law", function()
    local draws = 20000
    local idx = T.multinomial(p:expand(draws, 4), 2)
    expect.eq(idx.shape, { draws, 2 })
    expect.truthy(idx:select(2, 1):ne(idx:select(2, 2)):all():item(), "distinct categories in a row")
    local pair = freq((idx:select(2, 1) - 1) * 4 + idx:select(2, 2), 16):totable()
    local want, pv = {}, p:totable()
    for a = 1, 4 do
      for b = 1, 4 do want[(a - 1) * 4 + b] = a == b and 0 or pv[a] * pv[b] / (1 - pv[a]) end
    end
    near(pair, want, draws, "pairs without replacement")
    local all = T.multinomial(T.tensor({ 1, 2, 3, 4, 5 }, { dtype = "float32" }), 5)
    expect.eq(all:sort():totable(), { 1, 2, 3, 4, 5 })
  end)
  it("follows manual_seed as the rand ops do", function()
    T.manual_seed(5)
    local a, b = T.multinomial(p, 50, true), T.multinomial(p, 3)
    T.manual_seed(5)
    expect.eq({ T.multinomial(p, 50, true):totable(), T.multinomial(p, 3):totable() }, { a:totable(), b:totable() })
    expect.truthy(not T.multinomial(p, 50, true):equal(a), "the next draws differ")
  end)
  it("raises on bad distributions and sample counts", function()
    errs(function() T.multinomial(p, 5) end, "multinomial", "cannot sample n_sample (5) > prob_dist.size(-1) (4) samples without replacement")
    errs(function() T.multinomial(p, 4) end, "multinomial", "not enough non-negative category to sample")
    errs(function() T.multinomial(p, 0) end, "multinomial", "num_samples expected a positive integer")
    errs(function() T.multinomial(T.tensor({ 0.5, -0.1 }), 1) end, "multinomial", "element < 0")
    errs(function() T.multinomial(T.tensor({ 0.5, 0 / 0 }), 1) end, "multinomial", "inf, nan")
    errs(function() T.multinomial(T.zeros(3), 1, true) end, "multinomial", "sum of probabilities <= 0")
    errs(function() T.multinomial(T.tensor({ 1, 2 }), 1) end, "multinomial", "expected a floating tensor")
    errs(function() T.multinomial(T.ones(2, 2, 2), 1) end, "multinomial", "prob_dist must be 1 or 2 dim")
    errs(function() T.multinomial(T.ones(2, 0), 1) end, "multinomial", "number of categories cannot be zero")
  end)
end)
