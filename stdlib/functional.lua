-- crescent.functional: T.F (API.md section 4). Each function is a composition of registry ops,
-- so inside T.compile it is captured op by op and fused like user code (Inductor's
-- decompositions): layer_norm becomes a mean, a variance and one pointwise tail; attention two
-- matmuls around a softmax. Signatures follow torch.nn.functional; class indices are 1-based.
local core = require "crescent.core"
local fail, is_tensor = core.fail, core.is_tensor

local F = {}
local T  -- crescent, bound by F.bind (crescent.lua requires this file while building T)

function F.bind(t)
  T = t
  require("crescent.losses").bind(t)
  require("crescent.functional_conv").bind(t, F._check_opts)
end

local function check_tensor(op, i, name, v)
  if not is_tensor(v) then
    fail(string.format("%s: argument %d (%s) expected a tensor, got %s", op, i, name, type(v)))
  end
end
local function check_opts(op, i, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" or is_tensor(opts) then
    fail(string.format("%s: argument %d (opts) expected a table, got %s", op, i, type(opts)))
  end
  for k in pairs(opts) do
    if not allowed[k] then
      local names = {}
      for n in pairs(allowed) do names[#names + 1] = n end
      table.sort(names)
      fail(string.format("%s: unknown option '%s' (expected one of: %s)", op, tostring(k), table.concat(names, ", ")))
    end
  end
  return opts
end
F._check_opts = check_opts  -- crescent.nn validates its layers' options the same way

-- float16 / bfloat16 inputs of the normalisations compute in float32 and round once at the end,
-- as PyTorch's CPU and CUDA kernels do.
local function widen(x)
  local dt = x.dtype
  if dt == "float16" or dt == "bfloat16" then return x:float(), dt end
  return x, nil
end
local function narrow_back(y, dt) return dt and y:to(dt) or y end

-- The trailing dims a normalisation covers: normalized_shape must match x's last sizes.
local function last_dims(op, x, shape)
  if type(shape) == "number" then shape = { shape } end
  if type(shape) ~= "table" or #shape == 0 then
    fail(op .. ": argument 2 (normalized_shape) expected a size or a non-empty list of sizes, got " .. tostring(shape))
  end
  local n, xs = #shape, x.shape
  local ok = n <= #xs
  for i = 1, n do ok = ok and xs[#xs - n + i] == shape[i] end
  if not ok then
    fail(string.format("%s: normalized_shape {%s} expected to match the last sizes of the input of shape {%s}",
      op, table.concat(shape, ","), table.concat(xs, ",")))
  end
  local dims = {}
  for i = 1, n do dims[i] = -i end
  return dims
end

-- nn.functional ---------------------------------------------------------------------------------

function F.linear(x, w, b) return T.linear(x, w, b) end
-- embedding(idx, weight[, {padding_idx =, max_norm =, norm_type = 2, scale_grad_by_freq =}]):
-- max_norm first rescales, in place and unrecorded, the rows idx reads whose norm passes it
-- (torch's embedding_renorm_); scale_grad_by_freq divides a row's gradient by its count in idx
function F.embedding(idx, w, opts)
  if opts == nil or (opts.max_norm == nil and opts.norm_type == nil and opts.sparse == nil) then return T.embedding(idx, w, opts) end
  opts = check_opts("embedding", 3, opts, { padding_idx = true, max_norm = true, norm_type = true, scale_grad_by_freq = true, sparse = true })
  if opts.sparse then fail("embedding: sparse = true is not implemented (crescent has no sparse tensors): the gradient is dense") end
  local max_norm, p = opts.max_norm, opts.norm_type or 2
  if max_norm ~= nil then
    if type(max_norm) ~= "number" then fail("embedding: max_norm expected a number, got " .. type(max_norm)) end
    if type(p) ~= "number" then fail("embedding: norm_type expected a number, got " .. type(p)) end
    check_tensor("embedding", 1, "input", idx)
    T.no_grad(function()
      local rows = T.unique(idx:flatten())
      local sel = w:index_select(1, rows)
      local norms = sel:norm(2, true, { p = p })
      local scale = T.where(norms:gt(max_norm), max_norm / (norms + 1e-7), 1)
      w:index_copy_(1, rows, sel * scale)
    end)
  end
  return T.embedding(idx, w, { padding_idx = opts.padding_idx, scale_grad_by_freq = opts.scale_grad_by_freq })
end
function F.relu(x) return T.relu(x) end
function F.silu(x) return T.silu(x) end
-- leaky_relu(x[, negative_slope = 0.01]), elu(x[, alpha = 1]), selu(x), celu(x[, alpha = 1]),
-- softplus, mish, logsigmoid, hardsigmoid, hardswish as PyTorch's: selu is elu's scaled form,
-- celu elu of x / alpha scaled by alpha.
local function number_arg(op, i, name, v, dflt)
  if v == nil then return dflt end
  if type(v) ~= "number" then
    fail(string.format("%s: argument %d (%s) expected a number, got %s", op, i, name, type(v)))
  end
  return v
end
function F.leaky_relu(x, slope) return T.leaky_relu(x, number_arg("leaky_relu", 2, "negative_slope", slope, 0.01)) end
function F.elu(x, alpha) return T.elu(x, number_arg("elu", 2, "alpha", alpha, 1.0)) end
local SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
function F.selu(x) return T.elu(x, SELU_ALPHA) * SELU_SCALE end
-- softplus(x[, beta = 1[, threshold = 20]]): linear where beta * x > threshold
-- (T.softplus's threshold is 20; another is PyTorch's formula in ops, its exp taken of beta * x
-- clamped to the threshold so that the branch not taken has no inf to spoil the gradient)
function F.softplus(x, beta, threshold)
  beta = number_arg("softplus", 2, "beta", beta, 1.0)
  threshold = number_arg("softplus", 3, "threshold", threshold, 20)
  if threshold == 20 then return T.softplus(x, beta) end
  local half = x.dtype == "float16" or x.dtype == "bfloat16"  -- (computed in float32, as PyTorch's)
  local xf = half and x:float() or x
  local z = xf * beta
  local y = T.where(z:gt(threshold), xf, T.log1p(T.exp(z:clamp(nil, threshold))) / beta)
  return half and y:to(x.dtype) or y
end
-- hardtanh(x[, min_val = -1[, max_val = 1]]), relu6(x): clamps whose gradient is zero at the bounds
function F.hardtanh(x, min_val, max_val)
  min_val = number_arg("hardtanh", 2, "min_val", min_val, -1.0)
  max_val = number_arg("hardtanh", 3, "max_val", max_val, 1.0)
  return T.hardtanh(x, min_val, max_val)
end
function F.relu6(x) return T.hardtanh(x, 0, 6) end
function F.mish(x) return T.mish(x) end
function F.logsigmoid(x) return T.logsigmoid(x) end
function F.hardsigmoid(x) return T.hardsigmoid(x) end
function F.hardswish(x) return T.hardswish(x) end
function F.celu(x, alpha)
  alpha = number_arg("celu", 2, "alpha", alpha, 1.0)
  if alpha == 0 then fail("celu: argument 2 (alpha) expected a non-zero number, got 0") end
  if alpha == 1 then return T.elu(x, 1.0) end
  return T.elu(x / alpha, 1.0) * alpha
end
function F.gelu(x, opts) return T.gelu(x, opts) end
-- softmax / log_softmax(x, dim[, {dtype =}]), or torch's keywords: (x, {dim =, dtype =})
local function dim_keyword(dim, opts)
  if type(dim) == "table" and not is_tensor(dim) and opts == nil then return dim.dim, dim.dtype ~= nil and { dtype = dim.dtype } or nil end
  return dim, opts
end
function F.softmax(x, dim, opts) return T.softmax(x, dim_keyword(dim, opts)) end
function F.log_softmax(x, dim, opts) return T.log_softmax(x, dim_keyword(dim, opts)) end

-- layer_norm(x, normalized_shape[, weight[, bias[, eps = 1e-5]]]): biased variance, as PyTorch.
-- Eagerly one fused op (T._layer_norm, forward and backward kernels), and so in a training
-- capture where that is faster (core.fused_op); else the composition below, which the code
-- generators fuse with the neighbouring ops. A weight or bias of another dtype than x (autocast)
-- takes the composition too.
local function fusable(x, w, b)
  if not core.fused_op(x.device) then return false end
  for _, t in ipairs({ w or x, b or x }) do
    if not is_tensor(t) or t.dtype ~= x.dtype or t.device ~= x.device then return false end
  end
  return true
end
function F.layer_norm(x, shape, w, b, eps)
  check_tensor("layer_norm", 1, "input", x)
  local dims = last_dims("layer_norm", x, shape)
  if fusable(x, w, b) then
    return (T._layer_norm(x, type(shape) == "number" and { shape } or shape, w, b, eps or 1e-5))
  end
  local xf, dt = widen(x)
  local mu = xf:mean(dims, true)
  local xc = xf - mu
  local y = xc * T.rsqrt((xc * xc):mean(dims, true) + (eps or 1e-5))
  if w ~= nil then y = y * w end
  if b ~= nil then y = y + b end
  return narrow_back(y, dt)
end

-- rms_norm(x, normalized_shape[, weight[, eps]]): eps defaults to the machine epsilon of x's
-- dtype, as torch.nn.functional.rms_norm.
local EPS = { float32 = 1.1920928955078125e-07, float64 = 2.220446049250313e-16,
              float16 = 0.0009765625, bfloat16 = 0.0078125 }
function F.rms_norm(x, shape, w, eps)
  check_tensor("rms_norm", 1, "input", x)
  local dims = last_dims("rms_norm", x, shape)
  local xf, dt = widen(x)
  local y = xf * T.rsqrt((xf * xf):mean(dims, true) + (eps or EPS[x.dtype] or EPS.float32))
  if w ~= nil then y = y * w end
  return narrow_back(y, dt)
end

-- dropout(x[, p = 0.5[, training = true]]): zeroes elements with probability p and scales the
-- rest by 1 / (1 - p); the identity when not training.
function F.dropout(x, p, training)
  check_tensor("dropout", 1, "input", x)
  p = p == nil and 0.5 or p
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    fail("dropout: argument 2 (p) expected a probability in [0, 1], got " .. tostring(p))
  end
  if training == false or p == 0 then return x end
  if p == 1 then return x * 0 end
  local keep = T.rand(x.shape, { device = x.device }):ge(p)
  return T.where(keep, x / (1 - p), 0)
end

-- scaled_dot_product_attention(q, k, v[, {causal =, mask =, scale =}]): q {..., L, E},
-- k {..., S, E}, v {..., S, Ev}. mask is a bool tensor (true: may attend) or a float tensor added
-- to the scores, broadcast to {..., L, S}. causal is PyTorch's is_causal: query i sees keys
-- 1..i, aligned top-left. A row with no visible key gives NaN, as in PyTorch.
local SDPA_OPTS = { causal = true, mask = true, scale = true }
local function same_batch(q, k, v)  -- T.attention takes one batch shape (matmul would broadcast)
  if q:dim() < 2 or k:dim() ~= q:dim() or v:dim() ~= q:dim() then return false end
  for d = 1, q:dim() - 2 do
    if k:size(d) ~= q:size(d) or v:size(d) ~= q:size(d) then return false end
  end
  return true
end
-- Whether a backward will reach the op: then T._attention, which also returns the rows'
-- logsumexp that the fused backward kernel reads (attention recomputes it). A capture's tensors
-- carry no autograd history when replayed: there a training capture (ctx.capturing == 2) decides.
local function needs_grad(...)
  if not T.is_grad_enabled() then return false end
  if core.ctx.capturing ~= 0 then return core.ctx.capturing == 2 end
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if t ~= nil and t.requires_grad then return true end
  end
  return false
end
function F.scaled_dot_product_attention(q, k, v, opts)
  for i, t in ipairs({ q, k, v }) do check_tensor("scaled_dot_product_attention", i, ({ "query", "key", "value" })[i], t) end
  opts = check_opts("scaled_dot_product_attention", 4, opts, SDPA_OPTS)
  if opts.causal and opts.mask ~= nil then
    fail("scaled_dot_product_attention: causal = true and a mask cannot be given together (PyTorch refuses both)")
  end
  local scale = opts.scale or 1 / math.sqrt(q:size(-1))
  local m = opts.mask
  if m ~= nil then check_tensor("scaled_dot_product_attention", 4, "mask", m) end
  if q.device ~= "cpu" and same_batch(q, k, v) and
     (m == nil or core.api.attention_mask_fits(core.ptr(m), core.ptr(q), core.ptr(k)) ~= 0) and
     core.api.attention_fused(q.dtype, q:size(-2), q:size(-1), v:size(-1), scale) ~= 0 then
    -- one op, a fused kernel: the scores never reach memory (a mask is read where it lies,
    -- broadcast). Other inputs take the ops below, which a compiled graph fuses (scale, mask and
    -- softmax in one kernel).
    if needs_grad(q, k, v, m) then return (T._attention(q, k, v, scale, opts.causal or false, m)) end
    return T.attention(q, k, v, scale, opts.causal or false, m)
  end
  local s = T.matmul(q * scale, k:transpose(-2, -1))
  if opts.causal then
    local L, S = q:size(-2), k:size(-2)
    s = s:masked_fill(T.ones(L, S, { dtype = "bool", device = q.device }):triu(1), -math.huge)
  elseif m ~= nil then
    if m.dtype == "bool" then s = s:masked_fill(m:logical_not(), -math.huge) else s = s + m end
  end
  return T.matmul(s:softmax(-1), v)
end

-- normalize(x[, p = 2[, dim = 2[, eps = 1e-12]]]) or normalize(x, {p =, dim =, eps =}): x divided
-- by its p-norm along dim (at least eps).
function F.normalize(x, p, dim, eps)
  check_tensor("normalize", 1, "input", x)
  if type(p) == "table" then
    local o = check_opts("normalize", 2, p, { p = true, dim = true, eps = true })
    p, dim, eps = o.p, o.dim, o.eps
  end
  local n = x:norm(dim or 2, true, { p = p or 2 })
  return x / n:clamp(eps or 1e-12)
end

-- cosine_similarity(x1, x2[, dim = 2[, eps = 1e-8]]): sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps))
-- along dim, the inputs broadcast first; each norm is clamped as a value only (PyTorch's
-- clamp_min_ under no_grad), so its gradient is the norm's.
local function clamped_norm(x, dim, eps)
  local n = x:norm(dim, true)
  return n + (n:clamp(eps) - n):detach()
end
function F.cosine_similarity(x1, x2, dim, eps)
  check_tensor("cosine_similarity", 1, "x1", x1)
  check_tensor("cosine_similarity", 2, "x2", x2)
  if type(dim) == "table" then
    local o = check_opts("cosine_similarity", 3, dim, { dim = true, eps = true })
    dim, eps = o.dim, o.eps
  end
  dim, eps = dim or 2, eps or 1e-8
  local a, b = x1.shape, x2.shape
  local shape = {}
  for j = 1, math.max(#a, #b) do  -- (the broadcast shape, aligned from the last dim)
    local p, q = a[#a - math.max(#a, #b) + j] or 1, b[#b - math.max(#a, #b) + j] or 1
    if p ~= q and p ~= 1 and q ~= 1 then
      fail(string.format("cosine_similarity: x1 {%s} and x2 {%s} cannot be broadcast", table.concat(a, ","), table.concat(b, ",")))
    end
    shape[j] = p == 1 and q or p
  end
  x1, x2 = x1:expand(shape), x2:expand(shape)
  return (x1 / clamped_norm(x1, dim, eps) * (x2 / clamped_norm(x2, dim, eps))):sum(dim)
end

function F.tanh(x) return T.tanh(x) end
function F.sigmoid(x) return T.sigmoid(x) end

-- batch_norm(x, running_mean, running_var[, weight[, bias[, training = false[, momentum = 0.1[,
-- eps = 1e-5]]]]]): x {N, C, ...}, statistics per channel (dim 2). Training normalises with the
-- batch's (biased) variance and, when running tensors are given, updates them in place with the
-- unbiased one; momentum nil gives the cumulative average (the caller passes 1 / batches).
-- a per-channel tensor of batch_norm / group_norm: C values (a view would name no layer)
local function per_channel(op, name, t, C)
  if t ~= nil and (not is_tensor(t) or t:numel() ~= C) then
    fail(string.format("%s: expected %s of size equal to the number of channels of the input (%d), got %s", op, name, C,
      is_tensor(t) and t:numel() or type(t)))
  end
end

function F.batch_norm(x, rm, rv, w, b, training, momentum, eps)
  local op = "batch_norm"
  check_tensor(op, 1, "input", x)
  if x:dim() < 2 then fail(op .. ": input expected at least 2 dims {N, C, ...}, got a " .. x:dim() .. "-D tensor") end
  eps, momentum = eps or 1e-5, momentum or 0.1
  local C = x:size(2)
  per_channel(op, "running_mean", rm, C)
  per_channel(op, "running_var", rv, C)
  per_channel(op, "weight", w, C)
  per_channel(op, "bias", b, C)
  local shape = { 1, C }
  for _ = 3, x:dim() do shape[#shape + 1] = 1 end
  local dims = { 1 }
  for d = 3, x:dim() do dims[#dims + 1] = d end
  local xf, dt = widen(x)
  local mean, var
  if training then
    local n = xf:numel() / C
    if n <= 1 then fail(string.format("%s: Expected more than 1 value per channel when training, got input size %s", op, "{" .. table.concat(x.shape, ",") .. "}")) end
    mean = xf:mean(dims, true)
    var = ((xf - mean) ^ 2):mean(dims, true)
    if rm ~= nil then
      T.no_grad(function()
        rm:mul_(1 - momentum):add_(mean:view(C):to(rm.dtype) * momentum)
        rv:mul_(1 - momentum):add_(var:view(C):to(rv.dtype) * (momentum * n / (n - 1)))
      end)
    end
  else
    if rm == nil or rv == nil then fail(op .. ": running_mean and running_var expected tensors when not training") end
    mean, var = rm:view(shape), rv:view(shape)
  end
  local y = (xf - mean) * T.rsqrt(var + eps)
  if w ~= nil then y = y * w:view(shape) end
  if b ~= nil then y = y + b:view(shape) end
  return narrow_back(y, dt)
end

-- group_norm(x, num_groups[, weight[, bias[, eps = 1e-5]]]): x {N, C, ...}, statistics over each
-- group of C / num_groups channels and the spatial dims.
function F.group_norm(x, G, w, b, eps)
  local op = "group_norm"
  check_tensor(op, 1, "input", x)
  if x:dim() < 2 then fail(op .. ": input expected at least 2 dims {N, C, ...}, got a " .. x:dim() .. "-D tensor") end
  local N, C = x:size(1), x:size(2)
  if type(G) ~= "number" or G < 1 or C % G ~= 0 then
    fail(string.format("%s: Expected number of channels in input to be divisible by num_groups, but got input of shape {%s} and num_groups=%s", op, table.concat(x.shape, ","), tostring(G)))
  end
  per_channel(op, "weight", w, C)
  per_channel(op, "bias", b, C)
  local xf, dt = widen(x)
  local g = xf:reshape(N, G, -1)
  local mean = g:mean(3, true)
  local gc = g - mean
  local y = (gc * T.rsqrt((gc * gc):mean(3, true) + (eps or 1e-5))):view(x.shape)
  local shape = { 1, C }
  for _ = 3, x:dim() do shape[#shape + 1] = 1 end
  if w ~= nil then y = y * w:view(shape) end
  if b ~= nil then y = y + b:view(shape) end
  return narrow_back(y, dt)
end

-- conv1d, conv2d, conv_transpose2d, unfold, fold, pools, pad, interpolate (crescent.functional_conv)
local conv = require "crescent.functional_conv"
for name, fn in pairs(conv) do
  if type(fn) == "function" and name ~= "bind" then F[name] = fn end
end

-- torch's keyword arguments as a trailing table: F.layer_norm(x, {d}, {eps = 1e-6}) is
-- F.layer_norm(x, {d}, nil, nil, 1e-6); `inplace = true` (torch's activations and dropout) writes
-- the result into the input and returns it.
local is_opts = require("crescent.binding").is_opts
local KEYWORDS = {
  linear = { "input", "weight", "bias" }, leaky_relu = { "input", "negative_slope", "inplace" },
  elu = { "input", "alpha", "inplace" }, celu = { "input", "alpha", "inplace" }, selu = { "input", "inplace" },
  relu = { "input", "inplace" }, relu6 = { "input", "inplace" }, silu = { "input", "inplace" },
  mish = { "input", "inplace" }, hardsigmoid = { "input", "inplace" }, hardswish = { "input", "inplace" },
  hardtanh = { "input", "min_val", "max_val", "inplace" }, softplus = { "input", "beta", "threshold" },
  layer_norm = { "input", "normalized_shape", "weight", "bias", "eps" },
  rms_norm = { "input", "normalized_shape", "weight", "eps" }, dropout = { "input", "p", "training", "inplace" },
  normalize = { "input", "p", "dim", "eps" }, cosine_similarity = { "x1", "x2", "dim", "eps" },
  batch_norm = { "input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps" },
  group_norm = { "input", "num_groups", "weight", "bias", "eps" }, pad = { "input", "pad", "mode", "value" },
}
local function keywords(op, names, fn)
  local inplace = names[#names] == "inplace"
  local n = inplace and #names - 1 or #names
  return function(...)
    local k = select("#", ...)
    local opts = k > 1 and select(k, ...)  -- (never the first argument: the input)
    if not is_opts(opts) then
      if k > #names then fail(string.format("%s: expected at most %d arguments, got %d", op, #names, k)) end
      if k <= n then return fn(...) end  -- (the common call: no table to make)
    end
    local r = { ... }
    if is_opts(opts) then
      r[k] = nil
      for key, v in pairs(opts) do
        local slot
        for i, name in ipairs(names) do if name == key then slot = i end end
        if not slot or slot == 1 then
          fail(string.format("%s: unknown option '%s' (expected one of: %s)", op, tostring(key), table.concat(names, ", ", 2)))
        end
        if slot < k then fail(string.format("%s: got argument %d (%s) twice, positionally and as an option", op, slot, key)) end
        r[slot] = v
      end
    end
    local write = inplace and r[#names]
    if write ~= nil and type(write) ~= "boolean" then fail(op .. ": inplace expected a boolean, got " .. type(write)) end
    local y = fn(unpack(r, 1, n))
    if not write then return y end
    return y == r[1] and y or r[1]:copy_(y)
  end
end
for name, names in pairs(KEYWORDS) do F[name] = keywords(name, names, F[name]) end
F._keywords = keywords  -- (crescent.nn_init's initialisers take them so too)

-- losses (crescent.losses): cross_entropy, nll_loss, mse_loss, l1_loss, smooth_l1_loss,
-- binary_cross_entropy, binary_cross_entropy_with_logits, kl_div
local losses = require "crescent.losses"
losses.check_opts = check_opts
for name, fn in pairs(losses) do
  if name ~= "bind" and name ~= "check_opts" then F[name] = fn end
end

return F
