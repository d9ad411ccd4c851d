-- Linear algebra: matmul (1-D rules, batched broadcasting), mm, bmm, linear, tril, triu.
-- Values against PyTorch 1.13 (one python run for the whole file) and against float64 products
-- computed here in Lua; transposed / strided / expanded operands, zero sizes, every dtype, and
-- every category of bad input.
local T = require "crescent"
local R = require "torch_ref"

expect.covers("matmul", "mm", "bmm", "linear", "tril", "triu")

T.manual_seed(7)
math.randomseed(7)

local FLOATS = { "float32", "float64", "float16", "bfloat16" }
local INTS = { "int32", "int64" }

-- random values of a dtype: normal floats, small integers (so integer products are exact)
local function rnd(shape, dtype)
  if dtype == "int32" or dtype == "int64" then return T.randint(-5, 6, shape, { dtype = dtype }) end
  return T.randn(shape):to(dtype)
end

-- float64 reference product of two 2-D tensors, in Lua
local function lua_mm(a, b)
  local A, B = a:double():totable(), b:double():totable()
  local n, k, m = #A, #B, b:size(2)
  local C = {}
  for i = 1, n do
    C[i] = {}
    for j = 1, m do
      local s = 0
      for p = 1, k do s = s + A[i][p] * B[p][j] end
      C[i][j] = s
    end
  end
  return C
end

-- tolerances of a product of length-k sums, by dtype
local function tol(dtype)
  if dtype == "float16" then return 1e-2, 1e-2 end
  if dtype == "bfloat16" then return 2e-2, 2e-2 end
  if dtype == "float32" then return 1e-4, 1e-5 end
  return nil, nil
end

-- ---- the PyTorch cases: key -> {fn = crescent result, dtype =} -------------------------------
local L = R.list()
local function case(key, fn, expr, inputs) L:case(key, fn, expr, inputs) end

-- matmul over the 1-D / 2-D / batched shape rules, every numeric dtype
local shapes = {
  { {5}, {5} }, { {3, 5}, {5} }, { {5}, {5, 4} }, { {3, 5}, {5, 4} }, { {2, 3, 5}, {5} }, { {5}, {2, 5, 4} },
  { {2, 1, 3, 5}, {6, 5, 4} }, { {4, 3, 5}, {5, 2} }, { {3, 5}, {4, 5, 2} }, { {1, 3, 5}, {4, 5, 2} },
  { {2, 3, 1, 5}, {3, 5, 1} }, { {1}, {1} },
}
for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16", "int32", "int64" }) do
  for i, s in ipairs(shapes) do
    local a, b = rnd(s[1], dt), rnd(s[2], dt)
    case(string.format("matmul_%s_%d", dt, i), function() return T.matmul(a, b) end, "a @ b", { a = a, b = b })
  end
end

