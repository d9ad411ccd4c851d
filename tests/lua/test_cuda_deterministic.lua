-- T.use_deterministic_algorithms (vm/deterministic.hpp): the setting itself, then on CUDA the
-- ordered scatter-add (index_add, scatter_add and the gradients of embedding / index_select: the
-- same bits every run, the atomic path's values within rounding) and PyTorch's error for the ops
-- without a deterministic path. The GPU cases skip cleanly without one.
local T = require "crescent"

local errs = expect.error_checker("test_cuda_deterministic.lua")
local need_gpu = expect.need_gpu

-- fn() with the setting on (warn_only as given), the previous one back even when fn raises
local with_determinism = require "with_determinism"
local function deterministic(fn, warn_only) with_determinism(true, fn, warn_only) end

local function bits(x) return x:cpu():double():totable() end

describe("deterministic algorithms", function()
  it("T.use_deterministic_algorithms sets the mode PyTorch's way and checks its arguments", function()
    expect.eq(T.are_deterministic_algorithms_enabled(), false)
    T.use_deterministic_algorithms(true)
    expect.eq({ T.are_deterministic_algorithms_enabled(), T.is_deterministic_algorithms_warn_only_enabled() }, { true, false })
    T.use_deterministic_algorithms(true, { warn_only = true })
    expect.eq({ T.are_deterministic_algorithms_enabled(), T.is_deterministic_algorithms_warn_only_enabled() }, { true, true })
    T.use_deterministic_algorithms(false)
    expect.eq({ T.are_deterministic_algorithms_enabled(), T.is_deterministic_algorithms_warn_only_enabled() }, { false, false })
    errs(function() T.use_deterministic_algorithms(1) end, "use_deterministic_algorithms", "expected a boolean, got 1")
    errs(function() T.use_deterministic_algorithms(true, { warn = true }) end, "use_deterministic_algorithms",
      "unknown option 'warn'")
    errs(function() T.use_deterministic_algorithms(true, { warn_only = 1 }) end, "use_deterministic_algorithms",
      "warn_only expected a boolean")
    expect.eq(T.are_deterministic_algorithms_enabled(), false)
    -- the CPU's scatter-add is in index order either way
    local idx = T.randint(1, 4, { 1000 }):long()
    local src = T.randn(1000, 3)
    local want = T.zeros(3, 3):index_add(1, idx, src)
    deterministic(function() expect.eq(bits(T.zeros(3, 3):index_add(1, idx, src)), bits(want)) end)
  end)

  it("the CUDA scatter-add family gives the same bits every run, near the atomic path's values", function()
    need_gpu()
    T.manual_seed(77)
    for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16" }) do
      local half = dt == "float16" or dt == "bfloat16"
      -- many duplicates: 20000 rows into 50, a 1-D line into 7 bins (the histogram kernel's case),
      -- scatter_add by a full index along dim 2
      local idx = T.randint(1, 51, { 20000 }):long():cuda()
      local src = T.randn(20000, 64):to(dt):cuda()
      local line_idx, line = T.randint(1, 8, { 100000 }):long():cuda(), T.randn(100000):to(dt):cuda()
      local sidx, ssrc = T.randint(1, 6, { 30, 400 }):long():cuda(), T.randn(30, 400):to(dt):cuda()
      local function run(d)
        return { T.zeros(50, 64, { dtype = d, device = "cuda" }):index_add(1, idx, src:to(d), { alpha = 0.5 }),
                 T.zeros(7, { dtype = d, device = "cuda" }):index_add(1, line_idx, line:to(d)),
                 T.ones(30, 5, { dtype = d, device = "cuda" }):scatter_add(2, sidx, ssrc:to(d)) }
      end
      -- within rounding of the atomic path; 16-bit floats, which that path rounds at every add,
      -- against float64 (the ordered path sums in float and rounds once)
      local atomic = run(half and "float64" or dt)
      deterministic(function()
        local first = run(dt)
        for _ = 1, 3 do
          local again = run(dt)
          for i = 1, 3 do expect.eq(bits(again[i]), bits(first[i]), dt .. " case " .. i .. " run to run") end
        end
        for i = 1, 3 do
          expect.eq(first[i].dtype, dt)
          expect.close(first[i]:double(), atomic[i]:double(), half and 1e-2 or 1e-4, half and 1e-2 or 1e-3)
        end
      end)
    end
  end)

  it("embedding's and index_select's gradients on CUDA are deterministic under the setting", function()
    need_gpu()
    T.manual_seed(3)
    local ids = T.randint(1, 101, { 8, 512 }):long():cuda()  -- (4096 positions into 100 rows)
    local go = T.randn(8, 512, 96):cuda()
    local function grads()
      local w = T.zeros(100, 96, { device = "cuda", requires_grad = true })
      T.embedding(ids, w):backward(go)
      local x = T.zeros(100, 96, { device = "cuda", requires_grad = true })
      x:index_select(1, ids:view(-1)):backward(go:view(4096, 96))
      return { w.grad, x.grad }
    end
    local atomic = grads()
    deterministic(function()
      local first, again = grads(), grads()
      for i = 1, 2 do
        expect.eq(bits(again[i]), bits(first[i]), "gradient " .. i .. " run to run")
        expect.close(first[i], atomic[i], 1e-4, 1e-3)
      end
    end)
  end)

  it("x[idx]'s gradient and index_put_'s accumulate on CUDA are deterministic under the setting (issue 34)", function()
    need_gpu()
    T.manual_seed(5)
    local idx = T.randint(1, 41, { 6000 }):long():cuda()  -- (6000 positions into 40 rows: many repeats)
    local rows, cols = T.randint(1, 41, { 3000 }):long():cuda(), T.randint(1, 9, { 3000 }):long():cuda()
    local go, src = T.randn(6000, 24):cuda(), T.randn(3000):cuda()
    local function results(dt)
      local x = T.zeros(40, 24, { device = "cuda", dtype = dt, requires_grad = true })
      x[idx]:backward(go:to(dt))
      local y = T.zeros(40, 8, { device = "cuda", dtype = dt })
      y:index_put_({ rows, cols }, src:to(dt), true)
      local z = T.zeros(40, 8, { device = "cuda", dtype = dt }):t()  -- (a strided self)
      z:index_put_({ cols, rows }, src:to(dt), true)
      return { x.grad, y, z }
    end
    local atomic = results("float32")
    for _, dt in ipairs({ "float32", "float64", "bfloat16" }) do
      deterministic(function()
        local first, again = results(dt), results(dt)
        for i = 1, 3 do
          expect.eq(bits(again[i]), bits(first[i]), dt .. " result " .. i .. " run to run")
          -- (bfloat16: summed in float, rounded once; its inputs rounded to 8 bits, 150 of them a
          -- gradient row: about 0.03 from the float32 sums)
          expect.close(first[i]:float(), atomic[i], dt == "bfloat16" and 0.1 or 1e-4, dt == "bfloat16" and 0.1 or 1e-3)
        end
      end)
    end
    deterministic(function()  -- a bad position still raises, at the next synchronisation
      local ok, err = pcall(function()
        return T.zeros(4, { device = "cuda" }):index_put_({ T.tensor({ 1, 5 }):long():cuda() }, T.ones(2):cuda(), true):cpu()
      end)
      expect.eq(ok, false)
      expect.eq(tostring(err):find("index 5 is out of range", 1, true) ~= nil, true, tostring(err))
    end)
  end)

  it("CUDA ops without a deterministic path raise PyTorch's error (warn_only: they run)", function()
    need_gpu()
    local x = T.zeros(4, { device = "cuda" })
    local idx, src = T.tensor({ 1, 1, 3 }):long():cuda(), T.tensor({ 1, 2, 3 }):float():cuda()
    deterministic(function()
      errs(function() x:scatter_reduce(1, idx, src, "sum") end, "scatter_reduce",
        "does not have a deterministic implementation on CUDA", "warn_only = true")
      -- order-free reductions and integers run
      expect.eq(x:scatter_reduce(1, idx, src, "amax"):cpu():totable(), { 2, 0, 3, 0 })
      expect.eq(x:long():scatter_reduce(1, idx, src:long(), "sum"):cpu():totable(), { 3, 0, 3, 0 })
      -- masked_select's gradient writes each selected position once: it runs
      local y = T.randn(5, 3, { device = "cuda", requires_grad = true })
      y:masked_select(y:detach():gt(0)):sum():backward()
      expect.eq(y.grad:cpu():double():totable(), y:detach():gt(0):double():cpu():totable())
    end)
    deterministic(function()
      expect.eq(x:scatter_reduce(1, idx, src, "sum"):cpu():totable(), { 3, 0, 3, 0 })
    end, true)
  end)
end)
