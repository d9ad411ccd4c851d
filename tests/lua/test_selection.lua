-- PyTorch's indexing in Lua form (x[mask], x[idx], x:index(list) and their assignments) and the
-- data ops of API.md section 10, against PyTorch 1.13 (one python run): 1-based index values in
-- Lua, 0-based in the Python expressions. Errors, and graph breaks in compiled functions.
local T = require "crescent"
local R = require "torch_ref"

expect.covers("masked_select", "nonzero", "index", "index_put", "index_put_", "scatter_reduce", "bincount",
  "_value_counts", "_unique_counted")

T.manual_seed(7)
math.randomseed(7)

local function rnd(shape, dtype)
  if dtype == "bool" then return T.rand(shape):gt(0.5) end
  if dtype == "int32" or dtype == "int64" then return T.randint(-9, 10, shape, { dtype = dtype }) end
  return T.randn(shape):to(dtype)
end
local function idx(n, shape) return T.randint(1, n + 1, shape, { dtype = "int64" }) end
local function L(t) return T.tensor(t, { dtype = "int64" }) end

local refs = R.list()
local function case(key, fn, expr, inputs) refs:case(key, fn, expr, inputs) end
-- fn runs on a clone of x and returns it (assignments)
local function put_case(key, x, fn, py, inputs)
  inputs.x = x
  case(key, function() local y = x:clone(); fn(y); return y end, "(lambda y: (" .. py .. ", y)[1])(x.clone())", inputs)
end

-- ---- reading -------------------------------------------------------------------------------------
for _, dt in ipairs({ "float32", "float64", "float16", "int32", "int64", "bool" }) do
  local x = rnd({ 3, 4 }, dt)
  local m, m1 = T.rand(3, 4):gt(0.4), T.tensor({ true, false, true })
  local i2 = idx(3, { 2, 2 })
  case("mask_" .. dt, function() return x[m] end, "x[m]", { x = x, m = m })
  case("mask_rows_" .. dt, function() return x[m1] end, "x[m]", { x = x, m = m1 })
  case("masked_select_bc_" .. dt, function() return x:masked_select(T.tensor({ true, false, false, true })) end,
    "x.masked_select(torch.tensor([True, False, False, True]))", { x = x })
  case("idx_" .. dt, function() return x[i2] end, "x[i - 1]", { x = x, i = i2 })
  case("nonzero_" .. dt, function() return T.nonzero(x) end, "torch.nonzero(x) + 1", { x = x })
end
do
  local x = rnd({ 3, 4, 5 }, "float32")
  local a, b = idx(4, { 2 }), idx(5, { 3, 1 })
  case("index_all_idx", function() return x:index({ T.all, a }) end, "x[:, a - 1]", { x = x, a = a })
  case("index_adjacent", function() return x:index({ T.all, a:view(2, 1), b:view(1, 3) }) end,
    "x[:, a.view(2, 1) - 1, b.view(1, 3) - 1]", { x = x, a = a, b = b })
  local i3 = L({ 3, 1, 2 })
  case("index_apart_fixed", function() return x:index({ i3, T.all, L({ 5, 1, 2 }) }) end, "x[[2, 0, 1], :, [4, 0, 1]]", { x = x })
  case("index_number_range", function() return x:index({ 2, { 1, 4, 2 }, a }) end, "x[1, 0:4:2, a - 1]", { x = x, a = a })
  local m2 = T.rand(4, 5):gt(0.5)
  case("index_mask_2d", function() return x:index({ T.all, m2 }) end, "x[:, m]", { x = x, m = m2 })
  case("index_range_only", function() return x:index({ { 2, 3 }, T.all, { 5, 5 } }) end, "x[1:3, :, 4:5]", { x = x })
  case("x_table_key", function() return x[{ 3, T.all, 2 }] end, "x[2, :, 1]", { x = x })
  case("where_1arg", function() return T.stack({ T.where(x:gt(0.5)) }) end, "torch.stack(torch.where(x > 0.5)) + 1", { x = x })
  case("nonzero_tuple", function() return T.stack({ T.nonzero(x:gt(0), { as_tuple = true }) }) end,
    "torch.stack(torch.nonzero(x > 0, as_tuple=True)) + 1", { x = x })
  case("nonzero_0d", function() return T.nonzero(T.tensor(3)) end, "torch.nonzero(torch.tensor(3))", {})
  -- a 0-d condition gives one index tensor, as torch's (its nonzero as a 1-element vector)
  case("where_0d", function() return T.stack({ T.where(T.tensor(true)) }) end, "torch.stack(torch.where(torch.tensor(True))) + 1", {})
  case("where_0d_false", function() return T.stack({ T.where(T.tensor(0)) }) end, "torch.stack(torch.where(torch.tensor(0))) + 1", {})
  case("nonzero_tuple_0d", function() return T.stack({ T.nonzero(T.tensor(2.5), { as_tuple = true }) }) end,
    "torch.stack(torch.nonzero(torch.tensor(2.5), as_tuple=True)) + 1", {})
  case("mask_empty", function() return x[x:gt(100)] end, "x[x > 100]", { x = x })
  case("mask_nc", function() return x:transpose(1, 3)[x:transpose(1, 3):lt(0)] end, "x.transpose(0, 2)[x.transpose(0, 2) < 0]", { x = x })
end
do  -- long inputs: many pieces of the CPU's parallel compaction and a ragged last one; NaN counts
  local x = T.randn(3, 100003)
  x[2][7] = 0 / 0
  local m = x:gt(0.3)
  case("mask_long", function() return x[m] end, "x[m]", { x = x, m = m })
  local z = T.randn(5, 40001):gt(0.5):to("float64") * T.randn(5, 40001, { dtype = "float64" })
  z[3][9] = 0 / 0
  case("nonzero_long", function() return T.nonzero(z) end, "torch.nonzero(z) + 1", { z = z })
  case("nonzero_long_3d", function() return T.nonzero(z:view(5, 13, 3077)) end, "torch.nonzero(z.view(5, 13, 3077)) + 1",
    { z = z })
  -- 1-D bool masks, dense (kept records packed in place, the pieces' last bursts through the
  -- buffer), all true, and sparse (all through the buffer)
  local b = T.rand(300007):gt(0.2)
  case("nonzero_long_bool", function() return T.nonzero(b) end, "torch.nonzero(b) + 1", { b = b })
  local full, sparse = T.ones(200003, { dtype = "bool" }), T.rand(200003):gt(0.99)
  case("nonzero_long_true", function() return T.nonzero(full) end, "torch.nonzero(b) + 1", { b = full })
  case("nonzero_long_sparse", function() return T.nonzero(sparse) end, "torch.nonzero(b) + 1", { b = sparse })
  case("mask_long_true", function() return z:view(-1):narrow(1, 1, 200003)[full] end, "z.view(-1)[0:200003][b]",
    { z = z, b = full })
  local h = z:to("float16")
  case("mask_long_16bit", function() return h:masked_select(m:narrow(2, 1, 40001):narrow(1, 1, 1)) end,
    "h.masked_select(m[0:1, 0:40001])", { h = h, m = m })
end
-- ---- assignment ------------------------------------------------------------------------------------
for _, dt in ipairs({ "float32", "float64", "int64", "bool" }) do
  local x = rnd({ 4, 3 }, dt)
  local m = T.rand(4, 3):gt(0.5)
  local v = rnd({ 2, 3 }, dt)
  put_case("set_mask_num_" .. dt, x, function(y) y[m] = 1 end, "y.__setitem__(m, 1)", { m = m })
  put_case("set_idx_" .. dt, x, function(y) y[L({ 4, 1 })] = v end, "y.__setitem__(torch.tensor([3, 0]), v)", { v = v })
  put_case("set_rows_mask_" .. dt, x, function(y) y[T.tensor({ true, false, false, true })] = v end,
    "y.__setitem__(torch.tensor([True, False, False, True]), v)", { v = v })
