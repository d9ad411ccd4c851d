-- The fused layer_norm (T._layer_norm, T._layer_norm_backward: vm/ops/norm.cpp) against torch
-- 1.13's F.layer_norm: the value and the gradients of input, weight and bias, in float32 and
-- float64, over one and two normalised dims, with and without weight / bias, on a non-contiguous
-- input; double backward (create_graph) against torch's; the op's own outputs and refusals.
-- (gradcheck: test_autograd_ops.lua; the CUDA kernels: test_cuda_kernels.lua.)
local T = require "crescent"
local R = require "torch_ref"
local F = T.F

expect.covers("_layer_norm", "_layer_norm_backward")
local errs = expect.error_checker("test_layer_norm.lua")
T.manual_seed(11)

local B = R.batch([[
def ln(x, shape, w, b, eps):
    x = x.clone().requires_grad_(True)
    ps = [t.clone().requires_grad_(True) if t is not None else None for t in (w, b)]
    y = F.layer_norm(x, shape, ps[0], ps[1], eps)
    (y * torch.arange(y.numel(), dtype=y.dtype).view(y.shape).sin()).sum().backward()
    return [y.detach(), x.grad] + [p.grad for p in ps if p is not None]
def ln2(x, shape, w, b):
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    y = F.layer_norm(x, shape, w, b)
    gx, gw = torch.autograd.grad((y * y.detach().cos()).sum(), [x, w], create_graph=True)
    (gx.square().sum() + (gw * gw.detach()).sum()).backward()
    return [x.grad, w.grad]
]])

