-- Autograd's surface (API.md section 9): requires_grad, grad, grad_fn, is_leaf, detach,
-- retain_grad, hooks, backward and T.autograd.grad options, grad mode, printing, double
-- backward, and the misuse errors with PyTorch's messages.
local T = require "crescent"
local errs = expect.error_checker("test_autograd.lua")

local function f64(...) return T.randn(..., { dtype = "float64" }) end

describe("autograd surface", function()
  it("records leaves, grad_fn and gradients", function()
    local x = T.tensor({ 1.0, 2.5, 3 }, { requires_grad = true })
    expect.truthy(x.requires_grad and x.is_leaf and x.grad == nil and x.grad_fn == nil)
    local y = (x * x + 2):sum()
    expect.eq(tostring(y.grad_fn), "<SumBackward>")
    expect.eq(y.grad_fn:name(), "SumBackward")
    expect.truthy(not y.is_leaf and y.requires_grad)
    y:backward()
    expect.close(x.grad, { 2, 5, 6 })
    y = (x * 3):sum()
    y:backward()
    expect.close(x.grad, { 5, 8, 9 })  -- accumulates
    x.grad = nil
    expect.eq(x.grad, nil)
  end)

  it("takes requires_grad on every creation op and refuses integer dtypes", function()
    expect.truthy(T.zeros(2, 3, { requires_grad = true }).requires_grad)
    expect.truthy(T.ones({ 2 }, { requires_grad = true, dtype = "float64" }).requires_grad)
    expect.truthy(T.full({ 2 }, 1.5, { requires_grad = true }).requires_grad)
    expect.truthy(T.randn(2, { requires_grad = true }).requires_grad)
    expect.truthy(T.linspace(0, 1, 3, { requires_grad = true }).requires_grad)
    expect.truthy(not T.zeros(2, { requires_grad = false }).requires_grad)
    errs(function() T.tensor({ 1, 2 }, { requires_grad = true }) end, "requires_grad_",
      "only Tensors of floating point dtype can require gradients, got int64")
    errs(function() T.zeros(2, { dtype = "bool" }):requires_grad_() end, "requires_grad_", "got bool")
    local x = T.zeros(2)
    x.requires_grad = true
    expect.truthy(x.requires_grad)
    errs(function() (x * 2):requires_grad_(false) end, "requires_grad_", "only change requires_grad flags of leaf")
  end)

  it("prints grad_fn and requires_grad as PyTorch does", function()
    local x = T.ones(2, { requires_grad = true })
    expect.eq(tostring(x), "tensor([1., 1.], requires_grad=True)")
    expect.eq(tostring(x * 2), "tensor([2., 2.], grad_fn=<MulBackward>)")
    expect.eq(tostring(T.ones(2, { dtype = "float64", requires_grad = true })), "tensor([1., 1.], dtype=float64, requires_grad=True)")
    -- (a suffix past the line width goes on a line of its own, as torch's)
    expect.eq(tostring((T.arange(9, { dtype = "float32" }) / 8):requires_grad_()),
      "tensor([0.0000, 0.1250, 0.2500, 0.3750, 0.5000, 0.6250, 0.7500, 0.8750, 1.0000],\n       requires_grad=True)")
    expect.eq(tostring((x * 2):detach()), "tensor([2., 2.])")
  end)

  it("detach shares storage and drops history", function()
    local x = T.ones(3, { requires_grad = true })
    local d = (x * 2):detach()
    expect.truthy(not d.requires_grad and d.is_leaf and d.grad_fn == nil)
    local e = x:detach()
    e:fill_(5)
    expect.close(x, { 5, 5, 5 })
  end)

  it("max / min along a dim keep the indices only: their values may change in place, as torch's", function()
    local x = T.tensor({ { 1, 5, 3 }, { 4, 2, 6 } }, { dtype = "float64" }):requires_grad_()
    local v = x:max(2)
    v:add_(1)
    v:sum():backward()
    expect.eq(x.grad:totable(), { { 0, 1, 0 }, { 0, 0, 1 } })
    local y = T.tensor({ 1, 5, 3 }, { dtype = "float64" }):requires_grad_()
    local m = y:min()  -- (no dim: the value is kept, as torch's)
    m:add_(1)
    expect.errors(function() m:backward() end, "modified by an inplace operation")
  end)
  it("detach_ drops the history in place; a view refuses, as torch", function()
    local x = T.ones(3, { requires_grad = true })
    local y = x * 3
    expect.eq(y:detach_(), y)
    expect.truthy(not y.requires_grad and y.is_leaf and y.grad_fn == nil)
    local l = (y * x):sum()
    l:backward()
    expect.close(x.grad, { 3, 3, 3 })
    expect.errors(function() (x * 2):narrow(1, 1, 2):detach_() end, "detach_: can't detach views in%-place")
    x:detach_()
    expect.truthy(not x.requires_grad and x.is_leaf)
    local g = T.compile(function(v) local w = v * 2; w:detach_(); return w + 1 end)
    for _ = 1, 4 do  -- (compiled calls too: the replay's value carries no gradient after detach_)
      local r = g(T.ones(3, { requires_grad = true }))
      expect.truthy(not r.requires_grad and r.is_leaf and r.grad_fn == nil)
    end
    local p = T.ones(3, { requires_grad = true })
    local f = T.compile(function(v) local w = v * 3; w:detach_(); return (w * v):sum() end)
    for _ = 1, 4 do
      p.grad = nil
      f(p):backward()
      expect.close(p.grad, { 3, 3, 3 })
    end
  end)

  it("no_grad / enable_grad / inference_mode / set_grad_enabled", function()
    local x = T.ones(2, { requires_grad = true })
    local y, n = T.no_grad(function(a, b) return x * a, b end, 2, 7)
    expect.truthy(not y.requires_grad and n == 7)
    expect.truthy(T.no_grad(function() return T.enable_grad(function() return x * 2 end) end).requires_grad)
    expect.truthy(not T.inference_mode(function() return x * 2 end).requires_grad)
    expect.errors(function() T.no_grad(function() error("boom") end) end, "test_autograd.lua:%d+: boom")
    expect.truthy(T.is_grad_enabled())
    T.set_grad_enabled(false)
    expect.truthy(not (x * 2).requires_grad and not T.is_grad_enabled())
    T.set_grad_enabled(true)
    expect.truthy((x * 2).requires_grad)
    -- an in-place update of a leaf is allowed without grad
    T.no_grad(function() x:add_(1) end)
    expect.close(x, { 2, 2 })
  end)

  it("backward takes a gradient, retain_graph and inputs", function()
    local x = T.tensor({ 1, 2 }, { dtype = "float32", requires_grad = true })
    local w = T.tensor({ 3, 4 }, { dtype = "float32", requires_grad = true })
    local y = x * w
    y:backward(T.tensor({ 1, 10 }, { dtype = "float32" }), { retain_graph = true })
    expect.close(x.grad, { 3, 40 })
    expect.close(w.grad, { 1, 20 })
    y:backward(T.ones(2), { inputs = { x } })
    expect.close(x.grad, { 6, 44 })
    expect.close(w.grad, { 1, 20 })  -- not an input: untouched
  end)

  it("T.autograd.grad with grad_outputs, allow_unused and create_graph", function()
    local x = f64(3):requires_grad_()
    local unused = f64(3):requires_grad_()
    local g = T.autograd.grad((x * x):sum(), { x, unused }, { allow_unused = true })
    expect.close(g[1], (x * 2):detach())
    expect.eq(g[2], nil)
    expect.eq(x.grad, nil)
    local g2 = T.autograd.grad(x * 3, x, T.ones(3, { dtype = "float64" }))
    expect.close(g2[1], { 3, 3, 3 })
    -- double backward: d/dx sum(d/dx sum(x^3)) = 6x
    local d1 = T.autograd.grad((x * x * x):sum(), { x }, { create_graph = true })[1]
    expect.truthy(d1.requires_grad)
    local d2 = T.autograd.grad(d1:sum(), { x })[1]
    expect.close(d2, (x * 6):detach())
  end)

  it("double backward through exp, tanh, sigmoid, softmax and div", function()
    local x = f64(4):requires_grad_()
    for _, case in ipairs({
      { function(v) return v:exp() end, function(v) return v:exp() end },
      { function(v) return v:tanh() end, function(v) local t = v:tanh(); return (t * t - 1) * t * 2 end },
      { function(v) return v:sigmoid() end, function(v) local s = v:sigmoid(); return s * (1 - s) * (1 - s * 2) end },
      { function(v) return 1 / (v * v + 1) end, function(v) local d = v * v + 1; return (v * v * 6 - 2) / (d * d * d) end },
    }) do
      local d1 = T.autograd.grad(case[1](x):sum(), { x }, { create_graph = true })[1]
      local d2 = T.autograd.grad(d1:sum(), { x })[1]
      expect.close(d2, T.no_grad(case[2], x), 1e-9, 1e-12)
    end
    -- gelu's gradient is one fused op (_gelu_backward); its own gradient, in both forms
    for _, mode in ipairs({ "none", "tanh" }) do
      local function g(v) return T.autograd.grad(T.gelu(v, { approximate = mode }):sum(), { v }, { create_graph = true })[1] end
      expect.truthy(T.autograd.gradcheck(g, { x }), "gelu " .. mode)
    end
    local function f(v) return T.softmax(v, 1):select(1, 1) end
    expect.truthy(T.autograd.gradcheck(function(v)
      return T.autograd.grad(f(v), { v }, { create_graph = true })[1]
    end, { x }))
  end)

  it("double backward through saved tensors that are not leaves (a view among them)", function()
    local x = f64(3):requires_grad_()
    local y = x * 2
    local d1 = T.autograd.grad((y * y * y):sum(), { x }, { create_graph = true })[1]  -- 24 x^2
    expect.close(T.autograd.grad(d1:sum(), { x })[1], (x * 48):detach(), 1e-12, 1e-12)
    local m = T.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float64", requires_grad = true })
    local v = (m * 1):t()
    local g = T.autograd.grad((v * v):sum(), { m }, { create_graph = true })[1]  -- 2 m
    expect.close(T.autograd.grad((g * g):sum(), { m })[1], (m * 8):detach(), 1e-12, 1e-12)
  end)

  it("a saved tensor written in place later does not keep its graph alive", function()
    local function step()
      local w = T.randn(256, 256, { requires_grad = true })
      local a = w * 2
      local b = a * a  -- saves a
      a:add_(b)  -- a's node reaches b's, which saved a
      local z = T.zeros(256, 256)
      z:add_(z * w)  -- z (saved, no history then) gets a node reaching the one that saved it
    end
    collectgarbage()
    collectgarbage()
    local before = T.memory_stats().in_use
    for _ = 1, 3 do step() end
    collectgarbage()
    collectgarbage()
    expect.eq(T.memory_stats().in_use, before)
  end)

  it("norm with p < 1: the gradient of a zero element is 0, as PyTorch masks it", function()
    local x = T.tensor({ 0, 4, -1, 0 }, { dtype = "float64", requires_grad = true })
    x:norm({ p = 0.5 }):backward()
    local n = (2 + 1) ^ 2  -- (sum |x|^0.5)^2
    expect.close(x.grad, T.tensor({ 0, (4 ^ -0.5) * n ^ 0.5, -n ^ 0.5, 0 }, { dtype = "float64" }), 1e-12, 1e-12)
  end)

  it("retain_grad and hooks", function()
    local a = T.randn(2, 2, { requires_grad = true })
    local b = a * 3
    b:retain_grad()
    expect.truthy(b.retains_grad)
    local seen
    local h = b:register_hook(function(g) seen = g:clone(); return g * 2 end)
    b:sum():backward()
    expect.close(seen, T.ones(2, 2))
    expect.close(b.grad, T.full({ 2, 2 }, 2))
    expect.close(a.grad, T.full({ 2, 2 }, 6))
    h:remove()
    local calls = 0
    a:register_hook(function(g) calls = calls + 1 end)
    a.grad = nil
    ;(a * 3):sum():backward()
    expect.eq(calls, 1)
    expect.close(a.grad, T.full({ 2, 2 }, 3))
    a:register_hook(function() error("inside hook") end)
    expect.errors(function() (a * 1):sum():backward() end, "test_autograd.lua:%d+: inside hook")
    errs(function() T.ones(2):register_hook(print) end, "register_hook", "doesn't require gradient")
    local c = a * 1
    c:register_hook(function() return 1 end)
    errs(function() c:sum():backward() end, "register_hook", "a hook returned a number, expected a tensor or nil")
  end)

  it("removed hooks leave the tensor's list; hooks may remove hooks while they run", function()
    local w = T.randn(4, 4, { requires_grad = true })
    local x = T.randn(2, 4)
    for _ = 1, 2000 do  -- (a parameter's hook registered and removed every step)
      local h = w:register_hook(function(g) return g * 2 end)
      h:remove()
    end
    x:matmul(w):sum():backward()
    expect.close(w.grad, x:sum(1):view(4, 1):expand(4, 4))  -- (no removed hook doubled it)
    w.grad = nil
    local order, second = {}, nil
    local first = w:register_hook(function(g) order[#order + 1] = 1; second:remove() end)
    second = w:register_hook(function(g) order[#order + 1] = 2 end)
    local post = w:register_post_accumulate_grad_hook(function() order[#order + 1] = "post" end)
    x:matmul(w):sum():backward()
    expect.eq(order, { 1, "post" }, "a hook another one removed does not run")
    first:remove(); post:remove()
    order = {}
    x:matmul(w):sum():backward()
    expect.eq(order, {}, "all removed")
  end)

  it("a hook may not change the gradient's dtype (PyTorch: 'has changed the type of value')", function()
    local x = T.tensor({ 1.5, 2.5 }, { requires_grad = true })
    local h = x:register_hook(function(g) return g:long() end)
    errs(function() x:sum():backward() end, "backward", "hook: the returned gradient has changed the type of value",
      "expected float32 on cpu, got int64 on cpu")
    expect.eq(x.grad, nil)
    h:remove()
    local y = x * 2  -- a non-leaf's hook
    y:register_hook(function(g) return g:double() end)
    errs(function() y:sum():backward() end, "backward", "expected float32 on cpu, got float64 on cpu")
    y = x * 3
    y:register_hook(function(g) return g * 2 end)  -- same dtype: taken
    y:sum():backward()
    expect.close(x.grad, { 6, 6 })
  end)

  it("a non-leaf's hook outlives its tensor (it belongs to the node, as PyTorch's)", function()
    local x = T.ones(2, { requires_grad = true })
    local function forward(scale)
      local y = x * 2
      local h = y:register_hook(function(g) return g * scale end)
      return y:sum(), h
    end
    local l = forward(10)
    collectgarbage(); collectgarbage()  -- (y is gone)
    l:backward()
    expect.eq(x.grad:totable(), { 20, 20 })
    x.grad = nil
    local l2, h = forward(10)
    collectgarbage(); collectgarbage()
    h:remove()
    l2:backward()
    expect.eq(x.grad:totable(), { 2, 2 }, "removed after its tensor died")
    x.grad = nil
    local f = T.compile(function(a) local y = a * 2; y:register_hook(function(g) return g * 10 end); return y:sum() end)
    for i = 1, 4 do
      local a = T.ones(2, { requires_grad = true })
      f(a):backward()
      expect.eq(a.grad:totable(), { 20, 20 }, "call " .. i)
    end
  end)
end)

describe("autograd errors", function()
  it("backward on a non-scalar without a gradient, or one of the wrong shape", function()
    local x = T.randn(3, { requires_grad = true })
    errs(function() (x * 2):backward() end, "backward", "grad can be implicitly created only for scalar outputs")
    errs(function() (x * 2):backward(T.ones(4)) end, "backward", "Mismatch in shape: grad_output[1] has a shape of {4}")
    errs(function() T.ones(2):sum():backward() end, "backward", "does not require grad and does not have a grad_fn")
  end)

  it("one gradient per output; requires_grad_(true) on a non-leaf is a no-op", function()
    local a = T.tensor({ 1, 2 }, { dtype = "float64", requires_grad = true })
    errs(function() T.autograd.grad({ (a * 2):sum(), (a * a):sum() }, { a }, { T.tensor(1, { dtype = "float64" }) }) end,
      "autograd.grad", "grad_outputs expected one entry per output, got 1 for 2 outputs")
    errs(function() T.autograd.backward({ (a * 2):sum(), (a * a):sum() }, { T.tensor(1, { dtype = "float64" }) }) end,
      "autograd.backward", "grad_tensors expected one entry per output")
    local g = T.autograd.grad({ (a * 2):sum(), (a * a):sum() }, { a }, { T.tensor(1, { dtype = "float64" }), n = 2 })
    expect.eq(g[1]:totable(), { 4, 6 }, "a trailing nil entry is an implicit one")
    local y = a * 2
    expect.eq(y:requires_grad_(true), y)
    errs(function() y:requires_grad_(false) end, "requires_grad_", "only change requires_grad flags of leaf variables")
  end)

  it("an in-place op on a leaf that requires grad", function()
    local x = T.randn(3, { requires_grad = true })
    errs(function() x:add_(1) end, "add_", "a leaf Variable that requires grad is being used in an in-place operation")
    errs(function() x:zero_() end, "zero_", "a leaf Variable")
    errs(function() x[1] = 2 end, "fill_", "a view of a leaf Variable that requires grad is being used in an in-place operation")
  end)

  it("a saved tensor changed in place: version, op and line", function()
    local x = T.randn(3, { requires_grad = true })
    local y = x * 2
    local z = y:sin()
    local line = debug.getinfo(1, "l").currentline - 1
    y:mul_(2)
    errs(function() z:sum():backward() end, "backward",
      "one of the variables needed for gradient computation has been modified by an inplace operation: [float32 {3}], saved by sin at ",
      "test_autograd.lua:" .. line, "is at version 1; expected version 0 instead")
  end)

  it("an operand kept only for another one's gradient is not saved when that one needs none", function()
    local C = T.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float64" })
    local cases = {  -- {the op of b, x's gradient}: b changes in place after the op, as torch allows
      { function(b) return b * 3 end, { 3, 3 } },
      { function(b) return b / T.tensor({ 2, 4 }, { dtype = "float64" }) end, { 0.5, 0.25 } },
      { function(b) return b:view(1, 2):matmul(C) end, { 3, 7 } },
      { function(b) return C:matmul(b) end, { 4, 6 } },
      { function(b) return T.F.linear(b:view(1, 2), C) end, { 4, 6 } },
    }
    for i, c in ipairs(cases) do
      local x = T.tensor({ 1, 2 }, { dtype = "float64", requires_grad = true })
      local b = x * 1
      local y = c[1](b)
      b:add_(1)
      y:sum():backward()
      expect.eq(x.grad:totable(), c[2], "case " .. i)
    end
    local w = T.tensor({ 1, 2 }, { dtype = "float64", requires_grad = true })
    local b = w * 1
    local y = b:matmul(w)  -- (w requires grad: b is saved, and its change raises)
    b:add_(1)
    errs(function() y:backward() end, "backward", "modified by an inplace operation", "saved by matmul")
  end)

  it("an in-place op on a non-leaf rebases its history", function()
    local x = T.tensor({ 1, 2 }, { dtype = "float32", requires_grad = true })
    local y = x * 2
    y:mul_(3)
    expect.eq(tostring(y.grad_fn), "<MulBackward>")
    y:sum():backward()
    expect.close(x.grad, { 6, 6 })
    local b = T.zeros(2)
    b:copy_(x)
    expect.truthy(b.requires_grad and not b.is_leaf)
    x.grad = nil
    ;(b * b):sum():backward()
    expect.close(x.grad, { 2, 4 })
  end)

  it("a second backward through a freed graph", function()
    local x = T.randn(3, { requires_grad = true })
    local y = (x * x):sum()
    y:backward()
    errs(function() y:backward() end, "backward", "Trying to backward through the graph a second time")
    local z = (x + 1):sum()  -- saves nothing: a second backward works, as in PyTorch
    z:backward()
    z:backward()
  end)

  it("unused inputs, ops without a derivative, bad options", function()
    local x = T.randn(3, { requires_grad = true })
    errs(function() T.autograd.grad((x * 2):sum(), { x, T.randn(3, { requires_grad = true }) }) end, "autograd.grad",
      "appears to not have been used in the graph")
    errs(function() T.autograd.grad((x * 2):sum(), { T.randn(3) }) end, "autograd.grad", "input 1 does not require grad")
    errs(function() (x * 2):sum():backward({ retain = true }) end, "backward", "unknown option 'retain'")
    errs(function() x.grad = T.zeros(4) end, "grad", "assigned grad has data of a different size")
    errs(function() x.grad = T.zeros(3, { dtype = "float64" }) end, "grad", "different type")
    errs(function() x.foo = 1 end, "tensor", "cannot set field 'foo'")
  end)

  it("a tensor as its own grad (PyTorch: 'can't assign Variable as its own grad')", function()
    local x = T.ones(3, { requires_grad = true })
    errs(function() x.grad = x end, "grad", "can't assign a tensor as its own grad")
    expect.eq(x.grad, nil)
    x.grad = x:detach()  -- another tensor over the same memory: allowed, as PyTorch
    expect.close(x.grad, { 1, 1, 1 })
  end)

  it("an empty inputs list (PyTorch: 'inputs' argument to backward() cannot be empty)", function()
    local x = T.tensor({ 1.5, 2.5 }, { requires_grad = true })
    local y = (x * x):sum()
    errs(function() y:backward(nil, { inputs = {} }) end, "backward",
      "inputs expected a non-empty list of tensors, got an empty list")
    errs(function() T.autograd.backward(y, { inputs = {} }) end, "autograd.backward", "expected a non-empty list")
    errs(function() T.autograd.grad(y, {}) end, "autograd.grad", "inputs expected a non-empty list of tensors")
    errs(function() T.autograd.grad(y, {}, { allow_unused = true }) end, "autograd.grad", "non-empty")
    expect.eq(x.grad, nil)
    y:backward(nil, { inputs = { x } })
    expect.close(x.grad, { 3, 5 })
  end)
end)

describe("rule edge cases", function()
  it("std of a constant has a zero gradient (not 0 / 0), as PyTorch's", function()
    local x = T.full({ 4 }, 2.5):requires_grad_()
    x:std():backward()
    expect.eq(x.grad:totable(), { 0, 0, 0, 0 })
  end)
end)

describe("inference tensors", function()
  it("tensors made under inference_mode are inference tensors; views share it", function()
    local w = T.randn(3, { requires_grad = true })
    local x = T.randn(3)
    local i = T.inference_mode(function()
      expect.truthy(T.is_inference_mode_enabled() and not T.is_grad_enabled())
      local r = w * 2
      expect.truthy(r:is_inference() and not r.requires_grad)
      expect.truthy(not x:narrow(1, 1, 2):is_inference())  -- a view of a normal tensor stays normal
      r:add_(1)  -- in place inside the mode: allowed
      return r
    end)
    expect.truthy(i:is_inference() and i:narrow(1, 1, 2):is_inference() and i:detach():is_inference())
    expect.truthy(not (x:is_inference() or (i + 1):is_inference() or i:clone():is_inference()))
  end)

  it("outside the mode: no in-place change, no requires_grad, not saved for backward", function()
    local i = T.inference_mode(function() return T.ones(3) end)
    errs(function() i:add_(1) end, "add_", "Inplace update to inference tensor outside InferenceMode is not allowed")
    errs(function() i:narrow(1, 1, 1):zero_() end, "zero_", "Inplace update to inference tensor")
    errs(function() i:requires_grad_() end, "requires_grad_",
      "Setting requires_grad=True on inference tensor outside InferenceMode is not allowed")
    local w = T.randn(3, { requires_grad = true })
    errs(function() return w * i end, "mul", "Inference tensors cannot be saved for backward")
    local y = w + i  -- (add saves nothing: allowed, as PyTorch)
    y:sum():backward()
    expect.close(w.grad, T.ones(3))
    expect.close(i:clone():requires_grad_() * 2, i * 2)
  end)

  it("enable_grad inside inference_mode turns grad mode on but records nothing", function()
    local x = T.ones(3, { requires_grad = true })
    local y, z = T.inference_mode(function()
      return T.enable_grad(function()
        expect.truthy(T.is_grad_enabled() and T.is_inference_mode_enabled())
        local w = T.ones(2, { requires_grad = true })  -- (an inference leaf requiring grad, as PyTorch's)
        expect.truthy(w.requires_grad and w:is_inference() and not (w * 2).requires_grad)
        return x * 2, (x * 2):sum()
      end)
    end)
    expect.truthy(not y.requires_grad and y:is_inference() and y.grad_fn == nil and not z.requires_grad)
    T.inference_mode(function()
      T.set_grad_enabled(true)
      expect.truthy(T.is_grad_enabled() and not (x * 2).requires_grad)
    end)
    expect.truthy(T.is_grad_enabled() and not T.is_inference_mode_enabled() and (x * 2).requires_grad)
    T.no_grad(function()
      T.inference_mode(function() T.enable_grad(function() end) end)
      expect.truthy(not T.is_grad_enabled() and not (x * 2).requires_grad)
    end)
  end)

  it("backward under inference_mode with create_graph records no double-backward graph", function()
    local x = T.tensor({ 1.5, 2.5 }, { requires_grad = true })
    local y = (x * x):sum()
    local g = T.inference_mode(function() return T.autograd.grad(y, { x }, { create_graph = true })[1] end)
    expect.close(g, { 3, 5 })
    expect.truthy(not g.requires_grad and g:is_inference())
  end)
end)

describe("deep graphs", function()
  -- (a chain deeper than the C stack allows recursive node destruction: 140k nodes crashed it)
  it("a 200k-node chain backprops and is freed iteratively", function()
    local x = T.ones(1, { requires_grad = true, dtype = "float64" })
    local y = x
    for _ = 1, 200000 do y = y * 1.0000001 end
    y:sum():backward()
    expect.close(x.grad, { 1.0000001 ^ 200000 }, 1e-9, 0)
    y = nil
    collectgarbage()
    collectgarbage()
    expect.truthy(x.grad ~= nil)
  end)
end)
