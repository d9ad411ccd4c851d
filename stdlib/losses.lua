-- crescent.losses: the loss functions of T.F (API.md section 9) with torch.nn.functional's options
-- and errors. Each is a composition of registry ops, so its gradient comes from the ops' rules;
-- the forms are the numerically stable ones (log_softmax, log-sum-exp / softplus forms).
-- Class indices are 1-based.
local core = require "crescent.core"
local fail, is_tensor = core.fail, core.is_tensor

local L = {}
local T
function L.bind(t) T = t end

local function check_tensor(op, i, name, v)
  if not is_tensor(v) then fail(string.format("%s: argument %d (%s) expected a tensor, got %s", op, i, name, type(v))) end
end
local function shape_str(x) return "{" .. table.concat(x.shape, ",") .. "}" end
local FLOATING = { float32 = true, float64 = true, float16 = true, bfloat16 = true }

local REDUCTIONS = { mean = true, sum = true, none = true }
-- (input, target, opts) checked; opts with its reduction filled in
local function start(op, input, target, opts, allowed, reductions)
  check_tensor(op, 1, "input", input)
  check_tensor(op, 2, "target", target)
  local o = L.check_opts(op, 3, opts, allowed)
  local r = o.reduction or "mean"
  if not (reductions or REDUCTIONS)[r] then fail(string.format("%s: %s is not a valid value for reduction (expected %s)", op, tostring(r),
      reductions and '"mean", "sum", "none" or "batchmean"' or '"mean", "sum" or "none"')) end
  local c = {}
  for k, v in pairs(o) do c[k] = v end
  c.reduction = r
  if c.weight ~= nil then check_tensor(op, 3, "weight", c.weight) end
  return c
end

local function reduce(loss, reduction)
  if reduction == "none" then return loss end
  if reduction == "sum" then return loss:sum() end
  return loss:mean()
end

local function same_size(op, input, target, msg)
  if shape_str(input) ~= shape_str(target) then fail(string.format(msg, op, shape_str(target), shape_str(input))) end
end

