-- Compiled autograd (issue 35, vm/graph/joint.hpp): a compiled function called with grad mode on
-- gives the gradients of eager autograd - cold (recorded: eager autograd), replayed (one
-- CompiledFunctionBackward node per segment, its backward graph run on the eager kernels) and
-- compiled (forward and backward graphs native) - for a corpus of functions, graph breaks,
-- modules trained with SGD and AdamW; no_grad switches to the inference graph; segments that
-- cannot be differentiated as graphs fall back to eager autograd and are counted; whole training
-- steps (backward() and opt:step() inside T.compile) equal the eager steps.
local T = require "crescent"
local S = expect
local nn, optim = T.nn, T.optim

local function stat(k) return T.compiler.stats()[k] end
local function randn(seed, ...) T.manual_seed(seed); return T.randn(...) end
local function x34(c) return randn(1000 + c, 3, 4) end
local FLOATING = { float32 = true, float64 = true, float16 = true, bfloat16 = true }
local function floating(t) return FLOATING[t.dtype] end

-- A loss over every floating result that requires grad (nonlinear, so gradients depend on values).
local function loss_of(rets, n)
  local loss
  local function add(v)
    if T.is_tensor(v) then
      if v.requires_grad and floating(v) then
        local l = (v * v):sum() * 0.5 + v:sum()
        loss = loss and loss + l or l
      end
    elseif type(v) == "table" then
      for _, x in pairs(v) do add(x) end
    end
  end
  for i = 1, n do add(rets[i]) end
  return loss
end