end
do
  local x = rnd({ 4, 5 }, "float64")
  local v, a = rnd({ 3 }, "float64"), L({ 2, 5, 2 })
  put_case("put_accumulate", x, function(y) y:index_put_({ L({ 1, 4, 1 }), a }, v, true) end,
    "y.index_put_((torch.tensor([0, 3, 0]), a - 1), v, accumulate=True)", { v = v, a = a })
  put_case("put_col", x, function(y) y:index({ T.all, 2 }):copy_(v:narrow(1, 1, 1):expand(4)) end,
    "y[:, 1].copy_(v[0:1].expand(4))", { v = v })
  put_case("set_all_idx", x, function(y) y[{ T.all, a:narrow(1, 1, 2) }] = T.ones(4, 2, { dtype = "float64" }) end,
    "y.__setitem__((slice(None), a[:2] - 1), torch.ones(4, 2, dtype=torch.float64))", { a = a })
  put_case("set_mask_tensor", x, function(y) y[y:gt(0)] = T.zeros(1, { dtype = "float64" }) end, "y.__setitem__(y > 0, torch.zeros(1, dtype=torch.float64))", {})
  -- values with leading dims of size 1 lose them, as torch's setitem (slicePrefix1sDims)
  put_case("set_row_leading_ones", x, function(y) y[2] = v:view(1, 1, 3):narrow(3, 1, 1):expand(1, 1, 5) end,
    "y.__setitem__(1, v.view(1, 1, 3)[:, :, 0:1].expand(1, 1, 5))", { v = v })
  put_case("set_idx_leading_ones", x, function(y) y[L({ 3, 1 })] = T.ones(1, 2, 5, { dtype = "float64" }) end,
    "y.__setitem__(torch.tensor([2, 0]), torch.ones(1, 2, 5, dtype=torch.float64))", {})
  put_case("set_mask_leading_ones", x, function(y) y[{ y:gt(0):any(2) }] = T.full({ 1, 1, 5 }, 7, { dtype = "float64" }) end,
    "y.__setitem__((y > 0).any(1), torch.full((1, 1, 5), 7, dtype=torch.float64))", {})
  local y3 = rnd({ 2, 3, 4 }, "float32")
  local v3 = rnd({ 2, 2 }, "float32")
  put_case("set_adjacent_middle", y3, function(y) y:index_put_({ T.all, L({ 3, 1 }), L({ 4, 2 }) }, v3:narrow(1, 1, 1)) end,
    "y.__setitem__((slice(None), torch.tensor([2, 0]), torch.tensor([3, 1])), v[0:1])", { v = v3 })
end

