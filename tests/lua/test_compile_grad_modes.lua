-- Compiled functions where grad mode or requires_grad changes inside the call (vm/graph/recorder.cpp
-- grad_turned_on, vm/lua/autograd_api.cpp): requires_grad_() on a tensor the function made, and
-- T.enable_grad / set_grad_enabled(true) in a call made without grad, end the graph there and
-- capture the rest for training; the gradients equal eager's.
local T = require "crescent"
local S = expect

describe("tensors made to require grad inside a compiled function", function()
  it("differentiate the ops after requires_grad_ once compiled (a graph break there), as eager", function()
    T.config.sync_compile = true
    local makers = {
      function(x) return x:clone():requires_grad_() end,
      function(x) return x:detach():requires_grad_() end,
      function(x) return (x * 1):requires_grad_(true) end,
    }
    for n, make in ipairs(makers) do
      local f = T.compile(function(x)
        local xx = make(x)
        local y = (xx * xx):sum()
        y:backward()
        return xx.grad
      end)
      for call = 1, 5 do
        local x = T.randn(2, 3)
        S.close(f(x), x * 2, 1e-6, 1e-6, ("maker %d, call %d"):format(n, call))
      end
    end
    -- an adversarial input (FGSM): autograd.grad of a loss with respect to a copy of the input
    T.manual_seed(3)
    local model = T.nn.Linear(4, 3)
    local function fgsm(x, y)
      local xa = x:clone():requires_grad_()
      local g = T.autograd.grad({ T.F.cross_entropy(model(xa), y) }, { xa })[1]
      return x + 0.1 * g:sign()
    end
    local cf = T.compile(fgsm)
    for call = 1, 5 do
      local x, y = T.randn(2, 4), T.tensor({ 1, 3 })
      S.close(cf(x, y), fgsm(x, y), 0, 0, "fgsm call " .. call)
    end
    T.config.sync_compile = false
  end)
end)

describe("grad mode turned on inside a compiled function called without grad", function()
  it("ends the graph there and captures what follows for training, as eager differentiates it", function()
    T.config.sync_compile = true
    local w = T.ones(3, { requires_grad = true })
    local f = T.compile(function(x) return T.enable_grad(function() return (x * w):sum() end) end)
    local g = T.compile(function(x)
      local d = T.enable_grad(function()
        local xx = x:detach():requires_grad_()
        return T.autograd.grad({ (xx * w):sum() * 2 }, { xx })[1]
      end)
      return d * 3
    end)
    local h = T.compile(function(x)
      T.set_grad_enabled(true)
      local y = (x * w):sum()
      T.set_grad_enabled(false)
      return y
    end)
    for call = 1, 5 do
      local x = T.full({ 3 }, 2.5)
      local y = T.no_grad(f, x)
      S.eq({ y:item(), y.requires_grad }, { 7.5, true }, "enable_grad, call " .. call)
      S.close(T.no_grad(g, x), T.full({ 3 }, 6.0), 0, 0, "autograd.grad inside enable_grad, call " .. call)
      local z = T.no_grad(h, x)
      S.truthy(z.requires_grad, "set_grad_enabled, call " .. call)
      w.grad = nil
      z:backward()
      S.close(w.grad, T.full({ 3 }, 2.5), 0, 0, "its gradient, call " .. call)
    end
    T.config.sync_compile = false
  end)

  it("results made under inference_mode are inference tensors, as eager's (views: their base's kind)", function()
    for _, mode in ipairs({ "default", "reduce-overhead" }) do
      local f = T.compile(function(x) return x * 2, x:view(-1), x:add_(0) end, { mode = mode })
      for call = 1, 6 do
        local x = T.ones(2, 2)
        local a, b, c = T.inference_mode(function() return f(x) end)
        S.eq({ a:is_inference(), b:is_inference(), c:is_inference() }, { true, false, false }, mode .. ", call " .. call)
        local y = T.inference_mode(function() return T.ones(2, 2) end)
        local p, q = T.inference_mode(function() return f(y) end)
        S.eq({ p:is_inference(), q:is_inference() }, { true, true }, mode .. ", inference input, call " .. call)
        T.compiler.wait()
      end
    end
  end)
end)