-- Runs f on leaf copies of args(call) (floating tensors require grad), backward through the loss;
-- returns the loss and the gradients of the arguments (and of `params`, cleared after).
local function grads(f, c, call, params)
  local args = S.pack(c.args(call))
  for i = 1, args.n do
    local a = args[i]
    if T.is_tensor(a) and floating(a) then args[i] = a:detach():clone():requires_grad_() end
  end
  local rets = S.pack(f(unpack(args, 1, args.n)))
  local loss = loss_of(rets, rets.n)
  loss:backward()
  local r = { loss = loss:item() }
  for i = 1, args.n do
    if T.is_tensor(args[i]) and args[i].requires_grad then r[#r + 1] = args[i].grad end
  end
  for _, p in ipairs(params or {}) do
    r[#r + 1] = p.grad
    p.grad = nil
  end
  return r
end

local function close_num(got, want, what)
  if math.abs(got - want) > 1e-5 * math.max(1, math.abs(want)) then error(string.format("%s: %.9g vs %.9g", what, got, want), 2) end
end

local function same_grads(got, want, what)
  close_num(got.loss, want.loss, what .. ": loss")
  S.eq(#got, #want, what .. ": number of gradients")
  for i = 1, #want do
    if want[i] == nil then S.eq(got[i], nil, what .. ": gradient " .. i) else S.close(got[i], want[i], 1e-5, 1e-5) end
  end
end

local W = randn(77, 5, 4):requires_grad_()
local function helper(x) local s = (x * 2):sum():item(); return x * s, s end

local corpus = {
  { name = "pointwise chain", args = x34, fn = function(x)
    return ((x * 2 + 1):exp():tanh() - x:sigmoid()):relu() * x:abs():sqrt() + x:neg():exp()
  end },
  { name = "two inputs, broadcasting", args = function(c) return x34(c), randn(c, 4) end, fn = function(x, b)
    return (x * b):sin() + b, x / (b:abs() + 1)
  end },
  { name = "reductions", args = x34, fn = function(x)
    return x:sum(2), x:mean(1, true), x:amax(2), x:sum(), x:logsumexp(2), x:var(2), x:norm()
  end },
  { name = "softmax and log_softmax", args = x34, fn = function(x)
    return x:softmax(2), x:log_softmax(1) * 0.5
  end },
  { name = "views", args = x34, fn = function(x)
    return x:view(4, 3) * 2, x:reshape(2, 6):exp(), x:transpose(1, 2) + 1, x:t():contiguous(), x:flatten() * x:flatten()
  end },
  { name = "narrow, select, expand, unsqueeze", args = x34, fn = function(x)
    return x:narrow(2, 2, 2) * 3, x:select(1, 3):exp(), x:sum(2, true):expand(3, 4) + x, x:unsqueeze(1):squeeze(1) * x
  end },
  { name = "matmul and linear", args = function(c) return x34(c), randn(c + 50, 4, 5), randn(c + 60, 5) end,
    fn = function(a, b, bias) return a:matmul(b):relu(), T.linear(a, b:t(), bias), T.mm(a, b) * 2 end },
  { name = "cat and stack", args = function(c) return x34(c), randn(c + 5, 3, 4) end, fn = function(x, y)
    return T.cat({ x, y * 2 }, 1), T.stack({ x:exp(), y }, 3)
  end },
  { name = "gelu, silu, tanh, clamp", args = x34, fn = function(x)
    return x:gelu() + x:silu(), T.clamp(x, -0.5, 0.5) * x, x:tanh():pow(2)
  end },
  { name = "a weight as an upvalue", args = x34, fn = function(x) return T.linear(x, W):tanh() end, params = { W } },
  { name = "item() graph breaks in a loop", args = x34, fn = function(x)
    local s = 0
    for i = 1, 3 do s = s + (x * i):sin():sum():item() end
    return x:exp() * s
  end },
  { name = "values used across a break", args = x34, fn = function(x)
    local y = x:exp() * 2
    local n = y:amax():item()
    local z = y / n
    return z - (z + y):amin():item(), y:sin()
  end },
  { name = "a break in a helper", args = x34, fn = function(x)
    local a, s = helper(x:sin())
    return a:exp(), helper(a)
  end },
  { name = "a result that is an input", args = function(c) return x34(c), randn(c, 3, 4) end, fn = function(x, y)
    return x, y * x
  end },
  { name = "embedding and index_select (index_add_ in the backward)", args = x34, fn = function(x)
    local idx = T.tensor({ 3, 1, 3, 2 })
    return T.embedding(idx, x:t()) * 2, x:index_select(2, idx):exp()
  end },
  { name = "cross_entropy and layer_norm", args = function(c) return x34(c), randn(c + 7, 4) end, fn = function(x, g)
    local y = T.F.layer_norm(x, { 4 }, g)
    return T.F.cross_entropy(y * 2, T.tensor({ 1, 4, 2 }))
  end },
  -- rules fixed for ties, a zero number base, median and saturated binary_cross_entropy
  { name = "maximum / minimum with ties, pow with base 0, median", args = x34, fn = function(x)
    local c = x:clamp(-0.2, 0.2)
    return T.maximum(x, c) + T.minimum(c, x), T.pow(0, x:abs():round()) * x, x:median() * x:view(12):median()
  end },
  { name = "binary_cross_entropy at inputs 0 and 1", args = x34, fn = function(x)
    return T.F.binary_cross_entropy(x:clamp(0, 1), T.full({ 3, 4 }, 0.25), { reduction = "none" })
  end },
  { name = "integer results beside float ones", args = x34, fn = function(x)
    return x:argmax(2), x:max(2), x:gt(0), x * 2
  end },
}

-- Segments that are differentiated by eager autograd instead (counted in grad_fallbacks).
local fallbacks = {
  { name = "an in-place op on an intermediate", args = x34, fn = function(x)
    local y = x * 2
    y:add_(1)
    return y:exp()
  end },
  { name = "T.no_grad around part of a segment", args = x34, fn = function(x)
    local s = T.no_grad(function() return x * 3 end)
    return x:exp() * s
  end },
}

local CALLS = 5  -- cold (recorded), two replays on the eager kernels, then compiled (hot = 2)

local function check(c, opts)
  local cf = T.compile(c.fn, opts)
  for call = 1, CALLS do
    local want = grads(c.fn, c, call, c.params)
    local got = grads(cf, c, call, c.params)
    same_grads(got, want, c.name .. ", call " .. call)
  end
end

for _, v in ipairs({ { "", nil }, { " (backend aot_eager)", { backend = "aot_eager" } } }) do
  describe("compiled gradients match eager autograd" .. v[1], function()
    for _, c in ipairs(corpus) do
      it(c.name, function()
        T.compiler.reset()
        check(c, v[2])
        S.truthy(stat("backward_graphs_compiled") > 0, "no backward graph was compiled")
        S.eq(stat("grad_fallbacks"), 0, "grad fallbacks")
      end)
    end
  end)
end

-- The fused library ops in a training capture (core.fused_op): F.layer_norm and F.cross_entropy
-- record _layer_norm and _cross_entropy, extern nodes whose backward is the registry's rule (the
-- fused _layer_norm_backward / _cross_entropy_backward). The CPU default is the composition:
-- forced here, so that CI runs the externs.
local fused_on_cpu = require "fused_cpu"
local function targets() return T.tensor({ 1, 4, 2 }) end
local fused_corpus = {
  { name = "layer_norm with weight and bias", op = "_layer_norm",
    args = function(c) return x34(c), randn(c + 7, 4), randn(c + 8, 4) end,
    fn = function(x, w, b) return T.F.layer_norm(x * 2, { 4 }, w, b):tanh() end },
  { name = "layer_norm over two dims, no affine", op = "_layer_norm", args = function(c) return randn(c, 2, 3, 4) end,
    fn = function(x) return T.F.layer_norm(x, { 3, 4 }, nil, nil, 1e-3) end },
  { name = "cross_entropy, mean", op = "_cross_entropy", args = x34,
    fn = function(x) return T.F.cross_entropy(x * 2, targets()) end },
  { name = "cross_entropy, ignore_index and label_smoothing", op = "_cross_entropy", args = x34,
    fn = function(x) return T.F.cross_entropy(x:exp(), targets(), { ignore_index = 4, label_smoothing = 0.1 }) end },
  { name = "cross_entropy, sum with class weights", op = "_cross_entropy", args = x34,
    fn = function(x) return T.F.cross_entropy(x, targets(), { reduction = "sum", weight = T.tensor({ 1, 2, 0.5, 1 }) }) end },
  { name = "cross_entropy, none over {N, C, d}", op = "_cross_entropy", args = function(c) return randn(c, 2, 4, 3) end,
    fn = function(x)
      return T.F.cross_entropy(x, T.tensor({ { 1, 2, 3 }, { 4, 4, 1 } }), { reduction = "none", label_smoothing = 0.05 })
    end },
}

describe("fused library ops in a training capture", function()
  for _, c in ipairs(fused_corpus) do
    it(c.name .. ": eager's gradients, " .. c.op .. " a node of the graph", function()
      fused_on_cpu(function()
        T.compiler.reset()
        check(c, nil)
        check(c, { backend = "aot_eager" })
        S.eq(stat("grad_fallbacks"), 0, "grad fallbacks")
        local args = S.pack(c.args(1))
        for i = 1, args.n do args[i] = args[i]:detach():requires_grad_() end
        local e = T.explain(c.fn, unpack(args, 1, args.n))
        S.eq(e.graph_count, 1, "graphs")
        local ops = table.concat(e.graph_ops[1], " ")
        S.truthy((" " .. ops .. " "):find(" " .. c.op .. " ", 1, true), ops)
      end)
    end)
  end
  it("attention on CUDA: _attention saves its logsumexp, _attention_backward the eager gradients", function()
    S.need_gpu()
    local function qkv(c)
      local r = {}
      for i = 1, 3 do r[i] = randn(c * 10 + i, 2, 3, 40, 32):cuda() end  -- (sizes the fused kernels take)
      return unpack(r)
    end
    local bool_mask = (T.rand(40, 40) + T.eye(40)):gt(0.3):cuda()  -- (each query sees itself)
    local float_mask = randn(5, 3, 40, 40):cuda()
    local F = T.F
    for _, c in ipairs({
      { name = "causal", fn = function(q, k, v) return F.scaled_dot_product_attention(q, k, v, { causal = true }) end },
      { name = "bool mask", fn = function(q, k, v) return F.scaled_dot_product_attention(q, k, v, { mask = bool_mask }) end },
      { name = "float mask, scale", fn = function(q, k, v)
        return F.scaled_dot_product_attention(q * 2, k, v:tanh(), { mask = float_mask, scale = 0.3 })
      end },
    }) do
      c.args, c.op = qkv, "_attention"
      T.compiler.reset()
      check(c, nil)
      check(c, { backend = "aot_eager" })
      S.eq(stat("grad_fallbacks"), 0, c.name .. ": grad fallbacks")
      local q, k, v = qkv(1)
      local e = T.explain(c.fn, q:requires_grad_(), k:requires_grad_(), v:requires_grad_())
      local ops = " " .. table.concat(e.graph_ops[1], " ") .. " "
      S.truthy(ops:find(" _attention ", 1, true), c.name .. ":" .. ops)
    end
  end)
  it("takes the composition on the CPU by default", function()
    local e = T.explain(fused_corpus[1].fn, x34(1):requires_grad_(), randn(2, 4):requires_grad_(), randn(3, 4))
    S.truthy(not table.concat(e.graph_ops[1], " "):find("_layer_norm", 1, true), table.concat(e.graph_ops[1], " "))
  end)
end)

describe("segments compiled autograd does not take", function()
  for _, c in ipairs(fallbacks) do
    it(c.name .. " runs on eager autograd, counted", function()
      T.compiler.reset()
      check(c)
      S.truthy(stat("grad_fallbacks") > 0, "no fallback was counted")
    end)
  end
end)

describe("detach inside a compiled function", function()
  it("gives eager's values and gradients, without and with grad mode", function()
    local fn = function(x) return (x * 2):detach() + x end
    local f = T.compile(fn)
    local x = T.tensor({ 1, 2, 3 }, { dtype = "float32" })
    for _ = 1, 4 do S.eq(f(x):totable(), { 3, 6, 9 }) end
    local w = T.tensor({ 1, 2, 3 }, { dtype = "float32", requires_grad = true })
    for _ = 1, 3 do
      w.grad = nil
      f(w):sum():backward()
      S.eq(w.grad:totable(), { 1, 1, 1 })
    end
  end)
  it("is an op of the graph, not a graph break", function()
    local f = T.compile(function(a) local h = (a * 3):detach(); return a * h end)
    T.compiler.reset()
    for i = 1, 4 do
      local a = T.randn(5, { requires_grad = true })
      f(a):sum():backward()
      S.close(a.grad, a:detach() * 3, 1e-6, 1e-6, "call " .. i)
    end
    S.eq(T.compiler.stats().graph_breaks, 0)
    S.eq(T.compiler.stats().backward_graphs_compiled, 1)
  end)
end)

describe("in-place writes through views inside a compiled function", function()
  -- (the view's base takes the write's history, as eager's CopySlices: the recorded view had no
  -- base, and the base kept its own grad_fn - gradients through the overwritten elements)
  local cases = {
    ["t[i][j] = number"] = function(z)
      local t = z:reshape({ 2, 2 }) + 1.5
      t[1][2] = 3
      return t * z:reshape({ 2, 2 })
    end,
    ["narrow():fill_()"] = function(z) local t = z + 1.5; t:narrow(1, 2, 2):fill_(3); return t * t end,
    ["select():mul_()"] = function(z) local t = z:reshape({ 2, 2 }) * 1; t:select(1, 1):mul_(3); return t:exp() end,
  }
  for name, fn in pairs(cases) do
    it(name .. ": eager's gradients on every call", function()
      local f = T.compile(fn)
      for call = 1, 4 do
        local ze, zc = randn(call, 4):requires_grad_(true), randn(call, 4):requires_grad_(true)
        fn(ze):sum():backward()
        f(zc):sum():backward()
        S.close(zc.grad, ze.grad, 1e-6, 1e-6, "call " .. call)
      end
    end)
  end
end)

describe("requires_grad and is_leaf of a compiled training function's tensors", function()
  it("are eager's on replayed calls too (the values have no autograd history yet)", function()
    local seen = {}
    local fn = function(w, x)
      local h = x * 2
      local y = w * h
      seen[#seen + 1] = ("%s %s %s %s"):format(h.requires_grad, h.is_leaf, y.requires_grad, y.is_leaf)
      -- (Lua code that branches on it: a loss of the tensors that require grad)
      local loss = y.requires_grad and y:sum() or h:sum()
      loss:backward()
      return loss
    end
    local f = T.compile(fn)
    for call = 1, 4 do
      local w = randn(call, 3):requires_grad_(true)
      f(w, randn(10 + call, 3))
      S.close(w.grad, randn(10 + call, 3) * 2, 1e-6, 1e-6, "call " .. call)
    end
    for i = 1, 4 do S.eq(seen[i], "false true true false", "call " .. i) end
  end)
end)

describe("the compiled node", function()
  it("is one CompiledFunctionBackward per segment, from the first replay on", function()
    local f = T.compile(function(x, w) return (x * w):sin():sum() end)
    T.compiler.reset()
    local x, w = T.randn(3, 4, { requires_grad = true }), T.randn(3, 4, { requires_grad = true })
    S.eq(tostring(f(x, w).grad_fn), "<SumBackward>")  -- recorded: eager autograd
    local y = f(x, w)
    S.eq(tostring(y.grad_fn), "<CompiledFunctionBackward>")
    S.eq(y.grad_fn:name(), "CompiledFunctionBackward")
    y:backward()
    S.close(x.grad, (x * w):cos() * w, 1e-5, 1e-6)
  end)

  it("splits the backward at a graph break: one node per segment", function()
    local f = T.compile(function(x)
      local y = x:exp()
      local s = y:sum():item()
      return y * s
    end)
    T.compiler.reset()
    local x = T.randn(4, { requires_grad = true })
    f(x)
    local r = f(x)
    S.eq(tostring(r.grad_fn), "<CompiledFunctionBackward>")
    r:sum():backward()
    local want = x:detach():exp() * x:detach():exp():sum()  -- s is a Lua number: no gradient through it
    S.close(x.grad, want, 1e-5, 1e-6)
  end)

  it("uses the inference graph under T.no_grad, the training one outside", function()
    local f = T.compile(function(x, w) return (x * w):tanh() end)
    T.compiler.reset()
    local x, w = T.randn(3, { requires_grad = true }), T.randn(3, { requires_grad = true })
    for _ = 1, 4 do
      local a = T.no_grad(f, x, w)
      S.truthy(not a.requires_grad and a.grad_fn == nil, "no_grad result has no history")
      local b = f(x, w)
      S.truthy(b.requires_grad, "training result requires grad")
      S.close(a, b, 0, 0)
    end
    S.eq(tostring(f(x, w).grad_fn), "<CompiledFunctionBackward>")
  end)

  it("retraces when requires_grad of an input changes (a guard)", function()
    local f = T.compile(function(x, w) return (x * w):exp():sum() end)
    T.compiler.reset()
    local x, w = T.randn(3), T.randn(3, { requires_grad = true })
    for _ = 1, 3 do f(x, w):backward() end
    S.close(w.grad, (x * w):exp() * x * 3, 1e-5, 1e-6)
    S.eq(x.grad, nil)
    x:requires_grad_()
    w.grad = nil
    for _ = 1, 3 do f(x, w):backward() end
    S.close(x.grad, (x * w):detach():exp() * w:detach() * 3, 1e-5, 1e-6)
  end)

  it("raises on a second backward without retain_graph, and version changes as eager does", function()
    local f = T.compile(function(x) return x:sin() end)
    local x = T.randn(3, { requires_grad = true })
    f(x)
    local y = f(x):sum()
    y:backward({ retain_graph = true })
    y:backward()
    S.close(x.grad, x:detach():cos() * 2, 1e-6, 1e-6)
    S.errors(function() y:backward() end, "backward through the graph a second time")
    local a, b = T.randn(2, 3, { requires_grad = true }), T.randn(3, 3, { requires_grad = true })
    local g = T.compile(function(u, v) local m = u:matmul(v); return m, m:sin() end)
    g(a, b)
    local m, s = g(a, b)
    m:mul_(2)  -- sin reads m, which the forward saves (a matmul is never recomputed)
    S.errors(function() s:sum():backward() end, "modified by an inplace operation")
  end)

  it("lets an input the backward does not read change before it, as eager does, the first time too", function()
    local w = T.randn(3, { requires_grad = true })
    local f = T.compile(function(x, v) return (x + v) * 2, x * v end)
    for i = 1, 4 do  -- (cold, then the first compiled backward - the traced one - and later ones)
      local x = T.randn(3)
      local y, z = f(x, w)
      x:add_(1)  -- nothing reads it to differentiate y
      w.grad = nil
      y:sum():backward({ retain_graph = true })  -- (z shares the compiled segment's node)
      S.close(w.grad, T.full({ 3 }, 2), 0, 0, "call " .. i)
      S.errors(function() z:sum():backward() end, "modified by an inplace operation")  -- z's does
    end
  end)

  it("gives an op recorded where a guard failed the history of the replayed ops before it", function()
    -- (x, a view, carries autograd meta without requiring grad; a - x is recorded after a - the
    -- replayed prefix - got the prefix's node; grad fuzzer seed 9005 #86)
    local f = T.compile(function(x, z) local a = z * 1; return (a - x) * 2, a end, { hot = 0 })
    for call = 1, 4 do
      local n = call == 3 and 4 or 3  -- (call 3: x's size and strides change, a guard fails at sub)
      local x = T.arange(n):view(1, n):permute(2, 1)
      local z = T.randn({}, { requires_grad = true })
      local y, a = f(x, z)
      S.eq(tostring(y.requires_grad) .. " " .. tostring(a.requires_grad), "true true", "call " .. call)
      S.close(T.autograd.grad({ y:sum() }, { z })[1], T.tensor(2.0 * n), 0, 0, "call " .. call)
      T.compiler.wait()
    end
  end)

  it("reads a saved value whose dim of size 1 got another stride than the trace's", function()
    -- (y * 1 of a permuted {3, 1} y: the compiled forward and eager give its size-1 dim other strides;
    -- its backward graph, native, read it; grad fuzzer seed 9005 #386)
    local f = T.compile(function(x, y, z)
      y, z = y * 1, z * 1
      local t = z:narrow(1, 1, 0):matmul(z:narrow(1, 1, 0))
      if T.atan2(t, x):item() <= 0 then y:permute(2, 1)[1] = 3 end
      return y:permute(2, 1)
    end, { hot = 0 })
    for call = 1, 6 do
      local x = T.tensor(call % 2 == 0 and -1 or 2, { dtype = "int64" })  -- (odd calls write y)
      local y, z = T.randn(1, 3):permute(2, 1):requires_grad_(true), T.randn(1, { requires_grad = true })
      local g = T.autograd.grad({ (f(x, y, z) * T.tensor({ { 1, 2, 3 } })):sum() }, { y })[1]
      S.close(g:view(-1), call % 2 == 1 and T.zeros(3) or T.tensor({ 1, 2, 3 }), 0, 0, "call " .. call)
      T.compiler.wait()
    end
  end)

  it("recomputes a value the forward did not save: an in-place write to it changes nothing", function()
    local h = T.randn(3, { requires_grad = true })
    local g = T.compile(function(a) return a * 2, a:exp() end)
    g(h)
    local _, e = g(h)
    e:mul_(2)  -- (eager autograd would raise: exp saves its output; here the backward recomputes it)
    e:sum():backward()
    S.close(h.grad, h:detach():exp() * 2, 1e-6, 1e-6)
  end)

  it("refuses create_graph with a clear error", function()
    local f = T.compile(function(x) return x:sin():sum() end)
    local x = T.randn(3, { requires_grad = true })
    f(x)
    S.errors(function() f(x):backward({ create_graph = true }) end, "create_graph")
  end)

  it("replays the cached backward graph; background compiles land after T.compiler.wait", function()
    T.config.sync_compile = false
    local ok, err = pcall(function()
      local f = T.compile(function(x, w) return ((x * w):sigmoid() * x):sum() end)
      T.compiler.reset()
      local x, w = T.randn(8, 16, { requires_grad = true }), T.randn(8, 16, { requires_grad = true })
      for i = 1, 6 do
        x.grad, w.grad = nil, nil
        f(x, w):backward()
        local s = (x * w):detach():sigmoid()
        S.close(w.grad, s * (1 - s) * x * x, 1e-5, 1e-6)
        if i == 4 then T.compiler.wait(f) end
      end
      S.eq(stat("backward_graphs_compiled"), 1, "one backward graph, replayed")
    end)
    T.config.sync_compile = true
    if not ok then error(err, 0) end
  end)

  it("compiles the backward graph to native code", function()
    S.need_native_cpu()
    local dir = T.config.cache_dir
    T.config.cache_dir = "0"  -- (no disk cache: every kernel is compiled and counted)
    local ok, err = pcall(function()
      -- (a function of its own: kernels compiled for another spec's graph are reused in memory)
      local f = T.compile(function(x, w) return ((x * w):tanh() * x + w):sum() end)
      local x, w = T.randn(8, 24, { requires_grad = true }), T.randn(8, 24, { requires_grad = true })
      T.compiler.reset()
      for _ = 1, 4 do T.no_grad(f, x, w) end  -- the inference graph alone
      local forward = stat("kernels_compiled")
      S.truthy(forward > 0, "the forward graph compiled no kernel")
      T.compiler.reset()
      for _ = 1, 5 do f(x, w):backward() end
      S.truthy(stat("kernels_compiled") > forward, "the backward graph compiled no kernel")
      S.eq(stat("eager_fallbacks"), 0, "eager fallbacks")
    end)
    T.config.cache_dir = dir
    if not ok then error(err, 0) end
  end)
end)

-- An MLP trained compiled and eagerly from the same weights: equal losses and weights.
local function mlp()
  T.manual_seed(3)
  return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
end

local function train(make_opt, compiled)
  local m = mlp()
  local fwd = compiled and T.compile(m) or function(x) return m:forward(x) end
  local opt = make_opt(m:parameters())
  local losses = {}
  for step = 1, 6 do
    local x, y = randn(500 + step, 8, 6), randn(600 + step, 8, 3)
    opt:zero_grad()
    local loss = ((fwd(x) - y) ^ 2):mean()
    loss:backward()
    opt:step()
    losses[step] = loss:item()
  end
  return losses, m:parameters()
end

describe("training a module compiled", function()
  for name, make in pairs({
    SGD = function(p) return optim.SGD(p, { lr = 0.1, momentum = 0.9 }) end,
    AdamW = function(p) return optim.AdamW(p, { lr = 0.01, weight_decay = 0.1 }) end,
  }) do
    it("gives the losses and weights of eager training with " .. name, function()
      T.compiler.reset()
      local want, wp = train(make, false)
      local got, gp = train(make, true)
      for i = 1, #want do close_num(got[i], want[i], "loss " .. i) end
      for i = 1, #wp do S.close(gp[i], wp[i], 1e-5, 1e-6) end
      S.truthy(stat("backward_graphs_compiled") > 0, "no backward graph was compiled")
    end)
  end
end)

-- The min-cut partitioner (vm/graph/partition.hpp): what the forward saves for its backward.
local function partition_of(f, ...)
  T.compiler.reset()
  for _ = 1, 3 do f(...):sum():backward() end
  return { saved = stat("saved_values"), bytes = stat("saved_bytes"), recomputed = stat("recomputed_ops") }
end

describe("the partitioner", function()
  it("saves nothing but the input of a pointwise chain, recomputing the chain", function()
    local f = T.compile(function(x) return ((x * 2 + 1):exp():tanh() - x:sigmoid()):relu() * x:abs():sqrt() end)
    local x = T.randn(16, 8, { requires_grad = true })
    local p = partition_of(f, x)
    S.eq(p.saved, 0, "saved values")
    S.eq(p.bytes, 0, "saved bytes")
    S.truthy(p.recomputed >= 8, "the chain is recomputed in the backward")
  end)

  it("saves the matmul outputs of matmul -> gelu -> matmul and recomputes gelu", function()
    local w1, w2 = T.randn(8, 32, { requires_grad = true }), T.randn(32, 4, { requires_grad = true })
    local f = T.compile(function(x) return x:matmul(w1):gelu():matmul(w2) end)
    local x = T.randn(16, 8, { requires_grad = true })
    local p = partition_of(f, x)
    -- gelu reads the first matmul's output (saved: never recomputed); the second matmul reads
    -- gelu's (recomputed from the saved one, not saved)
    S.eq(p.saved, 1, "saved values")
    S.eq(p.bytes, 16 * 32 * 4, "saved bytes")
    S.eq(p.recomputed, 1, "gelu recomputed")
  end)

  it("saves a reduction's small result rather than recomputing it", function()
    local f = T.compile(function(x) local s = x:sum(2, true); return (x * s):exp() end)
    local x = T.randn(16, 8, { requires_grad = true })
    local p = partition_of(f, x)
    S.eq(p.saved, 1, "saved values")
    S.eq(p.bytes, 16 * 4, "saved bytes: the sum")
  end)

  it("keeps the backward's memory near eager's, the first one's trace too; holds no gradient after", function()
    local x, w1, w2 = T.randn(256, 64), T.randn(64, 512), T.randn(512, 64)
    local function mlp(a, p, q) return (a:matmul(p):gelu():matmul(q):tanh() * 2):exp():sum() end
    -- per step: the backward's peak of CPU tensor storage (Lua's garbage collected before it, so
    -- the figure does not depend on when the collector runs), and what stays after the step
    local function peaks(f)
      local p, q = w1:clone():requires_grad_(), w2:clone():requires_grad_()
      local r = {}
      for i = 1, 4 do
        local loss = f(x, p, q)
        collectgarbage()
        T.reset_peak_memory()
        loss:backward()
        loss, p.grad, q.grad = nil, nil, nil
        collectgarbage()
        r[i] = { peak = T.memory_stats().peak, after = T.memory_stats().in_use }
      end
      return r
    end
    local eager, compiled = peaks(mlp), peaks(T.compile(mlp))
    for i = 1, 4 do  -- (the first backward's trace held every value: 1.78x at step 2)
      S.truthy(compiled[i].peak <= 1.3 * eager[i].peak,
        ("step %d: compiled peak %d bytes, eager %d"):format(i, compiled[i].peak, eager[i].peak))
      S.eq(compiled[i].after, eager[i].after, "storage held after step " .. i .. " (the trace's gradients were)")
    end
  end)
end)

describe("T.explain of a training call", function()
  it("counts forward and backward graphs, and says which segment eager autograd differentiates", function()
    local w = T.randn(4, 4, { requires_grad = true })
    local function f(x)
      local y = x:matmul(w):gelu()
      local s = y:sum():item()
      local z = y * s
      z:add_(1)
      return z
    end
    local r = T.explain(f, T.randn(3, 4, { requires_grad = true }))
    S.eq(r.graph_count, 2, "forward graphs")
    S.eq(r.backward_graph_count, 1, "backward graphs")
    S.eq(#r.grad_fallbacks, 1, "segments on eager autograd")
    S.eq(r.grad_fallbacks[1].graph, 2)
    S.truthy(r.grad_fallbacks[1].reason:find("in-place op add_", 1, true), r.grad_fallbacks[1].reason)
    S.truthy(tostring(r):find("1 backward graph(s)", 1, true), tostring(r))
    local inference = T.no_grad(T.explain, f, T.randn(3, 4, { requires_grad = true }))
    S.eq(inference.graph_count, 2)
    S.eq(inference.backward_graph_count, 0, "no backward graph under T.no_grad")
  end)
end)

-- A whole training step compiled (issue 35): zero_grad, forward, loss, backward() and opt:step()
-- inside T.compile, one graph: backward() is traced into it (vm/graph/step.cpp), the update is
-- recorded as in-place ops on the parameters and state.
local OPTIMIZERS = {
  SGD = function(p) return optim.SGD(p, { lr = 0.1 }) end,
  ["SGD with momentum"] = function(p) return optim.SGD(p, { lr = 0.1, momentum = 0.9, weight_decay = 0.01 }) end,
  AdamW = function(p) return optim.AdamW(p, { lr = 0.01, weight_decay = 0.1 }) end,
}

-- Trains mlp() for `steps` steps with step(m, opt, x, y, i) (compiled with `opts`, or eager);
-- `before(opt, i)` runs ahead of each step.
local function train_steps(make_opt, body, opts, before, steps)
  local m = mlp()
  local opt = make_opt(m:parameters())
  local step = function(x, y, i) return body(m, opt, x, y, i) end
  if opts then step = T.compile(step, opts) end
  local losses = {}
  for i = 1, steps or 8 do
    if before then before(opt, i) end
    losses[i] = step(randn(500 + i, 8, 6), randn(600 + i, 8, 3), i):item()
  end
  return losses, m:parameters()
end

local function plain_step(m, opt, x, y)
  opt:zero_grad()
  local loss = ((m:forward(x) - y) ^ 2):mean()
  loss:backward()
  opt:step()
  return loss
end

local function same_training(body, make_opt, opts, before, steps)
  T.compiler.reset()
  local want, wp = train_steps(make_opt, body, nil, before, steps)
  local got, gp = train_steps(make_opt, body, opts or {}, before, steps)
  for i = 1, #want do close_num(got[i], want[i], "loss " .. i) end
  for i = 1, #wp do S.close(gp[i], wp[i], 1e-5, 1e-6) end
end

for _, v in ipairs({ { "", nil }, { " (backend aot_eager)", { backend = "aot_eager" } } }) do
  describe("a compiled training step" .. v[1], function()
    for name, make in pairs(OPTIMIZERS) do
      it("gives the losses and weights of the eager step with " .. name, function()
        same_training(plain_step, make, v[2])
        S.eq(stat("backward_graphs_compiled"), 0, "the backward is traced into the step's graph")
        S.eq(stat("grad_fallbacks"), 0, "grad fallbacks")
        S.eq(stat("graph_breaks"), 0, "graph breaks")
        S.need_native_cpu()  -- (the counts below are of native compiles)
        S.eq(stat("eager_fallbacks"), 0, "eager fallbacks")
        S.eq(stat("graphs_compiled"), 1, "forward, backward and update are one graph")
      end)
    end
  end)
end

describe("a compiled training step", function()
  it("zero_grad(false) zeroes the gradients in place (a graph op)", function()
    same_training(function(m, opt, x, y)
      opt:zero_grad(false)
      local loss = ((m:forward(x) - y) ^ 2):mean()
      loss:backward()
      opt:step()
      return loss
    end, OPTIMIZERS["SGD with momentum"])
    S.need_native_cpu()  -- (the counts below are of native compiles)
    S.eq(stat("eager_fallbacks"), 0, "eager fallbacks")
  end)

  it("accumulates two backward passes before one update", function()
    same_training(function(m, opt, x, y)
      opt:zero_grad()
      local first = ((m:forward(x) - y) ^ 2):mean()
      first:backward()
      local loss = ((m:forward(x * 2) - y) ^ 2):mean()
      loss:backward()
      opt:step()
      return loss
    end, OPTIMIZERS.AdamW)
  end)

  for name, make in pairs(OPTIMIZERS) do
    it("follows an lr schedule with " .. name .. ", recompiling the update once", function()
      same_training(plain_step, make, nil, function(opt, i) opt.param_groups[1].lr = 0.05 / i end, 10)
      S.need_native_cpu()  -- (the counts below are of native compiles)
      S.eq(stat("eager_fallbacks"), 0, "eager fallbacks (a variant per lr)")
      -- (the update's lr becomes a run argument after it changed once; the forward's first
      -- graph is recompiled once to return the loss)
      S.truthy(stat("recompiles") <= 2, "recompiles: " .. stat("recompiles"))
    end)
  end

  it("is exact with graph breaks in the middle: a loss and a gradient read as Lua numbers", function()
    local norms = {}
    same_training(function(m, opt, x, y, i)
      opt:zero_grad()
      local loss = ((m:forward(x) - y) ^ 2):mean()
      local scaled = loss * (loss:item() > 1 and 0.5 or 1)
      scaled:backward()
      norms[#norms + 1] = m:parameters()[1].grad:norm():item()
      opt:step()
      return loss
    end, OPTIMIZERS.AdamW)
    for i = 1, 8 do close_num(norms[8 + i], norms[i], "gradient norm " .. i) end
  end)

  it("runs a gradient hook eagerly, on every step", function()
    local calls, handles = 0, {}
    same_training(function(m, opt, x, y)
      opt:zero_grad()
      local loss = ((m:forward(x) - y) ^ 2):mean()
      loss:backward()
      opt:step()
      return loss
    end, function(p)
      handles[#handles + 1] = p[1]:register_hook(function(g) calls = calls + 1; return g * 0.5 end)
      return optim.SGD(p, { lr = 0.1, momentum = 0.9 })
    end)
    S.eq(calls, 16, "the hook ran on each eager and compiled step")
  end)

  it("is exact over a sequence-length sweep, one graph dynamic after one change", function()
    T.manual_seed(5)
    local emb, head = nn.Linear(4, 8), nn.Linear(8, 3)
    local function run(compiled)
      T.manual_seed(9)
      local e, h = nn.Linear(4, 8), nn.Linear(8, 3)
      e:load_state_dict(emb:state_dict())
      h:load_state_dict(head:state_dict())
      local params = e:parameters()
      for _, p in ipairs(h:parameters()) do params[#params + 1] = p end
      local opt = optim.AdamW(params, { lr = 0.01 })
      local step = function(x)
        opt:zero_grad()
        local loss = ((h:forward(e:forward(x):gelu()) - 1) ^ 2):mean()
        loss:backward()
        opt:step()
        return loss
      end
      if compiled then step = T.compile(step) end
      local losses = {}
      for i, len in ipairs({ 5, 7, 9, 11, 13, 7, 5 }) do losses[i] = step(randn(40 + i, len, 4)):item() end
      return losses, params
    end
    T.compiler.reset()
    local want, wp = run(false)
    local got, gp = run(true)
    for i = 1, #want do close_num(got[i], want[i], "loss " .. i) end
    for i = 1, #wp do S.close(gp[i], wp[i], 1e-5, 1e-6) end
    -- one graph of forward, backward (traced per length) and update: the dynamic one (the first
    -- length's variant ran once, never hot), whatever the number of lengths (the later instances
    -- reuse its kernels), and no graph break
    S.need_native_cpu()  -- (the counts below are of native compiles)
    S.eq(stat("graphs_compiled"), 1, "graphs")
    S.eq(stat("recompiles"), 1, "recompiles")
    S.eq(stat("graph_breaks"), 0, "graph breaks")
    S.eq(stat("backward_graphs_compiled"), 0, "backward graphs")
    S.eq(stat("eager_fallbacks"), 0, "eager fallbacks")
    S.eq(stat("grad_fallbacks"), 0, "grad fallbacks")
  end)
end)
