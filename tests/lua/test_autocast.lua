-- Mixed precision (API.md section 9): T.autocast's dtype choices per policy class (the registry's
-- OpDef::cast and cast_cpu, after PyTorch's CUDA and CPU autocast lists; CUDA's with a GPU),
-- the two devices' states apart,
-- gradients through the casts, nesting, enabled = false, restore on error, and T.amp.GradScaler
-- against PyTorch's GradScaler semantics (hand-computed: Debian's torch 1.13 disables its
-- scaler without CUDA).
local T = require "crescent"
local errs = expect.error_checker("test_autocast.lua")

local function ac(dtype, fn, ...) return T.autocast("cpu", { dtype = dtype }, fn, ...) end
local a, b = T.randn(3, 4), T.randn(4, 5)

-- The policy classes, checked on `dev` tensors under `dev`'s autocast. PyTorch's CUDA lists: float32
-- for reductions, softmax, exp / log / pow; the widest input for cat / stack / where / addcmul.
-- Its CPU lists are shorter: float32 for prod (and the losses), the widest for cat / stack only.
local function dtype_choices(dev, cuda_lists)
  local A, B = a:to(dev), b:to(dev)
  local function acd(low, fn) return T.autocast(dev, { dtype = low }, fn) end
  for _, low in ipairs({ "float16", "bfloat16" }) do
    it("lower precision for matmuls and attention (" .. dev .. ", " .. low .. ")", function()
      acd(low, function()
        expect.eq(T.matmul(A, B).dtype, low)
        expect.eq(T.mm(A, B).dtype, low)
        expect.eq(T.bmm(A:unsqueeze(1), B:unsqueeze(1)).dtype, low)
        expect.eq(T.F.linear(A, B:t(), T.randn(5):to(dev)).dtype, low)
        local q = T.randn(1, 2, 3, 4):to(dev)
        expect.eq(T.attention(q, q, q).dtype, low)
      end)
    end)

    it("float32 for the ops of its float32 list (" .. dev .. ", " .. low .. ")", function()
      local h = A:to(low)
      acd(low, function()
        local f32 = { prod = true }
        if cuda_lists then
          for _, f in ipairs({ "sum", "logsumexp", "norm", "exp", "log", "rsqrt", "reciprocal", "expm1", "log1p" }) do f32[f] = true end
        end
        for _, f in ipairs({ "sum", "prod", "logsumexp", "norm", "exp", "log", "rsqrt", "reciprocal", "expm1", "log1p" }) do
          local r = f == "logsumexp" and h[f](h, 2) or h[f](h)
          expect.eq(r.dtype, f32[f] and "float32" or low, f)
        end
        local other = cuda_lists and "float32" or low
        expect.eq(T.softmax(h, -1).dtype, other)
        expect.eq(T.log_softmax(h, -1).dtype, other)
        expect.eq(T.cumsum(h, 1).dtype, other)
        expect.eq(T.pow(h, 2).dtype, other)
        expect.eq(T.F.cross_entropy(h, T.tensor({ 1, 2, 3 }):to(dev)).dtype, "float32")
        expect.eq(T.F.mse_loss(h, h).dtype, "float32")
      end)
    end)

    it("the widest input for its promote list (" .. dev .. ", " .. low .. ")", function()
      local h = A:to(low)
      acd(low, function()
        expect.eq(T.cat({ A, h }).dtype, "float32")
        expect.eq(T.stack({ h, h }).dtype, low)
        expect.eq(T.cat({ A:double(), h }).dtype, "float64")  -- float64 is never cast
        expect.eq(T.where(A:gt(0), h, A).dtype, "float32")  -- (cast, or where's own promotion)
      end)
    end)

    it("leaves other ops, float64 and integers as they are (" .. dev .. ", " .. low .. ")", function()
      acd(low, function()
        expect.eq((A + 1).dtype, "float32")
        expect.eq(T.relu(A).dtype, "float32")
        expect.eq(A:mean().dtype, "float32")  -- (mean is on no PyTorch list)
        expect.eq(T.matmul(A:double(), B:double()).dtype, "float64")
        expect.eq(T.arange(6):to(dev):sum().dtype, "int64")
      end)
    end)
  end
end

describe("autocast dtype choices", function()
  dtype_choices("cpu", false)
  if T.cuda.is_available() then dtype_choices("cuda", true) end

  it("keeps the CPU's and CUDA's states apart", function()
    T.autocast("cuda", function()
      expect.eq(T.matmul(a, b).dtype, "float32")  -- CPU tensors: CUDA's autocast does not apply
      expect.truthy(T.is_autocast_enabled("cuda") and not T.is_autocast_enabled("cpu"))
      T.autocast("cpu", function()
        expect.truthy(T.is_autocast_enabled("cuda") and T.is_autocast_enabled("cpu"))
        expect.eq(T.matmul(a, b).dtype, "bfloat16")
        T.autocast("cuda", { enabled = false }, function()
          expect.truthy(not T.is_autocast_enabled("cuda") and T.is_autocast_enabled("cpu"))
          expect.eq(T.matmul(a, b).dtype, "bfloat16")
        end)
        expect.truthy(T.is_autocast_enabled("cuda"))
      end)
      expect.truthy(T.is_autocast_enabled("cuda") and not T.is_autocast_enabled("cpu"))
    end)
    T.autocast("cpu", { dtype = "float16" }, function()
      T.autocast("cuda", { dtype = "bfloat16" }, function()
        expect.eq(T.get_autocast_dtype("cpu"), "float16")
        expect.eq(T.get_autocast_dtype("cuda"), "bfloat16")
      end)
    end)
  end)

  it("defaults to bfloat16 on the CPU and float16 on CUDA, as PyTorch", function()
    T.autocast("cpu", function()
      expect.eq(T.matmul(a, b).dtype, "bfloat16")
      expect.eq(T.get_autocast_dtype("cpu"), "bfloat16")
      expect.truthy(T.is_autocast_enabled("cpu") and not T.is_autocast_enabled("cuda"))
    end)
    T.autocast("cuda", function() expect.eq(T.get_autocast_dtype("cuda"), "float16") end)
    expect.truthy(not T.is_autocast_enabled("cpu"))
  end)

  it("computes what the cast inputs give", function()
    local r = ac("bfloat16", function() return T.matmul(a, b) end)
    expect.close(r, T.matmul(a:bfloat16(), b:bfloat16()), { atol = 0, rtol = 0 })
  end)
end)

describe("autocast and autograd", function()
  it("sends float32 gradients to float32 leaves through the casts", function()
    local w = T.randn(5, 4, { dtype = "float32", requires_grad = true })
    local x = T.randn(3, 4, { dtype = "float32", requires_grad = true })
    local loss = ac("bfloat16", function()
      local y = T.F.linear(x, w)
      expect.eq(y.dtype, "bfloat16")
      return T.F.cross_entropy(y, T.tensor({ 1, 2, 3 }))
    end)
    expect.eq(loss.dtype, "float32")
    loss:backward()
    expect.eq(w.grad.dtype, "float32")
    expect.eq(x.grad.dtype, "float32")
    -- the same graph written with explicit casts gives the same gradients
    local w2, x2 = w:detach():requires_grad_(), x:detach():requires_grad_()
    local y2 = T.F.linear(x2:bfloat16(), w2:bfloat16())
    T.F.cross_entropy(y2:float(), T.tensor({ 1, 2, 3 })):backward()
    expect.close(w.grad, w2.grad, { atol = 0, rtol = 0 })
    expect.close(x.grad, x2.grad, { atol = 0, rtol = 0 })
  end)

  it("runs backward outside autocast (backward called inside the region)", function()
    local w = T.randn(4, 4, { dtype = "float32", requires_grad = true })
    ac("float16", function()
      local y = T.matmul(a, w)
      y:float():sum():backward()
    end)
    expect.eq(w.grad.dtype, "float32")
    expect.close(w.grad, T.matmul(a:half():t(), T.ones(3, 4, { dtype = "float16" })):float(), { atol = 0, rtol = 0 })
  end)
end)

describe("autocast regions", function()
  it("nests, and enabled = false turns it off inside", function()
    ac("bfloat16", function()
      expect.eq(T.matmul(a, b).dtype, "bfloat16")
      ac("float16", function() expect.eq(T.matmul(a, b).dtype, "float16") end)
      expect.eq(T.matmul(a, b).dtype, "bfloat16")
      T.autocast("cpu", { enabled = false }, function()
        expect.eq(T.matmul(a, b).dtype, "float32")
        expect.truthy(not T.is_autocast_enabled("cpu"))
      end)
      T.autocast("cuda", { enabled = false }, function() expect.eq(T.matmul(a, b).dtype, "bfloat16") end)
      expect.eq(T.matmul(a, b).dtype, "bfloat16")
    end)
    expect.eq(T.matmul(a, b).dtype, "float32")
  end)

  it("passes arguments and returns every result", function()
    local p, q, n = ac("bfloat16", function(x, y) return x + y, "k", nil end, 1, 2)
    expect.eq(p, 3)
    expect.eq(q, "k")
    expect.eq(n, nil)
  end)

  it("restores the previous state when fn raises", function()
    local ok = pcall(ac, "bfloat16", function() error("boom") end)
    expect.truthy(not ok and not T.is_autocast_enabled("cpu"))
    expect.eq(T.matmul(a, b).dtype, "float32")
    ac("float16", function()
      pcall(ac, "bfloat16", function() error("boom") end)
      expect.eq(T.matmul(a, b).dtype, "float16")
    end)
  end)

  it("rejects bad arguments", function()
    errs(function() T.autocast("tpu", function() end) end, "autocast", 'expected "cuda" or "cpu", got "tpu"')
    errs(function() T.autocast("cpu", { dtype = "float32" }, function() end) end, "autocast",
      'option dtype expected "float16" or "bfloat16"')
    errs(function() T.autocast("cpu", { dtpye = "float16" }, function() end) end, "autocast", "unknown option 'dtpye'")
    errs(function() T.autocast("cpu", {}, 3) end, "autocast", "argument 3 (fn) expected a function, got number")
  end)
end)

describe("autocast and T.compile", function()
  for _, mode in ipairs({ "default", "reduce-overhead" }) do
    it("a compiled function follows the caller's autocast state (mode " .. mode .. ")", function()
      local f = T.compile(function(x, y) return T.matmul(x, y) + 1, T.softmax(T.matmul(x, y), -1) end, { mode = mode })
      for _ = 1, 4 do
        local p, q = f(a, b)
        expect.truthy(p.dtype == "float32" and q.dtype == "float32")
        local p2, q2 = ac("bfloat16", f, a, b)
        expect.truthy(p2.dtype == "bfloat16" and q2.dtype == "bfloat16")  -- (softmax: on no CPU list)
        local p3 = T.autocast("cuda", f, a, b)
        expect.eq(p3.dtype, "float32")
        expect.close(p2, T.matmul(a:bfloat16(), b:bfloat16()) + 1, { atol = 0, rtol = 0 })
      end
    end)
  end
end)

-- A stand-in optimizer with PyTorch's interface (param_groups, step): plain SGD, lr 1.
local function sgd(params)
  local o = { param_groups = { { params = params } }, steps = 0 }
  function o:step()
    self.steps = self.steps + 1
    T.no_grad(function()
      for _, p in ipairs(params) do p:sub_(p.grad) end
    end)
    return "stepped"
  end
  return o
end

describe("GradScaler", function()
  it("scales, unscales, steps and grows as PyTorch's", function()
    local s = T.amp.GradScaler("cpu", { growth_interval = 3 })
    expect.eq(s:get_scale(), 65536)
    local w = T.tensor({ 1.0, 2.0 }, { dtype = "float32", requires_grad = true })
    local opt = sgd({ w })
    for i = 1, 3 do
      w.grad = nil
      local loss = (w * w):sum()
      local scaled = s:scale(loss)
      expect.eq(scaled.shape, { 1 })  -- loss * the (1,)-shaped scale, as PyTorch's
      scaled:backward()
      expect.close(w.grad, (w * 2 * 65536):detach(), { atol = 0, rtol = 0 })
      local before = w:detach():clone()
      expect.eq(s:step(opt), "stepped")
      expect.close(w:detach(), before - before * 2, { atol = 0, rtol = 0 })  -- unscaled gradient 2w
      s:update()
      expect.eq(s:get_scale(), i < 3 and 65536 or 131072)
      expect.eq(s:_get_growth_tracker(), i < 3 and i or 0)
    end
    expect.eq(opt.steps, 3)
  end)

  it("skips the step and backs off on inf or NaN", function()
    local s = T.amp.GradScaler("cpu", { init_scale = 1024, growth_interval = 2 })
    local w = T.tensor({ 1.0, 2.0 }, { dtype = "float32", requires_grad = true })
    local opt = sgd({ w })
    local function iteration(bad)
      w.grad = nil
      s:scale((w * bad):sum()):backward()
      local r = s:step(opt)
      s:update()
      return r
    end
    expect.eq(iteration(1), "stepped")
    expect.eq(s:_get_growth_tracker(), 1)
    local before = w:detach():clone()
    expect.eq(iteration(math.huge), nil)
    expect.close(w:detach(), before, { atol = 0, rtol = 0 })
    expect.eq(s:get_scale(), 512)
    expect.eq(s:_get_growth_tracker(), 0)
    expect.eq(iteration(0 / 0), nil)
    expect.eq(s:get_scale(), 256)
    expect.eq(iteration(1), "stepped")
    expect.eq(iteration(1), "stepped")
    expect.eq(s:get_scale(), 512)  -- grown after growth_interval clean steps
    expect.eq(opt.steps, 3)
  end)

  it("rounds the scale to float32 at each update, and keeps a finite scale", function()
    local s = T.amp.GradScaler("cpu", { init_scale = 3, growth_factor = 1.1, backoff_factor = 0.3, growth_interval = 1 })
    local w = T.tensor({ 1.0 }, { dtype = "float32", requires_grad = true })
    local opt = sgd({ w })
    local f = require("ffi").new("float[1]")
    local function f32(x) f[0] = x; return tonumber(f[0]) end
    local expected = 3
    for _, bad in ipairs({ 1, math.huge, 1, 1 }) do
      w.grad = nil
      s:scale(w * bad):sum():backward()
      s:step(opt)
      s:update()
      expected = f32(expected * (bad == 1 and 1.1 or 0.3))
      expect.eq(s:get_scale(), expected)
    end
    local big = T.amp.GradScaler("cpu", { init_scale = 3e38, growth_interval = 1 })
    w.grad = nil
    big:scale(w):sum():backward()
    big:step(opt)
    big:update()
    expect.eq(big:get_scale(), f32(3e38))  -- 6e38 is not a finite float32: unchanged
  end)

  it("unscale_ before step (clipping) and the misuse errors", function()
    local s = T.amp.GradScaler("cpu", { init_scale = 4 })
    local w = T.tensor({ 3.0 }, { dtype = "float32", requires_grad = true })
    local opt = sgd({ w })
    errs(function() s:step(opt) end, "GradScaler:step", "did not use scaler:scale")
    s:scale(w * 1):sum():backward()
    s:unscale_(opt)
    expect.close(w.grad, { 1 })
    errs(function() s:unscale_(opt) end, "GradScaler:unscale_", "already been called on this optimizer")
    s:step(opt)
    errs(function() s:step(opt) end, "GradScaler:step", "step() has already been called since the last update()")
    errs(function() s:unscale_(opt) end, "GradScaler:unscale_", "unscale_() is being called after step()")
    s:update()
    errs(function() s:update() end, "GradScaler:update", "no inf checks were recorded prior to update")
    local h = T.tensor({ 1.0 }, { dtype = "float16", requires_grad = true })
    s:scale(h * 1):sum():backward()
    errs(function() s:step(sgd({ h })) end, "GradScaler:unscale_", "attempting to unscale FP16 gradients")
    errs(function() T.amp.GradScaler({ growth_factor = 0.5 }) end, "GradScaler", "growth_factor expected a number > 1.0")
  end)

  it("state_dict / load_state_dict, update(new_scale) and enabled = false", function()
    local s = T.amp.GradScaler("cpu", { init_scale = 8, growth_interval = 5 })
    local w = T.tensor({ 1.0 }, { dtype = "float32", requires_grad = true })
    local opt = sgd({ w })
    s:scale(w):sum():backward()
    s:step(opt)
    s:update()
    local sd = s:state_dict()
    expect.eq(sd, { scale = 8, growth_factor = 2, backoff_factor = 0.5, growth_interval = 5, _growth_tracker = 1 })
    local r = T.amp.GradScaler("cpu")
    r:load_state_dict(sd)
    expect.eq(r:state_dict(), sd)
    s:update(100)
    expect.eq(s:get_scale(), 100)
    local off = T.amp.GradScaler("cpu", { enabled = false })
    expect.truthy(off:scale(w) == w and off:get_scale() == 1)
    expect.eq(off:state_dict(), {})
    w.grad = T.tensor({ 5.0 }, { dtype = "float32" })
    expect.eq(off:step(opt), "stepped")
    errs(function() r:load_state_dict({}) end, "GradScaler:load_state_dict", "the source state dict is empty")
  end)
end)