-- cross_entropy / nll_loss -----------------------------------------------------------------------
local function class_dim(x) return x:dim() == 1 and 1 or 2 end
local function class_view(x, C, cd)  -- a per-class vector broadcast along the class dim
  if cd == 1 then return { C } end
  local s = { 1, C }
  for _ = 3, x:dim() do s[#s + 1] = 1 end
  return s
end

-- class probabilities (floating target of the input's shape)
local function probabilities(op, lsm, target, o, cd)
  if shape_str(lsm) ~= shape_str(target) then
    fail(string.format("%s: class probabilities expected the input's shape %s, got %s", op, shape_str(lsm), shape_str(target)))
  end
  local C = lsm:size(cd)
  local ls = o.label_smoothing or 0
  if ls > 0 then target = target * (1 - ls) + ls / C end
  local terms = lsm * target
  if o.weight then terms = terms * o.weight:view(class_view(lsm, C, cd)) end
  local loss = -terms:sum(cd)
  if o.reduction == "none" then return loss end
  if o.reduction == "sum" then return loss:sum() end
  return loss:sum() / (lsm:numel() / C)
end

-- class indices: the mean divides by the summed weights of the targets not ignored (PyTorch's
-- nll_loss); label smoothing adds the mean over the classes with the same weights.
-- fused: lsm holds the logits, and T._cross_entropy (one op, a one-pass backward) computes the loss.
local function indices(op, lsm, target, o, cd, fused)
  if target.dtype ~= "int64" and target.dtype ~= "int32" then
    fail(op .. ": target expected int64 class indices (1-based) or floating class probabilities, got " .. target.dtype)
  end
  local want = {}
  for d = 1, lsm:dim() do
    if d ~= cd then want[#want + 1] = lsm:size(d) end
  end
  if table.concat(want, ",") ~= table.concat(target.shape, ",") then
    if cd == 2 and target:dim() >= 1 and target:size(1) ~= lsm:size(1) then
      fail(string.format("%s: Expected input batch_size (%d) to match target batch_size (%d).", op, lsm:size(1), target:size(1)))
    end
    fail(string.format("%s: target expected the shape %s (the input's without the class dim), got %s", op, "{" .. table.concat(want, ",") .. "}", shape_str(target)))
  end
  local C = lsm:size(cd)
  if o.weight and (o.weight:dim() ~= 1 or o.weight:size(1) ~= C) then
    fail(string.format("%s: weight expected a tensor of %d elements (one per class), got shape %s", op, C, shape_str(o.weight)))
  end
  if fused then
    return (T._cross_entropy(lsm, target, o.weight, o.ignore_index or -100, o.label_smoothing or 0, o.reduction))
  end
  local valid = target:ne(o.ignore_index or -100)
  local idx = T.where(valid, target, 1):long()
  local picked = lsm:gather(cd, idx:unsqueeze(cd)):squeeze(cd)
  local w = o.weight and T.where(valid, o.weight:index_select(1, idx:flatten()):view(idx.shape), 0) or valid:to(lsm.dtype)
  local ls = o.label_smoothing or 0
  local loss = -(picked * w)
  if ls > 0 then
    local smooth = o.weight and (lsm * o.weight:view(class_view(lsm, C, cd))):sum(cd) or lsm:sum(cd)
    loss = loss * (1 - ls) - T.where(valid, smooth, 0) * (ls / C)
  end
  -- (where, not the product with w alone: ignored positions get exactly 0 gradient, as PyTorch's,
  -- also from a mean over none, 0 / 0)
  loss = T.where(valid, loss, 0)
  if o.reduction == "none" then return loss end
  if o.reduction == "sum" then return loss:sum() end
  return loss:sum() / w:sum()
end

-- PyTorch's autocast runs the losses in float32 (on both devices' lists): float16 / bfloat16
-- input and target on a device whose autocast is on are cast first.
local LOW = { float16 = true, bfloat16 = true }
local function float32(x)
  if is_tensor(x) and LOW[x.dtype] and T.is_autocast_enabled(x.device:match("^%a+")) then return x:float() end
  return x
end

-- Class-index cross_entropy is one op eagerly (T._cross_entropy), and so in a training capture
-- where that is faster (core.fused_op); else, and for a weight of another dtype or device than
-- the input's or one that requires grad (the fused op's weight gets none, as PyTorch's), the
-- composition above.
local function fusable(input, w)
  if not core.fused_op(input.device) or not FLOATING[input.dtype] then return false end
  return w == nil or (w.dtype == input.dtype and w.device == input.device and not w.requires_grad)
end

-- cross_entropy(input, target[, {reduction = "mean", ignore_index = -100, weight =,
-- label_smoothing = 0}]): input {N, C} (or {C}, or {N, C, d...}) of logits; target 1-based
-- class indices {N, d...} (int64), or class probabilities of input's shape (floating).
local CE_OPTS = { reduction = true, ignore_index = true, weight = true, label_smoothing = true }
function L.cross_entropy(input, target, opts)
  local o = start("cross_entropy", input, target, opts, CE_OPTS)
  local ls = o.label_smoothing or 0
  if type(ls) ~= "number" or ls < 0 or ls > 1 then
    fail("cross_entropy: label_smoothing must be between 0.0 and 1.0. Got: " .. tostring(ls))
  end
  if input:dim() == 0 then fail("cross_entropy: input expected at least 1 dim (classes), got a 0-d tensor") end
  local cd = class_dim(input)
  -- (the fused op reads 16-bit scores itself, in float32 under autocast: its dtype=, which
  -- autocast sets; no float32 copy of them, their gradient written in their dtype)
  if not FLOATING[target.dtype] and fusable(input, o.weight) then return indices("cross_entropy", input, target, o, cd, true) end
  input, target = float32(input), float32(target)
  if FLOATING[target.dtype] then return probabilities("cross_entropy", input:log_softmax(cd), target, o, cd) end
  if fusable(input, o.weight) then return indices("cross_entropy", input, target, o, cd, true) end
  return indices("cross_entropy", input:log_softmax(cd), target, o, cd)
end

-- nll_loss(input, target[, {weight =, ignore_index = -100, reduction = "mean"}]): input holds
-- log-probabilities {N, C} (or {C}, {N, C, d...}); target 1-based class indices.
function L.nll_loss(input, target, opts)
  local o = start("nll_loss", input, target, opts, { reduction = true, ignore_index = true, weight = true })
  if input:dim() == 0 then fail("nll_loss: input expected at least 1 dim (classes), got a 0-d tensor") end
  return indices("nll_loss", input, target, o, class_dim(input))
end

-- regression losses ------------------------------------------------------------------------------
local R_OPTS = { reduction = true }

function L.mse_loss(input, target, opts)
  local o = start("mse_loss", input, target, opts, R_OPTS)
  local d = input - target
  return reduce(d * d, o.reduction)
end

function L.l1_loss(input, target, opts)
  local o = start("l1_loss", input, target, opts, R_OPTS)
  return reduce((input - target):abs(), o.reduction)
end

-- smooth_l1_loss(input, target[, {reduction =, beta = 1}]): 0.5 d^2 / beta where |d| < beta,
-- else |d| - 0.5 beta
function L.smooth_l1_loss(input, target, opts)
  local o = start("smooth_l1_loss", input, target, opts, { reduction = true, beta = true })
  local beta = o.beta or 1
  if type(beta) ~= "number" or beta < 0 then fail("smooth_l1_loss: smooth_l1_loss does not support negative values for beta.") end
  local z = (input - target):abs()
  if beta == 0 then return reduce(z, o.reduction) end
  return reduce(T.where(z:lt(beta), z * z * (0.5 / beta), z - 0.5 * beta), o.reduction)
end

-- huber_loss(input, target[, {reduction =, delta = 1}]): 0.5 d^2 where |d| < delta, else
-- delta (|d| - 0.5 delta): smooth_l1_loss with beta = delta, times delta
function L.huber_loss(input, target, opts)
  local o = start("huber_loss", input, target, opts, { reduction = true, delta = true })
  local delta = o.delta or 1
  if type(delta) ~= "number" or not (delta > 0) then
    fail("huber_loss: huber_loss does not support non-positive values for delta, got " .. tostring(delta))
  end
  local z = (input - target):abs()
  return reduce(T.where(z:lt(delta), z * z * 0.5, (z - 0.5 * delta) * delta), o.reduction)
end

-- binary losses ----------------------------------------------------------------------------------
local function weighted(loss, w)
  if w ~= nil then return loss * w end
  return loss
end

-- binary_cross_entropy(input, target[, {weight =, reduction =}]): input probabilities in [0, 1];
-- the logs are clamped at -100 and the gradient's denominator at 1e-12, as PyTorch's kernels
-- (T._binary_cross_entropy: finite gradients where the input is exactly 0 or 1).
function L.binary_cross_entropy(input, target, opts)
  local op = "binary_cross_entropy"
  local o = start(op, input, target, opts, { weight = true, reduction = true })
  same_size(op, input, target, "%s: Using a target size (%s) that is different to the input size (%s) is deprecated. Please ensure they have the same size.")
  if input:numel() > 0 then
    local lo, hi = input:detach():min():item(), input:detach():max():item()
    if not (lo >= 0 and hi <= 1) then fail(op .. ": all elements of input should be between 0 and 1") end
  end
  return reduce(weighted(T._binary_cross_entropy(input, target), o.weight), o.reduction)
end

-- -log(sigmoid(x)) = log(1 + exp(-x)), stable for every x with the right gradient also at 0:
-- with m = min(x, 0): -m + log1p(exp(2m - x)) (the exponent is -|x|)
local function neg_log_sigmoid(x)
  local m = x:clamp(nil, 0)
  return (m * 2 - x):exp():log1p() - m
end

-- binary_cross_entropy_with_logits(input, target[, {weight =, reduction =, pos_weight =}]):
-- pos_weight y softplus(-x) + (1 - y) softplus(x): torch's (1 - y) x + (1 + (pos_weight - 1) y)
-- softplus(-x) written so that the gradient is sigmoid(x) - y without cancelling (2e-22 at -50)
function L.binary_cross_entropy_with_logits(input, target, opts)
  local op = "binary_cross_entropy_with_logits"
  local o = start(op, input, target, opts, { weight = true, reduction = true, pos_weight = true })
  same_size(op, input, target, "%s: Target size (%s) must be the same as input size (%s)")
  local sp = neg_log_sigmoid(input)
  local negative = (1 - target) * neg_log_sigmoid(-input)
  -- (the weights take the loss's dtype, input's and target's: a float64 weight leaves it float32)
  local pw, w = o.pos_weight, o.weight
  if pw ~= nil then
    check_tensor(op, 3, "pos_weight", pw)
    sp = sp * (pw:to(negative.dtype) * target)
  else
    sp = sp * target
  end
  if is_tensor(w) then w = w:to(negative.dtype) end
  return reduce(weighted(negative + sp, w), o.reduction)
end

-- kl_div(input, target[, {reduction = "mean", log_target = false}]): input holds log-probabilities;
-- target probabilities (or log-probabilities with log_target). "batchmean" divides the sum by
-- the batch size (dim 1), "mean" by the element count, as PyTorch.
local KL_REDUCTIONS = { mean = true, sum = true, none = true, batchmean = true }
function L.kl_div(input, target, opts)
  local o = start("kl_div", input, target, opts, { reduction = true, log_target = true }, KL_REDUCTIONS)
  local loss
  if o.log_target then
    loss = target:exp() * (target - input)
  else
    -- xlogy(t, t) - t * input: 0 where t == 0 (the gradient of t there is NaN, as PyTorch's)
    loss = T.where(target:eq(0), 0, target * target:log()) - target * input
  end
  if o.reduction == "batchmean" then
    if input:dim() == 0 then return loss:sum() end
    return loss:sum() / input:size(1)
  end
  return reduce(loss, o.reduction)
end

-- (cross_entropy casts by itself: its fused op reads 16-bit scores as they are)
for _, name in ipairs({ "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
                        "binary_cross_entropy_with_logits", "kl_div" }) do
  local f = L[name]
  L[name] = function(input, target, opts) return f(float32(input), float32(target), opts) end
end

return L