-- ---- data ops --------------------------------------------------------------------------------------
do
  local x = rnd({ 3, 4 }, "float32")
  local xi = T.randint(0, 5, { 10 }, { dtype = "int64" })
  case("flip", function() return x:flip(1, 2) end, "x.flip(0, 1)", { x = x })
  case("flip_neg", function() return T.flip(x, { -1 }) end, "x.flip(-1)", { x = x })
  case("roll", function() return x:roll(2, 2) end, "x.roll(2, 1)", { x = x })
  case("roll_multi", function() return x:roll({ -1, 5 }, { 1, 2 }) end, "x.roll((-1, 5), (0, 1))", { x = x })
  case("roll_flat", function() return x:roll(3) end, "x.roll(3)", { x = x })
  case("tile", function() return x:tile(2, 1, 3) end, "x.tile((2, 1, 3))", { x = x })
  case("tile_short", function() return x:tile(2) end, "x.tile((2,))", { x = x })
  case("repeat", function() return x["repeat"](x, 2, 3) end, "x.repeat(2, 3)", { x = x })
  case("repeat_interleave", function() return x:repeat_interleave(2, 2) end, "x.repeat_interleave(2, 1)", { x = x })
  case("repeat_interleave_flat", function() return x:repeat_interleave(3) end, "x.repeat_interleave(3)", { x = x })
  case("repeat_interleave_t", function() return x:repeat_interleave(L({ 1, 0, 2 }), 1) end,
    "x.repeat_interleave(torch.tensor([1, 0, 2]), 0)", { x = x })
  case("full_like", function() return T.full_like(xi, 7) end, "torch.full_like(x, 7)", { x = xi })
  case("full_like_dtype", function() return T.full_like(xi, 2.5, { dtype = "float64" }) end, "torch.full_like(x, 2.5, dtype=torch.float64)", { x = xi })
  case("isclose", function() return T.isclose(x, x + 1e-6) end, "torch.isclose(x, x + 1e-6)", { x = x })
  case("isclose_tol", function() return T.isclose(x, x * 1.01, { rtol = 0.02 }) end, "torch.isclose(x, x * 1.01, rtol=0.02)", { x = x })
  local nan = T.tensor({ 0 / 0, 1, math.huge, -math.huge, 2 })
  local nan2 = T.tensor({ 0 / 0, 1.00000001, math.huge, math.huge, 3 })
  case("isclose_special", function() return T.isclose(nan, nan2) end, "torch.isclose(a, b)", { a = nan, b = nan2 })
  case("isclose_nan", function() return T.isclose(nan, nan2, { equal_nan = true }) end, "torch.isclose(a, b, equal_nan=True)", { a = nan, b = nan2 })
  case("isclose_int", function() return T.isclose(xi, xi + 1, { atol = 1 }) end, "torch.isclose(x, x + 1, atol=1)", { x = xi })
  case("allclose", function() return T.tensor(T.allclose(x, x + 1e-9)) end, "torch.tensor(torch.allclose(x, x + 1e-9))", { x = x })
  case("equal", function() return T.tensor({ T.equal(x, x:clone()), T.equal(x, x:t()), T.equal(x, x + 1) }) end,
    "torch.tensor([torch.equal(x, x.clone()), torch.equal(x, x.t()), torch.equal(x, x + 1)])", { x = x })
  case("clip", function() return x:clip(-0.5, 0.5) end, "x.clip(-0.5, 0.5)", { x = x })
  case("diff", function() return x:diff() end, "x.diff()", { x = x })
  case("diff_n_dim", function() return x:diff(2, 1) end, "x.diff(2, 0)", { x = x })
  case("diff_pre", function() return x:diff(1, 2, { prepend = x:narrow(2, 1, 1), append = x }) end,
    "x.diff(1, 1, prepend=x[:, 0:1], append=x)", { x = x })
  case("diff_bool", function() return x:gt(0):diff() end, "(x > 0).diff()", { x = x })
  case("argsort", function() return x:argsort(2) end, "x.argsort(1) + 1", { x = x })
  case("argsort_desc", function() return x:argsort(1, { descending = true }) end, "x.argsort(0, descending=True) + 1", { x = x })
  case("sort_opts", function() return (x:sort(2, { descending = true })) end, "x.sort(1, descending=True)[0]", { x = x })
  case("sort_opts_only", function() return (x:sort({ dim = 1, descending = true })) end, "x.sort(0, descending=True)[0]", { x = x })
  local ti = idx(4, { 3, 2 })
  case("take_along_dim", function() return T.take_along_dim(x, ti, 2) end, "torch.take_along_dim(x, i - 1, 1)", { x = x, i = ti })
  case("take_along_dim_flat", function() return x:take_along_dim(L({ 12, 1 })) end, "x.take_along_dim(torch.tensor([11, 0]))", { x = x })
  case("take_along_dim_bc", function() return T.take_along_dim(x, L({ { 2, 1 } }), 2) end, "torch.take_along_dim(x, torch.tensor([[1, 0]]), 1)", { x = x })
  local src = rnd({ 3, 2 }, "float32")
  case("index_copy", function() return x:index_copy(2, L({ 4, 1 }), src) end, "x.index_copy(1, torch.tensor([3, 0]), s)", { x = x, s = src })
  case("index_fill", function() return x:index_fill(1, L({ 3, 1 }), -2) end, "x.index_fill(0, torch.tensor([2, 0]), -2)", { x = x })
  put_case("index_fill_", x, function(y) y:index_fill_(2, L({ 2 }), 9) end, "y.index_fill_(1, torch.tensor([1]), 9)", {})
  local si, ss = L({ { 3, 1 }, { 2, 2 } }), rnd({ 2, 3 }, "float32")
  case("scatter_src", function() return x:scatter(1, si, ss) end, "x.scatter(0, i - 1, s)", { x = x, i = si, s = ss })
  case("scatter_value", function() return x:scatter(2, L({ { 4 }, { 1 }, { 2 } }), 5) end,
    "x.scatter(1, torch.tensor([[3], [0], [1]]), 5)", { x = x })
  case("scatter_add_reduce", function() return x:scatter(1, L({ { 1, 1 }, { 1, 1 } }), ss, { reduce = "add" }) end,
    "x.scatter(0, torch.tensor([[0, 0], [0, 0]]), s, reduce='add')", { x = x, s = ss })
  for _, red in ipairs({ "sum", "mean", "prod", "amax", "amin" }) do
    for _, inc in ipairs({ true, false }) do
      case(string.format("scatter_reduce_%s_%s", red, tostring(inc)),
        function() return x:scatter_reduce(1, L({ { 1, 1 }, { 3, 1 } }), ss, red, { include_self = inc }) end,
        string.format("x.scatter_reduce(0, torch.tensor([[0, 0], [2, 0]]), s, '%s', include_self=%s)", red, inc and "True" or "False"),
        { x = x, s = ss })
    end
  end
  -- prod's gradient at zeros (PyTorch's formula): one zero of src at a position, two, a zero of self
  local zs, zx = T.tensor({ 0.5, 0, 0, 0, -1.5, 2, 3 }, { dtype = "float64" }), T.tensor({ 0, 1.5, -2 }, { dtype = "float64" })
  local zi, zg = L({ 1, 1, 2, 2, 3, 3, 1 }), T.tensor({ 0.3, -0.7, 1.1 }, { dtype = "float64" })
  for _, inc in ipairs({ true, false }) do
    for k, name in ipairs({ "x", "s" }) do
      case(string.format("scatter_reduce_prod_grad_%s_%s", name, tostring(inc)), function()
        local a, b = zx:clone():requires_grad_(), zs:clone():requires_grad_()
        return T.autograd.grad((a:scatter_reduce(1, zi, b, "prod", { include_self = inc }) * zg):sum(), { a, b })[k]
      end, string.format("(lambda a, b: torch.autograd.grad((a.scatter_reduce(0, i - 1, b, 'prod', include_self=%s) * g).sum(), (a, b))[%d])"
        .. "(x.clone().requires_grad_(), s.clone().requires_grad_())", inc and "True" or "False", k - 1), { x = zx, s = zs, i = zi, g = zg })
    end
  end
  local xl = T.randint(-20, 20, { 3, 4 }, { dtype = "int64" })
  case("scatter_reduce_mean_int", function() return xl:scatter_reduce(1, L({ { 1, 1 }, { 3, 1 } }), xl:narrow(1, 1, 2):mul(3), "mean") end,
    "x.scatter_reduce(0, torch.tensor([[0, 0], [2, 0]]), x[0:2] * 3, 'mean')", { x = xl })
  local xn = T.tensor({ { 1, 0 / 0 }, { 3, 4 } })
  for _, red in ipairs({ "amax", "amin", "prod" }) do
    case("scatter_reduce_nan_" .. red, function() return xn:scatter_reduce(1, L({ { 1, 1 }, { 1, 2 } }), xn:flip(2), red) end,
      "x.scatter_reduce(0, torch.tensor([[0, 0], [0, 1]]), x.flip(1), '" .. red .. "')", { x = xn })
    case("scatter_reduce_int_" .. red, function() return xl:scatter_reduce(2, L({ { 1, 1, 4 }, { 2, 2, 2 } }), xl:narrow(2, 1, 3), red, { include_self = false }) end,
      "x.scatter_reduce(1, torch.tensor([[0, 0, 3], [1, 1, 1]]), x[:, 0:3], '" .. red .. "', include_self=False)", { x = xl })
  end
  case("triu_indices", function() return T.triu_indices(4, 5, 1) end, "torch.triu_indices(4, 5, 1) + 1", {})
  case("tril_indices", function() return T.tril_indices(3, 3) end, "torch.tril_indices(3, 3) + 1", {})
  case("tril_indices_neg", function() return T.tril_indices(4, 3, -1) end, "torch.tril_indices(4, 3, -1) + 1", {})
  local a, b = T.arange(3), T.arange(4):double()
  case("meshgrid_ij", function() return T.stack({ T.meshgrid(a:double(), b) }) end,
    "torch.stack(torch.meshgrid(a.double(), b, indexing='ij'))", { a = a, b = b })
  case("meshgrid_xy", function() return T.stack({ T.meshgrid({ a:double(), b }, { indexing = "xy" }) }) end,
    "torch.stack(torch.meshgrid(a.double(), b, indexing='xy'))", { a = a, b = b })
  local cls = L({ { 1, 3 }, { 2, 3 } })
  case("one_hot", function() return T.one_hot(cls) end, "torch.nn.functional.one_hot(c - 1)", { c = cls })
  case("one_hot_n", function() return T.F.one_hot(cls, 5) end, "torch.nn.functional.one_hot(c - 1, 5)", { c = cls })
  case("one_hot_inferred", function() return T.F.one_hot(cls, -1) end, "torch.nn.functional.one_hot(c - 1, -1)", { c = cls })
  case("bincount", function() return T.bincount(xi) end, "torch.bincount(x)", { x = xi })
  case("bincount_min", function() return xi:bincount(nil, 9) end, "torch.bincount(x, minlength=9)", { x = xi })
  case("bincount_opts", function() return T.bincount(xi, { minlength = 9 }) end, "torch.bincount(x, minlength=9)", { x = xi })
  local w = T.rand(10, { dtype = "float64" })
  case("bincount_w", function() return T.bincount(xi, w) end, "torch.bincount(x, w)", { x = xi, w = w })
  -- (values past the first pass's 4096 bins: a second pass, per piece or serial; int32, strided)
  local xl, xw = T.randint(0, 5000, { 100000 }), T.randint(0, 200000, { 70000 }):int()
  local wl = T.rand(100000)
  case("bincount_long", function() return T.bincount(xl) end, "torch.bincount(x)", { x = xl })
  case("bincount_long_w", function() return T.bincount(xl, wl) end, "torch.bincount(x, w)", { x = xl, w = wl })
  case("bincount_wide_int32", function() return T.bincount(xw, nil, 300000) end, "torch.bincount(x, minlength=300000)", { x = xw })
  case("bincount_strided", function() return T.bincount(xl:view(1000, 100):select(2, 3)) end,
    "torch.bincount(x.view(1000, 100)[:, 2])", { x = xl })
  case("unique", function() return T.unique(xi) end, "torch.unique(x)", { x = xi })
  case("unique_inverse", function() return select(2, T.unique(xi:view(2, 5), { return_inverse = true })) end,
    "torch.unique(x.view(2, 5), return_inverse=True)[1] + 1", { x = xi })
  case("unique_counts", function() return select(2, T.unique(xi, { return_counts = true })) end,
    "torch.unique(x, return_counts=True)[1]", { x = xi })
  -- (integers of a range no wider than their number are counted - from 0 up by bincount -,
  -- wider ones sorted)
  local xr, xs = T.randint(-40, 30, { 7, 20 }):int(), L({ 100, -7, 3, 100, 2 ^ 40, -7 })
  local xn = T.randint(3, 60, { 7, 20 })
  for _, kv in ipairs({ { "counted", xr }, { "counted_from_3", xn }, { "sorted", xs } }) do
    local key, v = kv[1], kv[2]
    case("unique_" .. key, function() return T.unique(v) end, "torch.unique(x)", { x = v })
    case("unique_" .. key .. "_inv", function() return select(2, T.unique(v, { return_inverse = true })) end,
      "torch.unique(x, return_inverse=True)[1] + 1", { x = v })
    case("unique_" .. key .. "_counts", function() return select(2, T.unique(v, { return_counts = true })) end,
      "torch.unique(x, return_counts=True)[1]", { x = v })
  end
  local xd = L({ { 1, 2 }, { 0, 5 }, { 1, 2 }, { 0, 5 }, { 1, 1 } })
  case("unique_dim", function() return T.unique(xd, { dim = 1 }) end, "torch.unique(x, dim=0)", { x = xd })
  case("unique_dim_inv", function() return select(2, T.unique(xd, { dim = 1, return_inverse = true, return_counts = true })) end,
    "torch.unique(x, dim=0, return_inverse=True)[1] + 1", { x = xd })
  case("unique_dim2_counts", function() return select(2, T.unique(xd:t(), { dim = 2, return_counts = true })) end,
    "torch.unique(x.t(), dim=1, return_counts=True)[1]", { x = xd })
  local xc = L({ { 1, 2 }, { 1, 2 }, { 0, 5 }, { 0, 5 }, { 1, 2 } })
  case("unique_consecutive_dim", function() return T.unique_consecutive(xc, { dim = 1 }) end, "torch.unique_consecutive(x, dim=0)", { x = xc })
  case("unique_consecutive_dim_inv", function() return select(2, T.unique_consecutive(xc, { dim = 1, return_inverse = true })) end,
    "torch.unique_consecutive(x, dim=0, return_inverse=True)[1] + 1", { x = xc })
  case("unique_consecutive_dim2_counts", function() return select(2, T.unique_consecutive(xc:t(), { dim = 1, return_counts = true })) end,
    "torch.unique_consecutive(x.t(), dim=0, return_counts=True)[1]", { x = xc })
  case("unique_consecutive_dim_cols", function() return T.unique_consecutive(xc, { dim = 2 }) end, "torch.unique_consecutive(x, dim=1)", { x = xc })
  -- (more columns than one round of pairs: the ranks of column pairs combine three times)
  local xw = T.randint(0, 2, { 40, 7 }):double():mul(0.5)
  case("unique_dim_7_cols", function() return T.unique(xw, { dim = 1 }) end, "torch.unique(x, dim=0)", { x = xw })
  case("unique_dim_7_cols_inv", function() return select(2, T.unique(xw, { dim = 1, return_inverse = true })) end,
    "torch.unique(x, dim=0, return_inverse=True)[1] + 1", { x = xw })
end

-- ---- linear algebra, reductions, runs ----------------------------------------------------------------
do
  local x, v, w = rnd({ 3, 4 }, "float64"), rnd({ 4 }, "float64"), rnd({ 3 }, "float64")
  local nan = T.tensor({ { 1, 0 / 0, 3 }, { 4, 5, 6 } }, { dtype = "float64" })
  case("rot90", function() return x:rot90() end, "x.rot90()", { x = x })
  case("rot90_k", function() return T.rot90(x, -1, { 2, 1 }) end, "torch.rot90(x, -1, (1, 0))", { x = x })
  case("rot90_2", function() return T.rot90(x:view(3, 2, 2), 2, { 1, 3 }) end, "torch.rot90(x.view(3, 2, 2), 2, (0, 2))", { x = x })
  case("outer", function() return T.outer(v, w) end, "torch.outer(v, w)", { v = v, w = w })
  case("dot", function() return T.dot(v, v) end, "torch.dot(v, v)", { v = v })
  case("addmm", function() return T.addmm(w:view(3, 1), x, x:t(), { beta = 0.5, alpha = 2 }) end,
    "torch.addmm(w.view(3, 1), x, x.t(), beta=0.5, alpha=2)", { x = x, w = w })
  case("addmm_beta0", function() return T.addmm(nan:narrow(1, 1, 1):narrow(2, 1, 3):expand(3, 3), x, x:t(), { beta = 0 }) end,
    "torch.addmm(q[0:1, 0:3].expand(3, 3), x, x.t(), beta=0)", { x = x, q = nan })
  case("addmv", function() return T.addmv(w, x, v) end, "torch.addmv(w, x, v)", { x = x, v = v, w = w })
  case("baddbmm", function() return T.baddbmm(x:narrow(2, 1, 3), x:view(1, 3, 4), x:t():view(1, 4, 3), { alpha = -1 }) end,
    "torch.baddbmm(x[:, 0:3], x.view(1, 3, 4), x.t().reshape(1, 4, 3), alpha=-1)", { x = x })
  case("nansum", function() return T.nansum(nan, 2) end, "torch.nansum(q, 1)", { q = nan })
  case("nanmean", function() return nan:nanmean() end, "q.nanmean()", { q = nan })
  case("nanmean_dim", function() return T.nanmean(nan, 1, true) end, "torch.nanmean(q, 0, True)", { q = nan })
  case("kthvalue", function() return T.stack({ T.kthvalue(x, 2, 2) }) end, "torch.stack([r.to(x.dtype) + (i == 1) for i, r in enumerate(torch.kthvalue(x, 2, 1))])", { x = x })
  case("median", function() return x:median() end, "x.median()", { x = x })
  case("median_nan", function() return nan:median() end, "q.median()", { q = nan })
  case("median_dim", function() return (T.median(nan, 2, true)) end, "torch.median(q, 1, True)[0]", { q = nan })
  case("median_dim_idx", function() return select(2, T.median(x, 1)) end, "torch.median(x, 0)[1] + 1", { x = x })
  local r = L({ 1, 1, 2, 2, 2, 3, 1, 1 })
  case("unique_consecutive", function() return T.unique_consecutive(r) end, "torch.unique_consecutive(r)", { r = r })
  case("unique_consecutive_c", function() return select(3, T.unique_consecutive(r, { return_inverse = true, return_counts = true })) end,
    "torch.unique_consecutive(r, return_counts=True)[1]", { r = r })
  case("unique_consecutive_i", function() return select(2, T.unique_consecutive(r:view(2, 4), { return_inverse = true })) end,
    "torch.unique_consecutive(r.view(2, 4), return_inverse=True)[1] + 1", { r = r })
end

-- ---- scans, positions, histograms, quantiles -------------------------------------------------------------
do
  local x = rnd({ 3, 5 }, "float64")
  local xn = T.tensor({ { 1, 3, 0 / 0, 2, 5 }, { 2, 2, 1, 3, 3 } }, { dtype = "float64" })
  local xi = L({ { 1, 3, 3, 0, 2 }, { -1, 2, 2, 2, 5 } })
  case("cumprod", function() return x:cumprod(2) end, "x.cumprod(1)", { x = x })
  case("cumprod_int", function() return T.cumprod(xi, 1) end, "torch.cumprod(x, 0)", { x = xi })
  case("cumprod_bool", function() return T.cumprod(xi:gt(0), 2) end, "torch.cumprod(x > 0, 1)", { x = xi })
  for _, f in ipairs({ "cummax", "cummin" }) do
    case(f, function() return (x[f](x, 2)) end, "x." .. f .. "(1)[0]", { x = x })
    case(f .. "_ties_idx", function() return select(2, xi[f](xi, 2)) end, "x." .. f .. "(1)[1] + 1", { x = xi })
    case(f .. "_nan", function() return (xn[f](xn, 2)) end, "x." .. f .. "(1)[0]", { x = xn })
    case(f .. "_nan_idx", function() return select(2, xn[f](xn, 2)) end, "x." .. f .. "(1)[1] + 1", { x = xn })
  end
  local sorted = T.tensor({ 1, 3, 3, 5, 7 }, { dtype = "float64" })
  local vals = T.tensor({ { 0, 3, 8 }, { 5, 6, 1 } }, { dtype = "float64" })
  case("searchsorted", function() return T.searchsorted(sorted, vals) end, "torch.searchsorted(s, v) + 1", { s = sorted, v = vals })
  case("searchsorted_right", function() return T.searchsorted(sorted, vals, { right = true }) end,
    "torch.searchsorted(s, v, right=True) + 1", { s = sorted, v = vals })
  case("searchsorted_nd", function() return T.searchsorted(vals:sort(2), vals) end, "torch.searchsorted(v.sort(1)[0], v) + 1", { v = vals })
  case("bucketize", function() return T.bucketize(vals, sorted) end, "torch.bucketize(v, s) + 1", { s = sorted, v = vals })
  -- long sequences (more than 32 entries): one stable sort of entries and values together
  local long = (T.randn(3, 90, { dtype = "float64" }) * 4):floor():sort(2)
  local lv = (T.randn(3, 70, { dtype = "float64" }) * 5):floor()
  lv[2][3], lv[1][1] = 0 / 0, long[1][7]:item()
  case("searchsorted_long", function() return T.searchsorted(long[2], lv) end, "torch.searchsorted(s[1], v) + 1", { s = long, v = lv })
  case("searchsorted_long_right", function() return T.searchsorted(long[2], lv, { right = true }) end,
    "torch.searchsorted(s[1], v, right=True) + 1", { s = long, v = lv })
  case("searchsorted_long_nd", function() return T.searchsorted(long, lv, { right = true }) end,
    "torch.searchsorted(s, v, right=True) + 1", { s = long, v = lv })
  case("bucketize_long", function() return T.bucketize(lv, long[3]) end, "torch.bucketize(v, s[2]) + 1", { s = long, v = lv })
  case("searchsorted_nan", function() return T.searchsorted(sorted, lv[2]) end, "torch.searchsorted(s, v[1]) + 1", { s = sorted, v = lv })
  local h = rnd({ 200 }, "float32")
  case("histc", function() return T.histc(h, 10) end, "torch.histc(h, 10)", { h = h })
  case("histc_range", function() return h:histc(7, -1, 1) end, "h.histc(7, -1, 1)", { h = h })
  -- (bin counts whose bins + 1 is a multiple of 8 or 16 are left out: torch 1.13's CPU kernel
  -- takes its top edge from an AVX2 linspace that misses max there and drops the max value)
  for _, dt in ipairs({ "float32", "float64" }) do
    local hs = rnd({ 16, 40 }, dt)
    for _, bins in ipairs({ 3, 6, 100 }) do
      case(("histc_rows_%s_%d"):format(dt, bins), function()
        local r = {}
        for i = 1, hs:size(1) do r[i] = T.histc(hs[i], bins) end
        return T.stack(r)
      end, ("torch.stack([torch.histc(r, %d) for r in h])"):format(bins), { h = hs })
    end
  end
  case("quantile", function() return x:quantile(0.3) end, "x.quantile(0.3)", { x = x })
  case("quantile_dim", function() return T.quantile(x, T.tensor({ 0.25, 0.5, 1 }, { dtype = "float64" }), 2, true) end,
    "torch.quantile(x, torch.tensor([0.25, 0.5, 1], dtype=torch.float64), 1, True)", { x = x })
  case("quantile_3d", function() return T.quantile(x:view(3, 5, 1), 0.7, 2) end, "torch.quantile(x.view(3, 5, 1), 0.7, 1)", { x = x })
  case("quantile_nan", function() return T.quantile(xn, 0.5, 2) end, "torch.quantile(x, 0.5, 1)", { x = xn })
  local qs = T.tensor({ 0, 0.1, 0.25, 0.5, 0.7, 0.9, 1 }, { dtype = "float64" })
  for _, mode in ipairs({ "linear", "lower", "higher", "midpoint", "nearest" }) do
    case("quantile_" .. mode, function() return T.quantile(x, qs, 2, false, { interpolation = mode }) end,
      ("torch.quantile(x, q, 1, False, interpolation='%s')"):format(mode), { x = x, q = qs })
    local x32 = T.arange(1, 5, { dtype = "float32" })
    case("quantile_f32_" .. mode, function() return x32:quantile(qs:float(), { interpolation = mode }) end,
      ("x.quantile(q, interpolation='%s')"):format(mode), { x = x32, q = qs:float() })
    case("quantile_nan_" .. mode, function() return T.quantile(xn, 0.5, 2, true, { interpolation = mode }) end,
      ("torch.quantile(x, 0.5, 1, True, interpolation='%s')"):format(mode), { x = xn })
  end
  local xm = T.tensor({ { 1, 0 / 0, 3, 2 }, { 0 / 0, 0 / 0, 0 / 0, 0 / 0 }, { 5, 4, 0 / 0, 0 / 0 } }, { dtype = "float64" })
  case("nanmedian", function() return xm:nanmedian() end, "x.nanmedian()", { x = xm })
  case("nanmedian_dim", function() return (T.nanmedian(xm, 2, true)) end, "torch.nanmedian(x, 1, True)[0]", { x = xm })
  case("nanmedian_dim_idx", function() return select(2, xm:narrow(1, 3, 1):nanmedian(2)) end,
    "x[2:].nanmedian(1)[1] + 1", { x = xm })
  case("nanmedian_int", function() return xi:nanmedian(2) end, "x.nanmedian(1)[0]", { x = xi })
  case("nanquantile", function() return T.nanquantile(xm, T.tensor({ 0.25, 0.5, 1 }, { dtype = "float64" }), 2) end,
    "torch.nanquantile(x, torch.tensor([0.25, 0.5, 1], dtype=torch.float64), 1)", { x = xm })
  case("nanquantile_all", function() return xm:nanquantile(0.3, { interpolation = "nearest" }) end,
    "x.nanquantile(0.3, interpolation='nearest')", { x = xm })
  case("nanquantile_keepdim", function() return xm:nanquantile(0.7, 1, true, { interpolation = "midpoint" }) end,
    "x.nanquantile(0.7, 0, True, interpolation='midpoint')", { x = xm })
  case("nanquantile_dense", function() return T.nanquantile(x, 0.3, 2) end, "torch.quantile(x, 0.3, 1)", { x = x })
  case("cumprod_dtype", function() return T.cumprod(xi, 2, { dtype = "float64" }) end, "torch.cumprod(x, 1, dtype=torch.float64)", { x = xi })
  case("cumprod_dtype_int32", function() return xi:cumprod(1, { dtype = "int32" }) end, "x.cumprod(0, dtype=torch.int32)", { x = xi })
  case("median_int64", function() return xi:median() end, "x.median()", { x = xi })
  case("median_int32", function() return xi:int():median() end, "x.int().median()", { x = xi })
  case("median_empty", function() return T.zeros(0):median() end, "torch.zeros(0).median()", {})
  local reps = L({ 2, 0, 1, 3 })
  case("repeat_interleave_repeats", function() return T.repeat_interleave(reps) end, "torch.repeat_interleave(r) + 1", { r = reps })
end

refs:check("indexing and data ops vs PyTorch")

describe("random data ops", function()
  it("bernoulli and normal draw with the asked parameters and shapes", function()
    local b = T.bernoulli(T.full({ 4000 }, 0.25, { dtype = "float64" }))
    expect.eq(b.dtype, "float64")
    expect.truthy(math.abs(b:mean():item() - 0.25) < 0.05, "bernoulli's mean near p")
    local n = T.normal(T.full({ 4000 }, 3, { dtype = "float32" }), 2)
    expect.truthy(math.abs(n:mean():item() - 3) < 0.2 and math.abs(n:std():item() - 2) < 0.2, "normal's moments")
    expect.eq(T.normal(0, 1, { 2, 3 }).shape, { 2, 3 })
    expect.errors(function() local _ = T.bernoulli(T.full({ 2 }, 1.5)) end, "bernoulli: ", "%[0, 1%]")
    expect.errors(function() local _ = T.normal(T.zeros(2, { dtype = "int64" }), 1) end, "normal: ", "floating")
  end)
  it("index-valued results are 1-based, as API.md section 10 states", function()
    local x = T.tensor({ 3, 1, 4, 1, 5 }, { dtype = "float32" })
    expect.eq({ x:argmax():item(), x:argmin():item(), select(2, x:max(1)):item() }, { 5, 2, 5 })
    expect.eq(T.nonzero(x:gt(3)):view(-1):totable(), { 3, 5 })
    expect.eq(T.bucketize(T.tensor({ 0, 3, 6 }), T.tensor({ 1, 3, 5 })):totable(), { 1, 2, 4 })
    expect.eq(T.searchsorted(T.tensor({ 1, 3, 5 }), T.tensor({ 0, 3, 6 }), { right = true }):totable(), { 1, 3, 4 })
    expect.eq({ select(2, x:mode()):item(), select(2, x:kthvalue(1)):item() }, { 4, 2 })
  end)
  it("randperm is a permutation of 1..n; the *_like ops take x's shape, dtype and device", function()
    local p = T.randperm(50)
    expect.eq(p.dtype, "int64")
    expect.eq(p:sort(1):totable(), T.arange(1, 51):totable())
    -- a dtype must hold every value 1..n exactly: a float16 permutation of 2049 would repeat 2048
    expect.eq(T.randperm(2048, { dtype = "float16" }):sort(1):float():totable(), T.arange(1, 2049):float():totable())
    expect.errors(function() T.randperm(2049, { dtype = "float16" }) end, "randperm", "greater than 2048 for float16", "2049")
    expect.errors(function() T.randperm(300, { dtype = "uint8" }) end, "randperm", "greater than 255 for uint8")
    expect.errors(function() T.randperm(2, { dtype = "bool" }) end, "randperm", "numeric dtype, got bool")
    local x = T.zeros(3, 2, { dtype = "float64" })
    expect.eq(T.rand_like(x).shape, { 3, 2 })
    expect.eq(T.randn_like(x).dtype, "float64")
    local r = T.randint_like(x, 3, 6)
    expect.truthy(r:ge(3):all():item() and r:lt(6):all():item(), "randint_like within [3, 6)")
    expect.eq(T.randint_like(x, 4, { dtype = "int64" }).dtype, "int64")
  end)
end)

describe("_value_counts (unique's counting of integers)", function()
  -- the counts of lo..hi (or none) and the range {lo, hi}, on the CPU or a CUDA device
  local function check(values, dt, want_counts, want_range, dev)
    local x = T.tensor(values, { dtype = dt })
    x = dev and x:to(dev) or x
    local counts, range = T._value_counts(x)
    expect.eq({ range.device, range.dtype, range:totable() }, { "cpu", "int64", want_range }, dt)
    expect.eq({ counts.device, counts.dtype, counts:cpu():totable() }, { x.device, "int64", want_counts }, dt)
  end
  local function cases(dev)
    for _, dt in ipairs({ "int64", "int32" }) do
      check({ 3, 1, 3, 2 }, dt, { 1, 1, 2 }, { 1, 3 }, dev)       -- from 1: one pass
      check({ 4, 5, 4, 4 }, dt, { 3, 1 }, { 4, 5 }, dev)
      check({ 5, 5, 6 }, dt, {}, { 5, 6 }, dev)                   -- hi >= 2 numel: none
      check({ 3, 1, 3, 7 }, dt, {}, { 1, 7 }, dev)                -- wider than its number: none
      check({ -3, 1, -3, 0, -1 }, dt, {}, { -3, 1 }, dev)         -- negative: none (a slot each)
      check({ 0 }, dt, { 1 }, { 0, 0 }, dev)
      check({}, dt, {}, { 0, -1 }, dev)
    end
    -- values past the first pass's 4096 bins (a second pass); their counts against bincount's
    local x = T.randint(4000, 9000, { 6000 })
    local counts, range = T._value_counts(dev and x:to(dev) or x)
    local lo, hi = unpack(range:totable())
    expect.eq({ lo, hi }, { x:min():item(), x:max():item() })
    expect.eq(counts:cpu():totable(), T.bincount(x):narrow(1, lo + 1, hi - lo + 1):totable())
  end

  it("gives the range, and the counts of lo..hi when 0 <= lo and hi - lo < numel", function()
    cases(nil)
    expect.errors(function() T._value_counts(T.zeros(2, 2, { dtype = "int64" })) end,
      "_value_counts: expected a 1%-D int32 or int64 tensor, got int64 tensor of shape {2,2}")
    expect.errors(function() T._value_counts(T.zeros(3)) end, "_value_counts: expected a 1%-D int32 or int64 tensor")
  end)

  it("gives the same on a CUDA device, the counts there", function()
    expect.need_gpu()
    cases("cuda")
  end)
end)

describe("_unique_counted (unique of integers by counting)", function()
  -- the values that occur and their counts (or two empty tensors), on the CPU or a CUDA device
  local function check(values, dt, want_values, want_counts, dev)
    local x = T.tensor(values, { dtype = dt })
    x = dev and x:to(dev) or x
    local v, c = T._unique_counted(x)
    expect.eq({ v.device, v.dtype, v:cpu():totable() }, { x.device, dt, want_values }, dt)
    expect.eq({ c.device, c.dtype, c:cpu():totable() }, { x.device, "int64", want_counts }, dt)
  end
  local function cases(dev)
    for _, dt in ipairs({ "int64", "int32" }) do
      check({ 3, 1, 3, 2 }, dt, { 1, 2, 3 }, { 1, 1, 2 }, dev)
      check({ 0, 5, 4, 4, 0, 0 }, dt, { 0, 4, 5 }, { 3, 2, 1 }, dev)
      check({ 5, 5, 6 }, dt, {}, {}, dev)                         -- hi >= 2 numel: not counted
      check({ 3, 1, 3, 7 }, dt, {}, {}, dev)                      -- wider than its number
      check({ -3, 1, -3, 0, -1 }, dt, {}, {}, dev)                -- negative
      check({ 0 }, dt, { 0 }, { 1 }, dev)
      check({}, dt, {}, {}, dev)
    end
    -- below the first pass's 4096 bins (compacted there on CUDA) and past them (a second pass)
    for _, range in ipairs({ { 0, 3000 }, { 4000, 9000 } }) do
      local x = T.randint(range[1], range[2], { 6000 })
      local v, c = T._unique_counted(dev and x:to(dev) or x)
      local all = T.bincount(x)
      local at = all:gt(0)
      expect.eq(v:cpu():totable(), T.nonzero(at):view(-1):sub(1):totable(), range[1])
      expect.eq(c:cpu():totable(), all:masked_select(at):totable(), range[1])
    end
  end

  it("gives the values in order and their counts when 0 <= lo and hi - lo < numel", function()
    cases(nil)
    expect.errors(function() T._unique_counted(T.zeros(3)) end,
      "_unique_counted: expected a 1%-D int32 or int64 tensor")
  end)

  it("gives the same on a CUDA device, the results there", function()
    expect.need_gpu()
    cases("cuda")
  end)
end)

describe("misuse", function()
  local x = T.arange(12):view(3, 4)
  it("linear algebra and order statistics check their operands as torch", function()
    expect.errors(function() return T.addmm(T.zeros(3, 2, 4), T.ones(2, 3), T.ones(3, 4)) end, "addmm: ",
      "input of shape {3,2,4} cannot be broadcast to the product's shape {2,4}")
    expect.errors(function() return T.addmm(T.zeros(3, 4), T.ones(2, 3), T.ones(3, 4), { beta = 0 }) end, "addmm: ", "{3,4}")
    expect.errors(function() return T.addmv(T.zeros(3, 2), T.ones(2, 3), T.ones(3)) end, "addmv: ", "{3,2}")
    expect.errors(function() return T.addmm(T.zeros(2, 4, { dtype = "float64" }), T.ones(2, 3), T.ones(3, 4)) end,
      "addmm: ", "input expected the product's dtype float32", "float64")
    expect.eq(T.addmm(T.ones(4), T.ones(2, 3), T.ones(3, 4)):totable(), { { 4, 4, 4, 4 }, { 4, 4, 4, 4 } })
    local i32 = T.tensor({ 1, 2 }, { dtype = "int32" })
    expect.eq(T.dot(i32, i32).dtype, "int32")
    expect.errors(function() return T.dot(T.tensor({ true }), T.tensor({ true })) end, "dot: ", "bool")
    expect.errors(function() return T.tensor({ 1.5, 2.5, 3.5 }):kthvalue(1.5) end, "kthvalue: ", "k expected 1..3", "1.5")
    expect.errors(function() return T.zeros(4, 0):quantile(0.5, 1) end, "quantile: ", "input tensor must be non%-empty")
    expect.errors(function() return T.ones(3):quantile(1.5) end, "quantile: ", "range %[0, 1%]")
    local f = T.compile(function(y) return y:quantile(0.5, 2) end, { fullgraph = true })  -- (no item() for a number q)
    for _ = 1, 3 do expect.eq(f(T.arange(8):float():view(2, 4)):totable(), { 1.5, 5.5 }) end
  end)
  it("out-of-range indices raise naming the op, before anything is written", function()
    expect.errors(function() return x[L({ 4 })] end, "index_select: ", "index 4", "1..3")
    expect.errors(function() return x:index({ L({ 1 }), L({ 5 }) }) end, "index: ", "index 5", "dim 2")
    local y = x:clone()
    expect.errors(function() y:index_put_({ L({ 1, 9 }) }, T.tensor(0)) end, "index_put_: ", "index 9")
    expect.eq(y:totable(), x:totable())
    expect.errors(function() y:scatter_(1, L({ { 0 } }), 1) end, "scatter_: ", "index 0")
    expect.errors(function() y:scatter(1, L({ { 5 } }), y) end, "scatter: ", "index 5")
    expect.errors(function() y:index_copy(1, L({ 0 }), y:narrow(1, 1, 1)) end, "index_copy: ", "index 0", "1..3")
    expect.errors(function() y:index_copy_(2, L({ 5 }), y:narrow(2, 1, 1)) end, "index_copy_: ", "index 5", "1..4")
    expect.errors(function() y:index_fill(1, L({ 4 }), 1) end, "index_fill: ", "index 4")
    expect.errors(function() y:index_fill_(1, L({ -1 }), 1) end, "index_fill_: ", "index %-1")
    expect.eq(y:totable(), x:totable())
    local err = expect.errors(function() y:index_fill_(1, L({ 4 }), 1) end)
    expect.truthy(err:find("test_selection.lua:%d+: index_fill_:"), err)
    expect.errors(function() T.nonzero(x):index({ L({ 1 }), L({ -1 }) }) end, "index: ", "index %-1")
  end)
  it("searchsorted refuses leading dims that differ (as PyTorch)", function()
    expect.errors(function() return T.searchsorted(T.ones(2, 3), T.ones(1, 2)) end, "searchsorted: ", "{2,3} and {1,2}")
    expect.errors(function() return T.searchsorted(T.ones(2, 3), T.ones(2)) end, "searchsorted: ", "leading dims")
  end)
  it("masks of the wrong shape and wrong index dtypes give PyTorch's errors", function()
    expect.errors(function() return x[T.tensor({ true, false })] end, "index: ", "shape of the mask {2}", "{3,4}")
    -- of x's rank but another shape: no broadcast (as torch), eager and compiled
    local c = T.arange(3):float():view(3, 1)
    local m32 = T.tensor({ { true, true }, { false, true }, { true, false } })
    expect.errors(function() return c[m32] end, "index: ", "shape of the mask {3,2}", "{3,1}")
    expect.errors(function() return x[T.tensor({ { true, false, true, true } })] end, "index: ", "shape of the mask {1,4}", "{3,4}")
    local f = T.compile(function(a, m) return a[m] end)
    expect.errors(function() return f(c, m32) end, "index: ", "shape of the mask {3,2}", "{3,1}")
    expect.eq(f(c, T.tensor({ { true }, { false }, { true } })):totable(), { 0, 2 })
    expect.errors(function() return x:masked_select(T.ones(3, 4)) end, "masked_select: ", "bool", "float32")
    expect.errors(function() return x:masked_select(T.ones(2, 4, { dtype = "bool" })) end, "masked_select: ")
    expect.errors(function() return x[T.ones(2)] end, "index: ", "must be int64, int32 or bool", "float32")
    expect.errors(function() return T._ops.index.fn(x, { T.ones(2, { dtype = "bool" }) }) end, "index: ", "boolean masks go through")
    expect.errors(function() return x:index({ 1, 1, 1 }) end, "index: ", "too many indices")
    expect.errors(function() x[L({ 1 })] = T.ones(3, { dtype = "int64" }) end, "index_put_: ", "shape mismatch", "{3}", "{1,4}")
    expect.errors(function() x:index_put_({ L({ 1 }) }, T.ones(4)) end, "index_put_: ", "dtypes match")
    expect.errors(function() x[L({ 1 })] = T.ones(4) end, "index_put_: ", "dtypes match")  -- as torch's setitem
    expect.errors(function() return x.shap end, "tensor: ", 'no field or method "shap"')
    expect.errors(function() x.shape = 1 end, "tensor: ", "cannot set field 'shape'")
    expect.errors(function() local _ = x:scatter_reduce(1, L({ { 1 } }), x, "max") end, "scatter_reduce: ", "\"amax\"")
    expect.errors(function() local _ = x:scatter_reduce(1, L({ { 4 } }), x, "sum") end, "scatter_reduce: ", "index 4")
    expect.errors(function() local _ = T.bincount(L({ -1, 2 })) end, "bincount: ", "non%-negative")
    expect.errors(function() local _ = T.bincount(L({ 1, 2 }), T.ones(3)) end, "bincount: ", "same length", "{3}")
    expect.errors(function() local _ = T.bincount(L({ { 1 } })) end, "bincount: ", "1-d", "{1,1}")
    expect.errors(function() local _ = T.bincount(L({ 1 }), nil, -1) end, "bincount: ", "minlength", "-1")
    expect.errors(function() local _ = T.one_hot(L({ 0, 2 })) end, "one_hot: ", "1 or more")
    expect.errors(function() local _ = T.one_hot(L({ 1, 2 }), 2.5) end, "one_hot: ", "num_classes expected a non%-negative integer or %-1, got 2.5")
    expect.errors(function() local _ = T.one_hot(L({ 1, 2 }), { num_classes = 3 }) end, "one_hot: ", "got table")
    expect.errors(function() local _ = x:repeat_interleave(L({ 1, -1, 1 }), 1) end, "repeat_interleave: ", "negative")
    expect.errors(function() local _ = x["repeat"](x, 2) end, "repeat: ", "can not be smaller")
  end)
  it("histc bins a value on an edge as PyTorch 2 (floor((v - min) * bins / (max - min)))", function()
    -- (torch 1.13's CPU kernel divides first: {2, 1, 1}; 2.x's kernels and its CUDA one: {1, 1, 2})
    expect.eq(T.histc(T.tensor({ 0, 0.1, 0.2, 0.3 }), 3, 0, 0.3):totable(), { 1, 1, 2 })
    expect.eq(T.histc(T.arange(32):float(), 31):sum():item(), 32)  -- (the max counted, whatever the bins)
  end)
  it("histc refuses a range that is not finite, from the data or given (as torch)", function()
    expect.errors(function() local _ = T.histc(T.tensor({ 1, math.huge, 2 }), 2) end, "histc: ", "range of %[1, inf%] is not finite")
    expect.errors(function() local _ = T.histc(T.tensor({ 1, 0 / 0, 2 }), 2) end, "histc: ", "range of %[nan, nan%] is not finite")
    expect.errors(function() local _ = T.histc(T.tensor({ 1, 2 }):float(), 2, 0, math.huge) end, "histc: ", "range of %[0, inf%] is not finite")
    expect.errors(function() local _ = T.histc(T.tensor({ 1, 2 }):float(), 2, 0 / 0, 1) end, "histc: ", "range of %[nan, 1%] is not finite")
    expect.errors(function() local _ = T.histc(T.tensor({ 1, 2 }, { dtype = "float64" }), 2, -math.huge, 1) end, "histc: ", "%[%-inf, 1%]")
    expect.errors(function() local _ = T.histc(T.tensor({ 1, 2 }):float(), 2, 3, 1) end, "histc: ", "max must be larger than min")
  end)
  it("data ops refuse what PyTorch refuses, naming the op", function()
    expect.errors(function() local _ = T.arange(3):flip(1, 1) end, "flip: ", "dim 1 appears multiple times")
    expect.errors(function() local _ = x:flip({ 2, -1 }) end, "flip: ", "dim 2 appears multiple times")
    expect.errors(function() local _ = T.tensor({ true, false }):median() end, "median: ", "bool")
    expect.errors(function() local _ = T.tensor({ true, false }):median(1) end, "median: ", "bool")
    expect.errors(function() local _ = T.zeros(0, { dtype = "int64" }):median() end, "median: ", "empty int64")
    expect.errors(function() local _ = T.F.one_hot(T.empty(0, { dtype = "int64" })) end, "one_hot: ",
      "Can not infer total number of classes from empty tensor")
    expect.eq(T.F.one_hot(T.empty(0, { dtype = "int64" }), 3).shape:equals({ 0, 3 }), true)
    expect.errors(function() local _ = T.repeat_interleave(L({ { 1 } })) end, "repeat_interleave: ", "1-D")
    expect.errors(function() local _ = T.quantile(T.ones(3), 0.5, { interpolation = "foo" }) end, "quantile: ",
      "interpolation must be one of linear, lower, higher, midpoint or nearest", "foo")
    expect.errors(function() local _ = T.quantile(T.ones(3), 0.5, 1, false, { interp = "lower" }) end, "quantile: ", "unknown option 'interp'")
    expect.errors(function() local _ = T.cumprod(T.ones(3), 1, { dtyp = "float64" }) end, "cumprod: ", "unknown option 'dtyp'")
  end)
  it("writes into an expanded tensor name the op called", function()
    local e = T.ones(4):expand(3, 4)
    expect.errors(function() e:index_fill_(1, L({ 1 }), 5) end, "index_fill_: ", "expanded tensor")
    expect.errors(function() e:scatter_(1, L({ { 1 } }), 5) end, "scatter_: ", "expanded tensor")
    expect.errors(function() e:index_copy_(1, L({ 1 }), T.ones(1, 4)) end, "index_copy_: ", "expanded tensor")
  end)
end)

describe("compiled", function()
  it("data-dependent sizes are graph breaks; compiled == eager", function()
    local f = T.compile(function(x) local y = x * 2; local s = y[y:gt(0)]; return s:sum() + y:index({ T.all, L({ 2, 1 }) }):sum() end)
    for k = 1, 4 do
      local x = T.randn(3, 4 + k % 2)
      local e = (x * 2)[(x * 2):gt(0)]:sum() + (x * 2):index({ T.all, L({ 2, 1 }) }):sum()
      expect.close(f(x), e)
    end
    local full = T.compile(function(x) return T.nonzero(x) end, { fullgraph = true })
    expect.errors(function() full(T.ones(2)) end, "graph break", "nonzero", "dynamic = true")
  end)

  it("x[mask] = a number or a 0-d tensor is a masked fill: no break, a gradient for the value", function()
    local function f(x, v)
      local y = x:clone()
      y[y:lt(0)] = 0
      y[x:select(2, 1):gt(0)] = v  -- (a mask over the leading dim: whole rows)
      return y
    end
    local full = T.compile(f, { fullgraph = true })
    for _ = 1, 3 do
      local x = T.randn(5, 3)
      local v = T.tensor(2.5)
      expect.close(full(x, v), f(x, v), 0, 0)
    end
    local v = T.tensor(2.5, { dtype = "float64" }):requires_grad_()
    local x = T.tensor({ { 1, -1 }, { -2, 3 } }, { dtype = "float64" })
    local y = f(x, v)
    expect.eq(y:totable(), { { 2.5, 2.5 }, { 0, 3 } })
    y:sum():backward()
    expect.eq(v.grad:item(), 2)
    -- a 0-d value of another dtype is cast, as torch's masked fill (an index key raises, as torch)
    local z = T.zeros(3, { dtype = "int64" })
    z[z:ge(0)] = T.tensor(2.5)
    expect.eq(z:totable(), { 2, 2, 2 })
    local w = T.zeros(3)
    v = T.tensor(2.5, { dtype = "float64" }):requires_grad_()
    w[w:ge(0)] = v
    expect.eq({ w.dtype, w:totable() }, { "float32", { 2.5, 2.5, 2.5 } })
    w:sum():backward()
    expect.eq(v.grad:item(), 3)
    expect.errors(function() w[T.tensor({ 1, 3 })] = T.tensor(2) end, "index_put_", "dtypes match")
  end)

  -- as torch.compile's unbacked symbols: the ops before run, the op runs, and capture goes on
  local function data_ops(x)
    local y = x:abs()
    local u, inv, counts = T.unique(y, { return_inverse = true, return_counts = true })
    local rows, cols = T.where(y:gt(2))
    local sel = y[y:lt(2)]
    return u * 2, inv, counts, rows + cols, sel:sum() + sel:numel(), T.bincount(y:flatten()):cumsum(1), sel:float():mean()
  end
  it("with dynamic = true they are sync points: unbacked sizes, no break, no recompile", function()
    local f = T.compile(data_ops, { dynamic = true, fullgraph = true })
    T.compiler.reset()
    -- counts that change every call, down to none (all values >= 2: sel is empty)
    for k, n in ipairs { 4, 7, 3, 9, 5, 6 } do
      local x = k == 4 and T.randint(2, 6, { 3, n }) or T.randint(-5, 6, { 3, n })
      local got, want = { f(x) }, { data_ops(x) }
      expect.eq(#got, #want)
      for i = 1, #want do
        expect.eq(got[i].dtype, want[i].dtype)
        expect.close(got[i], want[i], 0, 0, "result " .. i)
      end
    end
    T.compiler.wait(f)
    local s = T.compiler.stats()
    expect.eq(s.graph_breaks, 0)
    expect.eq(s.recompiles, 0)
    local e = T.explain(f, T.randint(-5, 6, { 3, 4 }))
    expect.eq(e.graph_break_count, 0)
    expect.truthy(#e.sync_points >= 4, e.summary)
    expect.truthy(e.sync_points[1].where:find("test_selection.lua", 1, true), e.summary)
    local unbacked = {}
    for _, d in ipairs(e.symbolic_dims) do if d.symbol:match("^u%d+$") then unbacked[#unbacked + 1] = d end end
    expect.truthy(#unbacked >= 4 and unbacked[1].dim == 1, e.summary)
    expect.truthy(e.summary:find("sync 1: ", 1, true) and e.summary:find(" u0 = input", 1, true), e.summary)
  end)

  it("library functions that read values name themselves at the break; one_hot(t, n) reads none", function()
    local reads = {
      { function(x, r) return T.repeat_interleave(x, r) end, "repeat_interleave: the result size depends on the repeats' values" },
      { function(x) return T.histc(x:float(), 4) end, "histc: the range comes from the values" },
      { function(x) return T.F.one_hot(x) end, "one_hot: the number of classes comes from the values" },
    }
    for _, r in ipairs(reads) do
      local f = T.compile(r[1], { dynamic = true, fullgraph = true })
      expect.errors(function() f(T.tensor({ 1, 2, 3 }), T.tensor({ 1, 0, 2 })) end, "fullgraph = true", r[2])
    end
    local oh = T.compile(function(x) return T.F.one_hot(x, 4) * 2 end, { fullgraph = true })
    for _ = 1, 3 do expect.eq(oh(T.tensor({ 1, 4, 2 })):totable(), { { 2, 0, 0, 0 }, { 0, 0, 0, 2 }, { 0, 2, 0, 0 } }) end
    expect.errors(function() oh(T.tensor({ 5, 1 })) end, "index 5 is out of range", "1..4")
    expect.errors(function() oh(T.tensor({ 0, 1 })) end, "index 0 is out of range")
  end)

  it("a call with a sync point never replays without Lua (reduce-overhead): counts stay live", function()
    local g = function(x, m) local n = T.masked_select(x, m):numel(); return T.zeros(n), x * n end
    local f = T.compile(g, { mode = "reduce-overhead", dynamic = true })
    for _, v in ipairs { { 1, 1, 1, 0 }, { 1, 1, 1, 0 }, { 1, 1, 1, 0 }, { 1, 0, 0, 0 }, { 0, 0, 0, 0 }, { 1, 1, 0, 0 } } do
      local x, m = T.ones(4), T.tensor(v):bool()
      local a, b = f(x, m)
      local ea, eb = g(x, m)
      expect.eq({ a:numel(), b:totable() }, { ea:numel(), eb:totable() })
      T.compiler.wait(f)
    end
    local e = T.explain(T.compile(g, { dynamic = true }), T.ones(4), T.tensor({ 1, 0, 1, 0 }):bool())
    expect.eq(#e.sync_points, 1)  -- (the function's first op: no graph ends there, it is listed)
  end)

  it("a backward() through a sync point differentiates the segments as eager does", function()
    local lin = T.nn.Linear(4, 3)
    local function step(x)
      local y = lin(x)
      local sel = y[y:gt(0)]
      local loss = (sel * sel):sum() + y:mean()
      loss:backward()
      return loss
    end
    local f = T.compile(step, { dynamic = true })
    for n = 2, 6 do
      local x = T.randn(n, 4, { dtype = "float64" })
      lin:double():zero_grad()
      local got = f(x)
      local gw, gb = lin.weight.grad:clone(), lin.bias.grad:clone()
      lin:zero_grad()
      expect.close(got, step(x))
      expect.close(gw, lin.weight.grad)
      expect.close(gb, lin.bias.grad)
    end
  end)
end)

describe("CUDA", function()
  it("the selections, index_put_ and scatter_reduce on a CUDA device equal the CPU's", function()
    if not T.cuda.is_available() then expect.skip("no CUDA device") end
    local x = T.randn(5, 6)
    local m, i = x:gt(0), L({ 3, 1, 5 })
    local g = x:cuda()
    expect.close(g[m:cuda()]:cpu(), x[m])
    expect.eq(T.nonzero(m:cuda()):cpu():totable(), T.nonzero(m):totable())
    expect.close(g:index({ T.all, i:cuda() }):cpu(), x:index({ T.all, i }))
    expect.close(g:index({ i:cuda(), L({ 2, 2, 6 }):cuda() }):cpu(), x:index({ i, L({ 2, 2, 6 }) }))
    local y, h = x:clone(), g:clone()
    y:index_put_({ i }, T.ones(6), true)
    h:index_put_({ i:cuda() }, T.ones(6):cuda(), true)
    expect.close(h:cpu(), y)
    local si = L({ { 1, 2, 1 }, { 5, 5, 5 } })
    expect.close(g:scatter_reduce(1, si:cuda(), g, "amax"):cpu(), x:scatter_reduce(1, si, x, "amax"))
    expect.close(T.unique(i:cuda()):cpu(), T.unique(i))
  end)
end)
