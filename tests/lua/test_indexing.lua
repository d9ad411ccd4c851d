-- Indexing: index_select, gather, embedding, masked_fill, masked_fill_. Index values are
-- 1-based here and 0-based in PyTorch (the python expressions subtract 1). Values against
-- PyTorch 1.13 (one python run), every dtype, int32 / int64 indices, random shapes,
-- non-contiguous inputs and indices, zero sizes, 0-d tensors, and every bad input.
local T = require "crescent"
local R = require "torch_ref"
local Samples = require "samples"

expect.covers("index_select", "gather", "embedding", "masked_fill", "masked_fill_")

T.manual_seed(11)
math.randomseed(11)

local DTYPES, rnd, idx = Samples.DTYPES, Samples.rnd, Samples.idx

local function random_shape(nd, max)
  local s = {}
  for i = 1, nd do s[i] = math.random(1, max or 5) end
  return s
end

local L = R.list()
local function case(key, fn, expr, inputs) L:case(key, fn, expr, inputs) end

-- ---- index_select ------------------------------------------------------------------------------
for _, dt in ipairs(DTYPES) do
  for i = 1, 3 do
    local s = random_shape(i + 1)
    local x = rnd(s, dt)
    local d = math.random(1, #s)
    local ix = idx(s[d], { math.random(0, 7) }, i == 2 and "int32" or "int64")
    case(string.format("isel_%s_%d", dt, i), function() return x:index_select(d, ix) end,
      string.format("x.index_select(%d, i.long() - 1)", d - 1), { x = x, i = ix })
    case(string.format("isel_neg_%s_%d", dt, i), function() return T.index_select(x, d - #s - 1, ix) end,
      string.format("x.index_select(%d, i.long() - 1)", d - 1), { x = x, i = ix })
  end
end
do
  local x = rnd({ 4, 5, 6 }, "float32")
  local ix = idx(4, { 3, 2 }):t()  -- a strided index: its first row
  case("isel_nc_x", function() return x:transpose(1, 3):index_select(2, ix:select(1, 1)) end,
    "x.transpose(0, 2).index_select(1, i.t()[0] - 1)", { x = x, i = ix:t():contiguous() })
  case("isel_nc_step", function() return x:slice(3, 1, 6, 2):index_select(3, T.tensor({ 3, 1, 3, 2 })) end,
    "x[:, :, ::2].index_select(2, torch.tensor([2, 0, 2, 1]))", { x = x })
  case("isel_expanded", function() return x:select(1, 2):expand(3, 5, 6):index_select(1, T.tensor({ 3, 1 })) end,
    "x[1].expand(3, 5, 6).index_select(0, torch.tensor([2, 0]))", { x = x })
  case("isel_0d_index", function() return x:index_select(2, T.tensor(4)) end, "x.index_select(1, torch.tensor(3))", { x = x })
  case("isel_0d_x", function() return T.tensor(2.5):index_select(1, T.tensor({ 1 })) end,
    "torch.tensor(2.5).index_select(0, torch.tensor([0]))", {})
  case("isel_empty_index", function() return x:index_select(3, T.empty(0, { dtype = "int64" })) end,
    "x.index_select(2, torch.empty(0, dtype=torch.long))", { x = x })
  local big = rnd({ 300, 200 }, "float32")
  local bi = idx(300, { 400 })
  case("isel_big_rows", function() return big:index_select(1, bi) end, "x.index_select(0, i - 1)", { x = big, i = bi })
  local bj = idx(200, { 150 }, "int32")
  case("isel_big_cols", function() return big:index_select(2, bj) end, "x.index_select(1, i.long() - 1)", { x = big, i = bj })
end

-- ---- gather ------------------------------------------------------------------------------------
for _, dt in ipairs(DTYPES) do
  for i = 1, 3 do
    local s = random_shape(i)
    local x = rnd(s, dt)
    local d = math.random(1, #s)
    local is = {}
    for k = 1, #s do is[k] = k == d and math.random(0, 6) or math.random(1, s[k]) end
    local ix = idx(s[d], is, i == 1 and "int32" or "int64")
    case(string.format("gather_%s_%d", dt, i), function() return x:gather(d, ix) end,
      string.format("torch.gather(x, %d, i.long() - 1)", d - 1), { x = x, i = ix })
  end
end
do
  local x = rnd({ 5, 4, 3 }, "float64")
  local ix = idx(4, { 3, 2, 2 })
  case("gather_nc_both", function() return x:transpose(1, 3):gather(3, ix:transpose(2, 3)) end,
    "torch.gather(x.transpose(0, 2), 2, i.transpose(1, 2) - 1)", { x = x, i = ix })
  local iy = idx(5, { 3, 6 })
  case("gather_last_nc", function() return x:select(3, 2):t():gather(2, iy) end,
    "torch.gather(x[:, :, 1].t(), 1, i - 1)", { x = x, i = iy })
  local iz = idx(5, { 2, 2, 3 })
  case("gather_dim1", function() return T.gather(x, 1, iz) end, "torch.gather(x, 0, i - 1)", { x = x, i = iz })
  case("gather_0d", function() return T.tensor(7):gather(1, T.tensor(1)) end, "torch.gather(torch.tensor(7), 0, torch.tensor(0))", {})
  case("gather_empty", function() return x:gather(2, T.empty(5, 0, 3, { dtype = "int64" })) end,
    "torch.gather(x, 1, torch.empty(5, 0, 3, dtype=torch.long))", { x = x })
  local big, bi = rnd({ 200, 300 }, "float32"), idx(300, { 150, 500 }, "int32")
  case("gather_big", function() return big:gather(2, bi) end, "torch.gather(x, 1, i.long() - 1)", { x = big, i = bi })
end

-- ---- embedding ---------------------------------------------------------------------------------
for _, dt in ipairs(DTYPES) do
  local w = rnd({ 7, 3 }, dt)
  for i, s in ipairs({ {}, { 4 }, { 2, 3 }, { 2, 1, 3 } }) do
    local ix = idx(7, s, i % 2 == 0 and "int32" or "int64")
    case(string.format("emb_%s_%d", dt, i), function() return T.embedding(ix, w) end, "F.embedding(i.long() - 1, w)",
      { i = ix, w = w })
  end
end
do
  local w = rnd({ 6, 10 }, "float32")
  local ix = idx(6, { 3, 4 })
  case("emb_nc_w", function() return T.embedding(ix, w:t():contiguous():t()) end, "F.embedding(i - 1, w)", { i = ix, w = w })
  local w2 = rnd({ 10, 6 }, "float32")
  case("emb_transposed_w", function() return T.embedding(ix:t(), w2:t()) end, "F.embedding(i.t() - 1, w.t())",
    { i = ix, w = w2 })
  case("emb_empty", function() return T.embedding(T.empty(2, 0, { dtype = "int64" }), w) end,
    "F.embedding(torch.empty(2, 0, dtype=torch.long), w)", { w = w })
  local big, bi = rnd({ 1000, 64 }, "float32"), idx(1000, { 16, 40 })
  case("emb_big", function() return T.embedding(bi, big) end, "F.embedding(i - 1, w)", { i = bi, w = big })
end

-- ---- masked_fill -------------------------------------------------------------------------------
for _, dt in ipairs(DTYPES) do
  local x = rnd({ 3, 4 }, dt)
  local m = T.rand(3, 4):gt(0.5)
  case("mf_" .. dt, function() return x:masked_fill(m, 3) end, "x.masked_fill(m, 3)", { x = x, m = m })
  case("mf_frac_" .. dt, function() return x:masked_fill(m, -2.75) end, "x.masked_fill(m, -2.75)", { x = x, m = m })
  local mr = T.rand(4):gt(0.5)
  case("mf_bcast_" .. dt, function() return T.masked_fill(x, mr, 0) end, "x.masked_fill(m, 0)", { x = x, m = mr })
  local mb = T.rand(2, 1, 4):gt(0.5)
  case("mf_grow_" .. dt, function() return x:masked_fill(mb, 1) end, "x.masked_fill(m, 1)", { x = x, m = mb })
  local v = rnd({}, dt)
  case("mf_tensor_" .. dt, function() return x:masked_fill(m, v) end, "x.masked_fill(m, v)", { x = x, m = m, v = v })
  case("mf_bool_value_" .. dt, function() return x:masked_fill(m, true) end, "x.masked_fill(m, True)", { x = x, m = m })
end
do
  local x = rnd({ 4, 5 }, "float32")
  local m = T.rand(5, 4):gt(0.5)
  case("mf_nc", function() return x:t():masked_fill(m:t():t(), -1) end, "x.t().masked_fill(m, -1)", { x = x, m = m })
  case("mf_nc_mask", function() return x:masked_fill(m:t(), 9) end, "x.masked_fill(m.t(), 9)", { x = x, m = m })
  case("mf_inf", function() return x:masked_fill(m:t(), -math.huge) end, "x.masked_fill(m.t(), -inf)", { x = x, m = m })
  case("mf_0d", function() return T.tensor(1.5):masked_fill(T.tensor(true), 2) end,
    "torch.tensor(1.5).masked_fill(torch.tensor(True), 2)", {})
  local big, bm = rnd({ 300, 400 }, "float32"), T.rand(300, 1):gt(0.5)
  case("mf_big", function() return big:masked_fill(bm, 0) end, "x.masked_fill(m, 0)", { x = big, m = bm })
end

L:check("indexing vs PyTorch")

-- ---- semantics checked without PyTorch ---------------------------------------------------------
describe("index values are 1-based", function()
  local x = T.tensor({ { 10, 20, 30 }, { 40, 50, 60 } })
  it("index_select", function()
    expect.eq(x:index_select(2, T.tensor({ 3, 1, 1 })):totable(), { { 30, 10, 10 }, { 60, 40, 40 } })
    expect.eq(x:index_select(1, T.tensor({ 2 })):totable(), { { 40, 50, 60 } })
    expect.eq(x:index_select(-1, T.tensor({ 2 }, { dtype = "int32" })):totable(), { { 20 }, { 50 } })
  end)
  it("gather", function()
    expect.eq(x:gather(2, T.tensor({ { 3, 3 }, { 1, 2 } })):totable(), { { 30, 30 }, { 40, 50 } })
    expect.eq(x:gather(1, T.tensor({ { 2, 1, 2 } })):totable(), { { 40, 20, 60 } })
  end)
  it("embedding", function()
    expect.eq(T.embedding(T.tensor({ 2, 1 }), x):totable(), { { 40, 50, 60 }, { 10, 20, 30 } })
    local e = T.embedding(T.tensor(2), x)
    expect.eq(e.shape, { 3 })
  end)
  it("results are copies", function()
    local r = x:index_select(1, T.tensor({ 1 }))
    r:fill_(0)
    expect.eq(x:totable(), { { 10, 20, 30 }, { 40, 50, 60 } })
  end)
end)

describe("masked_fill_", function()
  it("fills in place and returns self", function()
    local x = T.zeros(2, 3)
    local r = x:masked_fill_(T.tensor({ true, false, true }), 5)
    expect.truthy(r == x, "returns its argument")
    expect.eq(x:totable(), { { 5, 0, 5 }, { 5, 0, 5 } })
  end)
  it("writes through a view to the base", function()
    local base = T.zeros(3, 4)
    base:t():masked_fill_(T.tensor({ { true, false, false }, { false, false, true }, { false, false, false },
      { false, false, false } }), 1)
    expect.eq(base:totable(), { { 1, 0, 0, 0 }, { 0, 0, 0, 0 }, { 0, 1, 0, 0 } })
  end)
  it("reads a mask that aliases self before writing", function()
    local x = T.tensor({ true, false, true, false })
    x:masked_fill_(x, false)
    expect.eq(x:totable(), { false, false, false, false })
    local y = T.tensor({ true, false, false, false })
    y:masked_fill_(y:narrow(1, 1, 1), false)  -- mask {1} broadcast from y's first element
    expect.eq(y:totable(), { false, false, false, false })
  end)
  it("value may be a 0-d view of self", function()
    local x = T.tensor({ 1.0, 2.0, 3.0 })
    x:masked_fill_(T.tensor({ true, true, true }), x[3])
    expect.eq(x:totable(), { 3, 3, 3 })
  end)
  it("converts the value to self's dtype", function()
    local x = T.zeros(3, { dtype = "int64" })
    x:masked_fill_(T.tensor({ true, false, true }), 2.7)
    expect.eq(x:totable(), { 2, 0, 2 })
    expect.eq(x.dtype, "int64")
  end)
  it("is a method only", function() expect.truthy(T.masked_fill_ == nil) end)
end)

-- ---- bad inputs ----------------------------------------------------------------------------------
describe("errors", function()
  local x = T.randn(3, 4)
  it("index_select", function()
    expect.errors(function() x:index_select(2, T.tensor({ 0 })) end, "index_select: ", "index 0", "1%.%.4")
    expect.errors(function() x:index_select(1, T.tensor({ 1, 4 })) end, "index_select: ", "index 4", "1%.%.3")
    expect.errors(function() x:index_select(1, T.tensor({ -1 })) end, "index_select: ", "index %-1", "1%.%.3")
    expect.errors(function() x:index_select(2, T.tensor({ 1.5 })) end, "index_select: ", "int32 or int64", "float32")
    expect.errors(function() x:index_select(2, T.tensor({ true })) end, "index_select: ", "bool")
    expect.errors(function() x:index_select(2, T.tensor({ { 1 } })) end, "index_select: ", "1%-D", "{1,1}")
    expect.errors(function() x:index_select(3, T.tensor({ 1 })) end, "index_select: ", "dim 3", "out of range")
    expect.errors(function() x:index_select(0, T.tensor({ 1 })) end, "index_select: ", "dim 0")
    expect.errors(function() x:index_select(1.5, T.tensor({ 1 })) end, "index_select: ", "integer")
    expect.errors(function() x:index_select(1, { 1 }) end, "index_select: ", "expected a tensor")
    expect.errors(function() T.empty(0, 2):index_select(1, T.tensor({ 1 })) end, "index_select: ", "empty")
    expect.errors(function() T.tensor(1.0):index_select(1, T.tensor({ 1, 1 })) end, "index_select: ", "one index")
  end)
  it("gather", function()
    expect.errors(function() x:gather(2, T.tensor({ { 5 } })) end, "gather: ", "index 5", "1%.%.4")
    expect.errors(function() x:gather(1, T.tensor({ { 0 } })) end, "gather: ", "index 0", "1%.%.3")
    expect.errors(function() x:gather(2, T.tensor({ 1 })) end, "gather: ", "as many dims", "{3,4}", "{1}")
    expect.errors(function() x:gather(2, T.ones(4, 1, { dtype = "int64" })) end, "gather: ", "{4,1}", "dim 1")
    expect.errors(function() x:gather(2, T.ones(1, 1)) end, "gather: ", "int32 or int64")
    expect.errors(function() x:gather(-3, T.ones(1, 1, { dtype = "int64" })) end, "gather: ", "dim %-3")
  end)
  it("embedding", function()
    local w = T.randn(5, 2)
    expect.errors(function() T.embedding(T.tensor({ 6 }), w) end, "embedding: ", "index 6", "1%.%.5")
    expect.errors(function() T.embedding(T.tensor({ { 1, 0 } }), w) end, "embedding: ", "index 0")
    expect.errors(function() T.embedding(T.tensor({ 1 }), T.randn(5)) end, "embedding: ", "2%-D", "{5}")
    expect.errors(function() T.embedding(T.tensor({ 1.5 }), w) end, "embedding: ", "int32 or int64")
    expect.errors(function() T.embedding(T.tensor({ 1 }), T.empty(0, 2)) end, "embedding: ", "index 1", "empty")
    expect.errors(function() return w.embedding end, 'no method "embedding": T.embedding is a function, not a method')
  end)
  it("masked_fill", function()
    local m = T.tensor({ true, false, true, false })
    expect.errors(function() x:masked_fill(T.ones(4), 1) end, "masked_fill: ", "bool", "float32")
    expect.errors(function() x:masked_fill(T.ones(3, { dtype = "bool" }), 1) end, "masked_fill: ", "{3,4}", "{3}")
    expect.errors(function() x:masked_fill(m, T.ones(1)) end, "masked_fill: ", "0%-d", "{1}")
    expect.errors(function() x:masked_fill(m, "a") end, "masked_fill: ", "tensor or a number")
    expect.errors(function() x:masked_fill(m) end, "masked_fill: ", "value")
    expect.errors(function() x:masked_fill_(T.ones(2, 3, 4, { dtype = "bool" }), 1) end, "masked_fill_: ", "{2,3,4}",
      "in place")
  end)
  it("carry the caller's location", function()
    local err = expect.errors(function() x:index_select(1, T.tensor({ 9 })) end)
    expect.truthy(err:find("test_indexing.lua:%d+: index_select:"), err)
  end)
end)

describe("0-d tensors and 0-d masks", function()
  it("index, assign, scatter, index_fill and index_copy as PyTorch (a 0-d mask adds a dim of size 1)", function()
    local z = T.tensor(2.5, { dtype = "float32" })
    local x = T.ones(2, 3)
    expect.eq(z[T.tensor(true)]:totable(), { 2.5 }, "z[true]")
    expect.eq(z[T.tensor(false)].shape, { 0 }, "z[false]")
    expect.eq({ x[T.tensor(true)].shape, x[T.tensor(false)].shape }, { { 1, 2, 3 }, { 0, 2, 3 } }, "x[true], x[false]")
    local w = z:clone()
    w[T.tensor(true)] = 7
    expect.eq(w:item(), 7, "z[true] = 7")
    w[T.tensor(false)] = 9
    expect.eq(w:item(), 7, "z[false] = 9 writes nothing")
    expect.eq(z:scatter(1, T.tensor(1), 5):item(), 5, "scatter")
    expect.eq(z:scatter(1, T.tensor(1), T.tensor(4.5, { dtype = "float32" })):item(), 4.5, "scatter of a 0-d src")
    expect.eq(z:index_fill(1, T.tensor({ 1 }), 5):item(), 5, "index_fill")
    expect.eq(z:index_copy(1, T.tensor({ 1 }), T.tensor(1.5, { dtype = "float32" })):item(), 1.5, "index_copy")
    local y = z:clone()
    expect.eq({ rawequal(y:index_fill_(1, T.tensor({ 1 }), 3), y), y:item(), y:dim() }, { true, 3, 0 }, "index_fill_ in place")
    expect.eq(z:item(), 2.5, "the source untouched")
  end)
end)
