-- Selections and data-dependent ops on a CUDA device against the CPU: masked_select, nonzero /
-- where(cond) / x[mask], index (x:index with several index tensors), index_put_ / x[...] = v
-- (accumulate included), and the surface ops made of them (unique, unique_consecutive,
-- bincount, histc, index_copy_ / index_fill_, scatter_, argsort, searchsorted, bucketize,
-- repeat_interleave, take_along_dim, cummax / cummin / cumprod): every dtype, random shapes,
-- broadcast and strided operands, empty selections, all-true masks, duplicates, inputs of more
-- than one block (3M elements), out-of-range positions raising at the next synchronisation, and
-- no op on host copies (T.cuda.stats().host_ops). Every case needs a GPU and skips without one.
-- CRESCENT_TEST_CUDA_AS_CPU=1 runs the cases with the CPU as the device (the spec's own logic,
-- where there is no GPU).
local T = require "crescent"

local AS_CPU = os.getenv("CRESCENT_TEST_CUDA_AS_CPU") == "1"
local WHERE = AS_CPU and "cpu" or "cuda:0"
local FLOAT = expect.FLOAT
local DTYPES = expect.DTYPES

local function need_device() if not AS_CPU then expect.need_gpu() end end
local function dev(t) return AS_CPU and t:clone() or t:cuda() end
local function host_ops() return AS_CPU and 0 or T.cuda.stats().host_ops end
local function sync() if not AS_CPU then T.cuda.synchronize() end end
local function shape_str(t) return "{" .. table.concat(t.shape, ",") .. "}" end

-- got (computed on the device) is want (the CPU's): device, dtype, shape, then every value (NaN
-- equals NaN; within tol relative and absolute when given). The message names the case, how many
-- elements differ and the first of them (flat position, both values).
local function same(got, want, what, tol)
  if got.device ~= WHERE then error(string.format("%s: result on %s, expected %s", what, got.device, WHERE), 2) end
  if got.dtype ~= want.dtype then error(string.format("%s: dtype %s, expected %s", what, got.dtype, want.dtype), 2) end
  if shape_str(got) ~= shape_str(want) then
    error(string.format("%s: shape %s, expected %s", what, shape_str(got), shape_str(want)), 2)
  end
  local g = got:cpu()
  if g:numel() == 0 then return end
  local bad
  if tol then
    local gd, wd = g:double(), want:double()
    bad = (gd - wd):abs():gt(wd:abs() * tol + tol)
  else
    bad = g:ne(want)
  end
  if FLOAT[want.dtype] then bad = bad:logical_and(g:isnan():logical_and(want:isnan()):logical_not()) end
  if not bad:any():item() then return end
  local first = bad:flatten():nonzero():view(-1)[1]:item()
  error(string.format("%s: %d of %d elements differ; the first at flat position %d: got %s, expected %s", what,
    bad:sum():item(), g:numel(), first, tostring(g:flatten()[first]:item()), tostring(want:flatten()[first]:item())), 2)
end

-- same() for each result of fn(device operands...) against fn(CPU operands...)
local function agree(what, fn, args, tol)
  local dargs = {}
  for i, a in ipairs(args) do dargs[i] = T.is_tensor(a) and dev(a) or a end
  local got, want = { fn(unpack(dargs)) }, { fn(unpack(args)) }
  if #got ~= #want then error(string.format("%s: %d results, expected %d", what, #got, #want), 2) end
  for i = 1, #want do same(got[i], want[i], #want > 1 and (what .. ", result " .. i) or what, tol) end
end

-- Random values of dtype dt: small integers (many duplicates and zeros); floats also get NaN and
-- -0 at a few places.
local function values(shape, dt)
  if dt == "bool" then return T.rand(shape):lt(0.5) end
  local x = (T.randn(shape) * 3):floor()
  if FLOAT[dt] and x:numel() > 0 then
    x = x:masked_fill(T.rand(shape):lt(0.03), 0 / 0):masked_fill(T.rand(shape):lt(0.03), -0.0)
  end
  return x:to(dt)
end

