-- crescent.surface_linalg: PyTorch's linear-algebra and order-statistic ops made of registry ops,
-- bound with crescent.surface's (same conventions: T.op and x:op, differentiable and compiled
-- through the ops they are made of, 1-based index results): rot90, outer, dot, addmm, addmv,
-- baddbmm, mv, var_mean, std_mean, count_nonzero, nan_to_num, msort, nansum, nanmean, kthvalue,
-- median, nanmedian, quantile, nanquantile.
local fail = require("crescent.core").fail
local A = require "crescent.surface_args"
local describe, check_tensor, opts_of, dim0, is_float = A.describe, A.check_tensor, A.opts_of, A.dim0, A.is_float
local is_opts = require("crescent.binding").is_opts
local is_tensor = require("crescent.core").is_tensor

local M = {}  -- name -> function, bound by crescent.surface
local T

-- rot90(x[, k = 1[, dims = {1, 2}]]): k quarter turns from the first dim towards the second
function M.rot90(x, k, dims)
  k, dims = (k or 1) % 4, dims or { 1, 2 }
  if #dims ~= 2 then fail("rot90: dims expected two dims, got " .. #dims) end
  local a, b = dim0("rot90", x, dims[1]) + 1, dim0("rot90", x, dims[2]) + 1
  if a == b then fail("rot90: dims expected two different dims, got " .. dims[1] .. " and " .. dims[2]) end
  if k == 1 then return T.flip(x, b):transpose(a, b) end
  if k == 2 then return T.flip(x, a, b) end
  if k == 3 then return T.flip(x, a):transpose(a, b) end
  return x:clone()
end
local function vectors(op, a, b)
  check_tensor(op, 1, "self", a)
  check_tensor(op, 2, "other", b)
  if a:dim() ~= 1 or b:dim() ~= 1 then fail(string.format("%s: expected 1-D tensors, got %s and %s", op, describe(a), describe(b))) end
end
function M.outer(a, b)
  vectors("outer", a, b)
  return a:unsqueeze(2) * b:unsqueeze(1)
