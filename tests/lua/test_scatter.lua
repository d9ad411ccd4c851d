-- Scatter-add: index_add / index_add_ (rows of a source added at the positions a 1-D index names
-- along a dim, times alpha) and scatter_add / scatter_add_ (each source element added at the
-- position its index element names), PyTorch's semantics with 1-based index values; embedding's
-- padding_idx (its backward is an index_add). Values against PyTorch 1.13 (one python run).
local T = require "crescent"
local R = require "torch_ref"
local Samples = require "samples"

expect.covers("index_add", "index_add_", "scatter_add", "scatter_add_")

T.manual_seed(5)
math.randomseed(5)

local DTYPES, rnd, idx = Samples.DTYPES, Samples.rnd, Samples.idx

local L = R.list()
local function case(key, fn, expr, inputs) L:case(key, fn, expr, inputs) end

-- ---- index_add ---------------------------------------------------------------------------------
for _, dt in ipairs(DTYPES) do
  for i, s in ipairs({ { 5 }, { 4, 3 }, { 3, 4, 2 } }) do
    local d = math.random(1, #s)
    local k = math.random(0, 6)
    local ss = { unpack(s) }
    ss[d] = k
    local x, src, ix = rnd(s, dt), rnd(ss, dt), idx(s[d], { k }, i == 2 and "int32" or "int64")
    case(string.format("iadd_%s_%d", dt, i), function() return x:index_add(d, ix, src) end,
      string.format("x.index_add(%d, i.long() - 1, s)", d - 1), { x = x, s = src, i = ix })
  end
end
do
  local x, src, ix = rnd({ 4, 6 }, "float64"), rnd({ 5, 4 }, "float64"), idx(6, { 5 })
  case("iadd_alpha", function() return x:index_add(2, ix, src:t(), { alpha = -2.5 }) end,
    "x.index_add(1, i - 1, s.t(), alpha=-2.5)", { x = x, s = src, i = ix })
  case("iadd_nc_self", function() return x:t():index_add(1, ix, src) end, "x.t().index_add(0, i - 1, s)", { x = x, s = src, i = ix })
  local xi, si = rnd({ 3, 4 }, "int64"), rnd({ 3, 2 }, "int64")
  local ij = idx(4, { 2 })
  case("iadd_int_alpha", function() return xi:index_add(-1, ij, si, { alpha = 3 }) end,
    "x.index_add(1, i - 1, s, alpha=3)", { x = xi, s = si, i = ij })
  case("iadd_0d", function() return T.tensor(1.5):index_add(1, T.tensor({ 1 }), T.tensor(2.5)) end,
    "torch.tensor(1.5).index_add(0, torch.tensor([0]), torch.tensor(2.5))", {})
  case("iadd_empty", function() return x:index_add(1, T.empty(0, { dtype = "int64" }), T.empty(0, 6, { dtype = "float64" })) end,
    "x.index_add(0, torch.empty(0, dtype=torch.long), torch.empty(0, 6, dtype=torch.float64))", { x = x })
  -- a GPT-2-like embedding gradient: many repeated rows, threads over the features
  local big, bs, bi = T.zeros(50, 96), rnd({ 700, 96 }, "float32"), idx(50, { 700 })
  case("iadd_big", function() return big:index_add(1, bi, bs) end, "x.index_add(0, i - 1, s)", { x = big, s = bs, i = bi })
  local y, ys, yi = rnd({ 8, 30, 3 }, "float32"), rnd({ 8, 200, 3 }, "float32"), idx(30, { 200 })
  case("iadd_mid", function() return y:index_add(2, yi, ys) end, "x.index_add(1, i - 1, s)", { x = y, s = ys, i = yi })
end

-- ---- scatter_add -------------------------------------------------------------------------------
for _, dt in ipairs(DTYPES) do
  for i, s in ipairs({ { 6 }, { 4, 3 }, { 3, 4, 2 } }) do
    local d = math.random(1, #s)
    local is, ss = {}, {}
    for k = 1, #s do
      is[k] = k == d and math.random(0, 7) or math.random(1, s[k])
      ss[k] = is[k] + math.random(0, 1)
    end
    local x, src, ix = rnd(s, dt), rnd(ss, dt), idx(s[d], is, i == 1 and "int32" or "int64")
    case(string.format("sadd_%s_%d", dt, i), function() return x:scatter_add(d, ix, src) end,
      string.format("x.scatter_add(%d, i.long() - 1, s)", d - 1), { x = x, s = src, i = ix })
  end
end
do
  local x, src, ix = rnd({ 5, 4, 3 }, "float64"), rnd({ 3, 6, 5 }, "float64"), idx(5, { 3, 5, 4 })
  case("sadd_nc", function() return x:transpose(1, 3):scatter_add(3, ix:transpose(2, 3), src:transpose(2, 3)) end,
    "x.transpose(0, 2).scatter_add(2, i.transpose(1, 2) - 1, s.transpose(1, 2))", { x = x, s = src, i = ix })
  case("sadd_0d", function() return T.tensor(1.5):scatter_add(1, T.tensor(1), T.tensor(4.5)) end,
    "torch.tensor(1.5).scatter_add(0, torch.tensor(0), torch.tensor(4.5))", {})
  local big, bs, bi = rnd({ 64, 300 }, "float32"), rnd({ 64, 500 }, "float32"), idx(300, { 64, 500 })
  case("sadd_big_last", function() return big:scatter_add(2, bi, bs) end, "x.scatter_add(1, i - 1, s)", { x = big, s = bs, i = bi })
  local cs, ci = rnd({ 400, 300 }, "float32"), idx(64, { 400, 300 })
  case("sadd_big_first", function() return big:scatter_add(1, ci, cs) end, "x.scatter_add(0, i - 1, s)", { x = big, s = cs, i = ci })
end

-- ---- in place ------------------------------------------------------------------------------------
do
  local x, src, ix = rnd({ 4, 3 }, "float32"), rnd({ 5, 3 }, "float32"), idx(4, { 5 })
  case("iadd_inplace", function() local y = x:clone(); y:index_add_(1, ix, src); return y end,
    "x.clone().index_add_(0, i - 1, s)", { x = x, s = src, i = ix })
  local gi = idx(4, { 2, 3 })
  case("sadd_inplace_view", function() local y = x:clone(); y:t():scatter_add_(2, gi:t(), src:narrow(1, 1, 2):t()); return y end,
    "(lambda y: (y.t().scatter_add_(1, i.t() - 1, s[:2].t()), y)[1])(x.clone())", { x = x, s = src, i = gi })
end

-- ---- embedding's padding_idx: forward unchanged, the padding row gets no gradient -------------------
do
  local w, g = rnd({ 6, 4 }, "float64"), rnd({ 2, 5, 4 }, "float64")
  local ix = T.tensor({ { 1, 3, 3, 6, 2 }, { 3, 3, 5, 1, 6 } })
  local function grad_of(opts)
    local wl = w:clone():requires_grad_()
    local y = T.embedding(ix, wl, opts)
    ;(y * g):sum():backward()
    return wl.grad, y
  end
  local pyg = "torch.autograd.grad((F.embedding(i - 1, w.requires_grad_(), padding_idx=%s) * g).sum(), w)[0]"
  case("emb_grad", function() return (grad_of()) end, pyg:format("None"), { i = ix, w = w, g = g })
  case("emb_grad_pad", function() return (grad_of({ padding_idx = 3 })) end, pyg:format("2"), { i = ix, w = w, g = g })
  case("emb_grad_pad_neg", function() return (grad_of({ padding_idx = -1 })) end, pyg:format("-1"), { i = ix, w = w, g = g })
  case("emb_pad_forward", function() return select(2, grad_of({ padding_idx = 3 })) end,
    "F.embedding(i - 1, w, padding_idx=2)", { i = ix, w = w })
end

L:check("scatter-add vs PyTorch")

describe("scatter-add semantics", function()
  it("adds repeated positions in index order, 1-based", function()
    local r = T.zeros(3):index_add(1, T.tensor({ 3, 1, 3 }), T.tensor({ 1, 2, 4 }, { dtype = "float32" }))
    expect.eq(r:totable(), { 2, 0, 5 })
    local s = T.zeros(2, 2):scatter_add(2, T.tensor({ { 2, 2 }, { 1, 2 } }), T.ones(2, 2))
    expect.eq(s:totable(), { { 0, 2 }, { 1, 1 } })
  end)
  it("results are new tensors; the in-place forms return self", function()
    local x = T.zeros(2)
    local y = x:index_add(1, T.tensor({ 1 }), T.ones(1))
    expect.eq(x:totable(), { 0, 0 })
    expect.truthy(x:index_add_(1, T.tensor({ 2 }), T.ones(1)) == x)
    expect.truthy(x:scatter_add_(1, T.tensor({ 1 }), T.ones(1)) == x)
    expect.eq(x:totable(), { 1, 1 })
    expect.eq(y:totable(), { 1, 0 })
    expect.truthy(T.index_add_ == nil and T.scatter_add_ == nil, "in-place forms are methods only")
  end)
  it("adds in index order whatever the threads (deterministic)", function()
    local src, ix = T.randn(600, 300), idx(7, { 600 })
    local a = T.zeros(7, 300):index_add(1, ix, src)
    local b = T.zeros(7, 300)
    for k = 1, 600 do b[ix[k]:item()]:add_(src[k]) end  -- one row at a time, in order
    expect.eq(a:eq(b):all():item(), true)
  end)
  it("adds a single long line over the threads: the same result on any number of them, the serial sum's up to rounding", function()
    local n0 = T.get_num_threads()
    local src, src2 = T.randn(200000), T.randn(200000, 2)
    local ix, big = T.randint(1, 1001, { 200000 }), T.randint(1, 150001, { 200000 })
    local runs = {}
    for _, n in ipairs({ 1, 2, 3, 4 }) do
      T.set_num_threads(n)
      runs[n] = { T.zeros(1000):index_add(1, ix, src), T.zeros(150000):scatter_add(1, big, src),
        T.zeros(1000, 2):index_add(1, ix, src2), T.zeros(1000, { dtype = "int64" }):index_add(1, ix, T.ones(200000, { dtype = "int64" })) }
    end
    T.set_num_threads(n0)
    for n = 2, 4 do
      for k, r in ipairs(runs[n]) do expect.eq(r:eq(runs[1][k]):all():item(), true, ("case %d, %d threads vs 1"):format(k, n)) end
    end
    local want = T.zeros(1000, { dtype = "float64" })  -- (the serial order, summed in float64)
    expect.close(runs[2][1]:double(), want:index_add(1, ix, src:double()), 1e-4, 1e-4)
    expect.eq(runs[2][4]:sum():item(), 200000)
  end)
  it("checks a long line's positions as it adds them: the first one out of range raises, self untouched", function()
    local src, ix = T.randn(200000), T.randint(1, 1001, { 200000 })
    local strided = T.randint(1, 1001, { 200000, 2 }):select(2, 1)  -- (an index read by its stride)
    for _, bad in ipairs({ { 150000, 0 }, { 7, 1001 }, { 199999, -3 } }) do
      local n = tostring(bad[2]):gsub("%-", "%%-")  -- (a pattern)
      local i = ix:clone()
      i[bad[1]] = bad[2]
      i[bad[1] + 1] = 5000  -- (a later bad one: not the one named)
      local x = T.randn(1000)
      local before = x:clone()
      expect.errors(function() x:index_add_(1, i, src) end,
        ("index_add_: index %s is out of range for dim 1 of size 1000"):format(n))
      expect.eq(x:eq(before):all():item(), true, "self untouched")
      local j = strided:clone()
      j[bad[1]] = bad[2]
      expect.errors(function() T.zeros(1000):index_add(1, j, src) end, ("index %s is out of range"):format(n))
    end
    local want = T.zeros(1000, { dtype = "float64" }):index_add(1, strided, src:double())
    expect.close(T.zeros(1000):index_add(1, strided, src):double(), want, 1e-4, 1e-4)
  end)
  it("adds a long line into a large target by buckets of rows: the serial loop's sums, bit for bit", function()
    -- (two equal columns take the loop over lines, one row after another in index order)
    local function twice(t) return t:view(-1, 1):expand(t:numel(), 2):contiguous() end
    local n0 = T.get_num_threads()
    for _, dt in ipairs({ "float32", "float16", "bfloat16", "float64", "int64", "int32" }) do
      local x, src = (T.randn(150000) * 8):to(dt), (T.randn(200000) * 8):to(dt)
      local ix = T.randint(1, 150001, { 200000 })
      local want = twice(x):scatter_add(1, twice(ix), twice(src)):select(2, 1)
      for _, n in ipairs({ 1, 3 }) do
        T.set_num_threads(n)
        expect.eq(x:scatter_add(1, ix, src):eq(want):all():item(), true, dt .. " scatter_add, threads " .. n)
        expect.eq(x:index_add(1, ix, src, { alpha = 3 }):eq(twice(x):index_add(1, ix, twice(src), { alpha = 3 }):select(2, 1)):all():item(),
          true, dt .. " index_add alpha 3, threads " .. n)
      end
      T.set_num_threads(n0)
    end
  end)
  it("checks the bucketed line's positions before it writes; strided operands and self", function()
    local src, ix = T.randn(200000), T.randint(1, 150001, { 200000 })
    for _, bad in ipairs({ { 1, 0 }, { 123456, 150001 }, { 200000, -2 } }) do
      local n = tostring(bad[2]):gsub("%-", "%%-")
      local i = ix:clone()
      i[bad[1]] = bad[2]
      local x = T.randn(150000)
      local before = x:clone()
      expect.errors(function() x:scatter_add_(1, i, src) end,
        ("scatter_add_: index %s is out of range for dim 1 of size 150000"):format(n))
      expect.eq(x:eq(before):all():item(), true, "self untouched")
      expect.errors(function() x:index_add(1, i, src) end, ("index %s is out of range"):format(n))
    end
    -- (strided index, source and self; a self of {n, 1}: the same line)
    local wide_i, wide_s = T.randint(1, 150001, { 200000, 3 }), T.randn(200000, 3)
    local i, s = wide_i:select(2, 2), wide_s:select(2, 3)
    local xs = T.randn(150000, 2):select(2, 2)
    local want = T.zeros(150000, { dtype = "float64" }):index_add(1, i, s:double()) + xs:double()
    expect.close(xs:index_add(1, i, s):double(), want, 1e-4, 1e-4)
    local column = xs:contiguous():view(150000, 1):index_add(1, i, s:view(200000, 1))
    expect.close(column:view(150000):double(), want, 1e-4, 1e-4)
    expect.close(T.zeros(150000):index_add(1, T.ones(200000, { dtype = "int64" }) * 7, s):narrow(1, 7, 1),
      T.tensor({ s:double():sum():item() }), 1e-3, 1e-3)
  end)
  it("refuses a source or index that overlaps self in place (as PyTorch)", function()
    local y = T.randn(4, 3)
    expect.errors(function() y:index_add_(1, T.tensor({ 2, 1, 4, 3 }), y) end, "index_add_: ", "memory", "clone")
    expect.errors(function() y:scatter_add_(1, T.ones(1, 3, { dtype = "int64" }), y:narrow(1, 2, 1)) end, "scatter_add_: ", "memory")
    local z = T.tensor({ { 0, 0, 0 }, { 1, 2, 3 } }, { dtype = "float32" })
    z:narrow(1, 1, 1):index_add_(1, T.tensor({ 1 }), z:narrow(1, 2, 1))  -- (disjoint rows are fine)
    expect.eq(z:totable(), { { 1, 2, 3 }, { 1, 2, 3 } })
  end)
  it("nn.Embedding zeroes its padding row", function()
    local e = T.nn.Embedding(5, 3, { padding_idx = -2 })
    expect.eq(e.padding_idx, 4)
    expect.eq(e.weight[4]:totable(), { 0, 0, 0 })
    expect.truthy(tostring(e):find("padding_idx=4"), tostring(e))
    expect.eq(T.F.embedding(T.tensor({ 4 }), e.weight, { padding_idx = 4 }):totable(), { { 0, 0, 0 } })
  end)
end)

describe("errors", function()
  local x = T.randn(3, 4)
  it("index_add", function()
    expect.errors(function() x:index_add(1, T.tensor({ 4 }), T.randn(1, 4)) end, "index_add: ", "index 4", "1%.%.3")
    expect.errors(function() x:index_add(1, T.tensor({ 0 }), T.randn(1, 4)) end, "index_add: ", "index 0")
    expect.errors(function() x:index_add(1, T.tensor({ { 1 } }), T.randn(1, 4)) end, "index_add: ", "1%-D", "{1,1}")
    expect.errors(function() x:index_add(1, T.tensor({ 1.5 }), T.randn(1, 4)) end, "index_add: ", "int32 or int64")
    expect.errors(function() x:index_add(1, T.tensor({ 1, 2 }), T.randn(1, 4)) end, "index_add: ", "2 elements", "1 along dim 1")
    expect.errors(function() x:index_add(1, T.tensor({ 1 }), T.randn(1, 3)) end, "index_add: ", "{3,4}", "apart from dim 1", "{1,3}")
    expect.errors(function() x:index_add(1, T.tensor({ 1 }), T.randn(4)) end, "index_add: ", "as many dims")
    expect.errors(function() x:index_add(1, T.tensor({ 1 }), T.randn(1, 4, { dtype = "float64" })) end, "index_add: ",
      "dtype float32", "float64")
    expect.errors(function() x:index_add(3, T.tensor({ 1 }), T.randn(1, 4)) end, "index_add: ", "dim 3")
    expect.errors(function() T.zeros(2, { dtype = "int64" }):index_add(1, T.tensor({ 1 }), T.ones(1, { dtype = "int64" }), { alpha = 0.5 }) end,
      "index_add: ", "alpha must be an integer")
    expect.errors(function() x:expand(2, 3, 4):index_add_(1, T.tensor({ 1 }), T.randn(1, 3, 4)) end, "index_add_: ", "expanded")
  end)
  it("scatter_add", function()
    expect.errors(function() x:scatter_add(2, T.tensor({ { 5 } }), T.randn(1, 1)) end, "scatter_add: ", "index 5", "1%.%.4")
    expect.errors(function() x:scatter_add(2, T.tensor({ 1 }), T.randn(1)) end, "scatter_add: ", "as many dims")
    expect.errors(function() x:scatter_add(2, T.ones(4, 1, { dtype = "int64" }), T.randn(4, 1)) end, "scatter_add: ",
      "no larger than src", "self {3,4}")
    expect.errors(function() x:scatter_add(2, T.ones(1, 3, { dtype = "int64" }), T.randn(1, 2)) end, "scatter_add: ", "no larger than src")
    expect.errors(function() x:scatter_add(2, T.ones(1, 1, { dtype = "int64" }), T.randn(1, 1, { dtype = "float64" })) end,
      "scatter_add: ", "src expected self's dtype")
  end)
  it("embedding padding_idx", function()
    local w = T.randn(5, 2)
    expect.errors(function() T.embedding(T.tensor({ 1 }), w, { padding_idx = 6 }) end, "embedding: ", "padding_idx", "1%.%.5", "6")
    expect.errors(function() T.embedding(T.tensor({ 1 }), w, { padding_idx = 0 }) end, "embedding: ", "padding_idx")
    expect.errors(function() T.nn.Embedding(5, 2, { padding_idx = -6 }) end, "Embedding: ", "padding_idx")
  end)
  it("carry the caller's location", function()
    local err = expect.errors(function() x:index_add(1, T.tensor({ 9 }), T.randn(1, 4)) end)
    expect.truthy(err:find("test_scatter.lua:%d+: index_add:"), err)
  end)
end)
