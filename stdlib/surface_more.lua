-- crescent.surface_more: more of PyTorch's data ops made of registry ops, bound with
-- crescent.surface's (same conventions: T.op and x:op, differentiable and compiled through the
-- ops they are made of, 1-based index results): logcumsumexp, mode, multinomial, histc, one_hot;
-- the in-place draws uniform_, normal_, exponential_, bernoulli_.
local core = require "crescent.core"
local fail = core.fail
local A = require "crescent.surface_args"
local describe, check_tensor, opts_of, dim0, is_float = A.describe, A.check_tensor, A.opts_of, A.dim0, A.is_float
local is_opts = require("crescent.binding").is_opts
local is_tensor = require("crescent.core").is_tensor

local M = {}  -- name -> function, bound by crescent.surface
local T

local function positions(x, k)  -- 1..n along dim k, broadcast to x's shape (int64)
  local shape = {}
  for j = 1, x:dim() do shape[j] = j == k and x:size(k) or 1 end
  return T.arange(1, x:size(k) + 1, { dtype = "int64", device = x.device }):view(shape):expand(x.shape)
end

-- log(exp(a) + exp(b)) around the larger m, so the sum inside the log is in [1, 2] and neither it
-- nor its gradient over- or underflows (the gradient through m cancels: 1 - sum / sum); an
-- infinite m is left out of the shift (-inf, -inf gives -inf; +inf gives +inf)
local function logaddexp(a, b)
  local m = T.maximum(a, b)
  m = T.where(m:isinf(), 0, m)
  return ((a - m):exp() + (b - m):exp()):log() + m
end

-- logcumsumexp(x, dim): a doubling scan (log2(n) steps) of logaddexp, as crescent.surface's cumprod
function M.logcumsumexp(x, dim)
  check_tensor("logcumsumexp", 1, "self", x)
  if dim == nil then fail("logcumsumexp: expected a dim, got none") end
  local k = dim0("logcumsumexp", x, dim) + 1
  if not is_float(x) then fail("logcumsumexp: expected a floating tensor, got " .. describe(x)) end
  if x:dim() == 0 then return x:clone() end
  local n, s = x:size(k), 1
  while s < n do
    local scanned = logaddexp(x:narrow(k, s + 1, n - s), x:narrow(k, 1, n - s))
    x = T.cat({ x:narrow(k, 1, s), scanned }, k)
    s = s * 2
  end
  return s == 1 and x:clone() or x
end

-- mode(x[, dim = -1[, keepdim]]) -> values, indices: the most frequent value along dim, the smallest
-- of them on a tie, and the position of its last occurrence (1-based), as PyTorch's CPU kernel
function M.mode(x, dim, keepdim)
  check_tensor("mode", 1, "self", x)
  local k = dim0("mode", x, dim or -1) + 1
  if x:dim() == 0 then return x:clone(), T.ones({}, { dtype = "int64", device = x.device }) end
  local n = x:size(k)
  if n == 0 then fail(string.format("mode: expected reduction dim %d to have non-zero size", k)) end
  local v, i = x:sort(k)  -- (stable: equal values keep their order)
  local pos = positions(x, k)
  local one = T.ones(v:narrow(k, 1, 1).shape, { dtype = "bool", device = x.device })
  local new = v:narrow(k, 2, n - 1):ne(v:narrow(k, 1, n - 1))
  local first, last = T.cat({ one, new }, k), T.cat({ new, one }, k)
  local start = T.cummax(T.where(first, pos, 1), k)
  local _, at = T.where(last, pos - start + 1, 0):max(k, true)  -- (the first of equal counts)
  v, i = v:gather(k, at), i:gather(k, at)
  if not keepdim then v, i = v:squeeze(k), i:squeeze(k) end
  return v, i
end

-- how many entries of each row of cdf (ascending) are <= each of u's: a merge by a stable sort
-- (cdf's entries ahead of u's on ties), O((n + m) log) rather than the n * m of a comparison
local function count_le(cdf, u)
  local n, m = cdf:size(2), u:size(2)
  local _, perm = T.cat({ cdf, u }, 2):sort(2)
  local before = perm:le(n):long():cumsum(2)
  return T.zeros(cdf:size(1), n + m, { dtype = "int64", device = cdf.device }):scatter_(2, perm, before):narrow(2, n + 1, m)
end