-- The masks a selection is tried with: random, none, all, sparse, the first element only.
local function masks(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local first = T.zeros(n, { dtype = "bool" })
  if n > 0 then first[1] = true end
  return {
    { "random", T.rand(shape):lt(0.5) }, { "none", T.zeros(shape, { dtype = "bool" }) },
    { "all", T.ones(shape, { dtype = "bool" }) }, { "sparse", T.rand(shape):lt(0.001) },
    { "first", first:view(shape) },
  }
end

-- fn raises at the device's next synchronisation (at once on the CPU) with each of `texts`.
local function raises(what, fn, ...)
  local ok, err = pcall(function()
    local r = fn()
    sync()
    if T.is_tensor(r) then local _ = r:cpu() end
  end)
  if ok then error(what .. ": expected an error, got none", 2) end
  err = tostring(err)
  for _, t in ipairs({ ... }) do
    if not err:find(t, 1, true) then error(string.format("%s: error %q does not name %q", what, err, t), 2) end
  end
  if not AS_CPU and not err:find("found by a CUDA kernel", 1, true) then
    error(string.format("%s: error %q does not say a CUDA kernel found it", what, err), 2)
  end
end

local SHAPES = { {}, { 0 }, { 1 }, { 7 }, { 0, 3 }, { 3, 5 }, { 2, 3, 4 }, { 4099 }, { 3, 4096 + 5 } }
local BIG = 3 * 2 ^ 20 + 17  -- more than 700 tiles of 4096, and a partial last one

-- it() for a case on the device: seeded, and no op of it may run on host copies (`what` names
-- them in the failure)
local function device_it(name, seed, what, fn)
  it(name, function()
    need_device()
    T.manual_seed(seed)
    local h = host_ops()
    fn()
    expect.eq(host_ops(), h, what)
  end)
end

describe("CUDA selections", function()
  device_it("masked_select: every dtype and shape, empty / all-true / sparse masks, broadcast and strided operands",
    1, "masked_select: ops on host copies", function()
    for _, dt in ipairs(DTYPES) do
      for _, shape in ipairs(SHAPES) do
        local x = values(shape, dt)
        for _, m in ipairs(masks(shape)) do
          agree(string.format("masked_select %s %s, %s mask", dt, shape_str(x), m[1]), function(a, k) return a:masked_select(k) end, { x, m[2] })
        end
      end
      local x = values({ 3, 5 }, dt)
      agree("masked_select " .. dt .. ", mask {3,1} broadcast", function(a, k) return a:masked_select(k) end, { x, T.rand(3, 1):lt(0.5) })
      agree("masked_select " .. dt .. ", x {5} broadcast", function(a, k) return a:masked_select(k) end, { x[2], T.rand(3, 5):lt(0.5) })
      agree("masked_select " .. dt .. ", strided x", function(a, k) return a:t():masked_select(k) end, { x, T.rand(5, 3):lt(0.5) })
      agree("masked_select " .. dt .. ", 0-d x", function(a, k) return a:masked_select(k) end, { values({}, dt), T.rand(4):lt(0.5) })
    end
  end)

  device_it("masked_select over several blocks (3M elements): half, nearly all and nearly none selected",
    2, "masked_select: ops on host copies", function()
    for _, dt in ipairs({ "float32", "int64", "float16", "bool" }) do
      local x = dt == "bool" and T.rand(BIG):lt(0.3) or (T.randn(BIG) * 1000):to(dt)
      for _, p in ipairs({ 0.5, 0.999, 1e-5 }) do
        agree(string.format("masked_select %s of %d, p = %g", dt, BIG, p), function(a, k) return a:masked_select(k) end, { x, T.rand(BIG):lt(p) })
      end
    end
    for _, n in ipairs({ 511, 512, 513, 4095, 4096, 4097, 8193 }) do  -- (a warp's share of 512, tiles of 4096)
      local v = T.randn(n)
      agree("masked_select of " .. n, function(a, k) return a:masked_select(k) end, { v, v:gt(-0.5) })
      agree("nonzero of " .. n, function(a) return T.nonzero(a) end, { v:gt(1.5) })
    end
    local x = T.randn(1500, 2001)  -- (a 2-D mask of several blocks whose rows straddle tiles)
    agree("masked_select {1500,2001}", function(a, k) return a:masked_select(k) end, { x, x:gt(0.3) })
  end)

  device_it("nonzero / where(cond) / x[mask]: 1-based coordinates for every dtype (NaN counts, -0 does not)",
    3, "nonzero: ops on host copies", function()
    local shapes = { {}, { 0 }, { 0, 3 }, { 5 }, { 3, 4 }, { 2, 3, 4 }, { 2, 2, 2, 2, 2 }, { 4099 }, { 3, 4096 + 5 } }
    for _, dt in ipairs(DTYPES) do
      for _, shape in ipairs(shapes) do
        local x = values(shape, dt)
        local what = string.format("%s %s", dt, shape_str(x))
        agree("nonzero " .. what, function(a) return T.nonzero(a) end, { x })
        if x:dim() > 0 then
          agree("nonzero as_tuple " .. what, function(a) return T.nonzero(a, { as_tuple = true }) end, { x })
          agree("where(cond) " .. what, function(a) return T.where(a:ne(0)) end, { x })
          agree("x[mask] " .. what, function(a, k) return a[k] end, { x, T.rand(shape):lt(0.5) })
        end
      end
      local x = values({ 4, 5, 3 }, dt)
      agree("x[mask] over the first 2 of 3 dims, " .. dt, function(a, k) return a[k] end, { x, T.rand(4, 5):lt(0.5) })
      agree("x:index({T.all, mask}), " .. dt, function(a, k) return a:index({ T.all, k }) end, { x, T.rand(5, 3):lt(0.5) })
      agree("nonzero of a strided " .. dt, function(a) return T.nonzero(a:transpose(1, 3)) end, { x })
    end
    local big = T.randn(BIG)
    agree("nonzero of 3M, 1% nonzero", function(a) return T.nonzero(a) end, { big:gt(2.33):to("float32") })
    agree("nonzero of 3M, all nonzero", function(a) return T.nonzero(a) end, { T.ones(BIG, { dtype = "int32" }) })
    agree("nonzero of {1500,2001}", function(a) return T.nonzero(a) end, { T.randn(1500, 2001):gt(1) })
    agree("x[mask] of 3M", function(a, k) return a[k] end, { big, big:gt(0) })
  end)

  device_it("x:index with several index tensors: int64 / int32, broadcast, slices between them, duplicates, empty",
    4, "index: ops on host copies", function()
    for _, dt in ipairs(DTYPES) do
      local x = values({ 6, 7, 5 }, dt)
      local i1, i2 = T.randint(1, 7, { 10 }), T.randint(1, 8, { 10 })  -- (duplicates)
      local cases = {
        { "two dims", function(a) return a:index({ i1, i2 }) end },
        { "two dims, int32", function(a) return a:index({ i1:int(), i2:int() }) end },
        { "broadcast {4,1} x {1,3}", function(a) return a:index({ i1:narrow(1, 1, 4):view(4, 1), i2:narrow(1, 1, 3):view(1, 3) }) end },
        { "three dims", function(a) return a:index({ i1, i2, T.randint(1, 6, { 10 }) }) end },
        { "dims 1 and 3 (a slice between)", function(a) return a:index({ i1, T.all, T.randint(1, 6, { 10 }) }) end },
        { "dims 2 and 3", function(a) return a:index({ T.all, i2, T.randint(1, 6, { 10 }) }) end },
        { "a range then two dims", function(a) return a:index({ { 2, 5 }, i2, T.randint(1, 6, { 10 }) }) end },
        { "negative-free 2-D mask", function(a) return a:index({ T.rand(6, 7):lt(0.4) }) end },
        { "empty", function(a) return a:index({ T.zeros(0, { dtype = "int64" }), T.zeros(0, { dtype = "int64" }) }) end },
        { "strided self", function(a) return a:transpose(1, 2):index({ i2, i1 }) end },
      }
      for _, c in ipairs(cases) do
        T.manual_seed(40)  -- (the cases that draw indices draw the same on both sides)
        local want = c[2](x)
        T.manual_seed(40)
        same(c[2](dev(x)), want, string.format("index %s %s, %s", dt, shape_str(x), c[1]))
      end
    end
    local x = values({ 6, 7, 5 }, "float32")
    local i1, i2 = T.randint(1, 7, { 4, 1 }), T.randint(1, 8, { 3 })
    same(dev(x):index({ i1, i2 }), x:index({ i1, i2 }), "index of a device tensor by CPU index tensors (PyTorch allows them)")
    x = T.randn(3000, 1000)
    agree("index of 3M positions", function(a, p, q) return a:index({ p, q }) end,
      { x, T.randint(1, 3001, { BIG }), T.randint(1, 1001, { BIG }) })
  end)

  it("x:index with a position out of range raises at the next synchronisation, naming the op and the dim", function()
    need_device()
    local x = dev(T.randn(6, 7, 5))
    raises("index dim 2", function() return x:index({ dev(T.tensor({ 1, 2 })), dev(T.tensor({ 1, 8 })) }) end,
      "index: index 8 is out of range for dim 2 of size 7 (expected 1..7)")
    raises("index dim 1", function() return x:index({ dev(T.tensor({ 0, 2 })), dev(T.tensor({ 1, 3 })) }) end,
      "index: index 0 is out of range for dim 1 of size 6 (expected 1..6)")
    raises("index dim 3", function() return x:index({ T.all, dev(T.tensor({ 1 })), dev(T.tensor({ -1 })) }) end,
      "index: index -1 is out of range for dim 2 of size 5 (expected 1..5)")  -- (dims 2 and 3 moved in front)
    -- the device stays usable, and the next good call is right
    same(x:index({ dev(T.tensor({ 6, 1 })), dev(T.tensor({ 7, 1 })) }), x:cpu():index({ T.tensor({ 6, 1 }), T.tensor({ 7, 1 }) }), "index after the errors")
  end)

  device_it("index_put_ / x[...] = v: unique positions, accumulated duplicates, masks, broadcast values",
    5, "index_put_: ops on host copies", function()
    for _, dt in ipairs(DTYPES) do
      local x = values({ 6, 7, 5 }, dt)
      local rows = select(2, T.rand(6):sort(1)):narrow(1, 1, 4)  -- (4 distinct rows)
      local cols = T.randint(1, 8, { 4 })
      local v = values({ 4, 5 }, dt)
      local d1, d2, d3 = T.tensor({ 1, 1, 2, 1, 6 }), T.tensor({ 3, 3, 3, 3, 7 }), T.tensor({ 5, 5, 5, 5, 1 })
      local dv = (dt == "bool") and T.rand(5):lt(0.5) or T.randint(-3, 4, { 5 }):to(dt)  -- (exact sums)
      -- values on the written tensor's device (PyTorch takes a CPU value only when 0-d); the
      -- positions may stay on the CPU
      local function on(a, t) return t:to(a.device) end
      local cases = {
        { "unique positions", function(a) return a:index_put_({ rows, cols }, on(a, v)) end },
        { "int32 indices", function(a) return a:index_put_({ rows:int(), cols:int() }, on(a, v)) end },
        { "a number", function(a) return a:index_put_({ rows, cols }, dt == "bool" and true or 2) end },
        { "a 0-d value broadcast", function(a) return a:index_put_({ rows, cols }, v[1][1]) end },
        { "accumulate duplicates", function(a) return a:index_put_({ d1, d2, d3 }, on(a, dv), true) end },
        { "accumulate rows", function(a) return a:index_put_({ d1, d2 }, on(a, values({ 5, 5 }, dt):masked_fill(T.zeros(5, 5, { dtype = "bool" }), 0)), true) end },
        { "dims 1 and 3", function(a) return a:index_put_({ rows, T.all, T.randint(1, 6, { 4 }) }, on(a, values({ 4, 7 }, dt))) end },
        { "x[mask2d] = v", function(a) local m = T.rand(6, 7):lt(0.5); a[m] = dt == "bool" and false or 3; return a end },
        { "x[mask3d] = v", function(a) local m = T.rand(6, 7, 5):lt(0.5); a[m] = dt == "bool" and true or -1; return a end },
        { "x[idx] = t", function(a) a[rows] = on(a, values({ 4, 7, 5 }, dt)); return a end },
        { "index_put (a copy)", function(a) return a:index_put({ rows, cols }, on(a, v)) end },
        { "strided self", function(a) a:transpose(1, 3):index_put_({ T.tensor({ 5, 1 }), T.tensor({ 7, 2 }) }, on(a, values({ 2, 6 }, dt))); return a end },
        -- sources read in place through their strides (a KV-cache write's permuted view)
        { "a transposed source", function(a) return a:index_put_({ rows, cols }, on(a, values({ 5, 4 }, dt)):t()) end },
        { "a narrowed, permuted source", function(a) return a:index_copy_(2, T.tensor({ 7, 2 }), on(a, values({ 5, 2, 9 }, dt)):narrow(3, 3, 6):permute(3, 2, 1)) end },
        { "a row broadcast", function(a) return a:index_put_({ rows, cols }, on(a, values({ 1, 5 }, dt)):expand(4, 5)) end },
        { "accumulate a transposed source", function(a) return a:index_put_({ d1, d2 }, on(a, values({ 5, 5 }, dt)):t(), true) end },
      }
      for _, c in ipairs(cases) do
        T.manual_seed(50)
        local want = c[2](x:clone())
        T.manual_seed(50)
        local y = dev(x)
        local got = c[2](y)
        same(got, want, string.format("index_put_ %s, %s", dt, c[1]))
        same(y, c[1] == "index_put (a copy)" and x or want, string.format("index_put_ %s, %s: the tensor written", dt, c[1]))
      end
    end
    -- accumulate over several blocks: 3M positions into 1M (counts stay exact in float32)
    local pos = T.randint(1, 2 ^ 20 + 1, { BIG })
    for _, dt in ipairs({ "float32", "int64", "float64", "int32" }) do
      agree("index_put_ accumulate 3M into 1M, " .. dt, function(a, p, o) return a:index_put_({ p }, o, true) end,
        { T.zeros(2 ^ 20, { dtype = dt }), pos, T.ones(BIG, { dtype = dt }) })
    end
    local p = select(2, T.rand(BIG):sort(1))  -- (distinct positions: one write each)
    agree("index_put_ 3M distinct positions", function(a, q, o) return a:index_put_({ q }, o) end, { T.zeros(BIG), p, T.randn(BIG) })
  end)

  it("index_copy_ of a permuted source (a KV-cache write) is one kernel, no copy first", function()
    expect.need_gpu()
    T.manual_seed(51)
    -- the static GPT-2 cache {2, B, H, S, hd} and c_attn's output {B, 1, 3D} (D = H hd) at batch 3
    local cache, c = T.zeros(2, 3, 4, 10, 8):cuda(), T.randn(3, 1, 96):cuda()
    local new = c:narrow(3, 33, 64):reshape(3, 1, 2, 4, 8):permute(3, 1, 4, 2, 5)
    local at = T.tensor({ 6 }):cuda()
    local k0 = T.cuda.stats().kernel_launches
    cache:index_copy_(4, at, new)
    expect.eq(T.cuda.stats().kernel_launches - k0, 1, "kernels launched")
    expect.eq(cache:cpu():select(4, 6):totable(), new:cpu():select(4, 1):totable(), "slot 6")
    expect.eq(cache:cpu():narrow(4, 1, 5):abs():sum():item(), 0, "the other slots")
  end)

  it("index_put_ with a position out of range raises at the next synchronisation, naming the op", function()
    need_device()
    local y = dev(T.zeros(6, 4))
    raises("index_put_ dim 1", function() return y:index_put_({ dev(T.tensor({ 1, 9 })) }, dev(T.ones({}))) end,
      "index_put_: index 9 is out of range for dim 1 of size 6 (expected 1..6)")
    raises("index_put_ accumulate dim 2", function() return y:index_put_({ dev(T.tensor({ 2 })), dev(T.tensor({ 5 })) }, dev(T.ones({})), true) end,
      "index_put_: index 5 is out of range for dim 2 of size 4 (expected 1..4)")
    if not AS_CPU then  -- nothing is written for a bad position; the good ones are (the device checks as it goes)
      expect.eq(y:cpu():totable(), { { 1, 1, 1, 1 }, { 0, 0, 0, 0 }, { 0, 0, 0, 0 }, { 0, 0, 0, 0 }, { 0, 0, 0, 0 }, { 0, 0, 0, 0 } },
        "index_put_ after the errors: row 1 written, nothing else")
    end
    local z = dev(T.zeros(3))
    z:index_put_({ dev(T.tensor({ 3, 3 })) }, dev(T.tensor({ 1, 2 }, { dtype = "float32" })), true)
    expect.eq(z:cpu():totable(), { 0, 0, 3 }, "index_put_ after the errors")
  end)

  device_it("unique / unique_consecutive (sorted, inverse, counts), bincount, histc on the device",
    6, "unique / bincount / histc: ops on host copies", function()
    local opts = { return_inverse = true, return_counts = true }
    for _, dt in ipairs({ "float32", "float64", "int32", "int64", "float16", "bfloat16", "bool" }) do
      for _, shape in ipairs({ { 0 }, { 1 }, { 9 }, { 4, 6 }, { 5000 } }) do
        local x = values(shape, dt)
        if FLOAT[dt] then x = x:masked_fill(x:isnan(), 7) end  -- (NaN: PyTorch's unique keeps each apart)
        local what = string.format("%s %s", dt, shape_str(x))
        agree("unique " .. what, function(a) return T.unique(a) end, { x })
        agree("unique inverse / counts " .. what, function(a) return T.unique(a, opts) end, { x })
        agree("unique_consecutive " .. what, function(a) return T.unique_consecutive(a, opts) end, { x })
        agree("unique_consecutive of the sorted " .. what, function(a) return T.unique_consecutive(a:flatten():sort(1), opts) end, { x })
      end
    end
    local ids = T.randint(1, 1001, { BIG })
    agree("unique of 3M in 1..1000", function(a) return T.unique(a, opts) end, { ids })
    agree("unique of 3M distinct", function(a) return T.unique(a, opts) end, { select(2, T.rand(BIG):sort(1)) })
    agree("unique of 3M equal", function(a) return T.unique(a, opts) end, { T.full({ BIG }, 4, { dtype = "int64" }) })
    -- (counted past bincount's first 4096 bins; from a negative value, a slot each)
    agree("unique of 3M in 4000..9000", function(a) return T.unique(a, opts) end, { T.randint(4000, 9001, { BIG }) })
    agree("unique of 3M in -500..500", function(a) return T.unique(a, opts) end,
      { T.randint(-500, 501, { BIG }):int() })
    agree("unique_consecutive of 3M", function(a) return T.unique_consecutive(a, opts) end, { ids:div(300, { rounding_mode = "floor" }):sort(1) })
    for _, dt in ipairs({ "int64", "int32" }) do
      local c = T.randint(0, 30, { 500 }):to(dt)
      agree("bincount " .. dt, function(a) return T.bincount(a) end, { c })
      agree("bincount minlength " .. dt, function(a) return T.bincount(a, nil, 40) end, { c })
      agree("bincount weights " .. dt, function(a, w) return T.bincount(a, w) end, { c, T.randint(0, 5, { 500 }):double() })
      agree("bincount empty " .. dt, function(a) return T.bincount(a, nil, 3) end, { T.zeros(0, { dtype = dt }) })
    end
    agree("bincount of 3M", function(a) return T.bincount(a) end, { ids })
    for _, dt in ipairs({ "float32", "float64" }) do
      local x = (T.randn(2000) * 4):to(dt)
      agree("histc " .. dt, function(a) return T.histc(a, 17, -5, 5) end, { x })
      agree("histc of the data's range " .. dt, function(a) return T.histc(a, 10) end, { x })
    end
    agree("histc of 3M", function(a) return T.histc(a, 100, -3, 3) end, { T.randn(BIG) })
  end)

  device_it("index_copy_ / index_fill_ / scatter_ / argsort / searchsorted / bucketize / repeat_interleave / take_along_dim / cummax / cummin / cumprod",
    7, "surface ops: ops on host copies", function()
    for _, dt in ipairs(DTYPES) do
      local x = values({ 6, 5 }, dt)
      local rows = select(2, T.rand(6):sort(1)):narrow(1, 1, 3)
      local what = dt .. " {6,5}"
      agree("index_copy_ " .. what, function(a, s) return a:clone():index_copy_(1, rows:to(a.device), s) end, { x, values({ 3, 5 }, dt) })
      agree("index_copy_ dim 2 " .. what, function(a, s) return a:clone():index_copy_(2, T.tensor({ 5, 2 }):to(a.device), s) end, { x, values({ 6, 2 }, dt) })
      agree("index_fill_ " .. what, function(a) return a:clone():index_fill_(2, T.tensor({ 4, 1 }):to(a.device), dt == "bool" and true or 9) end, { x })
      agree("scatter_ " .. what, function(a, i, s) return a:clone():scatter_(1, i, s) end,
        { x, select(2, T.rand(6, 5):sort(1)):narrow(1, 1, 4), values({ 4, 5 }, dt) })
      agree("take_along_dim " .. what, function(a, i) return T.take_along_dim(a, i, 2) end, { x, T.randint(1, 6, { 6, 8 }) })
      if dt ~= "bool" then
        local tol = (dt == "float16" or dt == "bfloat16") and 1e-2 or nil
        agree("argsort " .. what, function(a) return a:argsort(2) end, { FLOAT[dt] and x:masked_fill(x:isnan(), 0) or x })
        agree("argsort descending " .. what, function(a) return a:argsort(1, true) end, { x })
        agree("cummax " .. what, function(a) return T.cummax(a, 2) end, { x })
        agree("cummin " .. what, function(a) return T.cummin(a, 1) end, { x })
        agree("cumprod " .. what, function(a) return T.cumprod(a:clamp(-2, 2), 2) end, { x }, tol)
        local b = T.arange(-6, 7, 2):to(dt)
        agree("searchsorted " .. what, function(s, v) return T.searchsorted(s, v) end, { b, x })
        agree("searchsorted right " .. what, function(s, v) return T.searchsorted(s, v, { right = true }) end, { b, x })
        agree("bucketize " .. what, function(v, s) return T.bucketize(v, s) end, { x, b })
      end
      agree("repeat_interleave " .. what, function(a, r) return T.repeat_interleave(a, r, 1) end, { x, T.tensor({ 0, 2, 1, 3, 0, 1 }) })
      agree("repeat_interleave number " .. what, function(a) return T.repeat_interleave(a, 3, 2) end, { x })
    end
    local edges, v = (T.randn(1000) * 2):sort(1), T.randn(BIG) * 2
    v[5] = 0 / 0
    agree("searchsorted of 3M values among 1000 entries", function(s, w) return T.searchsorted(s, w) end, { edges, v })
    agree("searchsorted right, 3M values, 1000 entries", function(s, w) return T.searchsorted(s, w, { right = true }) end, { edges:round(), v:round() })
    agree("bucketize of 3M values, 1000 boundaries", function(w, s) return T.bucketize(w, s) end, { v, edges })
    agree("searchsorted of 8 rows of 5000 entries", function(s, w) return T.searchsorted(s, w) end,
      { T.randint(0, 100, { 8, 5000 }):sort(2), T.randint(-5, 105, { 8, 3000 }) })
    agree("repeat_interleave of 3M counts", function(a, r) return T.repeat_interleave(a, r) end, { T.randn(BIG), T.randint(0, 3, { BIG }) })
  end)

  -- (targets of 96 MB, larger than any current GPU's L2)
  device_it("a 1-D scatter_add / index_add into a large target: random, sorted and mixed positions",
    12, "large targets: ops on host copies", function()
    for dt, bytes in pairs({ float32 = 4, float64 = 8, int64 = 8, int32 = 4 }) do
      local size = 96 * 2 ^ 20 / bytes
      local n = math.floor(size / 3)
      local tol = FLOAT[dt] and 1e-5 or nil
      local rand = T.randint(1, size + 1, { n })
      local sorted = rand:sort()
      local mixed = T.cat({ sorted:narrow(1, 1, n / 2), rand:narrow(1, n / 2 + 1, n - n / 2) })
      local src = FLOAT[dt] and T.randn(n):to(dt) or T.randint(-50, 50, { n }):to(dt)
      local target = FLOAT[dt] and T.randn(size):to(dt) or T.randint(-50, 50, { size }):to(dt)
      for what, pos in pairs({ random = rand, sorted = sorted, mixed = mixed }) do
        agree(dt .. " scatter_add, " .. what, function(o, i, s) return o:scatter_add(1, i, s) end,
          { target, pos, src }, tol)
        agree(dt .. " index_add_, " .. what, function(o, i, s) return o:clone():index_add_(1, i, s, { alpha = 3 }) end,
          { target, pos, src }, tol)
      end
    end
    raises("scatter_add into a large target, a position past it", function()
      local i = T.randint(1, 2 ^ 24 + 1, { 2 ^ 23 })
      i[2 ^ 22 + 5] = 2 ^ 24 + 7
      return dev(T.zeros(2 ^ 24)):scatter_add(1, dev(i), dev(T.ones(2 ^ 23)))
    end, "scatter_add", tostring(2 ^ 24 + 7))
  end)

  device_it("histograms: a long 1-D index_add into shared-memory bins, counting, warp-grouped counts, bincount / histc",
    9, "histograms: ops on host copies", function()
    for _, dt in ipairs(DTYPES) do
      local tol = (dt == "float16" or dt == "bfloat16") and 2e-2 or nil
      for _, bins in ipairs({ 1, 37, 1000, 6000, 20000 }) do
        if tol and bins == 1 then goto next end  -- (3000 into one bin: 16-bit sums round by order)
        local n = math.max(3000, 3 * bins)
        local what = string.format("%s, %d into %d", dt, n, bins)
        local pos, src = T.randint(1, bins + 1, { n }), values({ n }, dt)
        if FLOAT[dt] then src = src:masked_fill(src:isnan(), 1) end
        agree("index_add " .. what, function(o, i, s) return o:index_add(1, i, s) end, { values({ bins }, dt), pos, src }, tol)
        agree("index_add alpha " .. what, function(o, i, s) return o:index_add(1, i, s, { alpha = 2 }) end,
          { T.zeros(bins, { dtype = dt }), pos, src }, tol)
        local one = T.ones(1, { dtype = dt }):expand(n)  -- (a constant source: counted)
        agree("counting " .. what, function(o, i, s) return o:index_add(1, i, s) end, { T.zeros(bins, { dtype = dt }), pos, one }, tol)
        agree("counting, skewed " .. what, function(o, i, s) return o:index_add(1, i, s) end,
          { T.zeros(bins, { dtype = dt }), pos:remainder(math.min(3, bins)) + 1, one }, tol)
        agree("into a strided target " .. what, function(o, i, s) return o:select(2, 2):index_add_(1, i, s) end,
          { T.zeros(bins, 2, { dtype = dt }), pos, src }, tol)
        ::next::
      end
    end
    local z = T.full({ 40 }, -0.0, { dtype = "float32" })  -- (untouched bins keep -0: nothing is added to them)
    agree("-0 in untouched bins", function(o, i, s) return o:index_add(1, i, s):reciprocal() end,
      { z, T.randint(1, 21, { 4000 }), T.randn(4000) }, 1e-5)  -- (float sums: the order is the device's)
    local ids = T.randint(0, 1000, { BIG })
    agree("bincount of 3M into 1000", function(a) return T.bincount(a) end, { ids })
    agree("bincount of 3M into 50000", function(a) return T.bincount(a) end, { ids * 50 })
    -- (values past the first pass's 4096 bins: a second pass, in shared memory or by atomics)
    agree("bincount of 3M into 10000", function(a) return T.bincount(a) end, { ids * 10 })
    agree("bincount of 3M into 7000, float64 weights", function(a, w) return T.bincount(a, w) end, { ids * 7, T.rand(BIG):double() }, 1e-9)
    agree("bincount of 3M, minlength 9000", function(a) return T.bincount(a, nil, 9000) end, { ids })
    agree("bincount of int32 5000 into 300000", function(a) return T.bincount(a) end, { T.randint(0, 300000, { 5000 }):int() })
    agree("bincount of 3M, float32 weights", function(a, w) return T.bincount(a, w) end, { ids, T.rand(BIG) }, 1e-4)
    agree("bincount of 3M, float64 weights", function(a, w) return T.bincount(a, w) end, { ids, T.rand(BIG):double() }, 1e-9)
    agree("histc of 3M, 20000 bins", function(a) return T.histc(a, 20000, -2, 2) end, { T.randn(BIG) })
    agree("histc float16", function(a) return T.histc(a, 30, -2, 2) end, { T.randn(5000):half() })
    raises("index_add of a long line, a position past the bins", function()
      local i = T.randint(1, 11, { 5000 })
      i[4321] = 11
      return dev(T.zeros(10)):index_add(1, dev(i), dev(T.ones(1):expand(5000)))
    end, "index_add", "11")
  end)

  device_it("radix sort of long lines: every dtype, NaN / -0 / inf / extremes, ties, descending, rows, columns, topk",
    10, "radix sort: ops on host copies", function()
    local function sorts(what, x, d)
      for _, desc in ipairs({ false, true }) do
        local w = string.format("%s%s", what, desc and ", descending" or "")
        agree("sort " .. w, function(a) return a:sort(d, desc) end, { x })
      end
    end
    for _, dt in ipairs(DTYPES) do
      local x = values({ 40000 }, dt)  -- (more than two tiles of 16384; many ties)
      if FLOAT[dt] then
        x[5], x[6], x[39999] = 1 / 0, -1 / 0, -1 / 0
      elseif dt == "int64" then
        x[5], x[6] = 2 ^ 62, -2 ^ 63  -- (the smallest int64; doubles reach no larger max exactly)
      elseif dt == "int32" then
        x[5], x[6] = 2147483647, -2147483648
      end
      sorts(dt .. " {40000}", x, 1)
      sorts(dt .. " rows {3,5000}", values({ 3, 5000 }, dt), 2)
      sorts(dt .. " columns {4100,3}", values({ 4100, 3 }, dt), 1)
      if dt ~= "bool" then
        agree("topk 3000 of " .. dt, function(a) return a:topk(3000, 1, false) end, { x })
        agree("argsort " .. dt, function(a) return a:argsort(1, true) end, { x })
      end
    end
    local r = T.randn(BIG)
    r[77] = 0 / 0
    sorts("float32 of 3M distinct", r, 1)
    sorts("float32 of 3M, few values", (r * 2):round(), 1)
    sorts("int64 of 3M", T.randint(-2 ^ 40, 2 ^ 40, { BIG }), 1)
    agree("sort of a {2,9000,2} middle dim", function(a) return a:sort(2) end, { T.randn(2, 9000, 2) })
    -- onesweep's tiles (4096 keys, 2048 of 64 bits: whole, one past, one short), all-equal keys (one
    -- digit a pass), zeros of both signs (equal: position order) with NaNs, lines of a partial tile
    for _, n in ipairs({ 4097, 8191, 8192, 8193 }) do sorts("float32 {" .. n .. "}", values({ n }, "float32"), 1) end
    for _, n in ipairs({ 6143, 6144, 6145 }) do sorts("int64 {" .. n .. "}", values({ n }, "int64"), 1) end
    sorts("all-equal float32 of 100000", T.full({ 100000 }, 2.5), 1)
    sorts("all-equal int64 of 5000", T.full({ 5000 }, -3, { dtype = "int64" }), 1)
    local z = T.randn(50000):sign() * 0
    z[7], z[30000] = 0 / 0, 0 / 0
    sorts("-0 / 0 / NaN of 50000", z, 1)
    sorts("float64 rows {5,6145}", values({ 5, 6145 }, "float64"), 2)
    -- sizes 2^k +- 1 and 16M (the first pass reads the values, the last writes the result)
    for _, n in ipairs({ 2 ^ 16 - 1, 2 ^ 16 + 1, 2 ^ 20 + 1 }) do sorts("float32 {" .. n .. "}", values({ n }, "float32"), 1) end
    sorts("bfloat16 {65537}", values({ 65537 }, "bfloat16"), 1)
    local big = T.randn(2 ^ 24)
    big[3], big[4], big[5], big[6] = 0 / 0, -0.0, 1 / 0, -1 / 0
    sorts("float32 of 16M", big, 1)
  end)

  device_it("scatter_reduce (sum, prod, mean, amax, amin; include_self or not) by atomics on the device",
    11, "scatter_reduce: ops on host copies", function()
    for _, dt in ipairs(DTYPES) do
      if dt ~= "bool" then
        local tol = (dt == "float16" or dt == "bfloat16") and 2e-2 or nil
        for _, red in ipairs({ "sum", "prod", "mean", "amax", "amin" }) do
          for _, inc in ipairs({ true, false }) do
            local what = string.format("%s %s include_self=%s", dt, red, tostring(inc))
            local f = function(d) return function(a, i, s) return a:scatter_reduce(d, i, s, red, { include_self = inc }) end end
            agree("scatter_reduce dim 1 " .. what, f(1), { values({ 6, 5 }, dt), T.randint(1, 7, { 8, 5 }), values({ 8, 5 }, dt) }, tol)
            agree("scatter_reduce dim 2, a smaller index " .. what, f(2),
              { values({ 4, 9 }, dt), T.randint(1, 10, { 3, 12 }), values({ 4, 14 }, dt) }, tol)
            agree("scatter_reduce strided " .. what, f(1),
              { values({ 5, 7 }, dt):t(), T.randint(1, 8, { 9, 5 }), values({ 5, 9 }, dt):t() }, tol)
          end
        end
      end
    end
    local big = T.randint(1, 1001, { BIG })  -- (many hits a target: every combination contends)
    for _, red in ipairs({ "sum", "mean", "amax", "amin" }) do
      for _, inc in ipairs({ true, false }) do
        agree(string.format("scatter_reduce of 3M into 1000, %s, include_self=%s", red, tostring(inc)),
          function(a, i, s) return a:scatter_reduce(1, i, s, red, { include_self = inc }) end,
          { T.randn(1000), big, T.randn(BIG) }, 1e-3)
        agree(string.format("scatter_reduce of 3M int64 into 1000, %s, include_self=%s", red, tostring(inc)),
          function(a, i, s) return a:scatter_reduce(1, i, s, red, { include_self = inc }) end,
          { T.randint(-50, 50, { 1000 }), big, T.randint(-1000, 1000, { BIG }) })
      end
    end
    agree("scatter_reduce prod of 3M into 1000", function(a, i, s) return a:scatter_reduce(1, i, s, "prod") end,
      { T.ones(1000), big, T.ones(BIG):masked_fill(T.rand(BIG):lt(0.001), -1) })
    raises("scatter_reduce, a position past dim 1", function()
      return dev(T.zeros(4)):scatter_reduce(1, dev(T.tensor({ 1, 5 })), dev(T.ones(2)), "amax")
    end, "scatter_reduce", "5")
  end)

  -- (not device_it: narrowing the key columns at many offsets exhausts the eager CUDA path's
  -- programs per op, and later ones run on host copies - README "Not yet")
  it("unique(dim =): rows ranked lexicographically by whole-tensor sorts on the device", function()
    need_device()
    T.manual_seed(12)
    for _, dt in ipairs(DTYPES) do
      for _, shape in ipairs({ { 0, 3 }, { 4, 0 }, { 1, 5 }, { 30, 3 }, { 6, 4, 2 }, { 5000, 2 } }) do
        local x = dt == "bool" and T.rand(shape):lt(0.5) or T.randint(-2, 3, shape):to(dt)
        for k = 1, #shape do
          local what = string.format("%s %s dim %d", dt, shape_str(x), k)
          agree("unique " .. what, function(a) return T.unique(a, { dim = k, return_inverse = true, return_counts = true }) end, { x })
        end
      end
    end
    agree("unique of 3M rows of 2, dim 1", function(a) return T.unique(a, { dim = 1, return_counts = true }) end,
      { T.randint(0, 40, { BIG, 2 }) })
    agree("unique of 2000 rows of 70 columns, dim 1", function(a) return T.unique(a, { dim = 1, return_inverse = true }) end,
      { T.randint(0, 2, { 2000, 70 }) })
  end)

  it("compiled functions break at a data-dependent size and select on the device", function()
    need_device()
    T.manual_seed(8)
    local f = T.compile(function(a, m) return (a * 2):masked_select(m):sum() + a[m:logical_not()]:numel() end)
    for _, n in ipairs({ 10, 5000, 5000, 70000 }) do
      local x = T.randint(-5, 6, { n }):float()
      local m = x:gt(0)
      same(f(dev(x), dev(m)), f(x, m), "compiled masked_select, " .. n .. " elements")
    end
  end)
end)
