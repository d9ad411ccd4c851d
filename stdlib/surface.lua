-- crescent.surface: PyTorch's data ops that are compositions of registry ops (API.md section
-- 10): each is T.op and x:op, differentiable, compiled and run on CUDA through the ops it is
-- made of (as PyTorch's CompositeImplicitAutograd ops). Index-valued inputs and results are
-- 1-based; data-dependent sizes (unique, bincount) are sync points or graph breaks (Recorder::data_size).
local core = require "crescent.core"
local indexing = require "crescent.indexing"
local fail, is_tensor, is_opts = core.fail, core.is_tensor, require("crescent.binding").is_opts
local unpack = unpack or table.unpack
local A = require "crescent.surface_args"
local describe, check_tensor, opts_of, dim0, is_float = A.describe, A.check_tensor, A.opts_of, A.dim0, A.is_float

local S = {}  -- name -> function(x, ...), bound as T.name and x:name
local T

local function sizes_of(...)
  local a = ...
  if type(a) == "table" and not is_tensor(a) then return a end
  return { ... }
end
local function long(x, values) return T.tensor(values, { dtype = "int64", device = x and x.device or nil }) end

-- where / nonzero / sort ----------------------------------------------------------------------
local where3, index_put_, nonzero1, sort2, bincount1, registry
-- one index tensor per dim; a 0-d x gives one, as PyTorch's (its nonzero of x as a 1-element vector)
local function nonzero_columns(x) return indexing.columns(nonzero1(x:dim() == 0 and x:reshape(1) or x)) end
function S.where(cond, a, b)
  if a == nil and b == nil then
    check_tensor("where", 1, "condition", cond)
    return nonzero_columns(cond)
  end
  return where3(cond, a, b)
end
function S.nonzero(x, opts)
  opts = opts_of("nonzero", opts, { as_tuple = true })
  if opts.as_tuple then
    check_tensor("nonzero", 1, "self", x)
    return nonzero_columns(x)
  end
  return nonzero1(x)
end

-- sort(x[, dim[, descending | {descending =}]]) and sort(x, {dim =, descending =})
function S.sort(x, dim, desc)
  if is_opts(dim) then dim, desc = dim.dim, dim.descending
  elseif is_opts(desc) then desc = opts_of("sort", desc, { descending = true, stable = true }).descending end
  return sort2(x, dim, desc)
end
function S.argsort(x, dim, desc)
  local _, i = S.sort(x, dim, desc)
  return i
end

-- reordering ---------------------------------------------------------------------------------
function S.flip(x, ...)
  local dims, seen = sizes_of(...), {}
  for _, d in ipairs(dims) do
    local k = dim0("flip", x, d) + 1
    if seen[k] then fail(string.format("flip: dim %d appears multiple times in the list of dims", k)) end
    seen[k] = true
  end
  for _, d in ipairs(dims) do
    local k = dim0("flip", x, d) + 1
    local n = x:dim() == 0 and 1 or x:size(k)
    if n > 1 then x = x:index_select(k, T.arange(n, 0, -1, { dtype = "int64", device = x.device })) end
  end
  return x
end

-- roll(x, shifts[, dims]): without dims, over the flattened tensor
function S.roll(x, shifts, dims)
  if dims == nil then
    if type(shifts) == "table" and #shifts ~= 1 then fail("roll: shifts expected one number when dims is not given") end
    return S.roll(x:flatten(), shifts, 1):view(x.shape)
  end
  shifts = type(shifts) == "table" and shifts or { shifts }
  dims = type(dims) == "table" and dims or { dims }
  if #shifts ~= #dims then
    fail(string.format("roll: shifts (%d) and dims (%d) expected the same length", #shifts, #dims))
  end
  for j, d in ipairs(dims) do
    local k = dim0("roll", x, d) + 1
    local n = x:size(k)
    local s = n > 0 and shifts[j] % n or 0
    if s ~= 0 then x = T.cat({ x:narrow(k, n - s + 1, s), x:narrow(k, 1, n - s) }, k) end
  end
  return x
end

-- tile(x, reps...): reps padded with leading 1s; x["repeat"] requires as many reps as dims
function S.tile(x, ...)
  local reps = sizes_of(...)
  local nd = math.max(#reps, x:dim())
  local shape, big, final = {}, {}, {}
  for j = 1, nd do
    local r = reps[#reps - nd + j] or 1
    local s = x.shape[x:dim() - nd + j] or 1
    if type(r) ~= "number" or r < 0 or r ~= math.floor(r) then
      fail("tile: repetitions expected non-negative integers, got " .. tostring(r))
    end
    shape[#shape + 1] = 1; shape[#shape + 1] = s
    big[#big + 1] = r; big[#big + 1] = s
    final[j] = r * s
  end
  return x:reshape(shape):expand(big):reshape(final)
end
S["repeat"] = function(x, ...)
  local reps = sizes_of(...)
  if #reps < x:dim() then
    fail(string.format("repeat: the number of repetitions (%d) can not be smaller than the number of dims (%d)", #reps, x:dim()))
  end
  return S.tile(x, reps)
end

-- repeat_interleave(x, repeats[, dim]): repeats a number or a 1-D tensor of counts
function S.repeat_interleave(x, repeats, dim)
  if repeats == nil and is_tensor(x) then  -- repeat_interleave(repeats): positions 1..n, each repeats[i] times
    if x:dim() ~= 1 then fail("repeat_interleave: repeats expected a 1-D tensor, got " .. describe(x)) end
    return S.repeat_interleave(T.arange(1, x:numel() + 1, { dtype = "int64", device = x.device }), x, 1)
  end
  if dim == nil then x, dim = x:flatten(), 1 end
  local k = dim0("repeat_interleave", x, dim) + 1
  if type(repeats) == "number" then
    if repeats < 0 or repeats ~= math.floor(repeats) then fail("repeat_interleave: repeats must be non-negative, got " .. repeats) end
    local big = x.shape
    table.insert(big, k + 1, repeats)
    local final = x.shape
    final[k] = final[k] * repeats
    return x:unsqueeze(k + 1):expand(big):reshape(final)
  end
  check_tensor("repeat_interleave", 2, "repeats", repeats)
  if repeats.dtype ~= "int64" and repeats.dtype ~= "int32" then
    fail("repeat_interleave: repeats has to be an int64 or int32 tensor, got " .. describe(repeats))
  end
  local n = x:size(k)
  if repeats:dim() == 0 then repeats = repeats:reshape(1):expand(n) end
  if repeats:dim() ~= 1 or repeats:numel() ~= n then
    fail(string.format("repeat_interleave: repeats must have the same size as input along dim, got %d and %d", repeats:numel(), n))
  end
  if n > 0 and core.ctx.capturing ~= 0 then
    core.need(repeats, "repeat_interleave: the result size depends on the repeats' values (give a number)")
  end
  if n > 0 and repeats:min():item() < 0 then fail("repeat_interleave: repeats can not be negative, got " .. repeats:min():item()) end
  -- position j of the result takes the last group whose start is <= j (an empty group starts where
  -- the next one does): the count of starts <= j, a cumsum of the starts' marks, all on x's device
  local ends = repeats:long():cumsum(1)
  local total = n > 0 and ends[n]:item() or 0
  local marks = T.zeros(total + 1, { dtype = "int64", device = x.device })
  marks:index_add_(1, ends - repeats + 1, T.ones(n, { dtype = "int64", device = x.device }))
  return x:index_select(k, marks:narrow(1, 1, total):cumsum(1))
end

-- creation like x ------------------------------------------------------------------------------
local function like_opts(op, x, opts)
  check_tensor(op, 1, "self", x)
  opts = opts_of(op, opts, { dtype = true, device = true })
  return { dtype = opts.dtype or x.dtype, device = opts.device or x.device }
end
function S.full_like(x, v, opts) return T.full(x.shape, v, like_opts("full_like", x, opts)) end
function S.rand_like(x, opts) return T.rand(x.shape, like_opts("rand_like", x, opts)) end
function S.randn_like(x, opts) return T.randn(x.shape, like_opts("randn_like", x, opts)) end
-- norm(x[, dim[, keepdim]][, {p =}]), and torch's order with a string order first:
-- x:norm("fro"[, dim[, keepdim]]) (a number first stays the dim)
local norm3
function S.norm(x, dim, keepdim, opts)
  if type(dim) == "string" then return norm3(x, keepdim, opts, { p = dim }) end
  return norm3(x, dim, keepdim, opts)
end
-- randint([low = 0,] high, size[, opts]): torch's two forms (a size is a list, {} included)
local randint3
function S.randint(low, high, size, opts)
  if type(high) == "table" and not is_tensor(high) and (next(high) == nil or type(next(high)) == "number")
    and (size == nil or is_opts(size)) and opts == nil then
    return randint3(0, low, high, size)
  end
  return randint3(low, high, size, opts)
end
-- randint_like(x, [low,] high[, opts])
function S.randint_like(x, low, high, opts)
  if high == nil or type(high) == "table" then low, high, opts = 0, low, high end
  return T.randint(low, high, x.shape, like_opts("randint_like", x, opts))
end
-- randperm(n[, opts]): a random permutation of 1..n (1-based: it is an index); n at most the
-- largest integer up to which the dtype holds every integer (PyTorch checks it too)
local EXACT_UP_TO = { float16 = 2 ^ 11, bfloat16 = 2 ^ 8, float32 = 2 ^ 24, float64 = 2 ^ 53, uint8 = 255, int8 = 127,
                      int16 = 32767, int32 = 2 ^ 31 - 1 }
function S.randperm(n, opts)
  if type(n) ~= "number" or n < 0 or n ~= math.floor(n) then fail("randperm: n expected a non-negative integer, got " .. tostring(n)) end
  opts = opts_of("randperm", opts, { dtype = true, device = true })
  if opts.dtype == "bool" then fail("randperm: expected a numeric dtype, got bool (as torch: not implemented for 'Bool')") end
  local most = EXACT_UP_TO[opts.dtype]
  if most and n > most then
    fail(string.format("randperm: n cannot be greater than %d for %s (its values 1..n must be exact), got %d", most, opts.dtype, n))
  end
  local _, i = T.rand(n, { device = opts.device }):sort(1)
  return opts.dtype and i:to(opts.dtype) or i
end

-- arithmetic with options ------------------------------------------------------------------------
-- div(a, b[, {rounding_mode = "floor" | "trunc"}]): the true quotient, or it rounded down / toward
-- zero in the promoted dtype (integers stay integers), by the registry's _div_floor / _div_trunc
local ROUNDED = { floor = "_div_floor", trunc = "_div_trunc" }
local function rounded(op, opts)
  local mode = opts_of(op, opts, { rounding_mode = true }).rounding_mode
  if mode ~= nil and not ROUNDED[mode] then
    fail(string.format("%s: expected rounding_mode to be one of nil, 'trunc', or 'floor', but found %s", op,
      type(mode) == "string" and "'" .. mode .. "'" or describe(mode)))
  end
  return ROUNDED[mode]
end
function S.div(a, b, opts)
  local r = rounded("div", opts)
  if r then A.check_operand("div", 1, "self", a); A.check_operand("div", 2, "other", b) end  -- (not _div_floor's name)
  return registry[r or "div"].fn(a, b)
end
local CATEGORY = { bool = 0, int32 = 1, int64 = 1 }  -- (floating: 2)
function S.div_(x, y, opts)
  local r = rounded("div_", opts)
  if not r then return registry.div_.fn(x, y) end
  check_tensor("div_", 1, "self", x)
  local q = registry[r].fn(x, y)
  -- (the registry's in-place rule, vm/ops/pointwise.cpp check_result_fits)
  if table.concat(q.shape, ",") ~= table.concat(x.shape, ",") then
    fail(string.format("div_: the result of shape {%s} cannot be written into %s", table.concat(q.shape, ","), describe(x)))
  end
  if (CATEGORY[q.dtype] or 2) > (CATEGORY[x.dtype] or 2) then
    fail(string.format("div_: the result type %s cannot be written into %s", q.dtype, describe(x)))
  end
  return x:copy_(q)
end
-- round(x[, decimals | {decimals =}]): as PyTorch, round(x * 10^d) / 10^d (d < 0: round(x / 10^-d) * 10^-d)
function S.round(x, decimals)
  if is_opts(decimals) then decimals = opts_of("round", decimals, { decimals = true }).decimals end
  if decimals == nil or decimals == 0 then return registry.round.fn(x) end
  if type(decimals) ~= "number" or decimals ~= math.floor(decimals) then
    fail("round: decimals expected an integer, got " .. (type(decimals) == "number" and tostring(decimals) or describe(decimals)))
  end
  check_tensor("round", 1, "self", x)
  if not is_float(x) then fail("round: decimals expected a floating tensor, got " .. describe(x)) end
  local p = 10 ^ math.abs(decimals)
  if decimals > 0 then return registry.round.fn(x * p) / p end
  return registry.round.fn(x / p) * p
end

-- comparison ---------------------------------------------------------------------------------
function S.isclose(a, b, opts)
  opts = opts_of("isclose", opts, { rtol = true, atol = true, equal_nan = true })
  local rtol, atol = opts.rtol or 1e-05, opts.atol or 1e-08
  if is_tensor(a) and is_tensor(b) and a.dtype ~= b.dtype then
    fail(string.format("isclose: expected a and b to have the same dtype, got %s and %s", a.dtype, b.dtype))
  end
  local close = a:eq(b)
  if a.dtype ~= "bool" then
    local fa = (a.dtype == "int64" or a.dtype == "int32") and a:double() or a
    local fb = is_tensor(b) and b:to(fa.dtype) or b
    local tol = is_tensor(fb) and fb:abs() * rtol + atol or math.abs(fb) * rtol + atol
    local finite = fa:isinf():logical_or(is_tensor(fb) and fb:isinf() or math.abs(fb) == math.huge):logical_not()
    close = close:logical_or((fa - fb):abs():le(tol):logical_and(finite))
    if opts.equal_nan then close = close:logical_or(fa:isnan():logical_and(is_tensor(fb) and fb:isnan() or fb ~= fb)) end
  end
  return close
end
function S.allclose(a, b, opts) return S.isclose(a, b, opts):all():item() end
function S.equal(a, b)
  check_tensor("equal", 1, "self", a)
  check_tensor("equal", 2, "other", b)
  if a:dim() ~= b:dim() then return false end
  for j = 1, a:dim() do if a:size(j) ~= b:size(j) then return false end end
  return a:eq(b):all():item()
end
S.clip = function(x, lo, hi) return x:clamp(lo, hi) end
S.clip_ = function(x, lo, hi) return x:clamp_(lo, hi) end

-- diff(x[, n = 1[, dim = -1[, {prepend =, append =}]]])
function S.diff(x, n, dim, opts)
  if is_opts(n) then n, opts = nil, n elseif is_opts(dim) then dim, opts = nil, dim end
  opts = opts_of("diff", opts, { prepend = true, append = true })
  n, dim = n or 1, dim or -1
  local k = dim0("diff", x, dim) + 1
  if opts.prepend or opts.append then
    local parts = {}
    for _, t in ipairs({ opts.prepend or false, x, opts.append or false }) do
      if t then parts[#parts + 1] = t end
    end
    x = T.cat(parts, k)
  end
  for _ = 1, n do
    local len = x:size(k)
    if len == 0 then break end
    local a, b = x:narrow(k, 2, len - 1), x:narrow(k, 1, len - 1)
    x = x.dtype == "bool" and a:logical_xor(b) or a - b
  end
  return x
end

-- index inputs -------------------------------------------------------------------------------
-- take_along_dim(x, index[, dim]): gather with x and index broadcast off dim
function S.take_along_dim(x, index, dim)
  if dim == nil then return x:flatten():gather(1, index:flatten()) end
  local k = dim0("take_along_dim", x, dim) + 1
  if x:dim() ~= index:dim() then fail("take_along_dim: input and indices should have the same number of dimensions") end
  local xs, is = x.shape, index.shape
  for j = 1, x:dim() do
    if j ~= k then
      local s = math.max(xs[j], is[j])
      if (xs[j] ~= s and xs[j] ~= 1) or (is[j] ~= s and is[j] ~= 1) then
        fail(string.format("take_along_dim: shapes {%s} and {%s} cannot be broadcast off dim %d", table.concat(xs, ","), table.concat(is, ","), k))
      end
      xs[j], is[j] = s, s
    end
  end
  return x:expand(xs):gather(k, index:expand(is))
end

-- the x:index entries selecting positions index (a 1-D tensor) along dim k
local function along(x, k, index)
  if not is_tensor(index) or index:dim() > 1 or (index.dtype ~= "int64" and index.dtype ~= "int32") then
    fail("index expected a 0-d or 1-D int64 tensor, got " .. describe(index))
  end
  local e = {}
  for j = 1, k - 1 do e[j] = T.all end
  e[k] = index:reshape(-1)
  return e
end
-- x written through index_put_, whose error would name index_put_, not the op called
local function writable(op, x)
  check_tensor(op, 1, "self", x)
  for j = 1, x:dim() do
    if x:stride(j) == 0 and x:size(j) > 1 then
      fail(string.format("%s: cannot write into an expanded tensor (dim %d has stride 0): clone() it first", op, j))
    end
  end
end
-- put(...) (an index_put_) with its errors naming op, the function called
local function put_for(op, put, ...)
  local ok, r = pcall(put, ...)
  if ok then return r end
  error(type(r) == "string" and r:gsub("index_put_: ", op .. ": ", 1) or r, 0)
end
-- (a 0-d self is written through a 1-element view, as PyTorch takes dim 1 of a 0-d tensor)
local function one_d(x) return x:dim() == 0 and x:view(1) or x end
local function index_copy(op, x, dim, index, src)
  writable(op, x)
  local k = dim0(op, x, dim) + 1
  if src.dtype ~= x.dtype then fail(string.format("%s: source expected self's dtype %s, got %s", op, x.dtype, describe(src))) end
  put_for(op, indexing.index_put_, one_d(x), along(x, k, index), x:dim() == 0 and src:reshape(1) or src)
  return x
end
function S.index_copy_(x, dim, index, src) return index_copy("index_copy_", x, dim, index, src) end
function S.index_copy(x, dim, index, src) return index_copy("index_copy", x:clone(), dim, index, src) end
local function index_fill(op, x, dim, index, value)
  writable(op, x)
  local k = dim0(op, x, dim) + 1
  put_for(op, indexing.index_put_, one_d(x), along(x, k, index), is_tensor(value) and value:to(x.dtype) or value)
  return x
end
function S.index_fill_(x, dim, index, value) return index_fill("index_fill_", x, dim, index, value) end
function S.index_fill(x, dim, index, value) return index_fill("index_fill", x:clone(), dim, index, value) end

-- scatter(x, dim, index, src | value[, {reduce = "add" | "multiply"}]): x[.., index[i], ..] = src[i]
local function coords(op, x, k, index)
  if index:dim() ~= math.max(x:dim(), 1) then
    fail(string.format("%s: index expected as many dims as self {%s}, got %s", op, table.concat(x.shape, ","), describe(index)))
  end
  local list = {}
  for j = 1, index:dim() do
    if j == k then list[j] = index
    else
      if index:size(j) > x:size(j) then
        fail(string.format("%s: index %s is larger than self {%s} in dim %d", op, describe(index), table.concat(x.shape, ","), j))
      end
      local shape = {}
      for m = 1, index:dim() do shape[m] = m == j and index:size(j) or 1 end
      list[j] = T.arange(1, index:size(j) + 1, { dtype = "int64", device = x.device }):view(shape)
    end
  end
  return list
end
local function scatter(op, x, dim, index, src, opts)
  opts = opts_of(op, opts, { reduce = true })
  writable(op, x)
  local k = dim0(op, x, dim) + 1
  if x:dim() == 0 and is_tensor(index) and index:dim() == 0 then  -- (0-d: as its 1-element view)
    scatter(op, x:view(1), 1, index:view(1), is_tensor(src) and src:dim() == 0 and src:view(1) or src, opts)
    return x
  end
  local list = coords(op, x, k, index)
  local v
  if is_tensor(src) then
    if src.dtype ~= x.dtype then fail(string.format("%s: src expected self's dtype %s, got %s", op, x.dtype, describe(src))) end
    v = src
    for j = 1, index:dim() do v = v:narrow(j, 1, index:size(j)) end
  else
    v = T.full({}, src, { dtype = x.dtype, device = x.device })
  end
  if opts.reduce == nil then return put_for(op, index_put_, x, list, v) end
  if opts.reduce == "add" then return put_for(op, index_put_, x, list, v:expand(index.shape):contiguous(), true) end
  fail(op .. ": reduce expected \"add\" (use scatter_reduce for the others), got " .. tostring(opts.reduce))
end
function S.scatter_(x, dim, index, src, opts) return scatter("scatter_", x, dim, index, src, opts) end
function S.scatter(x, dim, index, src, opts) return scatter("scatter", x:clone(), dim, index, src, opts) end

-- positions and grids ------------------------------------------------------------------------
local function tri_indices(op, upper)
  return function(row, col, offset, opts)
    if is_opts(offset) then offset, opts = nil, offset end
    opts = opts_of(op, opts, { dtype = true, device = true })
    offset = offset or 0
    local r, c = {}, {}
    for i = 1, row do
      for j = 1, col do
        if (upper and j - i >= offset) or (not upper and j - i <= offset) then r[#r + 1] = i; c[#c + 1] = j end
      end
    end
    local out = T.tensor({ r, c }, { dtype = opts.dtype or "int64", device = opts.device })
    return #r == 0 and T.zeros(2, 0, { dtype = opts.dtype or "int64", device = opts.device }) or out
  end
end
S.triu_indices, S.tril_indices = tri_indices("triu_indices", true), tri_indices("tril_indices", false)

-- meshgrid(t1, t2, ...[, {indexing = "ij" | "xy"}]) -> one tensor per input
function S.meshgrid(...)
  local ts = { ... }
  if type(ts[1]) == "table" and not is_tensor(ts[1]) and not is_opts(ts[1]) then  -- meshgrid({a, b}[, opts])
    local list = { unpack(ts[1]) }
    list[#list + 1] = ts[2]
    ts = list
  end
  local opts = is_opts(ts[#ts]) and table.remove(ts) or {}
  opts = opts_of("meshgrid", opts, { indexing = true })
  local xy = opts.indexing == "xy"
  if opts.indexing ~= nil and opts.indexing ~= "ij" and not xy then fail("meshgrid: indexing expected \"ij\" or \"xy\", got " .. tostring(opts.indexing)) end
  local n, shape = #ts, {}
  for j, t in ipairs(ts) do
    check_tensor("meshgrid", j, "tensors", t)
    if t:dim() > 1 then fail("meshgrid: expected 0-d or 1-D tensors, got " .. describe(t)) end
    shape[j] = t:numel()
  end
  if xy and n >= 2 then shape[1], shape[2] = shape[2], shape[1] end
  local r = {}
  for j, t in ipairs(ts) do
    local at = j
    if xy and n >= 2 and j <= 2 then at = 3 - j end
    local view = {}
    for m = 1, n do view[m] = m == at and t:numel() or 1 end
    r[j] = t:reshape(view):expand(shape)
  end
  return unpack(r)
end

-- counting -----------------------------------------------------------------------------------
-- bincount(x[, weights[, minlength]]) or bincount(x, {weights =, minlength =}): counts of the
-- values 0..max (data values, not indices); the registry's counting kernel (vm/ops/bincount.cpp)
-- after the arguments' Lua forms
function S.bincount(x, weights, minlength)
  if type(weights) == "number" then weights, minlength = nil, weights
  elseif minlength == nil and is_opts(weights) then
    local o = opts_of("bincount", weights, { weights = true, minlength = true })
    weights, minlength = o.weights, o.minlength
  end
  return bincount1(x, weights, minlength)
end

-- the runs of equal values of a 1-D tensor: where each starts (bool), and their lengths
local function run_starts(v)
  local n = v:numel()
  local first = T.ones(n, { dtype = "bool", device = v.device })
  if n > 1 then first:narrow(1, 2, n - 1):copy_(v:narrow(1, 2, n - 1):ne(v:narrow(1, 1, n - 1))) end
  return first
end
local function run_lengths(first, x)
  local starts = T.nonzero(first):view(-1)
  if starts:numel() == 0 then return starts end
  local after = T.full({ 1 }, first:numel() + 1, { dtype = "int64", device = x.device })
  return T.cat({ starts:narrow(1, 2, starts:numel() - 1), after }, 1) - starts
end

-- unique of integers in a range lo..hi no wider than their number: counted per value (no sort);
-- `counts` of lo..hi from T._value_counts, or (nil) a slot per value and an index_add
local function unique_counted(x, flat, lo, hi, opts, counts)
  local slot
  local function slots()
    slot = slot or flat:long() - (lo - 1)  -- 1-based position of each value in lo..hi
    return slot
  end
  if not counts then
    counts = T.zeros(hi - lo + 1, { dtype = "int64", device = x.device })
      :index_add(1, slots(), T.ones(1, { dtype = "int64", device = x.device }):expand(flat:numel()))
  end
  local present = counts:gt(0)
  local r = { (T.nonzero(present):view(-1) + (lo - 1)):to(x.dtype) }
  if opts.return_inverse then r[#r + 1] = present:long():cumsum(1):index_select(1, slots()):view(x.shape) end
  if opts.return_counts then r[#r + 1] = counts:masked_select(present) end
  return unpack(r)
end

-- unique(x[, {sorted =, return_inverse =, return_counts =, dim =}]) -> values[, inverse][, counts]
function S.unique(x, opts)
  opts = opts_of("unique", opts, { sorted = true, return_inverse = true, return_counts = true, dim = true })
  if opts.dim ~= nil then return S.unique_dim(x, opts) end
  local flat = x:flatten()
  if (x.dtype == "int64" or x.dtype == "int32") and flat:numel() > 0 then
    if not opts.return_inverse then  -- (counted and compacted in one op)
      local values, counts = T._unique_counted(flat)
      if values:numel() > 0 then
        if opts.return_counts then return values, counts end
        return values
      end
    end
    -- (compiled: the range read below would be a graph break, where the sort's selections are
    -- sync points with dynamic = true)
    if core.ctx.capturing == 0 then
      local counts, range = T._value_counts(flat)  -- (one pass over the values: their range, the counts)
      local lo, hi = unpack(range:totable())
      if hi - lo < flat:numel() and math.abs(lo) < 2 ^ 53 and math.abs(hi) < 2 ^ 53 then
        return unique_counted(x, flat, lo, hi, opts, counts:numel() > 0 and counts or nil)
      end
    end
  end
  local s, perm = flat:sort(1)
  local n = s:numel()
  local first = run_starts(s)
  local values = s:masked_select(first)
  local r = { values }
  if opts.return_inverse then
    local group = first:long():cumsum(1)  -- 1-based group of each sorted element
    r[#r + 1] = T.zeros(n, { dtype = "int64", device = x.device }):scatter_(1, perm, group):view(x.shape)
  end
  if opts.return_counts then r[#r + 1] = run_lengths(first, x) end
  return unpack(r)
end
-- Dense 0-based ranks of the values of each column of keys {n, c}, as whole-tensor ops: equal
-- values share a rank, and NaN counts as equal to NaN here (sort puts them last, tied).
local function column_ranks(keys)
  local n = keys:size(1)
  local s, o = keys:sort(1)
  local step = T.zeros(keys.shape, { dtype = "int64", device = keys.device })
  if n > 1 then
    local a, b = s:narrow(1, 2, n - 1), s:narrow(1, 1, n - 1)
    local differ = a:ne(b)
    if keys.dtype ~= "int64" then differ = differ:logical_and(a:isnan():logical_and(b:isnan()):logical_not()) end
    step:narrow(1, 2, n - 1):copy_(differ)
  end
  return T.zeros(keys.shape, { dtype = "int64", device = keys.device }):scatter_(1, o, step:cumsum(1))
end
-- The rows of keys {n, c} ranked in lexicographic order (one rank per row, equal rows share it) by
-- prefix doubling: the ranks of adjacent column pairs combine into one key (a * n + b < n^2), so
-- ceil(log2 c) + 1 rounds of whole-tensor sorts, never one op per column.
local function row_ranks(keys)
  local n, c = keys:size(1), keys:size(2)
  if c == 0 or n == 0 then return T.zeros(n, { dtype = "int64", device = keys.device }) end
  if n > 3037000499 then fail("unique: dim = expects fewer than 3037000500 slices, got " .. n) end
  local r = column_ranks(keys)
  while c > 1 do
    local h = math.floor(c / 2)
    local ab = r:narrow(2, 1, 2 * h):reshape(n, h, 2)
    local joined = ab:select(3, 1) * n + ab:select(3, 2)
    if c % 2 == 1 then joined = T.cat({ joined, r:narrow(2, c, 1) }, 2) end
    r, c = column_ranks(joined), h + c % 2
  end
  return r:view(n)
end

-- unique along a dim: the distinct slices in lexicographic order, all on x's device: a stable
-- sort of the rows' lexicographic ranks orders them (ties keep their order), then the rows that
-- differ from the one before start the groups
function S.unique_dim(x, opts)
  local k = dim0("unique", x, opts.dim) + 1
  local m = x:transpose(1, k)
  local n = m:size(1)
  local rows = m:reshape(n, n > 0 and math.floor(m:numel() / n) or 0)
  local keys = rows  -- sorted as float32 / float64 / int64 (order-preserving widenings)
  if keys.dtype == "float16" or keys.dtype == "bfloat16" then keys = keys:float()
  elseif keys.dtype ~= "float32" and keys.dtype ~= "float64" and keys.dtype ~= "int64" then keys = keys:long() end
  local _, perm = row_ranks(keys):sort(1)
  local sorted = keys[perm]
  local first = T.ones(n, { dtype = "bool", device = x.device })
  if n > 1 and rows:size(2) > 0 then  -- (rows of no elements are all equal)
    first:narrow(1, 2, n - 1):copy_(sorted:narrow(1, 2, n - 1):ne(sorted:narrow(1, 1, n - 1)):any(2))
  elseif n > 1 then
    first:narrow(1, 2, n - 1):fill_(false)
  end
  local r = { m[perm[first]]:transpose(1, k) }
  if opts.return_inverse then
    r[#r + 1] = T.zeros(n, { dtype = "int64", device = x.device }):scatter_(1, perm, first:long():cumsum(1))
  end
  if opts.return_counts then r[#r + 1] = run_lengths(first, x) end
  return unpack(r)
end


-- random -----------------------------------------------------------------------------------------
local function bshape(a, b)
  local r, n = {}, math.max(#a, #b)
  for i = 1, n do
    local p, q = a[#a - n + i] or 1, b[#b - n + i] or 1
    if p ~= q and p ~= 1 and q ~= 1 then
      fail(string.format("normal: mean {%s} and std {%s} cannot be broadcast", table.concat(a, ","), table.concat(b, ",")))
    end
    r[i] = p == 1 and q or p
  end
  return r
end
-- bernoulli(p): 1 with probability p (a tensor of probabilities in [0, 1]), else 0; bernoulli(x,
-- p): x's shape and dtype, with the number p for every element
function S.bernoulli(x, p)
  check_tensor("bernoulli", 1, "self", x)
  if is_opts(p) then p = opts_of("bernoulli", p, { p = true }).p end  -- (torch's p =)
  if p ~= nil then
    if type(p) ~= "number" or not (p >= 0 and p <= 1) then fail("bernoulli: expected p in [0, 1], got " .. tostring(p)) end
    return x:clone():bernoulli_(p)
  end
  if x:ge(0):logical_and(x:le(1)):logical_not():any():item() then fail("bernoulli: expected all probabilities in [0, 1]") end
  return T.rand(x.shape, { dtype = x.dtype == "float64" and "float64" or "float32", device = x.device }):lt(x):to(x.dtype)
end
-- normal(mean, std[, size[, opts]]): mean and std tensors or numbers (numbers: size needed)
function S.normal(mean, std, size, opts)
  std = std or 1
  if is_tensor(std) and std:ge(0):logical_not():any():item() or (type(std) == "number" and not (std >= 0)) then
    fail("normal: expected std >= 0")
  end
  local like = is_tensor(mean) and mean or (is_tensor(std) and std or nil)
  local shape
  if like then
    shape = bshape(is_tensor(mean) and mean.shape or {}, is_tensor(std) and std.shape or {})
  else
    if size == nil then fail("normal: with numbers for mean and std, expected a size") end
    shape = size
  end
  opts = opts_of("normal", opts, { dtype = true, device = true })
  local dtype = opts.dtype or (like and like.dtype) or "float32"
  if not (dtype:find("float") or dtype == "bfloat16") then fail("normal: expected a floating mean / std / dtype, got " .. dtype) end
  return T.randn(shape, { dtype = dtype, device = opts.device or (like and like.device) or nil }) * std + mean
end

-- unique_consecutive along dim k: runs of equal slices; the inverse has x:size(k) entries
local function unique_consecutive_dim(x, k, opts)
  local n = x:size(k)
  local first = T.ones(n, { dtype = "bool", device = x.device })
  if n > 1 then
    local differ = x:narrow(k, 2, n - 1):ne(x:narrow(k, 1, n - 1))
    if differ:dim() > 1 then differ = differ:movedim(k, 1):flatten(2):any(2) end
    first:narrow(1, 2, n - 1):copy_(differ)
  end
  local r = { x:index_select(k, T.nonzero(first):view(-1)) }
  if opts.return_inverse then r[#r + 1] = first:long():cumsum(1) end
  if opts.return_counts then r[#r + 1] = run_lengths(first, x) end
  return unpack(r)
end

-- unique_consecutive(x[, {return_inverse =, return_counts =, dim =}]): runs of equal values
-- (flattened), or of equal slices along dim
function S.unique_consecutive(x, opts)
  opts = opts_of("unique_consecutive", opts, { return_inverse = true, return_counts = true, dim = true })
  if opts.dim ~= nil then return unique_consecutive_dim(x, dim0("unique_consecutive", x, opts.dim) + 1, opts) end
  local flat = x:flatten()
  local n = flat:numel()
  local first = run_starts(flat)
  local r = { flat:masked_select(first) }
  if opts.return_inverse then r[#r + 1] = first:long():cumsum(1):view(x.shape) end
  if opts.return_counts then r[#r + 1] = run_lengths(first, x) end
  return unpack(r)
end


-- scans by doubling (Hillis-Steele): log2(n) steps of one op over x and x shifted by 2^k along
-- the dim, so they are registry ops (differentiable, compiled) and need no kernel of their own
local function shifted(x, k, s, fill)
  local n = x:size(k)
  local pad = T.full_like(x:narrow(k, 1, s), fill)
  return T.cat({ pad, x:narrow(k, 1, n - s) }, k)
end
-- cumprod(x, dim[, {dtype =}]): x cast to dtype first (as cumsum); bool and int32 give int64
function S.cumprod(x, dim, opts)
  opts = opts_of("cumprod", opts, { dtype = true })
  local k = dim0("cumprod", x, dim) + 1
  if opts.dtype then x = x:to(opts.dtype) end
  if x:dim() == 0 then return x:clone() end
  if not opts.dtype and (x.dtype == "bool" or x.dtype == "int32") then x = x:long() end
  local s = 1
  while s < x:size(k) do
    x = x * shifted(x, k, s, 1)
    s = s * 2
  end
  return x
end
-- cummax / cummin(x, dim) -> values, indices (1-based: the last position of the extreme so far;
-- a NaN wins from where it is, as in PyTorch)
local function cumextreme(op, better)
  return function(x, dim)
    local k = dim0(op, x, dim) + 1
    if x:dim() == 0 then return x:clone(), T.ones({}, { dtype = "int64", device = x.device }) end
    local n = x:size(k)
    local shape = {}
    for j = 1, x:dim() do shape[j] = j == k and n or 1 end
    local v, i = x, T.arange(1, n + 1, { dtype = "int64", device = x.device }):view(shape):expand(x.shape)
    local s = 1
    while s < n do
      local sv, si = v:narrow(k, 1, n - s), i:narrow(k, 1, n - s)
      local cur, ci = v:narrow(k, s + 1, n - s), i:narrow(k, s + 1, n - s)
      local take = better(sv, cur)
      if x.dtype:find("float") then take = take:logical_or(sv:isnan():logical_and(cur:isnan():logical_not())) end
      v = T.cat({ v:narrow(k, 1, s), T.where(take, sv, cur) }, k)
      i = T.cat({ i:narrow(k, 1, s), T.where(take, si, ci) }, k)
      s = s * 2
    end
    return v, i
  end
end
S.cummax = cumextreme("cummax", function(a, b) return a:gt(b) end)
S.cummin = cumextreme("cummin", function(a, b) return a:lt(b) end)

-- For searchsorted with long sequences: how many entries of each line of sorted come before each
-- value of its line, by one stable sort of both together (the values ahead of equal entries, or
-- after them for right), O((m + n) log) rather than the m * n of a comparison; NaN sorts last, so
-- a NaN value is past every number, as in PyTorch's binary search.
local function merged_rank(sorted, values, right)
  local m = sorted:size(-1)
  local s = sorted:reshape(-1, m)
  local v = values:reshape(s:size(1), -1)
  local k = v:size(2)
  local _, perm = T.cat(right and { s, v } or { v, s }, 2):sort(2)
  local before = (right and perm:le(m) or perm:gt(k)):long():cumsum(2)  -- entries placed so far
  local at = T.zeros(s:size(1), m + k, { dtype = "int64", device = s.device }):scatter_(2, perm, before)
  return at:narrow(2, right and m + 1 or 1, k):reshape(values.shape)
end

-- searchsorted(sorted, values[, {right = false}]): 1-based insertion positions (torch's + 1) along
-- the last dim of sorted; bucketize(values, boundaries[, {right =}]) the same with 1-D boundaries
function S.searchsorted(sorted, values, opts)
  opts = opts_of("searchsorted", opts, { right = true, side = true })
  local right = opts.right or opts.side == "right"
  check_tensor("searchsorted", 1, "sorted_sequence", sorted)
  if not is_tensor(values) then values = T.full({}, values, { dtype = sorted.dtype, device = sorted.device }) end
  local lead = sorted:dim() > 1 and sorted:dim() == values:dim()
  for j = 1, sorted:dim() - 1 do lead = lead and sorted:size(j) == values:size(j) end
  if sorted:dim() > 1 and not lead then
    fail(string.format("searchsorted: sorted_sequence expected 1 dim or the leading dims of values, got {%s} and {%s}",
      table.concat(sorted.shape, ","), table.concat(values.shape, ",")))
  end
  local m = sorted:dim() == 0 and 1 or sorted:size(-1)
  if m > 32 and sorted.dtype == values.dtype and values:numel() > 0 then return merged_rank(sorted, values, right) + 1 end
  -- PyTorch's binary search counts the entries s with not (s >= v) (right: not (s > v)): a NaN
  -- value is past every entry
  local s = sorted:dim() == 1 and sorted or sorted:unsqueeze(-2)
  local after = right and s:gt(values:unsqueeze(-1)) or s:ge(values:unsqueeze(-1))
  return after:logical_not():sum(-1) + 1
end
function S.bucketize(values, boundaries, opts)
  if not is_tensor(boundaries) or boundaries:dim() ~= 1 then fail("bucketize: boundaries expected a 1-D tensor, got " .. describe(boundaries)) end
  return S.searchsorted(boundaries, values, opts_of("bucketize", opts, { right = true }))
end

local method_only = { unfold = true }  -- (Tensor.unfold; T.F.unfold is im2col)
local function_only = { randperm = true, randint = true, triu_indices = true, tril_indices = true, meshgrid = true, normal = true,
  where = true, einsum = true }  -- (x:where(cond, y) is torch's, with x the values: not T.where's order)
-- fn refusing an argument past its last parameter (as the registry ops' wrappers do,
-- crescent.binding): Lua would drop it, and with it a misspelt or unsupported option
local extra_arg = require("crescent.binding").extra_arg
local function strict(name, fn)
  local info = debug.getinfo(fn, "u")
  if info.isvararg then return fn end
  local n = info.nparams
  return function(...)
    if select("#", ...) > n and select(n + 1, ...) ~= nil then extra_arg(name, n, (select(n + 1, ...))) end
    return fn(...)
  end
end

function S.bind(t, methods, ops)
  T = t
  for _, name in ipairs({ "crescent.surface_more", "crescent.surface_linalg", "crescent.surface_views", "crescent.einsum" }) do
    local more = require(name)
    more.bind(t, ops)
    for k, fn in pairs(more) do if k ~= "bind" then S[k] = fn end end
  end
  where3, nonzero1, sort2, index_put_ = ops.where.fn, ops.nonzero.fn, ops.sort.fn, ops.index_put_.fn
  randint3, norm3 = T.randint, ops.norm.fn
  bincount1, registry = ops.bincount.fn, ops
  for name, fn in pairs(S) do
    if name ~= "bind" and name ~= "unique_dim" then
      fn = strict(name, fn)
      if not name:match("_$") and not method_only[name] then T[name] = fn end  -- (in-place forms: methods only)
      if not function_only[name] then methods[name] = fn end
    end
  end
  T.F.one_hot = T.F.one_hot or S.one_hot  -- (crescent.surface_more)
end

return S
