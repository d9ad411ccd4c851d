-- In-place ops on views under autograd (PyTorch's CopySlices): the base's history is rebased, the
-- views get an as_strided grad_fn over it; gradients against PyTorch 1.13 (torch_ref.lua) and
-- float64 central differences; PyTorch's refusals.
local T = require "crescent"
local Rf = require "torch_ref"

local function R(...) return T.randn({ ... }, { dtype = "float64" }):requires_grad_() end
local function errs(fn, ...)
  local ok, e = pcall(fn)
  expect.truthy(not ok, "expected an error")
  for _, p in ipairs({ ... }) do expect.truthy(tostring(e):find(p, 1, true), tostring(e)) end
end

-- Each case: inputs, a Lua function of them returning a scalar, the same in Python (function f
-- of the inputs' names, defined in the prelude).
local cases, prelude = {}, {}
local function case(name, inputs, fn, py)
  cases[#cases + 1] = { name = name, inputs = inputs, fn = fn }
  prelude[#prelude + 1] = py
end

local W = T.randn(4, 3, { dtype = "float64" })
case("narrow_mul", { a = R(4, 3), y = R(2, 3) }, function(a, y)
  local x = a:clone()
  x:narrow(1, 2, 2):mul_(y)
  return (x * x * W):sum()
end, [[
def narrow_mul(a, y, W):
    x = a.clone(); x.narrow(0, 1, 2).mul_(y); return (x * x * W).sum()]])
case("select_copy", { a = R(4, 3), y = R(3) }, function(a, y)
  local x = a:clone()
  x:select(1, 2):copy_(y * 2)
  return (x:sin() * W):sum()
end, [[
def select_copy(a, y, W):
    x = a.clone(); x.select(0, 1).copy_(y * 2); return (x.sin() * W).sum()]])
case("setindex", { a = R(4, 3), y = R(2) }, function(a, y)
  local x = a:clone()
  x[{ { 2, 3 }, 2 }] = y:exp()
  return (x * W):sum() + (x * x):sum()
end, [[
def setindex(a, y, W):
    x = a.clone(); x[1:3, 1] = y.exp(); return (x * W).sum() + (x * x).sum()]])
case("zeros_buffer", { y = R(3), z = R(2) }, function(y, z)
  local buf = T.zeros(4, 3, { dtype = "float64" })
  buf[2] = y
  buf[{ 1, { 2, 3 } }] = z * 2
  return (buf:sin() * W):sum()
end, [[
def zeros_buffer(y, z, W):
    buf = torch.zeros(4, 3, dtype=torch.float64); buf[1] = y; buf[0, 1:3] = z * 2
    return (buf.sin() * W).sum()]])
case("view_of_view", { a = R(4, 3), y = R(2, 2) }, function(a, y)
  local x = a:clone()
  local u = x:select(2, 1)  -- made before the write: its grad_fn is made again
  local v = x:t():narrow(1, 2, 2):narrow(2, 1, 2)
  v:add_(y * 3)
  v:mul_(y)
  return (u * u):sum() + (x * W):sum()
end, [[
def view_of_view(a, y, W):
    x = a.clone(); u = x.select(1, 0); v = x.t().narrow(0, 1, 2).narrow(1, 0, 2)
    v.add_(y * 3); v.mul_(y); return (u * u).sum() + (x * W).sum()]])
case("base_write", { a = R(4, 3) }, function(a)
  local x = a:clone()
  local v = x:view(12):narrow(1, 3, 5)
  x:mul_(W)
  return (v * v):sum()
end, [[
def base_write(a, W):
    x = a.clone(); v = x.view(12).narrow(0, 2, 5); x.mul_(W); return (v * v).sum()]])
case("index_put_view", { a = R(4, 3), y = R(2) }, function(a, y)
  local x = a:clone()
  x[{ 3, T.tensor({ 1, 3 }) }] = y
  x:select(2, 3):masked_fill_(T.tensor({ true, false, true, false }), 0)
  return (x:cos() * W):sum()
end, [[
def index_put_view(a, y, W):
    x = a.clone(); x[2, torch.tensor([0, 2])] = y
    x.select(1, 2).masked_fill_(torch.tensor([True, False, True, False]), 0); return (x.cos() * W).sum()]])
case("strided_base", { a = R(3, 4), y = R(2) }, function(a, y)
  local x = a:t():clone()  -- (clone keeps the layout or not: the base's strides are read either way)
  x:select(1, 3):narrow(1, 2, 2):copy_(y)
  return (x * W):sum()
end, [[
def strided_base(a, y, W):
    x = a.t().clone(); x.select(0, 2).narrow(0, 1, 2).copy_(y); return (x * W).sum()]])

local function grads_of(c)
  local names, vals = {}, {}
  for k in pairs(c.inputs) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do vals[#vals + 1] = c.inputs[k] end
  return names, vals
end

describe("in-place ops on views (CopySlices)", function()
  it("gradients equal PyTorch's", function()
    local B = Rf.batch(table.concat(prelude, "\n"))
    local got = {}
    for _, c in ipairs(cases) do
      local names, vals = grads_of(c)
      local env, args, leaves = { W = W }, {}, {}
      for i, k in ipairs(names) do
        env[k] = vals[i]
        args[#args + 1] = k .. ".detach().requires_grad_()"
        leaves[#leaves + 1] = "_" .. k
      end
      local py = string.format("(lambda %s: list(torch.autograd.grad(%s(%s, W), [%s])))(%s)", table.concat(leaves, ", "),
        c.name, table.concat(leaves, ", "), table.concat(leaves, ", "), table.concat(args, ", "))
      B:add(c.name, py, env)
      got[c.name] = T.autograd.grad({ c.fn(unpack(vals)) }, vals)
    end
    local res, why = B:run()
    if not res then expect.skip(why) end
    for _, c in ipairs(cases) do
      for i = 1, #got[c.name] do Rf.check(res, c.name .. "#" .. i, got[c.name][i], 1e-10, 1e-10) end
    end
  end)

  it("gradients pass gradcheck (float64 central differences)", function()
    for _, c in ipairs(cases) do
      local _, vals = grads_of(c)
      local ok, e = pcall(T.autograd.gradcheck, c.fn, vals)
      if not ok then error(c.name .. ": " .. tostring(e), 0) end
    end
  end)

  it("the base's grad_fn is CopySlices, the view's an as_strided of the base", function()
    local x = R(4, 3):clone()
    local v = x:narrow(1, 1, 2)
    local u = x:select(1, 4)
    expect.eq(tostring(v.grad_fn), "<NarrowBackward>")
    v:mul_(2)
    expect.eq(tostring(x.grad_fn), "<CopySlices>")
    expect.eq(tostring(v.grad_fn), "<AsStridedBackward>")
    expect.eq(tostring(u.grad_fn), "<AsStridedBackward>")
    local buf = T.zeros(3)
    expect.truthy(not (buf.requires_grad))
    buf[2] = R(1):sum()
    expect.truthy(buf.requires_grad and not buf.is_leaf)
    expect.eq(tostring(buf.grad_fn), "<CopySlices>")
  end)

  it("double backward through CopySlices", function()
    local a, y = R(3), R(2)
    local x = a:clone()
    x:narrow(1, 2, 2):mul_(y)
    local gy = T.autograd.grad({ (x * x * x):sum() }, { y }, nil, { create_graph = true })[1]
    local gg = T.autograd.grad({ gy:sum() }, { a, y })
    -- d/dy sum((a_i y_i)^3) = 3 a_i^3 y_i^2; its gradient: 9 a^2 y^2 and 6 a^3 y
    local a2, y2 = a:narrow(1, 2, 2):detach(), y:detach()
    expect.close(gg[1]:narrow(1, 2, 2), a2 * a2 * y2 * y2 * 9)
    expect.close(gg[1]:narrow(1, 1, 1), T.zeros(1, { dtype = "float64" }))
    expect.close(gg[2], a2 * a2 * a2 * y2 * 6)
  end)
end)

describe("in-place ops on views: refusals", function()
  it("a view of a leaf that requires grad", function()
    local a = R(4, 3)
    errs(function() a:narrow(1, 1, 2):mul_(2) end, "mul_", "a view of a leaf Variable that requires grad is being used in an in-place operation")
    errs(function() a[1] = 2 end, "a view of a leaf Variable that requires grad")
    T.no_grad(function() a[1] = 2 end)  -- (not recorded: allowed, as PyTorch)
    expect.close(a:select(1, 1):detach(), T.full({ 3 }, 2, { dtype = "float64" }))
  end)

  it("a view made in no_grad mode, changed in place with grad mode on", function()
    local x = R(4, 3):clone()
    local v = T.no_grad(function() return x:select(1, 1) end)
    errs(function() v:mul_(2) end, "mul_", "A view was created in no_grad mode and is being modified inplace with grad mode enabled")
    local w = T.no_grad(function() return x:select(1, 2) end)
    x:mul_(2)
    expect.truthy(w.requires_grad)  -- (a view requires grad when its base does)
    errs(function() return w.grad_fn end,
      "A view was created in no_grad mode and its base or another view of its base has been modified inplace with grad mode enabled")
    local buf = T.zeros(3)
    local b1 = T.no_grad(function() return buf:narrow(1, 1, 2) end)
    errs(function() b1:copy_(R(2)) end, "copy_", "A view was created in no_grad mode")
  end)

  it("an output of a function returning several views", function()
    local x = R(4, 3):clone()
    local parts = x:split(2)
    errs(function() parts[2]:mul_(2) end, "mul_", "Output 2 of SplitBackward is a view and is being modified inplace",
      "This view is the output of a function that returns multiple views")
  end)

  it("a saved view changed through its base: the version counter", function()
    local x = R(4):clone()
    local v = x:narrow(1, 1, 2)
    local y = v:sin()
    x:add_(1)
    errs(function() y:sum():backward() end, "modified by an inplace operation")
  end)
end)

describe("hooks and retain_grad across an in-place change of a non-leaf", function()
  it("retain_grad keeps the latest value's gradient; each hook the value it was registered on", function()
    -- PyTorch 2's rule (autograd mechanics, "Behavior of Tensor hooks when Tensor is modified in-place")
    local x = T.tensor({ 1, 2, 3, 4 }, { dtype = "float32", requires_grad = true })
    local y = x * 2
    local seen = {}
    y:register_hook(function(g) seen.before = g:totable() end)
    y:retain_grad()
    y:mul_(3)
    y:register_hook(function(g) seen.after = g:totable() end)
    ;(y * T.tensor({ 1, 2, 3, 4 }):float()):sum():backward()
    expect.eq(y.grad:totable(), { 1, 2, 3, 4 })
    expect.eq(seen.after, { 1, 2, 3, 4 })
    expect.eq(seen.before, { 3, 6, 9, 12 })
    expect.eq(x.grad:totable(), { 6, 12, 18, 24 })
  end)
  it("a tensor that dies before the backward leaves no hook behind in the older node", function()
    local x = T.tensor({ 1, 2 }, { dtype = "float32", requires_grad = true })
    local y = x * 2
    y:retain_grad()
    y:mul_(3)
    local z = (y * y):sum()
    y = nil
    collectgarbage(); collectgarbage()
    z:backward()
    expect.eq(x.grad:totable(), { 72, 144 })
  end)
end)

-- A compiled function's outputs viewing its inputs, or other outputs Lua holds, are views for
-- autograd as eager's are: an in-place change of the base after the call (here in the next
-- segment, past a graph break) gives them a grad_fn over the base's new history.
describe("views made by compiled functions", function()
  local programs = {
    base_changed = function(y)
      local t = y:reshape(2, 2):t()
      local _ = y:sum():item()
      y:div_(0)  -- (a NaN gradient through the view, as eager: 0 / 0)
      local _ = y:sum():item()
      return t * T.arange(4, { dtype = "float64" }):reshape(2, 2)
    end,
    needs_no_grad_first = function(buf, w)
      local v = buf:narrow(1, 2, 2)
      local _ = buf:sum():item()
      buf:mul_(w)
      local _ = buf:sum():item()
      return v * T.tensor({ 1, 2 }, { dtype = "float64" })
    end,
    of_an_output = function(buf, w)
      local y = buf * w
      local v = y:view(2, 2)
      local _ = y:sum():item()
      y:mul_(3)
      v[1]:add_(w[1])
      local _ = y:sum():item()
      return v * T.arange(4, { dtype = "float64" }):view(2, 2), y
    end,
  }
  local function run(f)
    local w = T.tensor({ 1, 2, 3, 4 }, { dtype = "float64", requires_grad = true })
    local outs = { f(w * 1, w) }
    local loss = 0
    for _, o in ipairs(outs) do loss = loss + (o * o):sum() end
    loss:backward()
    return w.grad:totable()
  end
  for name, prog in pairs(programs) do
    it(name .. ": gradients equal eager's, before and after native code lands", function()
      local want, f = run(prog), T.compile(prog)
      for call = 1, 4 do
        if call == 4 then T.compiler.wait(f) end
        expect.eq(run(f), want, ("call %d"):format(call))
      end
    end)
  end
end)
