-- Matmul with fused epilogues (vm/ops/epilogue.cpp, the rewrite in vm/graph/patterns.cpp):
-- _addmm_epilogue against the ops it stands for on the CPU (every activation, residual,
-- transposed weight), the rewrite inside compiled functions (the optimised graph holds the fused
-- op and gives eager's values), T.backends.cuda.matmul.allow_tf32; on CUDA (skipped without a
-- GPU) cuBLASLt's epilogues in float32 / float16 / bfloat16 against the CPU, a GPT-2-style MLP
-- compiled to two fused calls (and the residual add at one row), and the GEMV kernel of up to 4 rows
-- (vm/kernels/cuda/gemv.hpp): both weight layouts, every epilogue, the layouts it leaves to cuBLAS.
local T = require "crescent"
local work = require "cuda_work"
local S = expect
local dumps = require "graph_dumps"

S.covers("_addmm_epilogue")

-- The unfused form: act(x @ w + b) + r (w {K, N}, or linear's {N, K} when transposed).
local function reference(x, w, b, r, act, transposed)
  local y = T.matmul(x, transposed and w:t() or w)
  if b then y = y + b end
  if act == "relu" then y = T.relu(y) elseif act == "gelu_tanh" then y = T.gelu(y, { approximate = "tanh" }) end
  return r and y + r or y
end

local function operands(dt, M, K, N, transposed, dev)
  local on = function(t) return t:to(dt):to(dev or "cpu") end
  return on(T.randn(M, K)), on(transposed and T.randn(N, K) or T.randn(K, N)), on(T.randn(N)), on(T.randn(M, N))
end

-- (sums of K products in another blocking: their rounding, relative to the terms' size)
local TOL = { float64 = { 1e-12, 1e-11 }, float32 = { 1e-5, 1e-4 }, bfloat16 = { 1e-2, 1e-2 } }

describe("_addmm_epilogue on the CPU", function()
  it("equals the product, bias add, activation and residual add it stands for", function()
    T.manual_seed(1)
    for _, dt in ipairs { "float64", "float32", "bfloat16" } do
      -- (one tile; three tiles of rows, the last partial; two of columns: vm/ops/linalg.cpp)
      for _, shape in ipairs { { 1, 48, 40 }, { 70, 48, 40 }, { 600, 64, 200 }, { 3, 512, 2000 } } do
        for _, act in ipairs { "none", "relu", "gelu_tanh" } do
          for _, tr in ipairs { false, true } do
            local x, w, b, r = operands(dt, shape[1], shape[2], shape[3], tr)
            local what = ("%s %s %s transposed %s"):format(dt, table.concat(shape, "x"), act, tostring(tr))
            local rt, at = unpack(TOL[dt])
            S.close(T._addmm_epilogue(x, w, b, nil, act, tr), reference(x, w, b, nil, act, tr), rt, at, what)
            S.close(T._addmm_epilogue(x, w, b, r, act, tr), reference(x, w, b, r, act, tr), rt, at, what .. " + r")
            S.close(T._addmm_epilogue(x, w, nil, r, act, tr), reference(x, w, nil, r, act, tr), rt, at, what .. " no bias")
          end
        end
      end
    end
    local x3 = T.randn(2, 5, 8)
    local w, b, r = T.randn(8, 3), T.randn(3), T.randn(2, 5, 3)
    S.close(T._addmm_epilogue(x3, w, b, r), reference(x3, w, b, r), 1e-5, 1e-4)  -- batch dims fold into rows
    S.close(T._addmm_epilogue(x3:transpose(1, 2):contiguous():transpose(1, 2), w, b), reference(x3, w, b), 1e-5, 1e-4)
  end)

  it("names the op, the expectation and what was given on misuse; has no gradient", function()
    local x, w, b = T.randn(4, 8), T.randn(8, 3), T.randn(3)
    S.errors(function() T._addmm_epilogue(x, T.randn(7, 3), b) end, "_addmm_epilogue: .*does not fit weight")
    S.errors(function() T._addmm_epilogue(x, w, T.randn(4)) end, "_addmm_epilogue: bias expected shape {3}")
    S.errors(function() T._addmm_epilogue(x, w, b, T.randn(3, 3)) end, "_addmm_epilogue: residual expected the result's shape")
    S.errors(function() T._addmm_epilogue(x, w, b, nil, "gelu") end, '_addmm_epilogue: activation expected "none"')
    S.errors(function() T._addmm_epilogue(x, w:double(), b) end, "_addmm_epilogue: weight expected a float32 tensor")
    local xg = T.randn(4, 8, { requires_grad = true })
    local y = T._addmm_epilogue(xg, w, b):sum()
    S.errors(function() y:backward() end, "_addmm_epilogue: derivative not implemented")
  end)
end)

-- fn compiled, called until its graph is optimised (the debug dump written), checked against eager.
local function compiled_graph(fn, args)
  local texts, got = dumps.capture(function()
    local f = T.compile(fn)
    for _ = 1, 4 do T.no_grad(f, unpack(args)) end
    T.compiler.wait()
    return T.no_grad(f, unpack(args))
  end)
  return got, table.concat(texts, "\n")
end

local function mlp(x, w1, b1, w2, b2)  -- GPT-2's MLP with its residual
  return x + (T.matmul(T.gelu(T.matmul(x, w1) + b1, { approximate = "tanh" }), w2) + b2)
end

describe("the epilogue rewrite in compiled functions", function()
  it("fuses GPT-2's MLP (gelu tanh, then bias + residual) and gives eager's values", function()
    T.manual_seed(2)
    local args = { T.randn(2, 70, 32), T.randn(32, 128) * 0.1, T.randn(128), T.randn(128, 32) * 0.1, T.randn(32) }
    local got, text = compiled_graph(mlp, args)
    S.close(got, mlp(unpack(args)), 1e-5, 1e-5)
    local optimised = dumps.optimised(text) or text
    local _, fused = optimised:gsub("= _addmm_epilogue%(", "")
    S.eq(fused, 2, optimised)
  end)

  it("fuses linear with relu; the bias only before the erf gelu; nothing of a product used twice", function()
    T.manual_seed(3)
    local lin = T.nn.Linear(16, 24)
    local x0 = T.randn(5, 16)
    local got, text = compiled_graph(function(x) return T.relu(lin(x)) end, { x0 })
    S.close(got, T.no_grad(function() return T.relu(lin(x0)) end))
    S.truthy(text:find("_addmm_epilogue(", 1, true), text)
    local x, w, b = T.randn(5, 16), T.randn(16, 8), T.randn(8)
    local _, erf = compiled_graph(function(a) return T.gelu(T.matmul(a, w) + b) end, { x })
    local opt = dumps.optimised(erf)
    S.truthy(opt:find('_addmm_epilogue(%0, %1, %3, nil, "none", false)', 1, true) and opt:find("= gelu(", 1, true), erf)
    local got2, twice = compiled_graph(function(a) local p = T.matmul(a, w) return p + b, p * 2 end, { x })
    S.close(got2, T.matmul(x, w) + b)
    S.truthy(not dumps.optimised(twice):find("_addmm_epilogue", 1, true), twice)
  end)
end)

describe("T.backends.cuda.matmul.allow_tf32", function()
  it("is false by default, takes booleans, and rejects other settings", function()
    S.eq(T.backends.cuda.matmul.allow_tf32, false)
    T.backends.cuda.matmul.allow_tf32 = true
    S.eq(T.backends.cuda.matmul.allow_tf32, true)
    T.backends.cuda.matmul.allow_tf32 = false
    S.eq(T.backends.cuda.matmul.allow_tf32, false)
    S.errors(function() T.backends.cuda.matmul.allow_tf32 = 1 end, "allow_tf32: expected a boolean, got number")
    S.errors(function() T.backends.cuda.matmul.allow_fp16 = true end, "unknown setting 'allow_fp16'")
  end)
end)

describe("cuBLASLt epilogues on CUDA", function()
  it("give the CPU op's values: float32, float16, bfloat16, every activation, residual, layouts", function()
    S.need_gpu()
    T.manual_seed(4)
    -- (the result rounded once to its dtype; sums of K terms of about 1 in float32)
    local tol = { float32 = { 1e-4, 1e-4 }, float16 = { 4e-3, 2e-3 }, bfloat16 = { 1.6e-2, 8e-3 } }
    for _, dt in ipairs { "float32", "float16", "bfloat16" } do
      for _, shape in ipairs { { 1, 768, 3072 }, { 7, 64, 40 }, { 128, 256, 96 } } do
        for _, act in ipairs { "none", "relu", "gelu_tanh" } do
          for _, tr in ipairs { false, true } do
            local x, w, b, r = operands("float32", shape[1], shape[2], shape[3], tr)
            local d = function(t) return t:to(dt):cuda() end
            local what = ("%s %s %s transposed %s"):format(dt, table.concat(shape, "x"), act, tostring(tr))
            local want = reference(x:to(dt):float(), w:to(dt):float(), b:to(dt):float(), r:to(dt):float(), act, tr)
            local got = T._addmm_epilogue(d(x), d(w), d(b), d(r), act, tr)
            S.eq(got.dtype, dt, what)
            S.close(got:float():cpu(), want, tol[dt][1], tol[dt][2] * shape[2] ^ 0.5, what)
          end
        end
      end
    end
  end)

  it("runs GPT-2's MLP compiled as two fused calls, also under TF32", function()
    S.need_gpu()
    T.manual_seed(5)
    local w = { T.randn(768, 3072) * 0.02, T.randn(3072), T.randn(3072, 768) * 0.02, T.randn(768) }
    for i, a in ipairs(w) do w[i] = a:cuda() end
    -- (one row: the GEMV kernel, vm/kernels/cuda/gemv.hpp, and the residual add a kernel of its own,
    -- which in a model joins the next layer norm's; eight: cuBLASLt, the residual in its epilogue)
    for _, case in ipairs { { 1, { 3, 0 } }, { 8, { 0, 2 } } } do
      local x = T.randn(1, case[1], 768):cuda()
      local f = T.compile(mlp)
      for _ = 1, 4 do T.no_grad(f, x, unpack(w)) end
      T.compiler.wait()
      local kernels, blas, got = work(function() return T.no_grad(f, x, unpack(w)) end)
      S.close(got:cpu(), mlp(x, unpack(w)):cpu(), 1e-4, 1e-4)
      S.eq({ kernels, blas }, case[2], "kernels and cuBLAS calls a step")
      T.backends.cuda.matmul.allow_tf32 = true
      local tf = T.no_grad(f, x, unpack(w))
      T.backends.cuda.matmul.allow_tf32 = false
      S.close(tf:cpu(), got:cpu(), 2e-2, 2e-2)
    end
  end)
end)

describe("the GEMV kernel on CUDA (up to 4 rows, linear's weight layout)", function()
  -- (one rounding of a float sum of K terms of about 1)
  local tol = { float32 = { 1e-4, 1e-4 }, float16 = { 4e-3, 2e-3 }, bfloat16 = { 1.6e-2, 8e-3 } }

  it("gives the CPU op's values with every epilogue, as one kernel and no cuBLAS call", function()
    S.need_gpu()
    T.manual_seed(6)
    for _, dt in ipairs { "float32", "float16", "bfloat16" } do
      -- (K = 16384 at 4 rows: x in several tiles of shared memory; N = 50257: rows walked grid-stride)
      -- ({K, N} weights: K = 64 in one block, K >= 512 split over a cluster; N = 50256: many tiles)
      local shapes = { { 1, 768, 2304, true }, { 2, 3072, 768, true }, { 3, 64, 5, true }, { 4, 16384, 40, true },
                       { 1, 64, 50257, true }, { 1, 768, 2304, false }, { 2, 3072, 768, false }, { 3, 64, 40, false },
                       { 4, 520, 24, false }, { 1, 64, 50256, false } }
      for _, shape in ipairs(shapes) do
        for _, act in ipairs { "none", "relu", "gelu_tanh" } do
          local tr = shape[4]
          local x, w, b, r = operands("float32", shape[1], shape[2], shape[3], tr)
          local d = function(t) return t:to(dt):cuda() end
          local what = ("%s %s %s transposed %s"):format(dt, table.concat(shape, "x", 1, 3), act, tostring(tr))
          local want = reference(x:to(dt):float(), w:to(dt):float(), b:to(dt):float(), r:to(dt):float(), act, tr)
          local dx, dw, db, dr = d(x), d(w), d(b), d(r)
          local kernels, blas, got = work(function() return T._addmm_epilogue(dx, dw, db, dr, act, tr) end)
          S.eq({ kernels, blas }, { 1, 0 }, what .. ": kernels and cuBLAS calls")
          S.close(got:float():cpu(), want, tol[dt][1], tol[dt][2] * shape[2] ^ 0.5, what)
        end
      end
    end
  end)

  it("runs linear and matmul of a few rows; other layouts and 5 rows keep cuBLAS", function()
    S.need_gpu()
    T.manual_seed(7)
    local w, b = T.randn(96, 64):cuda(), T.randn(96):cuda()
    local x = T.randn(3, 64):cuda()
    for _, rows in ipairs { { 1, 64 }, { 4, 64 }, { 1, 1, 64 }, { 2, 2, 64 }, { 64 } } do
      local xr = T.randn(unpack(rows)):cuda()
      local kernels, blas, got = work(function() return T.linear(xr, w, b) end)
      S.eq({ kernels, blas }, { 1, 0 }, "linear " .. table.concat(rows, "x"))
      S.close(got:cpu(), T.linear(xr:cpu(), w:cpu(), b:cpu()), 1e-5, 1e-4)
      for _, wt in ipairs { w:t(), w:t():contiguous() } do  -- (linear's layout, and {K, N})
        local k2, b2, mm = work(function() return T.matmul(xr, wt) end)
        S.eq({ k2, b2 }, { 1, 0 }, "matmul " .. table.concat(rows, "x"))
        S.close(mm:cpu(), T.matmul(xr:cpu(), wt:cpu()), 1e-5, 1e-4)
      end
    end
    local b1 = T.randn(1):cuda()  -- (a bias of one broadcast element: not the GEMV's {N})
    S.close(T.linear(x, w, b1):cpu(), T.linear(x:cpu(), w:cpu(), b1:cpu()), 1e-5, 1e-4)
    local x5 = T.randn(5, 64):cuda()
    local _, blas5, got5 = work(function() return T.linear(x5, w, b) end)
    S.eq(blas5, 1, "5 rows: cuBLAS")
    S.close(got5:cpu(), T.linear(x5:cpu(), w:cpu(), b:cpu()), 1e-5, 1e-4)
    -- rows 4 bytes off a 16-byte boundary; rows of 62 floats (not whole chunks); {K, N} rows of 95
    local wide = T.randn(96, 65):cuda()
    local x62 = T.randn(2, 62):cuda()
    local cases = { { x, wide:narrow(2, 2, 64), "unaligned rows" }, { x62, wide:narrow(2, 1, 62), "62 columns" },
                    { x, T.randn(64, 95):cuda():t(), "95 columns of {K, N}" } }
    for _, case in ipairs(cases) do
      local xx, ww, what = case[1], case[2], case[3]
      local _, blas, got = work(function() return T.linear(xx, ww) end)
      S.eq(blas, 1, what .. ": cuBLAS")
      S.close(got:cpu(), T.linear(xx:cpu(), ww:cpu()), 1e-5, 1e-4, what)
    end
  end)

  it("in compiled graphs reads a weight before the previous kernel ends only where none writes it", function()
    -- (cuda::GemvWeights::settled: an input no node writes; a weight the graph computes or
    -- writes in place is read after the wait. Each call's values differ, so a stale read shows.)
    S.need_gpu()
    T.config.sync_compile = true
    local function fn(x, w, v)
      local a = T.matmul(x * 2, w)  -- an input no node writes
      local u = v * 3 + 1           -- computed by the kernel just before its product
      local b = T.matmul(a * 0.5, u)
      v:add_(1)                     -- an input written in place, then read by a product
      local l = T.linear(a * 0.25, w) + T.linear(b:tanh(), v * 2)  -- linear's {N, K} weights
      return T.matmul(b:tanh(), v) + a:sum() + l
    end
    local f = T.compile(fn)
    for call = 1, 6 do
      T.manual_seed(40 + call)
      for _, dt in ipairs { "float32", "bfloat16" } do
        local x, w, v = T.randn(1, 768), T.randn(768, 768) / 28, T.randn(768, 768) / 28
        local d = function(t) return t:to(dt):cuda() end
        local ve, vc = d(v), d(v)
        local want, got = fn(d(x), d(w), ve), f(d(x), d(w), vc)
        S.close(got:float():cpu(), want:float():cpu(), 2e-2, 2e-2, dt .. " call " .. call)
        S.close(vc:float():cpu(), ve:float():cpu(), 0, 0, "the in-place write")
      end
    end
    T.config.sync_compile = false
  end)

  it("propagates NaN and inf from x and w", function()
    S.need_gpu()
    local w = T.ones(8, 16)
    w[{ 3, 5 }] = 0 / 0
    local x = T.ones(2, 16)
    x[{ 2, 1 }] = 1 / 0
    local got = T.linear(x:cuda(), w:cuda()):cpu()
    S.close(got, T.linear(x, w), 0, 0)
  end)
end)