local cases = {}
local function case(key, dtype, x, shape, w, b, eps, atol)
  local e = { x = x:to(dtype), w = w and w:to(dtype), b = b and b:to(dtype) }
  local sh = type(shape) == "number" and { shape } or shape
  B:add(key, string.format("ln(x, (%s,), %s, %s, %s)", table.concat(sh, ","), w and "w" or "None", b and "b" or "None",
    tostring(eps or 1e-5)), e)
  cases[#cases + 1] = { key = key, e = e, shape = shape, eps = eps, dtype = dtype, atol = atol }
end

local x3, w8, b8 = T.randn(3, 5, 8) * 2 + 1, T.randn(8), T.randn(8)
for _, dt in ipairs({ "float32", "float64" }) do
  local function k(s) return s .. " " .. dt end
  case(k("affine"), dt, x3, 8, w8, b8)
  case(k("weight only"), dt, x3, 8, w8, nil)
  case(k("bias only"), dt, x3, 8, nil, b8)
  case(k("plain eps"), dt, x3, 8, nil, nil, 1e-2)
  case(k("two dims"), dt, x3, { 5, 8 }, T.randn(5, 8), T.randn(5, 8))
  case(k("long rows"), dt, T.randn(4, 1000), 1000, T.randn(1000), T.randn(1000))
  -- (past 4 MiB: gw / gb summed in the pass that computes gx, by blocks of rows; two float32
  -- orders of those 1100-term sums differ by up to 2e-5 where they cancel to near 0)
  local many_atol = dt == "float32" and 5e-5 or nil
  case(k("many rows"), dt, T.randn(1100, 1000), 1000, T.randn(1000), T.randn(1000), nil, many_atol)
  case(k("non-contiguous"), dt, T.randn(8, 6):t(), 8, w8, b8)
  -- (x's gradient is 0 there: torch's is rounding noise of rstd = 1 / sqrt(eps))
  case(k("one element rows"), dt, T.randn(4, 1), 1, T.randn(1), T.randn(1), nil, 1e-4)
end
local xd, wd, bd = T.randn(4, 6, { dtype = "float64" }), T.randn(6, { dtype = "float64" }), T.randn(6, { dtype = "float64" })
B:add("double backward", "ln2(x, (6,), w, b)", { x = xd, w = wd, b = bd })

local res, why = B:run()
local TOL = { float32 = { 1e-4, 1e-5 }, float64 = { 1e-10, 1e-12 } }

local function weights(y) return T.arange(0, y:numel(), { dtype = y.dtype }):view(y.shape):sin() end

describe("layer_norm against torch 1.13 (value and gradients)", function()
  for _, c in ipairs(cases) do
    it(c.key, function()
      if not res then expect.skip(why) end
      local x = c.e.x:clone():requires_grad_()
      local w = c.e.w and c.e.w:clone():requires_grad_()
      local b = c.e.b and c.e.b:clone():requires_grad_()
      local y = F.layer_norm(x, c.shape, w, b, c.eps)
      expect.eq(tostring(y.grad_fn), "<LayerNormBackward>")
      ;(y * weights(y)):sum():backward()
      local tol = { TOL[c.dtype][1], c.atol or TOL[c.dtype][2] }
      R.check(res, c.key .. "#1", y:detach(), tol[1], tol[2])
      R.check(res, c.key .. "#2", x.grad, tol[1], tol[2])
      local i = 3
      for _, p in ipairs({ w or false, b or false }) do
        if p then R.check(res, c.key .. "#" .. i, p.grad, tol[1], tol[2]); i = i + 1 end
      end
    end)
  end
  it("double backward (create_graph) through the composition of the gradient", function()
    if not res then expect.skip(why) end
    local x, w = xd:clone():requires_grad_(), wd:clone():requires_grad_()
    local y = F.layer_norm(x, 6, w, bd)
    local g = T.autograd.grad((y * y:detach():cos()):sum(), { x, w }, nil, { create_graph = true })
    ;(g[1]:square():sum() + (g[2] * g[2]:detach()):sum()):backward()
    R.check(res, "double backward#1", x.grad, 1e-10, 1e-12)
    R.check(res, "double backward#2", w.grad, 1e-10, 1e-12)
  end)
end)

describe("_layer_norm, the op", function()
  it("returns mean and rstd with the input's batch dims, in float32 for 16-bit inputs", function()
    local x = T.randn(2, 3, 4)
    local y, mean, rstd = T._layer_norm(x, { 3, 4 })
    expect.eq({ mean.shape, rstd.shape, mean.dtype }, { { 2, 1, 1 }, { 2, 1, 1 }, "float32" })
    expect.close(mean:flatten(), x:view(2, 12):mean(2), 1e-6, 1e-6)
    expect.close(rstd:flatten(), (x:view(2, 12):var(2, { correction = 0 }) + 1e-5):rsqrt(), 1e-5, 1e-5)
    expect.close(y, (x - mean) * rstd, 1e-6, 1e-6)
    local _, m16 = T._layer_norm(x:half(), { 4 })
    expect.eq({ m16.dtype, m16.shape }, { "float32", { 2, 3, 1 } })
    local _, m64 = T._layer_norm(x:double(), { 4 })
    expect.eq(m64.dtype, "float64")
  end)
  it("computes 16-bit inputs in float32 and rounds once", function()
    local x, w, b = T.randn(5, 16), T.randn(16), T.randn(16)
    for _, dt in ipairs({ "float16", "bfloat16" }) do
      local want = F.layer_norm(x:to(dt):float(), 16, w:to(dt):float(), b:to(dt):float()):to(dt)
      local got = F.layer_norm(x:to(dt), 16, w:to(dt), b:to(dt))
      expect.eq(got.dtype, dt)
      expect.close(got:float(), want:float(), 1e-2, 1e-2, dt)
      local xr = x:to(dt):requires_grad_()
      F.layer_norm(xr, 16, w:to(dt), b:to(dt)):sum():backward()
      expect.eq(xr.grad.dtype, dt)
    end
  end)
  it("computes only the gradients output_mask asks for", function()
    local x, w = T.randn(3, 4), T.randn(4)
    local y, mean, rstd = T._layer_norm(x, { 4 }, w)
    local go = T.randn(3, 4)
    local gx, gw, gb = T._layer_norm_backward(go, x, { 4 }, mean, rstd, w)
    expect.eq({ gx.shape, gw.shape, gb.shape }, { { 3, 4 }, { 4 }, { 4 } })
    local hx, hw, hb = T._layer_norm_backward(go, x, { 4 }, mean, rstd, w, { 0, 1, 0 })
    expect.eq({ hx.shape, hb.shape }, { { 0 }, { 0 } })
    expect.eq(hw:totable(), gw:totable())
    expect.close(gb, go:sum(1), 1e-6, 1e-6)
    local _ = y
  end)
  it("sums grad_weight and grad_bias in the same order whatever the row count splits into", function()
    local x, w, b = T.randn(777, 40), T.randn(40), T.randn(40)
    local go = T.randn(777, 40)
    local function grads()
      local ww, bb = w:clone():requires_grad_(), b:clone():requires_grad_()
      F.layer_norm(x, 40, ww, bb):backward(go)
      return ww.grad:totable(), bb.grad:totable()
    end
    local a1, b1 = grads()
    local a2, b2 = grads()
    expect.eq(a1, a2)
    expect.eq(b1, b2)
  end)
  it("sums grad_weight and grad_bias of inputs past the caches the same way on any number of threads", function()
    local x, w, go = T.randn(1100, 1000), T.randn(1000), T.randn(1100, 1000)
    local _, mean, rstd = T._layer_norm(x, { 1000 }, w)
    local threads = T.get_num_threads()
    local function grads(n)
      T.set_num_threads(n)
      local gx, gw, gb = T._layer_norm_backward(go, x, { 1000 }, mean, rstd, w)
      T.set_num_threads(threads)
      return { gx:totable(), gw:totable(), gb:totable() }
    end
    expect.eq(grads(1), grads(3))
    local _, gw, gb = T._layer_norm_backward(go, x, { 1000 }, mean, rstd, w, { 0, 1, 1 })
    local xhat = (x - mean:view(-1, 1)) * rstd:view(-1, 1)
    expect.close(gw, (go:double() * xhat:double()):sum(1), 1e-4, 1e-4)
    expect.close(gb, go:double():sum(1), 1e-4, 1e-4)
  end)
  it("gives the eager values compiled, where the capture keeps the composition", function()
    local w, b = T.randn(8), T.randn(8)
    local f = T.compile(function(x) return F.layer_norm(x + 1, 8, w, b) * 2 end, { hot = 1 })
    local x = T.randn(4, 8)
    for _ = 1, 3 do expect.close(f(x), F.layer_norm(x + 1, 8, w, b) * 2, 1e-5, 1e-5) end
  end)
  it("refuses what it cannot normalise, naming the op", function()
    local x = T.randn(2, 3)
    errs(function() T._layer_norm(x, { 2 }) end, "_layer_norm", "normalized_shape {2} expected to be non-empty and to match the last sizes of the input")
    errs(function() T._layer_norm(x, { 3 }, T.randn(4)) end, "_layer_norm", "weight expected input's dtype float32, device cpu and shape {3}")
    errs(function() T._layer_norm(x, { 3 }, nil, T.randn(3):double()) end, "_layer_norm", "bias expected input's dtype float32")
    errs(function() T._layer_norm(T.ones(2, 3):long(), { 3 }) end, "_layer_norm", "input expected a floating tensor")
    local _, mean, rstd = T._layer_norm(x, { 3 })
    errs(function() T._layer_norm_backward(x, x, { 3 }, mean, rstd, nil, { 1, 1, 0 }) end, "_layer_norm_backward",
      "output_mask asks for grad_weight, expected a weight")
    errs(function() T._layer_norm_backward(x, x, { 3 }, mean:double(), rstd) end, "_layer_norm_backward",
      "mean expected dtype float32 and shape {2,1}")
    -- mean and rstd carry no gradient; the gradient's own op has no derivative
    local xr = T.randn(2, 3, { requires_grad = true })
    local _, m = T._layer_norm(xr, { 3 })
    errs(function() m:sum():backward() end, "backward", "_layer_norm: mean and rstd (outputs 2 and 3) are not differentiable")
    local _, m2, r2 = T._layer_norm(xr:detach(), { 3 })
    local g = T._layer_norm_backward(T.ones(2, 3, { requires_grad = true }), xr:detach(), { 3 }, m2, r2)
    errs(function() g:sum():backward() end, "backward", "_layer_norm_backward: derivative not implemented")
  end)
end)