local function check_weights(w, op)
  if w:lt(0):any():item() or w:isinf():any():item() or w:isnan():any():item() then
    fail(op .. ": probability tensor contains either inf, nan or element < 0")
  end
  if w:sum(2):le(0):any():item() then fail(op .. ": invalid multinomial distribution (sum of probabilities <= 0)") end
end

-- multinomial(p, num_samples[, replacement | {replacement =}]): 1-based category indices drawn
-- from the rows of p (1-D or 2-D non-negative weights), from the generator of T.rand (manual_seed).
-- Without replacement, the top num_samples of p / Exp(1) noise: the same law as drawing one at a
-- time and removing it (PyTorch's method); with replacement, u * total placed among the cumsum.
function M.multinomial(p, num_samples, replacement)
  check_tensor("multinomial", 1, "self", p)
  if is_opts(replacement) then replacement = opts_of("multinomial", replacement, { replacement = true }).replacement end
  if not is_float(p) then fail("multinomial: expected a floating tensor of probabilities, got " .. describe(p)) end
  if p:dim() < 1 or p:dim() > 2 then fail("multinomial: prob_dist must be 1 or 2 dim, got " .. describe(p)) end
  if type(num_samples) ~= "number" or num_samples ~= math.floor(num_samples) or num_samples <= 0 then
    fail("multinomial: num_samples expected a positive integer, got " .. tostring(num_samples))
  end
  local w = (p:dim() == 1 and p:unsqueeze(1) or p):double()
  local rows, n = w:size(1), w:size(2)
  if n == 0 then fail("multinomial: number of categories cannot be zero") end
  if not replacement and num_samples > n then
    fail(string.format("multinomial: cannot sample n_sample (%d) > prob_dist.size(-1) (%d) samples without replacement", num_samples, n))
  end
  check_weights(w, "multinomial")
  local idx
  if replacement then
    local u = T.rand(rows, num_samples, { dtype = "float64", device = p.device })
    local cdf = w:cumsum(2)
    -- (u * total < total; the clamp keeps a rounding at the top off a trailing zero weight)
    local last_positive = (w:gt(0):long() * positions(w, 2)):amax(2, true)
    idx = T.minimum(count_le(cdf, u * cdf:narrow(2, n, 1)) + 1, last_positive)
  else
    if w:gt(0):sum(2):lt(num_samples):any():item() then
      fail("multinomial: invalid multinomial distribution (with replacement=False, not enough non-negative category to sample)")
    end
    local noise = T.rand(rows, n, { dtype = "float64", device = p.device }):neg():log1p():neg()
    idx = select(2, (w / noise):topk(num_samples, 2))
  end
  return p:dim() == 1 and idx:squeeze(1) or idx
end

local function shown(v) return v ~= v and "nan" or tostring(v) end

-- histc(x[, bins = 100[, min = 0[, max = 0]]]): counts of bins equal parts of [min, max] (the
-- data's range when min == max); values outside are not counted. v's bin is
-- floor((v - min) * bins / (max - min)), as PyTorch 2's kernels (1.13's CPU one differs at edges)
function M.histc(x, bins, lo, hi)
  bins, lo, hi = bins or 100, lo or 0, hi or 0
  check_tensor("histc", 1, "self", x)
  if not is_float(x) then fail("histc: expected a floating tensor, got " .. describe(x)) end
  if bins <= 0 then fail("histc: bins must be > 0, got " .. bins) end
  if lo == hi and x:numel() > 0 then
    if core.ctx.capturing ~= 0 then core.need(x, "histc: the range comes from the values (give min and max)") end
    lo, hi = x:min():item(), x:max():item()
  end
  if lo == hi then lo, hi = lo - 1, hi + 1 end
  if lo ~= lo or hi ~= hi or math.abs(lo) == math.huge or math.abs(hi) == math.huge then
    fail(string.format("histc: range of [%s, %s] is not finite", shown(lo), shown(hi)))
  end
  if lo > hi then fail(string.format("histc: max must be larger than min, got %s and %s", tostring(lo), tostring(hi))) end
  local f = x:flatten()
  local inside = f:ge(lo):logical_and(f:le(hi))
  -- (values outside go to a bin past the last, cut off: no selection, no read-back of its size)
  local pos = ((f - lo) * bins / (hi - lo)):floor():long():clamp(0, bins - 1):masked_fill(inside:logical_not(), bins)
  local one = T.ones(1, { dtype = x.dtype, device = x.device }):expand(f:numel())
  return T.zeros(bins + 1, { dtype = x.dtype, device = x.device }):index_add(1, pos + 1, one):narrow(1, 1, bins)
end

-- one_hot(t[, num_classes]): classes 1..num_classes (1-based, as cross_entropy's targets)
function M.one_hot(t, num_classes)
  check_tensor("one_hot", 1, "tensor", t)
  if t.dtype ~= "int64" then fail("one_hot: expected an int64 tensor of classes, got " .. describe(t)) end
  if num_classes == -1 then num_classes = nil end  -- (torch's default: inferred)
  if num_classes ~= nil and (type(num_classes) ~= "number" or num_classes ~= math.floor(num_classes) or num_classes < 0) then
    fail("one_hot: num_classes expected a non-negative integer or -1, got " .. (type(num_classes) == "number" and num_classes or describe(num_classes)))
  end
  if num_classes ~= nil and core.ctx.capturing ~= 0 then
    -- compiled: no value read (a graph break); the scatter refuses a class outside 1..num_classes
    local shape = t.shape
    shape[#shape + 1] = num_classes
    return T.zeros(shape, { dtype = "int64", device = t.device }):scatter_(-1, t:unsqueeze(-1), 1)
  end
  if t:numel() > 0 then
    if num_classes == nil and core.ctx.capturing ~= 0 then
      core.need(t, "one_hot: the number of classes comes from the values (give num_classes)")
    end
    local lo, hi = t:min():item(), t:max():item()
    if lo < 1 then fail("one_hot: class values must be 1 or more (1-based), got " .. lo) end
    if num_classes and hi > num_classes then fail(string.format("one_hot: class values must be at most num_classes (%d), got %d", num_classes, hi)) end
    num_classes = num_classes or hi
  end
  if num_classes == nil then fail("one_hot: Can not infer total number of classes from empty tensor (give num_classes)") end
  return T.arange(1, num_classes + 1, { dtype = "int64", device = t.device }):eq(t:unsqueeze(-1)):long()
end

-- x:uniform_([from = 0[, to = 1]]), x:normal_([mean = 0[, std = 1]]), x:exponential_([lambd = 1]),
-- x:bernoulli_([p = 0.5]): x filled in place with draws of its shape (16-bit dtypes drawn in
-- float32), as torch's; bernoulli_ takes any dtype and a number or a tensor of probabilities
local function draws(op, x, ...)
  check_tensor(op, 1, "self", x)
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if type(v) ~= "number" then fail(string.format("%s: argument %d expected a number, got %s", op, i + 1, describe(v))) end
  end
  if op ~= "bernoulli_" and not is_float(x) then fail(op .. ": expected a floating tensor, got " .. describe(x)) end
  if x.requires_grad and x.is_leaf and T.is_grad_enabled() then
    fail(op .. ": a leaf Variable that requires grad is being used in an in-place operation (wrap it in T.no_grad, as nn.init does)")
  end
  return { dtype = x.dtype == "float64" and "float64" or "float32", device = x.device }
end
function M.uniform_(x, from, to)
  from, to = from or 0, to or 1
  local o = draws("uniform_", x, from, to)
  if from > to then fail(string.format("uniform_: expects from <= to, but got from=%s > to=%s", from, to)) end
  return x:copy_(T.rand(x.shape, o) * (to - from) + from)
end
function M.normal_(x, mean, std)
  mean, std = mean or 0, std or 1
  local o = draws("normal_", x, mean, std)
  if not (std >= 0) then fail("normal_: expects std >= 0.0, but found std " .. tostring(std)) end
  return x:copy_(T.randn(x.shape, o) * std + mean)
end
function M.exponential_(x, lambd)
  lambd = lambd or 1
  local o = draws("exponential_", x, lambd)
  if not (lambd > 0) then fail("exponential_: expects lambda > 0.0, but found lambda=" .. tostring(lambd)) end
  return x:copy_((-T.rand(x.shape, o)):log1p() * (-1 / lambd))
end
function M.bernoulli_(x, p)
  p = p == nil and 0.5 or p
  local o = draws("bernoulli_", x)
  if is_tensor(p) then
    if p:ge(0):logical_and(p:le(1)):logical_not():any():item() then fail("bernoulli_: expected all probabilities in [0, 1]") end
  elseif type(p) ~= "number" or not (p >= 0 and p <= 1) then
    fail("bernoulli_: expected p in [0, 1], got " .. tostring(p))
  end
  return x:copy_(T.rand(x.shape, o):lt(p))
end

function M.bind(t) T = t end

return M
