-- The losses of T.F (API.md section 9) against torch 1.13's torch.nn.functional: the value and the
-- gradient of the input (and of the target where torch gives one) for every option, in float32 and
-- float64; and their refusals. Class indices are 1-based here, 0-based in torch.
local T = require "crescent"
local R = require "torch_ref"
local F = T.F

expect.covers("_cross_entropy", "_cross_entropy_backward")  -- (F.cross_entropy's fused op, below)
expect.covers("_binary_cross_entropy", "_binary_cross_entropy_backward")  -- (F.binary_cross_entropy's)
local errs = expect.error_checker("test_losses.lua")
T.manual_seed(5)

local B = R.batch([[
import warnings
warnings.filterwarnings("ignore")  # (kl_div's 'mean' warns on stderr, which the bridge reads)
def ce2(x, y, w):
    x = x.clone().requires_grad_(True)
    l = F.cross_entropy(x, y, weight=w, ignore_index=2, label_smoothing=0.2)
    g, = torch.autograd.grad(l, [x], create_graph=True)
    (g * g.detach().cos()).sum().backward()
    return [x.grad]
def bce2(x, y):
    x, y = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
    g, = torch.autograd.grad(F.binary_cross_entropy(x, y), [x], create_graph=True)
    (g * torch.arange(1., g.numel() + 1, dtype=g.dtype).view(g.shape)).sum().backward()
    return [g.detach(), x.grad, y.grad]
def lg(f, x, y, wrt_target=False):
    x = x.clone().requires_grad_(True)
    if wrt_target: y = y.clone().requires_grad_(True)
    l = f(x, y)
    (l.sum() if l.dim() else l).backward()
    return [l.detach(), x.grad] + ([y.grad] if wrt_target else [])
]])

local cases = {}
-- key: torch's f as a python lambda over (x, y) and the names in env; fn: crescent's over (x, y)
local function case(key, dtype, x, y, py, fn, env, wrt_target)
  env = env or {}
  local e = { a = x:to(dtype), b = (T.is_tensor(y) and y.dtype ~= "int64") and y:to(dtype) or y }
  for k, v in pairs(env) do e[k] = T.is_tensor(v) and v.dtype ~= "int64" and v:to(dtype) or v end
  local pe = {}
  for k, v in pairs(e) do pe[k] = v end
  if e.b.dtype == "int64" then pe.b = e.b - 1 end  -- torch's classes from 0
  B:add(key, string.format("lg(lambda x, y: %s, a, b, %s)", py, wrt_target and "True" or "False"), pe)
  cases[#cases + 1] = { key = key, x = e.a, y = e.b, fn = function(xx, yy) return fn(xx, yy, e) end, target = wrt_target, dtype = dtype }
end

local N, C = 6, 5
local logits = T.randn(N, C) * 2
local idx = T.randint(1, C + 1, { N })
idx[2] = 3  -- (the class ignore_index = 3 names below)
local w = T.rand(C) + 0.5
local probs = T.rand(N, C):softmax(-1)
local spatial, spatial_t = T.randn(3, 4, 2), T.randint(1, 5, { 3, 2 })
local x, y = T.randn(4, 3), T.randn(4, 3)
y[1][1] = x[1][1]:item() + 0.25  -- inside smooth_l1's beta
local p01 = T.rand(4, 3) * 0.98 + 0.01
local y01 = T.rand(4, 3)
local z = T.randn(4, 3) * 3
z[1][2] = 0  -- -log(sigmoid) at 0: its gradient there is -1/2
local pw = T.rand(3) + 0.5
local lp = T.randn(4, 3):log_softmax(-1)
local tp = T.rand(4, 3):softmax(-1)
tp[2][2] = 0  -- xlogy(0, 0) = 0
-- inputs exactly 0 and 1 (a saturated sigmoid): torch's gradient clamps its denominator there
local p_sat = T.tensor({ { 0, 1, 0, 1 }, { 0.5, 1e-30, 0.25, 1 } })
local y_sat = T.tensor({ { 0, 1, 1, 0 }, { 0.3, 0.5, 1, 1 } })
local idx_ignored = T.full({ N }, 3, { dtype = "int64" })  -- every target ignored

for _, dt in ipairs({ "float32", "float64" }) do
  local function k(s) return s .. " " .. dt end
  -- cross_entropy with class indices
  case(k("ce"), dt, logits, idx, "F.cross_entropy(x, y)", function(a, b) return F.cross_entropy(a, b) end)
  case(k("ce sum"), dt, logits, idx, "F.cross_entropy(x, y, reduction='sum')", function(a, b) return F.cross_entropy(a, b, { reduction = "sum" }) end)
  case(k("ce none"), dt, logits, idx, "F.cross_entropy(x, y, reduction='none')", function(a, b) return F.cross_entropy(a, b, { reduction = "none" }) end)
  case(k("ce weight"), dt, logits, idx, "F.cross_entropy(x, y, weight=w)", function(a, b, e) return F.cross_entropy(a, b, { weight = e.w }) end, { w = w })
  case(k("ce ignore"), dt, logits, idx, "F.cross_entropy(x, y, ignore_index=2)", function(a, b) return F.cross_entropy(a, b, { ignore_index = 3 }) end)
  case(k("ce smoothing"), dt, logits, idx, "F.cross_entropy(x, y, label_smoothing=0.1)", function(a, b) return F.cross_entropy(a, b, { label_smoothing = 0.1 }) end)
  case(k("ce all"), dt, logits, idx, "F.cross_entropy(x, y, weight=w, ignore_index=2, label_smoothing=0.2)",
    function(a, b, e) return F.cross_entropy(a, b, { weight = e.w, ignore_index = 3, label_smoothing = 0.2 }) end, { w = w })
  case(k("ce all none"), dt, logits, idx, "F.cross_entropy(x, y, weight=w, ignore_index=2, label_smoothing=0.2, reduction='none')",
    function(a, b, e) return F.cross_entropy(a, b, { weight = e.w, ignore_index = 3, label_smoothing = 0.2, reduction = "none" }) end, { w = w })
  case(k("ce 1-d"), dt, logits[1], idx[3], "F.cross_entropy(x, y)", function(a, b) return F.cross_entropy(a, b) end)
  case(k("ce spatial"), dt, spatial, spatial_t, "F.cross_entropy(x, y, label_smoothing=0.05)",
    function(a, b) return F.cross_entropy(a, b, { label_smoothing = 0.05 }) end)
  -- cross_entropy with class probabilities
  case(k("ce probs"), dt, logits, probs, "F.cross_entropy(x, y)", function(a, b) return F.cross_entropy(a, b) end, nil, true)
  case(k("ce probs options"), dt, logits, probs, "F.cross_entropy(x, y, weight=w, label_smoothing=0.3, reduction='none')",
    function(a, b, e) return F.cross_entropy(a, b, { weight = e.w, label_smoothing = 0.3, reduction = "none" }) end, { w = w }, true)
  -- nll_loss
  case(k("nll"), dt, logits:log_softmax(-1), idx, "F.nll_loss(x, y)", function(a, b) return F.nll_loss(a, b) end)
  case(k("nll options"), dt, logits:log_softmax(-1), idx, "F.nll_loss(x, y, weight=w, ignore_index=2)",
    function(a, b, e) return F.nll_loss(a, b, { weight = e.w, ignore_index = 3 }) end, { w = w })
  case(k("nll sum"), dt, logits:log_softmax(-1), idx, "F.nll_loss(x, y, reduction='sum')", function(a, b) return F.nll_loss(a, b, { reduction = "sum" }) end)
  -- regression
  for _, r in ipairs({ "mean", "sum", "none" }) do
    case(k("mse " .. r), dt, x, y, "F.mse_loss(x, y, reduction='" .. r .. "')", function(a, b) return F.mse_loss(a, b, { reduction = r }) end, nil, true)
    case(k("l1 " .. r), dt, x, y, "F.l1_loss(x, y, reduction='" .. r .. "')", function(a, b) return F.l1_loss(a, b, { reduction = r }) end, nil, true)
  end
  for _, beta in ipairs({ 1, 0.5, 0 }) do
    case(k("smooth_l1 " .. beta), dt, x, y, "F.smooth_l1_loss(x, y, beta=" .. beta .. ")",
      function(a, b) return F.smooth_l1_loss(a, b, { beta = beta }) end, nil, true)
  end
  for _, delta in ipairs({ 1, 0.5, 2 }) do
    case(k("huber " .. delta), dt, x, y, "F.huber_loss(x, y, delta=" .. delta .. ")",
      function(a, b) return F.huber_loss(a, b, { delta = delta }) end, nil, true)
  end
  case(k("CrossEntropyLoss module"), dt, logits, idx, "torch.nn.CrossEntropyLoss(weight=w, label_smoothing=0.1)(x, y)",
    function(a, b, e) return T.nn.CrossEntropyLoss({ weight = e.w, label_smoothing = 0.1 })(a, b) end, { w = w })
  case(k("HuberLoss module"), dt, x, y, "torch.nn.HuberLoss(reduction='sum', delta=0.7)(x, y)",
    function(a, b) return T.nn.HuberLoss({ reduction = "sum", delta = 0.7 })(a, b) end, nil, true)
  -- binary
  case(k("bce"), dt, p01, y01, "F.binary_cross_entropy(x, y)", function(a, b) return F.binary_cross_entropy(a, b) end, nil, true)
  case(k("bce weight sum"), dt, p01, y01, "F.binary_cross_entropy(x, y, weight=v, reduction='sum')",
    function(a, b, e) return F.binary_cross_entropy(a, b, { weight = e.v, reduction = "sum" }) end, { v = pw })
  case(k("bcel"), dt, z, y01, "F.binary_cross_entropy_with_logits(x, y)", function(a, b) return F.binary_cross_entropy_with_logits(a, b) end, nil, true)
  case(k("bcel pos_weight"), dt, z, y01, "F.binary_cross_entropy_with_logits(x, y, pos_weight=v)",
    function(a, b, e) return F.binary_cross_entropy_with_logits(a, b, { pos_weight = e.v }) end, { v = pw }, true)
  case(k("bcel all none"), dt, z, y01, "F.binary_cross_entropy_with_logits(x, y, weight=v, pos_weight=v * 2, reduction='none')",
    function(a, b, e) return F.binary_cross_entropy_with_logits(a, b, { weight = e.v, pos_weight = e.v * 2, reduction = "none" }) end, { v = pw })
  case(k("bce saturated"), dt, p_sat, y_sat, "F.binary_cross_entropy(x, y, reduction='none')",
    function(a, b) return F.binary_cross_entropy(a, b, { reduction = "none" }) end, nil, true)
  case(k("bce saturated weight mean"), dt, p_sat, y_sat, "F.binary_cross_entropy(x, y, weight=v)",
    function(a, b, e) return F.binary_cross_entropy(a, b, { weight = e.v }) end, { v = T.rand(4) + 0.5 })
  -- every target ignored: a NaN mean, and zero gradients (torch's nll_loss skips ignored positions)
  case(k("ce all ignored"), dt, logits, idx_ignored, "F.cross_entropy(x, y, ignore_index=2)",
    function(a, b) return F.cross_entropy(a, b, { ignore_index = 3 }) end)
  case(k("ce all ignored smoothing weight"), dt, logits, idx_ignored, "F.cross_entropy(x, y, weight=w, ignore_index=2, label_smoothing=0.2)",
    function(a, b, e) return F.cross_entropy(a, b, { weight = e.w, ignore_index = 3, label_smoothing = 0.2 }) end, { w = w })
  case(k("nll all ignored"), dt, logits:log_softmax(-1), idx_ignored, "F.nll_loss(x, y, ignore_index=2)",
    function(a, b) return F.nll_loss(a, b, { ignore_index = 3 }) end)
  -- kl_div
  for _, r in ipairs({ "batchmean", "sum", "mean", "none" }) do
    case(k("kl " .. r), dt, lp, tp, "F.kl_div(x, y, reduction='" .. r .. "')", function(a, b) return F.kl_div(a, b, { reduction = r }) end, nil, true)
  end
  case(k("kl log_target"), dt, lp, tp:clamp(0.01):log(), "F.kl_div(x, y, reduction='batchmean', log_target=True)",
    function(a, b) return F.kl_div(a, b, { reduction = "batchmean", log_target = true }) end, nil, true)
end

B:add("ce double backward", "ce2(a, b, w)", { a = logits:double(), b = idx - 1, w = w:double() })
B:add("bce double backward", "bce2(a, b)", { a = p_sat:double(), b = y_sat:double() })
local res, why = B:run()
local TOL = { float32 = { 2e-6, 1e-6 }, float64 = { 1e-11, 1e-12 } }

describe("losses against torch 1.13 (value and gradients)", function()
  for _, c in ipairs(cases) do
    it(c.key, function()
      if not res then expect.skip(why) end
      if res[c.key] and res[c.key].error then error("torch raised: " .. res[c.key].error) end
      local a = c.x:clone():requires_grad_()
      local b = c.y
      if c.target then b = c.y:clone():requires_grad_() end
      local l = c.fn(a, b)
      expect.truthy(l.grad_fn ~= nil, "differentiable")
      local s = l:dim() > 0 and l:sum() or l
      s:backward()
      local tol = TOL[c.dtype]
      R.check(res, c.key .. "#1", l:detach(), tol[1], tol[2])
      R.check(res, c.key .. "#2", a.grad, tol[1], tol[2])
      if c.target then R.check(res, c.key .. "#3", b.grad, tol[1], tol[2]) end
    end)
  end
end)

describe("losses refuse bad arguments", function()
  it("with the function's name and PyTorch's wording", function()
    errs(function() F.mse_loss(x, y, { reduction = "avg" }) end, "mse_loss", "avg is not a valid value for reduction")
    errs(function() F.kl_div(lp, tp, { reduction = "all" }) end, "kl_div", 'all is not a valid value for reduction (expected "mean", "sum", "none" or "batchmean")')
    errs(function() F.l1_loss(x, y, { beta = 1 }) end, "l1_loss", "unknown option 'beta'")
    errs(function() F.cross_entropy(logits, idx, { label_smoothing = 1.5 }) end, "cross_entropy", "label_smoothing must be between 0.0 and 1.0. Got: 1.5")
    errs(function() F.cross_entropy(logits, idx:narrow(1, 1, 4)) end, "cross_entropy", "Expected input batch_size (6) to match target batch_size (4).")
    errs(function() F.cross_entropy(logits, probs:narrow(2, 1, 3)) end, "cross_entropy", "class probabilities expected the input's shape {6,5}, got {6,3}")
    errs(function() F.nll_loss(logits, idx, { weight = T.ones(3) }) end, "nll_loss", "weight expected a tensor of 5 elements (one per class), got shape {3}")
    errs(function() F.binary_cross_entropy(p01 * 2, y01) end, "binary_cross_entropy", "all elements of input should be between 0 and 1")
    errs(function() F.binary_cross_entropy(p01, y01:narrow(1, 1, 2)) end, "binary_cross_entropy",
      "Using a target size ({2,3}) that is different to the input size ({4,3}) is deprecated. Please ensure they have the same size.")
    errs(function() F.binary_cross_entropy_with_logits(z, y01:t()) end, "binary_cross_entropy_with_logits", "Target size ({3,4}) must be the same as input size ({4,3})")
    errs(function() F.smooth_l1_loss(x, y, { beta = -1 }) end, "smooth_l1_loss", "does not support negative values for beta")
    errs(function() F.mse_loss(x, 3) end, "mse_loss", "argument 2 (target) expected a tensor, got number")
  end)
  it("as modules: options checked at construction, weights as buffers, torch's printing", function()
    errs(function() T.nn.MSELoss({ reduction = "avg" }) end, "MSELoss", "avg is not a valid value for reduction")
    errs(function() T.nn.L1Loss({ beta = 1 }) end, "L1Loss", "unknown option 'beta'")
    errs(function() T.nn.NLLLoss({ weight = 3 }) end, "NLLLoss", "option weight expected a tensor, got number")
    errs(function() F.huber_loss(T.ones(2), T.ones(2), { delta = 0 }) end, "huber_loss", "non-positive values for delta")
    local w = T.tensor({ 1, 2, 3 }, { dtype = "float32" })
    local m = T.nn.CrossEntropyLoss({ weight = w, reduction = "sum" })
    expect.eq(tostring(m), "CrossEntropyLoss()")
    expect.eq(m:state_dict().weight:totable(), { 1, 2, 3 })
    expect.eq(m:to("float64").weight.dtype, "float64")
    expect.eq(T.nn.BCEWithLogitsLoss({ pos_weight = T.ones(3) }):state_dict().pos_weight:totable(), { 1, 1, 1 })
    expect.eq(T.nn.KLDivLoss({ reduction = "batchmean" }).reduction, "batchmean")
  end)
  it("binary_cross_entropy_with_logits' gradient is sigmoid(x) - y without cancelling", function()
    local z = T.tensor({ -50.5, -20.5 }, { dtype = "float32" }):requires_grad_()
    F.binary_cross_entropy_with_logits(z, T.zeros(2), { reduction = "sum" }):backward()
    expect.close(z.grad, T.tensor({ 1.1698e-22, 1.2502e-09 }, { dtype = "float32" }), 1e-3, 0)
  end)
  it("stay finite where the naive forms overflow", function()
    local big = T.tensor({ -200, 200, 0 }, { dtype = "float32", requires_grad = true })
    local l = F.binary_cross_entropy_with_logits(big, T.tensor({ 1, 0, 1 }, { dtype = "float32" }), { reduction = "none" })
    expect.close(l:detach(), { 200, 200, math.log(2) }, 1e-6, 1e-6)
    l:sum():backward()
    expect.close(big.grad, { -1, 1, -0.5 }, 1e-6, 1e-6)
    local ce = F.cross_entropy(T.tensor({ { 1000, 0 } }, { dtype = "float32" }), T.tensor({ 2 }))
    expect.close(ce, 1000, 1e-6)
  end)
end)

describe("cross_entropy's fused op", function()
  it("is the graph node of class-index cross_entropy, and a double backward matches torch's", function()
    if not res then expect.skip(why) end
    local x = logits:double():requires_grad_()
    local l = F.cross_entropy(x, idx, { weight = w:double(), ignore_index = 3, label_smoothing = 0.2 })
    expect.eq(tostring(l.grad_fn), "<CrossEntropyBackward>")
    local g = T.autograd.grad(l, { x }, nil, { create_graph = true })[1]
    ;(g * g:detach():cos()):sum():backward()
    R.check(res, "ce double backward#1", x.grad, 1e-10, 1e-12)
  end)
  it("binary_cross_entropy's double backward (input and target) matches torch's, also at 0 and 1", function()
    if not res then expect.skip(why) end
    local x, t = p_sat:double():requires_grad_(), y_sat:double():requires_grad_()
    local g = T.autograd.grad(F.binary_cross_entropy(x, t), { x }, nil, { create_graph = true })[1]
    ;(g * T.arange(1, g:numel() + 1):double():view(g.shape)):sum():backward()
    R.check(res, "bce double backward#1", g:detach(), 1e-12, 1e-12)
    R.check(res, "bce double backward#2", x.grad, 1e-12, 1e-12)
    R.check(res, "bce double backward#3", t.grad, 1e-12, 1e-12)
  end)
  it("_cross_entropy_backward is the one-pass formula a * softmax - b * one_hot - k * weight", function()
    local x, t = T.randn(3, 4), T.tensor({ 2, 4, 1 })
    local a, b, k, cw = T.randn(3), T.randn(3), T.randn(3), T.rand(4)
    local lse = x:logsumexp(2)
    local one_hot = T.arange(1, 5):view(1, 4):eq(t:view(3, 1)):float()
    local want = a:view(3, 1) * x:softmax(2) - b:view(3, 1) * one_hot - k:view(3, 1) * cw
    expect.close(T._cross_entropy_backward(x, lse, t, a, b, k, cw), want, 1e-6, 1e-6)
    expect.close(T._cross_entropy_backward(x, lse, t, a, b, k), want + k:view(3, 1) * (cw - 1), 1e-6, 1e-6)
    errs(function() T._cross_entropy_backward(x, lse, t:int(), a, b, k) end, "_cross_entropy_backward", "target expected int64")
    -- pitch: rows 8 classes long (32 bytes), zeros past the 4 classes
    local wide = T._cross_entropy_backward(x, lse, t, a, b, k, cw, 8)
    expect.eq(wide.shape, { 3, 8 })
    expect.close(wide:narrow(2, 1, 4), want, 1e-6, 1e-6)
    expect.eq(wide:narrow(2, 5, 4):totable(), T.zeros(3, 4):totable())
    errs(function() T._cross_entropy_backward(x, lse, t, a, b, k, nil, 6) end, "_cross_entropy_backward",
      "pitch expected a 2-d input and a row length of at least its 4 classes, a multiple of 16 bytes, got 6")
    local g = T._cross_entropy_backward(x:clone():requires_grad_(), lse, t, a, b, k)
    errs(function() g:sum():backward() end, "backward", "_cross_entropy_backward: derivative not implemented")
  end)
  it("computes in its dtype= from 16-bit scores: the converted scores' loss, their gradient rounded", function()
    for _, low in ipairs { "bfloat16", "float16" } do
      for oi, o in ipairs { { nil, -100, 0, "mean" }, { w, 3, 0.2, "sum" }, { nil, 2, 0, "none" } } do
        local x = (logits * 3):to(low)
        local x1, x2 = x:clone():requires_grad_(), x:clone():requires_grad_()
        local l1 = T._cross_entropy(x1, idx, o[1], o[2], o[3], o[4], "float32")
        local l2 = T._cross_entropy(x2:float(), idx, o[1], o[2], o[3], o[4])
        local what = low .. " options " .. oi
        expect.eq(l1.dtype, "float32", what)
        expect.close(l1, l2, { atol = 0, rtol = 0 }, what)
        local g = T.arange(1, l1:numel() + 1):view(l1.shape):float()
        ;(l1 * g):sum():backward()
        ;(l2 * g):sum():backward()
        expect.eq(x1.grad.dtype, low, what)
        expect.close(x1.grad, x2.grad, { atol = 0, rtol = 0 }, what)
      end
    end
    errs(function() T._cross_entropy(logits, idx, nil, -100, 0, "mean", "bfloat16") end, "_cross_entropy",
      'dtype expected the input\'s dtype (float32) or a wider floating one, got "bfloat16"')
    errs(function() T._cross_entropy(logits:bfloat16(), idx, w:bfloat16(), -100, 0, "mean", "float32") end, "_cross_entropy",
      "weight expected dtype float32")
  end)
  it("refuses what the composition refuses, naming the op", function()
    errs(function() F.cross_entropy(logits, T.tensor({ 1, 2, 3, 4, 5, 9 })) end, "_cross_entropy", "gather: index 9 is out of range for dim 2 of size 5")
    errs(function() T._cross_entropy(logits, idx, nil, -100, 0, "avg") end, "_cross_entropy", 'reduction expected "mean", "sum" or "none", got "avg"')
    errs(function() T._cross_entropy(logits, idx:view(2, 3)) end, "_cross_entropy", "target expected int64 class indices of shape {6}")
  end)
end)