-- random shapes with random broadcast batch dims
for i = 1, 12 do
  local n, k, m = math.random(1, 9), math.random(1, 9), math.random(1, 9)
  local ba, bb = {}, {}
  for _ = 1, math.random(0, 2) do
    local s = math.random(1, 3)
    ba[#ba + 1] = s
    bb[#bb + 1] = math.random() < 0.4 and 1 or s
  end
  if math.random() < 0.3 then table.remove(bb, 1) end
  local sa, sb = {}, {}
  for _, s in ipairs(ba) do sa[#sa + 1] = s end
  for _, s in ipairs(bb) do sb[#sb + 1] = s end
  sa[#sa + 1], sa[#sa + 2] = n, k
  sb[#sb + 1], sb[#sb + 2] = k, m
  local a, b = rnd(sa, "float32"), rnd(sb, "float64"):float()
  case("matmul_random_" .. i, function() return T.matmul(a, b) end, "a @ b", { a = a, b = b })
end

-- non-contiguous operands: transposed (BLAS trans flags), stepped slices and expanded batches
-- (copied), strided vectors, in float32 (BLAS) and int64 / bfloat16 (generic kernel)
for _, dt in ipairs({ "float32", "float64", "int64", "bfloat16" }) do
  local a, b = rnd({ 6, 4 }, dt), rnd({ 5, 6 }, dt)
  case("nc_tt_" .. dt, function() return T.matmul(a:t(), b:t()) end, "a.t() @ b.t()", { a = a, b = b })
  local c, d = rnd({ 4, 9 }, dt), rnd({ 3, 6, 9 }, dt)
  case("nc_slice_" .. dt, function() return T.matmul(c:slice(2, 1, 9, 2), d:slice(3, 1, 9, 2):transpose(2, 3)) end,
    "c[:, ::2] @ d[:, :, ::2].transpose(1, 2)", { c = c, d = d })
  local e, f = rnd({ 1, 3, 4 }, dt), rnd({ 4, 2 }, dt)
  case("nc_expand_" .. dt, function() return T.matmul(e:expand(5, 3, 4), f:expand(5, 4, 2)) end,
    "e.expand(5, 3, 4) @ f.expand(5, 4, 2)", { e = e, f = f })
  local g, h = rnd({ 5, 3 }, dt), rnd({ 5, 4 }, dt)
  case("nc_vec_" .. dt, function() return T.matmul(g:select(2, 2), h) end, "g[:, 1] @ h", { g = g, h = h })
  case("nc_mv_" .. dt, function() return T.matmul(h:t(), g:select(2, 3)) end, "h.t() @ g[:, 2]", { g = g, h = h })
  local p, r = rnd({ 4, 3, 6 }, dt), rnd({ 6, 2 }, dt)
  case("nc_batch_perm_" .. dt, function() return T.matmul(p:permute(2, 1, 3), r:t():contiguous():t()) end,
    "p.permute(1, 0, 2) @ r", { p = p, r = r })
  local q = rnd({ 2, 6, 4 }, dt)
  case("nc_batch_t_" .. dt, function() return T.matmul(q:transpose(2, 3), a) end, "q.transpose(1, 2) @ a", { q = q, a = a })
end

-- sizes that reach the threaded paths: big BLAS products, many small batched products, and the
-- generic kernel's row blocks
do
  local a, b = rnd({ 70, 90 }, "float32"), rnd({ 90, 80 }, "float32")
  case("big_f32", function() return T.matmul(a, b) end, "a @ b", { a = a, b = b })
  local c, d = rnd({ 64, 6, 7 }, "float64"), rnd({ 64, 7, 5 }, "float64")
  case("many_f64", function() return T.bmm(c, d) end, "torch.bmm(c, d)", { c = c, d = d })
  local e, f = rnd({ 60, 50 }, "int64"), rnd({ 50, 40 }, "int64")
  case("big_i64", function() return T.matmul(e, f) end, "e @ f", { e = e, f = f })
  local g, h = rnd({ 3, 40, 30 }, "int32"), rnd({ 30, 45 }, "int32")
  case("big_i32", function() return T.matmul(g, h) end, "g @ h", { g = g, h = h })
  local h3 = rnd({ 3, 30, 45 }, "int32")
  case("big_batched_i32", function() return T.bmm(g, h3:transpose(2, 3):contiguous():transpose(2, 3)) end,
    "torch.bmm(g, h)", { g = g, h = h3 })
  for _, dt in ipairs({ "int64", "bfloat16", "float16" }) do
    local p, q = rnd({ 64, 6, 7 }, dt), rnd({ 64, 7, 5 }, dt)
    case("many_" .. dt, function() return T.bmm(p, q) end, "torch.bmm(p, q)", { p = p, q = q })
    case("many_t_" .. dt, function() return T.matmul(p, q:select(1, 3):t():t()) end, "p @ q[2]", { p = p, q = q })
  end
end

-- mm and bmm
for _, dt in ipairs({ "float32", "float64", "bfloat16", "int32", "int64" }) do
  local a, b = rnd({ 3, 4 }, dt), rnd({ 4, 5 }, dt)
  case("mm_" .. dt, function() return T.mm(a, b) end, "torch.mm(a, b)", { a = a, b = b })
  case("mm_t_" .. dt, function() return b:t():mm(a:t()) end, "torch.mm(b.t(), a.t())", { a = a, b = b })
  local c, d = rnd({ 2, 3, 4 }, dt), rnd({ 2, 4, 5 }, dt)
  case("bmm_" .. dt, function() return T.bmm(c, d) end, "torch.bmm(c, d)", { c = c, d = d })
  case("bmm_t_" .. dt, function() return d:transpose(2, 3):bmm(c:transpose(2, 3)) end,
    "torch.bmm(d.transpose(1, 2), c.transpose(1, 2))", { c = c, d = d })
end

-- linear: 1-D, 2-D and 3-D inputs, with and without bias, contiguous and transposed weights
for _, dt in ipairs({ "float32", "float64", "bfloat16", "float16", "int64" }) do
  local w, bias = rnd({ 5, 4 }, dt), rnd({ 5 }, dt)
  local wt = rnd({ 4, 5 }, dt)  -- wt:t() is a transposed {5, 4} weight, as after a transpose
  for i, xs in ipairs({ { 4 }, { 3, 4 }, { 2, 3, 4 } }) do
    local x = rnd(xs, dt)
    case(string.format("linear_%s_%d", dt, i), function() return T.linear(x, w) end, "F.linear(x, w)", { x = x, w = w })
    case(string.format("linear_b_%s_%d", dt, i), function() return T.linear(x, w, bias) end, "F.linear(x, w, b)",
      { x = x, w = w, b = bias })
    case(string.format("linear_wt_%s_%d", dt, i), function() return T.linear(x, wt:t(), bias) end,
      "F.linear(x, wt.t(), b)", { x = x, wt = wt, b = bias })
  end
  local x3 = rnd({ 4, 3, 2 }, dt)
  case("linear_ncx_" .. dt, function() return T.linear(x3:permute(3, 2, 1), w) end, "F.linear(x.permute(2, 1, 0), w)",
    { x = x3, w = w })
  local b2 = rnd({ 2, 5 }, dt)
  case("linear_b2_" .. dt, function() return T.linear(x3:permute(2, 3, 1), w, b2) end,
    "F.linear(x.permute(1, 2, 0), w, b)", { x = x3, w = w, b = b2 })
end

-- tril / triu: diagonals, batches, every dtype, transposed input
for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" }) do
  local x = dt == "bool" and T.rand(2, 4, 5):gt(0.3) or rnd({ 2, 4, 5 }, dt)
  for _, k in ipairs({ 0, 1, -1, 3, -3, 7, -9 }) do
    case(string.format("tril_%s_%d", dt, k), function() return T.tril(x, k) end, "torch.tril(x, " .. k .. ")", { x = x })
    case(string.format("triu_%s_%d", dt, k), function() return x:triu(k) end, "torch.triu(x, " .. k .. ")", { x = x })
  end
  case("tril_default_" .. dt, function() return x:tril() end, "torch.tril(x)", { x = x })
  case("triu_nc_" .. dt, function() return T.triu(x:transpose(1, 3)) end, "torch.triu(x.transpose(0, 2))", { x = x })
end

L:check("linalg vs PyTorch", function(got) return tol(got.dtype) end)

-- ---- float64 references computed in Lua --------------------------------------------------------
describe("matmul vs float64 sums", function()
  for _, dt in ipairs(FLOATS) do
    it("2-D products in " .. dt, function()
      for _ = 1, 5 do
        local n, k, m = math.random(1, 12), math.random(1, 40), math.random(1, 12)
        local a, b = rnd({ n, k }, dt), rnd({ k, m }, dt)
        expect.close(T.matmul(a, b), lua_mm(a, b), tol(dt))
        expect.close(T.matmul(b:t(), a:t()), lua_mm(b:t(), a:t()), tol(dt))
      end
    end)
  end
  for _, dt in ipairs(INTS) do
    it("2-D products in " .. dt .. " are exact", function()
      local a, b = rnd({ 7, 13 }, dt), rnd({ 13, 6 }, dt)
      expect.close(T.matmul(a, b), lua_mm(a, b))
      expect.eq(T.matmul(a, b).dtype, dt)
    end)
  end
  it("accumulates float16 in float32", function()
    -- 4096 * 1 + 1: each partial sum of 2049 ones in float16 would stall at 2048
    local a, b = T.ones(1, 3000):half(), T.ones(3000, 1):half()
    expect.close(T.matmul(a, b), { { 3000 } }, 0, 2)
    expect.close(T.matmul(a:bfloat16(), b:bfloat16()), { { 3000 } }, 0, 16)
  end)
  it("integer products wrap like int64 / int32 arithmetic", function()
    local big = T.tensor({ { 2 ^ 40, 2 ^ 40 } }, { dtype = "int64" })
    expect.eq(T.matmul(big, T.tensor({ { 2 ^ 20 }, { 2 ^ 20 } }, { dtype = "int64" })):totable(), { { 2 ^ 61 } })
    local a = T.tensor({ { 65536, 65536 } }, { dtype = "int32" })
    -- 2 * 2^32 wraps to 0 in int32, as in PyTorch
    expect.eq(T.matmul(a, T.tensor({ { 65536 }, { 65536 } }, { dtype = "int32" })):totable(), { { 0 } })
  end)
  it("1024 x 1024 float32 through BLAS", function()
    local a, b = T.randn(1024, 64), T.randn(64, 1024)
    local c = T.matmul(a, b)
    local A, Bt, C = a:totable(), b:totable(), c:totable()
    for _, ij in ipairs({ { 1, 1 }, { 1024, 1024 }, { 517, 3 }, { 2, 999 } }) do
      local s = 0
      for p = 1, 64 do s = s + A[ij[1]][p] * Bt[p][ij[2]] end
      expect.truthy(math.abs(C[ij[1]][ij[2]] - s) < 1e-4, "element " .. ij[1] .. "," .. ij[2])
    end
  end)
end)

-- ---- zero sizes -----------------------------------------------------------------------------------
describe("zero sizes", function()
  it("k = 0 gives zeros, in every dtype", function()
    for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16", "int32", "int64" }) do
      local r = T.matmul(T.empty(3, 0, { dtype = dt }), T.empty(0, 4, { dtype = dt }))
      expect.eq(r.shape, { 3, 4 })
      expect.close(r, T.zeros(3, 4))
      expect.close(T.matmul(T.empty(0, { dtype = dt }), T.empty(0, { dtype = dt })), 0)
      expect.close(T.bmm(T.empty(2, 3, 0, { dtype = dt }), T.empty(2, 0, 1, { dtype = dt })), T.zeros(2, 3, 1))
    end
  end)
  it("empty rows, columns and batches", function()
    expect.eq(T.matmul(T.empty(0, 3), T.randn(3, 4)).shape, { 0, 4 })
    expect.eq(T.matmul(T.randn(2, 3), T.empty(3, 0)).shape, { 2, 0 })
    expect.eq(T.matmul(T.empty(0, 2, 3), T.randn(3, 4)).shape, { 0, 2, 4 })
    expect.eq(T.matmul(T.empty(2, 0, 2, 3), T.randn(1, 3, 4)).shape, { 2, 0, 2, 4 })
    expect.eq(T.mm(T.empty(0, 3, { dtype = "int64" }), T.empty(3, 2, { dtype = "int64" })).shape, { 0, 2 })
  end)
  it("linear with no input features is the bias", function()
    local bias = T.tensor({ 1, 2, 3 }, { dtype = "float32" })
    expect.close(T.linear(T.empty(2, 0), T.empty(3, 0), bias), { { 1, 2, 3 }, { 1, 2, 3 } })
    expect.close(T.linear(T.empty(2, 0), T.empty(3, 0)), T.zeros(2, 3))
    expect.eq(T.linear(T.empty(0, 4), T.randn(3, 4), T.randn(3)).shape, { 0, 3 })
  end)
  it("tril / triu of empty matrices", function()
    expect.eq(T.tril(T.empty(0, 3)).shape, { 0, 3 })
    expect.eq(T.triu(T.empty(2, 3, 0), 1).shape, { 2, 3, 0 })
  end)
end)

-- ---- results are fresh tensors ------------------------------------------------------------------
describe("results", function()
  it("do not alias the inputs", function()
    local a = T.eye(3)
    local r = T.matmul(a, a)
    r:fill_(5)
    expect.close(a, T.eye(3))
    local t = T.tril(a)
    t:fill_(2)
    expect.close(a, T.eye(3))
  end)
  it("matmul of a 1-D pair is 0-d", function()
    local r = T.matmul(T.tensor({ 1, 2, 3 }), T.tensor({ 4, 5, 6 }))
    expect.eq(r.shape, {})
    expect.eq(r:item(), 32)
  end)
end)

-- ---- bad inputs -----------------------------------------------------------------------------------
describe("errors", function()
  local a, b = T.randn(2, 3), T.randn(4, 5)
  it("matmul", function()
    expect.errors(function() T.matmul(a, b) end, "matmul: ", "{2,3}", "{4,5}", "cannot be multiplied")
    expect.errors(function() T.matmul(T.randn(3), T.randn(4)) end, "matmul: ", "{3}", "{4}")
    expect.errors(function() T.matmul(T.randn(2, 2, 3), T.randn(3, 3, 4)) end, "matmul: ", "batch", "{2,2,3}", "{3,3,4}")
    expect.errors(function() T.matmul(T.tensor(2.0), a) end, "matmul: ", "at least 1 dim", "{}")
    expect.errors(function() T.matmul(a, T.randn(3, 2):double()) end, "matmul: ", "same dtype", "float32", "float64")
    expect.errors(function() T.matmul(a:int(), T.randn(3, 2):long()) end, "matmul: ", "int32", "int64")
    expect.errors(function() T.matmul(a:bool(), a:t():bool()) end, "matmul: ", "bool")
    expect.errors(function() T.matmul(a, 2) end, "matmul: ", "expected a tensor")
    expect.errors(function() a:matmul() end, "matmul: ", "expected a tensor")
  end)
  it("mm", function()
    expect.errors(function() T.mm(T.randn(2, 2, 3), T.randn(3, 2)) end, "mm: ", "2%-D", "{2,2,3}")
    expect.errors(function() T.mm(T.randn(3), T.randn(3, 2)) end, "mm: ", "2%-D")
    expect.errors(function() T.mm(a, b) end, "mm: ", "{2,3}", "{4,5}")
    expect.errors(function() T.mm(a, a:t():half()) end, "mm: ", "same dtype")
  end)
  it("bmm", function()
    expect.errors(function() T.bmm(a, a:t()) end, "bmm: ", "3%-D")
    expect.errors(function() T.bmm(T.randn(2, 2, 3), T.randn(3, 3, 2)) end, "bmm: ", "batch", "{2,2,3}", "{3,3,2}")
    expect.errors(function() T.bmm(T.randn(2, 2, 3), T.randn(2, 4, 2)) end, "bmm: ", "cannot be multiplied")
    expect.errors(function() T.bmm(T.randn(1, 2, 3), T.randn(2, 3, 2)) end, "bmm: ", "batch")
  end)
  it("linear", function()
    expect.errors(function() T.linear(a, T.randn(4)) end, "linear: ", "weight", "2%-D")
    expect.errors(function() T.linear(a, T.randn(4, 5)) end, "linear: ", "{2,3}", "{4,5}")
    expect.errors(function() T.linear(a, T.randn(4, 3), T.randn(5)) end, "linear: ", "bias", "{5}", "{2,4}")
    expect.errors(function() T.linear(a, T.randn(4, 3), T.randn(3, 2, 4)) end, "linear: ", "bias")
    expect.errors(function() T.linear(a, T.randn(4, 3):double()) end, "linear: ", "same dtype")
    expect.errors(function() T.linear(a, T.randn(4, 3), T.randn(4):half()) end, "linear: ", "same dtype")
    expect.errors(function() T.linear(T.tensor(1.0), T.randn(4, 1)) end, "linear: ", "at least 1 dim")
    expect.errors(function() T.linear(a:bool(), T.randn(4, 3):bool()) end, "linear: ", "bool")
    expect.errors(function() return a.linear end, 'no method "linear": T.linear is a function, not a method')
  end)
  it("tril / triu", function()
    expect.errors(function() T.tril(T.randn(3)) end, "tril: ", "at least 2 dims")
    expect.errors(function() T.triu(T.tensor(1)) end, "triu: ", "at least 2 dims")
    expect.errors(function() T.tril(a, 1.5) end, "tril: ", "integer")
    expect.errors(function() T.triu(a, "x") end, "triu: ", "integer", "string")
  end)
  it("carry the caller's location", function()
    local err = expect.errors(function() T.matmul(a, b) end)
    expect.truthy(err:find("test_linalg.lua:%d+: matmul:"), err)
  end)
end)
