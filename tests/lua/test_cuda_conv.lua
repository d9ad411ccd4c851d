-- Convolutions of CUDA tensors (vm/ops/conv_cuda.cpp, vm/cuda/cudnn.hpp) against the CPU's:
-- conv2d / conv1d forward and both gradients over groups, stride, padding, dilation and every
-- floating dtype, through cuDNN's graph API and its legacy API (T.backends.cudnn.api) and
-- through the path without it (T.backends.cudnn.enabled = false: the gather and cuBLAS); conv_transpose2d
-- (cuDNN's backward data); a double backward; a ResNet basic block forward and backward;
-- compiled graphs keep conv2d whole. Cases that need a GPU (and cuDNN) skip without one;
-- T.backends.cudnn's switches are checked everywhere.
-- CRESCENT_TEST_CUDA_AS_CPU=1 runs the cases with the CPU as the device (the spec's own logic).
local T = require "crescent"
local F = T.F

local errs = expect.error_checker("test_cuda_conv.lua")
expect.covers("_conv2d_input_grad", "_conv2d_weight_grad")  -- (their CPU kernels: the gradient-op cases below)
local AS_CPU = os.getenv("CRESCENT_TEST_CUDA_AS_CPU") == "1"
local DEV = AS_CPU and "cpu" or "cuda"

local function need_cudnn()
  if AS_CPU then return end
  expect.need_gpu()
  if not T.backends.cudnn.is_available() then expect.skip("cuDNN does not load: " .. T.backends.cudnn.unavailable_reason()) end
end

-- Runs fn with T.backends.cudnn's `flag` set to `on`, restoring it after.
local function with(flag, on, fn, ...)
  local prev = T.backends.cudnn[flag]
  T.backends.cudnn[flag] = on
  local ok, err = pcall(fn, ...)
  T.backends.cudnn[flag] = prev
  if not ok then error(err, 0) end
end

-- Tolerances against a float64 reference, relative to the reference's largest magnitude (a
-- convolution's error grows with its sums, not per element).
local TOL = { float64 = 1e-10, float32 = 1e-5, float16 = 1e-2, bfloat16 = 5e-2 }

local function near(got, want, what, tol)
  expect.eq(got.shape, want.shape, what .. ": shape")
  local g, w = got:cpu():double(), want:cpu():double()
  if w:numel() == 0 then return end
  local scale = math.max(w:abs():max():item(), 1e-30)
  local err = (g - w):abs():max():item()
  if not (err <= tol * scale) then
    error(string.format("%s: max error %.3g, %.3g of the largest value %.3g (tolerance %g)", what, err, err / scale, scale, tol), 2)
  end
end

-- Inputs rounded to `dtype` first, so that the float64 CPU reference sees the device's values.
local function randn(dtype, ...) return T.randn(...):to(dtype):double() end

-- cuDNN's two APIs (T.backends.cudnn.api), and the path without cuDNN
local PATHS = { "graph", "legacy", false }

-- fn(x, w, b) and the gradients of sum(fn(...) * gy) on the device in `dtype` against the CPU in
-- float64, for each of PATHS; bias: true (ws[1] elements), a size or nil.
local function check_conv(what, fn, xs, ws, bias, dtype)
  T.manual_seed(7)
  local x, w = randn(dtype, unpack(xs)), randn(dtype, unpack(ws))
  local b = bias and randn(dtype, bias == true and ws[1] or bias) or nil
  local function run(device, dt)
    local function leaf(t) return t:detach():to(dt):to(device):requires_grad_() end
    local xd, wd = leaf(x), leaf(w)
    local bd = b and leaf(b) or nil
    local y = fn(xd, wd, bd)
    local gy = (T.arange(y:numel()):remainder(3) + 0.5):view(y.shape):to(dt):to(device)  -- (exact in every dtype)
    y:backward(gy)
    return y, xd.grad, wd.grad, bd and bd.grad
  end
  local want = { run("cpu", "float64") }
  local tol = TOL[dtype]
  for _, api in ipairs(PATHS) do
    with("enabled", api ~= false, with, "api", api or "graph", function()
      local got = { run(DEV, dtype) }
      local path = api and "cuDNN " .. api .. " API" or "without cuDNN"
      for i, name in ipairs({ "output", "input grad", "weight grad", "bias grad" }) do
        if want[i] then
          expect.eq(got[i].dtype, dtype, what .. " " .. name .. " dtype")
          expect.eq(got[i].device, AS_CPU and "cpu" or "cuda:0", what .. " " .. name .. " device")
          near(got[i], want[i], string.format("%s (%s, %s) %s", what, dtype, path, name), tol)
        end
      end
    end)
  end
end

local function channels_last(t) return t:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) end

local CASES = {
  { "plain", function(x, w, b) return F.conv2d(x, w, b) end, { 2, 3, 9, 8 }, { 4, 3, 3, 3 }, true },
  { "stride padding dilation", function(x, w, b) return F.conv2d(x, w, b, { 2, 1 }, { 1, 2 }, { 2, 1 }) end,
    { 2, 3, 11, 10 }, { 5, 3, 3, 2 }, true },
  { "groups", function(x, w) return F.conv2d(x, w, nil, { stride = 2, padding = 1, groups = 2 }) end,
    { 3, 4, 8, 7 }, { 6, 2, 3, 3 }, false },
  { "depthwise", function(x, w, b) return F.conv2d(x, w, b, { groups = 8, padding = 1 }) end,
    { 2, 8, 6, 6 }, { 8, 1, 3, 3 }, true },
  { "1x1 strided", function(x, w, b) return F.conv2d(x, w, b, 2) end, { 2, 16, 7, 7 }, { 32, 16, 1, 1 }, true },
  { "unbatched same", function(x, w) return F.conv2d(x, w, nil, { padding = "same" }) end, { 3, 6, 5 }, { 4, 3, 2, 3 }, false },
  { "conv1d", function(x, w, b) return F.conv1d(x, w, b, 2, 3, 2) end, { 2, 4, 20 }, { 6, 4, 5 }, true },
  { "resnet stem", function(x, w) return F.conv2d(x, w, nil, 2, 3) end, { 2, 3, 32, 32 }, { 16, 3, 7, 7 }, false },
  -- (NCHW sizes over NHWC memory: the graph API takes them by their strides)
  { "channels-last operands", function(x, w, b) return F.conv2d(channels_last(x), channels_last(w), b, 1, 1) end,
    { 2, 8, 6, 5 }, { 16, 8, 3, 3 }, true },
}

describe("T.backends.cudnn", function()
  it("reads and sets its switches, and refuses others", function()
    local e, t = T.backends.cudnn.enabled, T.backends.cudnn.allow_tf32
    expect.eq(type(e), "boolean")
    expect.eq(t, true)  -- PyTorch's default for cuDNN convolutions
    with("allow_tf32", false, function() expect.eq(T.backends.cudnn.allow_tf32, false) end)
    expect.eq(T.backends.cudnn.allow_tf32, true)
    with("enabled", not e, function() expect.eq(T.backends.cudnn.enabled, not e) end)
    expect.eq(T.backends.cudnn.enabled, e)
    expect.eq(T.backends.cudnn.benchmark, false)  -- (PyTorch's default)
    with("benchmark", true, function() expect.eq(T.backends.cudnn.benchmark, true) end)
    errs(function() T.backends.cudnn.deterministic = true end, "T.backends.cudnn", "unknown setting 'deterministic'")
    errs(function() T.backends.cudnn.enabled = 1 end, "T.backends.cudnn.enabled", "expected a boolean, got number")
    local a = T.backends.cudnn.api
    expect.truthy(a == "graph" or a == "legacy", "api " .. tostring(a))
    for _, v in ipairs({ "legacy", "graph" }) do
      with("api", v, function() expect.eq(T.backends.cudnn.api, v) end)
    end
    expect.eq(T.backends.cudnn.api, a)
    errs(function() T.backends.cudnn.api = "frontend" end, "T.backends.cudnn.api", 'expected "graph" or "legacy", got frontend')
    local v = T.backends.cudnn.version()  -- (the library may load where no driver is)
    expect.truthy(v == nil or v >= 90000, "version " .. tostring(v))
    if T.backends.cudnn.is_available() then expect.truthy(v ~= nil) end
    expect.eq(T.backends.cudnn.unavailable_reason() == "", T.backends.cudnn.is_available())
  end)
  it("CRESCENT_CUDNN=0 starts it off", function()
    local out = expect.crescent({ "-e", "print(require('crescent').backends.cudnn.enabled)" }, { env = "CRESCENT_CUDNN=0" })
    expect.eq(out, "false\n")
  end)
  it("CRESCENT_CUDNN_API sets the API at start (graph by default), and a wrong value fails there", function()
    local out = expect.crescent({ "-e", "print(require('crescent').backends.cudnn.api)" }, { env = "CRESCENT_CUDNN_API=legacy" })
    expect.eq(out, "legacy\n")
    out = expect.crescent({ "-e", "print(require('crescent').backends.cudnn.api)" }, { env = "CRESCENT_CUDNN_API=" })
    expect.eq(out, "graph\n")
    local _, err, status = expect.crescent({ "-e", "print(1)" }, { env = "CRESCENT_CUDNN_API=v8" })
    expect.truthy(status ~= 0, "exit status " .. tostring(status))
    expect.truthy(err:find('CRESCENT_CUDNN_API: expected graph or legacy, got "v8"', 1, true), err)
  end)
  it("its gradient ops are conv2d's gradients on the CPU too, and check their operands", function()
    T.manual_seed(1)
    local x = T.randn(2, 4, 7, 6, { dtype = "float64" }):requires_grad_()
    local w = T.randn(6, 2, 3, 2, { dtype = "float64" }):requires_grad_()
    local y = F.conv2d(x, w, nil, { 2, 1 }, { 1, 0 }, { 1, 2 }, 2)
    local gy = T.randn(y.shape, { dtype = "float64" })
    y:backward(gy)
    near(T._conv2d_input_grad(gy, w:detach(), x.shape, { 2, 1 }, { 1, 0 }, { 1, 2 }, 2), x.grad, "input grad", 1e-12)
    near(T._conv2d_weight_grad(gy, x:detach(), w.shape, { 2, 1 }, { 1, 0 }, { 1, 2 }, 2), w.grad, "weight grad", 1e-12)
    errs(function() T._conv2d_weight_grad(T.ones(1, 2, 3, 3), T.ones(1, 2, 3, 3), { 2, 2, 2, 2 }) end,
      "_conv2d_weight_grad", "grad_output expected {1,2,2,2}")
    errs(function() T._conv2d_input_grad(T.ones(1, 2, 3, 3), T.ones(2, 3, 1, 1), { 1, 2, 3, 3 }) end,
      "_conv2d_input_grad", "expected an input of 3 channels")
  end)
end)

describe("convolutions on CUDA", function()
  -- (each case with T.backends.cudnn.enabled, whatever CRESCENT_CUDNN says)
  local spec_it = it
  local function it(name, fn) spec_it(name, function() with("enabled", true, fn) end) end
  it("conv2d / conv1d forward and gradients in float32 (no TF32) and float64", function()
    need_cudnn()
    with("allow_tf32", false, function()
      for _, c in ipairs(CASES) do
        for _, dt in ipairs({ "float32", "float64" }) do check_conv(c[1], c[2], c[3], c[4], c[5], dt) end
      end
    end)
  end)
  it("conv2d forward and gradients in float16 and bfloat16, and float32 with TF32", function()
    need_cudnn()
    for _, c in ipairs(CASES) do
      for _, dt in ipairs({ "float16", "bfloat16" }) do check_conv(c[1], c[2], c[3], c[4], c[5], dt) end
    end
    -- TF32 rounds the operands to 10 bits of mantissa
    local saved = TOL.float32
    TOL.float32 = 1e-2
    local ok, err = pcall(check_conv, "TF32", CASES[2][2], CASES[2][3], CASES[2][4], true, "float32")
    TOL.float32 = saved
    if not ok then error(err, 0) end
  end)
  it("benchmark mode: timed algorithms give the same results", function()
    need_cudnn()
    with("benchmark", true, function()
      with("allow_tf32", false, function()
        for i = 1, 3 do check_conv(CASES[i][1], CASES[i][2], CASES[i][3], CASES[i][4], CASES[i][5], "float32") end
      end)
      check_conv(CASES[1][1], CASES[1][2], CASES[1][3], CASES[1][4], CASES[1][5], "bfloat16")
    end)
  end)
  it("a CUDA graph replays cuDNN's three passes through either API (benchmark mode: the warm-up times)", function()
    need_cudnn()
    if AS_CPU then expect.skip("CRESCENT_TEST_CUDA_AS_CPU=1") end
    local function replay(api)
      local x, w = T.zeros(2, 4, 9, 9):cuda(), T.randn(8, 2, 3, 3):cuda()
      local function passes()
        local y = F.conv2d(x, w, nil, 1, 1, 1, 2)
        return y, T._conv2d_input_grad(y, w, x.shape, 1, 1, 1, 2), T._conv2d_weight_grad(y, x, w.shape, 1, 1, 1, 2)
      end
      passes()  -- (warm-up, as PyTorch asks before a capture)
      local g = T.cuda.CUDAGraph()
      local ys = { T.cuda.graph(g, passes) }
      for k = 1, 2 do
        x:copy_(T.randn(2, 4, 9, 9):cuda())
        g:replay()
        local want = { passes() }
        for i = 1, 3 do near(ys[i], want[i], api .. " API replay " .. k .. " pass " .. i, 1e-5) end
      end
    end
    for _, api in ipairs({ "graph", "legacy" }) do
      with("benchmark", true, with, "allow_tf32", false, with, "api", api, replay, api)
    end
  end)
  it("no host copies on the cuDNN path", function()
    need_cudnn()
    if AS_CPU then expect.skip("CRESCENT_TEST_CUDA_AS_CPU=1") end
    local x = T.randn(2, 4, 9, 9):cuda():requires_grad_()
    local w = T.randn(6, 2, 3, 3):cuda():requires_grad_()
    local before = T.cuda.stats().host_ops
    F.conv2d(x, w, nil, { padding = 1, groups = 2 }):sum():backward()
    T.cuda.synchronize()
    expect.eq(T.cuda.stats().host_ops - before, 0)
  end)
  it("conv_transpose2d: stride, padding, output_padding, groups, dilation", function()
    need_cudnn()
    with("allow_tf32", false, function()
      check_conv("conv_transpose2d", function(x, w, b) return F.conv_transpose2d(x, w, b, 2, 1, 1) end,
        { 2, 4, 5, 6 }, { 4, 3, 3, 3 }, 3, "float32")
      check_conv("conv_transpose2d groups dilation", function(x, w) return F.conv_transpose2d(x, w, nil, { stride = { 1, 2 }, padding = { 0, 1 }, groups = 2, dilation = 2 }) end,
        { 2, 4, 5, 5 }, { 4, 3, 2, 3 }, false, "float64")
      check_conv("conv_transpose2d unbatched", function(x, w) return F.conv_transpose2d(x, w, nil, 3) end,
        { 2, 4, 4 }, { 2, 5, 3, 3 }, false, "float32")
      check_conv("conv_transpose2d bfloat16", function(x, w, b) return F.conv_transpose2d(x, w, b, 2, 1, 1) end,
        { 2, 4, 5, 6 }, { 4, 3, 3, 3 }, 3, "bfloat16")
    end)
  end)
  it("double backward through cuDNN's gradients", function()
    need_cudnn()
    T.manual_seed(3)
    local x0, w0 = T.randn(2, 4, 7, 7, { dtype = "float64" }), T.randn(6, 2, 3, 3, { dtype = "float64" })
    local function run(device)
      local x, w = x0:detach():to(device):requires_grad_(), w0:detach():to(device):requires_grad_()
      local y = F.conv2d(x, w, nil, { stride = 2, padding = 1, groups = 2 })
      local gx, gw = unpack(T.autograd.grad((y * y):sum(), { x, w }, { create_graph = true }))
      local loss = (gx * gx):sum() + (gw * gw):sum()
      loss:backward()
      return x.grad, w.grad
    end
    local wx, ww = run("cpu")
    local gx, gw = run(DEV)
    near(gx, wx, "double backward input", TOL.float64)
    near(gw, ww, "double backward weight", TOL.float64)
  end)
  it("a ResNet basic block forward and backward", function()
    need_cudnn()
    T.manual_seed(11)
    local C = 16
    local p0 = { w1 = T.randn(C, C, 3, 3) * 0.1, w2 = T.randn(C, C, 3, 3) * 0.1, g1 = T.rand(C) + 0.5, b1 = T.randn(C),
                 g2 = T.rand(C) + 0.5, b2 = T.randn(C) }
    local x0 = T.randn(4, C, 14, 14)
    local function block(x, p)
      local h = F.relu(F.batch_norm(F.conv2d(x, p.w1, nil, 1, 1), nil, nil, p.g1, p.b1, true))
      return F.relu(F.batch_norm(F.conv2d(h, p.w2, nil, 1, 1), nil, nil, p.g2, p.b2, true) + x)
    end
    local function run(device, dt)
      local p = {}
      for k, v in pairs(p0) do p[k] = v:detach():to(dt):to(device):requires_grad_() end
      local x = x0:detach():to(dt):to(device):requires_grad_()
      local y = block(x, p)
      y:pow(2):sum():backward()
      return y, x.grad, p
    end
    with("allow_tf32", false, function()
      local wy, wgx, wp = run("cpu", "float64")
      local gy, ggx, gp = run(DEV, "float32")
      near(gy, wy, "block output", 1e-5)
      near(ggx, wgx, "block input grad", 1e-4)
      for k in pairs(p0) do near(gp[k].grad, wp[k].grad, "block " .. k .. " grad", 1e-4) end
    end)
  end)
  it("a compiled function keeps conv2d whole and matches eager", function()
    need_cudnn()
    T.manual_seed(5)
    local x, w, b = T.randn(2, 8, 10, 10):to(DEV), T.randn(16, 8, 3, 3):to(DEV), T.randn(16):to(DEV)
    local fn = function(a, k, c) return F.relu(F.conv2d(a, k, c, 1, 1)) * 2 end
    local r = T.explain(fn, x, w, b)
    expect.eq(r.graph_break_count, 0)
    local has = false
    for _, name in ipairs(r.graph_ops[1]) do has = has or name == "conv2d" end
    expect.truthy(has, "the graph's ops hold conv2d: " .. table.concat(r.graph_ops[1], " "))
    local f = T.compile(fn)
    near(f(x, w, b), fn(x, w, b), "compiled conv2d", 1e-6)
  end)
  it("CRESCENT_LOGS=perf names the library and cuDNN's algorithms; fusion shows conv2d as an extern step", function()
    need_cudnn()
    if AS_CPU then expect.skip("CRESCENT_TEST_CUDA_AS_CPU=1") end
    local script = "local T = require 'crescent'; T.config.sync_compile = true; " ..
      "local x, w = T.randn(2, 4, 8, 8):cuda(), T.randn(8, 4, 3, 3):cuda(); " ..
      "local f = T.compile(function(a, b) return T.F.relu(T.F.conv2d(a, b, nil, 1, 1)) end); for _ = 1, 3 do f(x, w) end; T.compiler.wait(); T.cuda.synchronize()"
    local out = expect.crescent({ "-e", script },
      { env = "CRESCENT_LOGS=perf,fusion CRESCENT_CUDNN=1 CRESCENT_CUDNN_API=legacy", merge = true })
    for _, want in ipairs({ "convolutions on CUDA: cuDNN 9", "conv2d: cuDNN 9", "forward algorithm", " B (legacy API)",
                            "conv2d (", "extern: no loop lowering for conv2d" }) do
      expect.truthy(out:find(want, 1, true), "expected '" .. want .. "' in:\n" .. out)
    end
    -- the graph API names the engine its heuristics ranked first among those that finalize
    out = expect.crescent({ "-e", script }, { env = "CRESCENT_LOGS=perf CRESCENT_CUDNN=1 CRESCENT_CUDNN_API=graph", merge = true })
    for _, want in ipairs({ "conv2d: cuDNN 9", "forward: graph API engine " }) do
      expect.truthy(out:find(want, 1, true), "expected '" .. want .. "' in:\n" .. out)
    end
    expect.truthy(out:find(", heuristics INSTANT", 1, true) or out:find(", heuristics mode A", 1, true)
                  or out:find(", heuristics fallback", 1, true), "the heuristics that ranked the engine in:\n" .. out)
    out = expect.crescent({ "-e", script }, { env = "CRESCENT_LOGS=perf CRESCENT_CUDNN=0", merge = true })
    local want = "convolutions on CUDA: im2col gather + cuBLAS (T.backends.cudnn.enabled is false)"
    expect.truthy(out:find(want, 1, true), "expected '" .. want .. "' in:\n" .. out)
  end)
end)