end
function M.dot(a, b)
  vectors("dot", a, b)
  if a.dtype ~= b.dtype then fail(string.format("dot: expected both vectors to have the same dtype, got %s and %s", a.dtype, b.dtype)) end
  if a.dtype == "bool" then fail("dot: not implemented for bool tensors") end
  if a:numel() ~= b:numel() then
    fail(string.format("dot: inconsistent tensor size, expected tensor [%d] and src [%d] to have the same number of elements", a:numel(), b:numel()))
  end
  return (a * b):sum({ dtype = a.dtype })  -- (int32 stays int32, as torch's)
end
-- beta * input + alpha * product (beta = 0: input is ignored, NaNs included, as PyTorch)
local function scaled_sum(op, input, product, opts)
  opts = opts_of(op, opts, { beta = true, alpha = true })
  check_tensor(op, 1, "input", input)
  if input.dtype ~= product.dtype then
    fail(string.format("%s: input expected the product's dtype %s, got %s", op, product.dtype, describe(input)))
  end
  local ok = input:dim() <= product:dim()  -- input broadcasts to the product's shape, not past it
  for j = 1, ok and input:dim() or 0 do
    local s = input:size(-j)
    ok = ok and (s == 1 or s == product:size(-j))
  end
  if not ok then
    fail(string.format("%s: input of shape {%s} cannot be broadcast to the product's shape {%s}", op,
      table.concat(input.shape, ","), table.concat(product.shape, ",")))
  end
  local beta, alpha = opts.beta or 1, opts.alpha or 1
  if alpha ~= 1 then product = product * alpha end
  if beta == 0 then  -- (an input requiring grad stays in the graph, its gradient zeros, as torch)
    local none = input.requires_grad and input:masked_fill(T.ones({}, { dtype = "bool", device = input.device }), 0)
    return product + (none or T.zeros_like(input))
  end
  return (beta == 1 and input or input * beta) + product
end
function M.addmm(input, a, b, opts) return scaled_sum("addmm", input, T.mm(a, b), opts) end
function M.addmv(input, m, v, opts)
  if m:dim() ~= 2 or v:dim() ~= 1 then fail(string.format("addmv: expected a matrix and a vector, got %s and %s", describe(m), describe(v))) end
  return scaled_sum("addmv", input, T.matmul(m, v), opts)
end
function M.baddbmm(input, a, b, opts) return scaled_sum("baddbmm", input, T.bmm(a, b), opts) end

-- mv(m, v): the matrix-vector product
function M.mv(m, v)
  check_tensor("mv", 1, "self", m)
  check_tensor("mv", 2, "vec", v)
  if m:dim() ~= 2 or v:dim() ~= 1 then fail(string.format("mv: expected a matrix and a vector, got %s and %s", describe(m), describe(v))) end
  return T.matmul(m, v)
end
-- var_mean / std_mean(x[, dim[, keepdim]][, {correction =, unbiased =}]): var (std) and mean
-- over the same dims, as two results
local function spread_mean(op, x, dim, keepdim, opts)
  check_tensor(op .. "_mean", 1, "self", x)
  if is_opts(dim) then dim, opts = nil, dim elseif is_opts(keepdim) then keepdim, opts = nil, keepdim end
  local spread = dim == nil and x[op](x, opts) or x[op](x, dim, keepdim, opts)
  return spread, dim == nil and x:mean() or x:mean(dim, keepdim)
end
function M.var_mean(x, dim, keepdim, opts) return spread_mean("var", x, dim, keepdim, opts) end
function M.std_mean(x, dim, keepdim, opts) return spread_mean("std", x, dim, keepdim, opts) end
-- count_nonzero(x[, dim]): the number of nonzero elements (over dim, a dim or a list), int64
function M.count_nonzero(x, dim)
  check_tensor("count_nonzero", 1, "self", x)
  if dim == nil then return x:ne(0):sum() end
  return x:ne(0):sum(dim)
end

-- nan_to_num(x[, nan = 0[, posinf[, neginf]]]) (or {nan =, posinf =, neginf =}): NaN and the
-- infinities replaced, the infinities by default by the dtype's largest and lowest finite values
local FINITE = { float32 = 3.4028234663852886e38, float64 = 1.7976931348623157e308, float16 = 65504,
  bfloat16 = 3.3895313892515355e38 }
function M.nan_to_num(x, nan, posinf, neginf)
  check_tensor("nan_to_num", 1, "self", x)
  if is_opts(nan) then
    local o = opts_of("nan_to_num", nan, { nan = true, posinf = true, neginf = true })
    nan, posinf, neginf = o.nan, o.posinf, o.neginf
  end
  for i, v in ipairs({ nan or 0, posinf or 0, neginf or 0 }) do
    if type(v) ~= "number" then fail(string.format("nan_to_num: argument %d expected a number, got %s", i + 1, describe(v))) end
  end
  local big = FINITE[x.dtype]
  if not big then return x:clone() end  -- (integers and bools hold no NaN or infinity)
  local r = T.where(x:isnan(), nan or 0, x)
  r = T.where(r:eq(math.huge), posinf or big, r)
  return T.where(r:eq(-math.huge), neginf or -big, r)
end
function M.nan_to_num_(x, ...) return x:copy_(M.nan_to_num(x, ...)) end
-- msort(x): x sorted along its first dim (the values)
function M.msort(x)
  check_tensor("msort", 1, "self", x)
  return (x:sort(1))
end

-- nansum / nanmean(x[, dim[, keepdim]]): NaNs count as absent
function M.nansum(x, dim, keepdim)
  local z = x:isnan():logical_not()
  return T.where(z, x, 0):sum(dim, keepdim)
end
function M.nanmean(x, dim, keepdim)
  if not (x.dtype:find("float") or x.dtype == "bfloat16") then fail("nanmean: expected a floating tensor, got " .. describe(x)) end
  return M.nansum(x, dim, keepdim) / x:isnan():logical_not():sum(dim, keepdim):to(x.dtype)
end
-- kthvalue(x, k[, dim = -1[, keepdim]]) -> values, indices (1-based)
function M.kthvalue(x, k, dim, keepdim)
  dim = dim or -1
  local d = dim0("kthvalue", x, dim) + 1
  local n = x:dim() == 0 and 1 or x:size(d)
  if type(k) ~= "number" or k < 1 or k > n or k ~= math.floor(k) then fail(string.format("kthvalue: k expected 1..%d, got %s", n, tostring(k))) end
  local v, i = x:sort(d)
  if x:dim() == 0 then return v, i end
  v, i = v:narrow(d, k, 1), i:narrow(d, k, 1)
  if not keepdim then v, i = v:squeeze(d), i:squeeze(d) end
  return v, i
end
-- The median of f (1-D) given its value v, with the gradient split evenly between the elements
-- equal to it (the NaNs for NaN), as PyTorch's: the max (or, for -inf, the min) over them, the
-- rest masked beyond it
local function spread(f, v)
  local hit = f:eq(v):logical_or(f:isnan():logical_and(v:isnan()))
  return T.where(v:eq(-math.huge), T.where(hit, f, math.huge):min(), T.where(hit, f, -math.huge):max())
end
local function empty_median(op, x)  -- (PyTorch: NaN; an integer tensor has none to give)
  if is_float(x) then return T.full({}, 0 / 0, { dtype = x.dtype, device = x.device }) end
  fail(op .. ": an empty " .. x.dtype .. " tensor has no median")
end

-- median(x[, dim[, keepdim]]): the lower median; NaN when a NaN is among the values (as torch)
function M.median(x, dim, keepdim)
  check_tensor("median", 1, "self", x)
  if x.dtype == "bool" then fail("median: not implemented for bool tensors, got " .. describe(x)) end
  if dim == nil then
    local f = x:flatten()
    if f:numel() == 0 then return empty_median("median", x) end
    local v = M.kthvalue(f, math.floor((f:numel() - 1) / 2) + 1, 1)
    if not is_float(x) then return v end
    return spread(f, T.where(f:isnan():any(), T.full_like(v, 0 / 0), v):detach())
  end
  local d = dim0("median", x, dim) + 1
  local n = x:dim() == 0 and 1 or x:size(d)
  if n == 0 then fail(string.format("median: expected reduction dim %d to have non-zero size", d)) end
  local v, i = x:sort(d)  -- NaN sorts last: a line holding one has it at the end
  if x:dim() > 0 then
    -- a line with NaN: its first NaN (value, index and gradient), as PyTorch's
    local first_i = x:isnan():int():argmax(d, true)
    local nan = v:narrow(d, n, 1):isnan()
    v = T.where(nan, x:gather(d, first_i), v:narrow(d, math.floor((n - 1) / 2) + 1, 1))
    i = T.where(nan, first_i, i:narrow(d, math.floor((n - 1) / 2) + 1, 1))
    if not keepdim then v, i = v:squeeze(d), i:squeeze(d) end
  end
  return v, i
end
-- nanmedian(x[, dim[, keepdim]]): the lower median of the values that are not NaN (NaN for a line
-- of NaNs only)
function M.nanmedian(x, dim, keepdim)
  check_tensor("nanmedian", 1, "self", x)
  if x.dtype == "bool" then fail("nanmedian: not implemented for bool tensors, got " .. describe(x)) end
  if not is_float(x) then return M.median(x, dim, keepdim) end
  -- the rank of the lower median among the c values that are not NaN (1-based: (c + 1) // 2,
  -- at least 1), read from x sorted along d (NaN last); a count, not item(): one graph compiled
  local function middle(s, d)
    local c = s:isnan():logical_not():sum(d, true)
    return T.div(c + 1, 2, { rounding_mode = "floor" }):clamp(1)
  end
  if dim == nil then
    local f = x:flatten()
    if f:numel() == 0 then return empty_median("nanmedian", x) end
    local s = f:sort(1)
    return spread(f, s:gather(1, middle(s, 1)):reshape({}):detach())
  end
  local d = dim0("nanmedian", x, dim) + 1
  if x:dim() > 0 and x:size(d) == 0 then fail(string.format("nanmedian: expected reduction dim %d to have non-zero size", d)) end
  local v, i = x:sort(d)
  if x:dim() == 0 then return v, i end
  local k = middle(v, d)
  v, i = v:gather(d, k), i:gather(d, k)
  if not keepdim then v, i = v:squeeze(d), i:squeeze(d) end
  return v, i
end

-- quantile / nanquantile(x, q[, dim[, keepdim[, {interpolation =}]]]): at rank q * (n - 1) of the
-- sorted values, PyTorch's modes; q a number or a 1-D tensor (its dim first). quantile: NaN where a
-- NaN is among the values; nanquantile: n counts the values that are not NaN.
local INTERPOLATION = { linear = true, lower = true, higher = true, midpoint = true, nearest = true }
local function quantile(op, skip_nan, x, q, dim, keepdim, opts)
  if is_opts(dim) then dim, opts = nil, dim elseif is_opts(keepdim) then keepdim, opts = nil, keepdim end
  local mode = opts_of(op, opts, { interpolation = true }).interpolation or "linear"
  if not INTERPOLATION[mode] then
    fail(op .. ": interpolation must be one of linear, lower, higher, midpoint or nearest, but got " .. tostring(mode))
  end
  check_tensor(op, 1, "self", x)
  if not is_float(x) then fail(op .. ": expected a float or double tensor, got " .. describe(x)) end
  -- ranks in x's dtype, as PyTorch's (float32 for 16-bit ones)
  local rdt = x.dtype == "float64" and "float64" or "float32"
  local qt = is_tensor(q) and q or T.tensor(q, { dtype = rdt, device = x.device })
  if qt:dim() > 1 then fail(op .. ": q expected a number or a 1-D tensor, got " .. describe(q)) end
  -- (a number q is checked here: no item(), so a compiled quantile keeps its graph)
  local out_of_range = type(q) == "number" and not (q >= 0 and q <= 1)
  if is_tensor(q) then out_of_range = qt:ge(0):logical_and(qt:le(1)):logical_not():any():item() end
  if out_of_range then fail(op .. ": q values must be in the range [0, 1]") end
  if x:numel() == 0 then fail(op .. ": input tensor must be non-empty") end
  local v = dim == nil and x:flatten() or x
  local k = dim == nil and 1 or dim0(op, x, dim) + 1
  if v:dim() == 0 then v = v:reshape(1) end
  local n = v:size(k)
  -- the lines last, one copy per q first: {nq, lines..., n}
  local s = v:sort(k):movedim(k, -1):unsqueeze(1)
  local nq = qt:numel()
  local shape = { nq }
  for j = 2, s:dim() do shape[j] = 1 end
  local qv = qt:reshape(-1):to(rdt):view(shape)
  local ranks
  if skip_nan then  -- (a line of NaNs only: rank 0, a NaN)
    ranks = (qv * (s:isnan():logical_not():sum(-1, true) - 1):to(rdt)):clamp(0)
  else  -- (a line holding a NaN has it last: rank n - 1)
    ranks = T.where(s:narrow(-1, n, 1):isnan(), n - 1, qv * (n - 1))
  end
  if mode == "lower" then ranks = ranks:floor() elseif mode == "higher" then ranks = ranks:ceil()
  elseif mode == "nearest" then ranks = ranks:round() end
  local sizes = { nq }
  for j = 2, s:dim() do sizes[j] = s:size(j) end
  local se = s:expand(sizes)
  local below = ranks:floor()
  local r = se:gather(-1, below:long() + 1)
  if mode == "linear" or mode == "midpoint" then
    local above = se:gather(-1, ranks:ceil():long() + 1)
    r = T.lerp(r, above, mode == "midpoint" and 0.5 or (ranks - below):to(x.dtype))
  end
  r = r:squeeze(-1)  -- {nq, the other dims in order}
  if keepdim then  -- (a 0-d x keeps no dim)
    if dim == nil then
      local ones = {}
      for j = 1, x:dim() do ones[j] = 1 end
      r = r:reshape(nq, unpack(ones))
    elseif x:dim() > 0 then
      r = r:unsqueeze(k + 1)
    end
  end
  if qt:dim() == 0 then r = r:squeeze(1) end
  return r
end
function M.quantile(x, q, dim, keepdim, opts) return quantile("quantile", false, x, q, dim, keepdim, opts) end
function M.nanquantile(x, q, dim, keepdim, opts) return quantile("nanquantile", true, x, q, dim, keepdim, opts) end

function M.bind(t) T = t end

return M
