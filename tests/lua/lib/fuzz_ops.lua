-- The compile fuzzer's op pools (fuzz_gen.lua), drawn from the registry (T._ops: each op's kind
-- and argument schema, and what it does on a probe input) instead of lists written by hand, so a
-- new op is fuzzed as soon as it is registered. Every registry op is in a pool, called by a
-- generator of its own (FORMS, MISC), or in EXCLUDED with the reason; FO.unplaced() lists those
-- in none of them (test_compile_fuzz.lua fails on it).
local T = require "crescent"

local FO = {}
local OPS = T._ops

-- Ops the fuzzer does not generate, each with why (mostly: arguments it cannot make yet).
FO.EXCLUDED = {
  as_strided = "sizes and strides that stay inside the storage: no generator yet",
  _attention = "attention with the rows' logsumexp: test_autograd_ops.lua gradchecks it, "
    .. "test_cuda_attention_grad.lua compares its CUDA gradients with float64",
  _attention_backward = "CUDA only, needs the forward's output and logsumexp: test_cuda_attention_grad.lua "
    .. "checks it through attention's gradient",
  _layer_norm = "needs normalized dims matching the input's last ones and weights of their shape: "
    .. "no generator yet (test_layer_norm.lua compares it with PyTorch, compiled too)",
  _layer_norm_backward = "needs the forward's mean and rstd of matching shapes: no generator yet "
    .. "(test_layer_norm.lua checks it through layer_norm's gradient)",
  _cross_entropy = "needs int64 class indices within the class dim: no generator yet (test_losses.lua "
    .. "compares it with PyTorch)",
  _cross_entropy_backward = "needs the forward's logsumexp and per-position factors: no generator "
    .. "yet (test_losses.lua checks it through cross_entropy's gradient)",
  _binary_cross_entropy = "needs probabilities in [0, 1] (F.binary_cross_entropy checks them): no generator yet "
    .. "(test_losses.lua compares it and its gradients with PyTorch)",
  _binary_cross_entropy_backward = "binary_cross_entropy's gradient: test_losses.lua checks it through "
    .. "binary_cross_entropy's gradient and gradcheck",
  _int8_quantize = "returns packed int8 rows (int32) and scales: test_quant.lua checks every byte",
  _int8_weight_mm = "needs packed int8 rows of the input's last size from _int8_quantize: no generator yet "
    .. "(test_quant.lua compares it with a float64 reference, compiled in test_gpt2.lua)",
  _conv2d_input_grad = "needs a grad_output of the convolution's output size: no generator yet (test_cuda_conv.lua "
    .. "compares it with conv2d's gradient, test_autograd_ops.lua gradchecks it)",
  _conv2d_weight_grad = "needs a grad_output of the convolution's output size: no generator yet (test_cuda_conv.lua "
    .. "compares it with conv2d's gradient, test_autograd_ops.lua gradchecks it)",
  _value_counts = "unique's counting of integers (a CPU range beside the counts): test_selection.lua checks it, "
    .. "and its unique cases compare unique with torch.unique",
  _unique_counted = "unique's counting of integers: test_selection.lua checks it, and its unique cases compare "
    .. "unique with torch.unique",
  _attention_cache = "a compiled graph's static KV cache write and attention over the cache: "
    .. "test_cuda_attention_decode.lua compares it with index_put_ then attention",
  _addmm_epilogue = "a compiled graph's fused product, bias, activation and residual: test_epilogue.lua compares "
    .. "it with the ops it stands for",
  _fused_sgd = "an optimizer's update of parameter lists in place: it refuses to run inside a capture",
  _fused_adam = "an optimizer's update of parameter lists in place: it refuses to run inside a capture",
  mm = "needs 2-d operands and bmm 3-d ones: the matmul statement makes 1- to 3-d ones (matmul reaches both kernels)",
  bmm = "needs 3-d operands: the matmul statement makes 1- to 3-d ones (matmul reaches its kernel)",
  linear = "its weight is (out, in): the matmul statement makes matmul's (in, out) right operand",
  index = "needs index tensors within each dim's size (x:index's one-tensor form is index_select): "
    .. "test_selection.lua compares it with PyTorch, compiled too",
  gather = "needs an index tensor of the input's rank within its sizes: no generator yet",
  embedding = "needs an int64 index tensor within the weight's rows: no generator yet",
  attention = "needs query, key and value of matching head sizes: no generator yet",
  im2col = "needs a 4-d input at least as large as its window: no generator yet",
  col2im = "needs a 3-d input whose sizes match its window geometry: no generator yet",
  conv2d = "needs a 4-d input and weight of matching channels: no generator yet",
  sort = "no generator yet (dim, descending)",
  topk = "no generator yet (k within the dim's size)",
  eye = "no generator yet (sizes and options)",
  linspace = "no generator yet (bounds and step count)",
  randint = "no generator yet (bounds and sizes; the inputs are made with it)",
  empty = "its values are undefined: eager and compiled results need not agree",
  empty_like = "its values are undefined: eager and compiled results need not agree",
  cpu = "a program's device is the run's (CRESCENT_FUZZ_DEVICE), not changed inside it",
  cuda = "a program's device is the run's (CRESCENT_FUZZ_DEVICE), not changed inside it",
  half = "float16 results are 1e-3 apart after one rounding of a float that native code computed "
    .. "differently, beyond the fuzzer's 1e-4 tolerance",
  bfloat16 = "bfloat16 results are 1e-2 apart after one rounding of a float that native code computed "
    .. "differently, beyond the fuzzer's 1e-4 tolerance",
}
for _, name in ipairs({ "_dist_all_reduce", "_dist_all_gather", "_dist_reduce_scatter", "_dist_broadcast", "_dist_bucket_start",
  "_dist_bucket_wait" }) do
  FO.EXCLUDED[name] = "a collective: needs a process group (test_dist_compiled.lua runs it on simulated ranks)"
end

-- Ops that a statement generator of fuzz_gen.lua calls by name (not drawn from a pool).
FO.FORMS = { where = "compare_where, convert", matmul = "matmul", cat = "join", stack = "join",
  arange = "create", full = "create", to = "convert" }

-- Call forms of the "misc" statement: A a float var, B a float var broadcastable with it (or A), D a
-- dim of A; DEV_ARG the run's {device =} options argument.
FO.MISC = {
  "A:cumsum(D)", "A:prod(D)", "A:var(D)", "A:std(D, true)", "A:logsumexp(D)", "A:argmax(D)", "(A:max(D))",
  "(select(2, A:min(D)))", "(select(2, A:aminmax({dim = D})))", "(A:aminmax())",
  "T.tril(A)", "T.triu(A, 1)", "A:clamp(-0.5, nil)", "A:pow(2)", "A:lerp(B, 0.3)",
  "T.addcmul(A, A, B, 0.5)", "T.atan2(A, B)", "A:fmod(0.7)", "A:remainder(0.7)", "A:masked_fill(A:gt(0), 0.5)",
  "A:index_select(D, T.tensor({1, 1}DEV_ARG))", "A:split(2, D)[1]", "A:chunk(2, D)[1]", "A:norm()",
  "A:gelu({approximate = \"tanh\"})", "A:clamp(B, B + 1)", "A:clamp(nil, B)", "A:lerp(B, B)",
  "A:gt(0.5):any(D):float()", "A:lt(1):all(D, true):double()", "A:ne(0):all():float()",
  "A:index_add(D, T.tensor({1, 1}DEV_ARG), A:index_select(D, T.tensor({1, 1}DEV_ARG)) * 0.5)",
  "A:scatter_add(D, A:argmax(D, true), A)",
  "A:masked_select(A:gt(0))", "A:scatter_reduce(D, A:argmin(D, true), A, \"amax\", {include_self = false})", "T.nonzero(A:gt(0.5)):float()",
  "T.bincount(A:gt(0):long():flatten(), nil, 3):float()",
  "A:flatten():index_put({A:flatten():argmax(1, true)}, A:flatten():narrow(1, 1, 1), true)",
  "A:flatten():clone():index_put_({A:flatten():argmin(1, true)}, A:amax())", "A:detach() * 2",
  "T.leaky_relu(A, 0.2)", "T.elu(A, 1.3)", "T.softplus(A, 1.5)", "T.hardtanh(A, -0.5, 0.7)",
}

-- ---- probes -----------------------------------------------------------------------------------

local function kind(op) return OPS[op].kind end
local KIND = { unary = kind("neg"), binary = kind("add"), reduction = kind("sum"), view = kind("view"),
  convert = kind("float"), creation = kind("zeros") }

local FLOATS = T.tensor({ { -2.5, 0.5, 3 } })
local INTS = T.tensor({ { -2, 0, 3 } }, { dtype = "int64" })
local function try(op, ...)
  local ok, r = pcall(OPS[op].fn, ...)
  return ok and r or nil
end
local function accepts_int(op) return try(op, INTS) ~= nil end
local function nan_on_negative(op)  -- log, sqrt, ...: the fuzzer applies them to abs(x)
  local r = try(op, FLOATS)
  return r ~= nil and r.dtype ~= "bool" and r:isnan():any():item()
end
local function bool_result(op, ...) local r = try(op, ...); return r ~= nil and r.dtype == "bool" end
local function int_result(op) local r = try(op, FLOATS); return r ~= nil and (r.dtype == "int64" or r.dtype == "int32") end
local function in_place(op) return op:sub(-1) == "_" end
local function has_opt(op, key)
  for _, o in ipairs(OPS[op].opts and OPS[op].opts.list or {}) do if o.name == key then return true end end
  return false
end
local function param_types(op)
  local t = {}
  for i, p in ipairs(OPS[op].params) do t[i] = p.type end
  return table.concat(t, ",")
end

-- The registry's ops satisfying pred, sorted by name (the draws must not depend on pairs' order).
local function select_ops(pred)
  local out = {}
  for name in pairs(OPS) do if not FO.EXCLUDED[name] and pred(name) then out[#out + 1] = name end end
  table.sort(out)
  return out
end

-- ---- the pools ---------------------------------------------------------------------------------

-- {name, int = valid on int64 tensors, abs = applied to abs(x)}
FO.UNARY = {}
for _, op in ipairs(select_ops(function(op) return kind(op) == KIND.unary end)) do
  FO.UNARY[#FO.UNARY + 1] = { op, int = accepts_int(op), abs = nan_on_negative(op) }
end
-- tensor op tensor-or-number, and whether it takes {alpha =} (a number-only second argument,
-- leaky_relu's slope: a MISC form)
FO.BINARY, FO.ALPHA = select_ops(function(op)
  return kind(op) == KIND.binary and not in_place(op) and OPS[op].params[2].type ~= "N"
    and not bool_result(op, FLOATS, FLOATS)
end), {}
for _, op in ipairs(FO.BINARY) do FO.ALPHA[op] = has_opt(op, "alpha") end
FO.COMPARE = select_ops(function(op)
  return kind(op) == KIND.binary and not in_place(op) and bool_result(op, FLOATS, FLOATS)
end)
-- reductions over dims: {name, dims = takes a list of dims, float = refuses integer tensors,
-- bool = gives booleans (all, any), index = gives integer positions (argmax, argmin)}; a dim
-- only as an option (aminmax) has a MISC form instead
FO.REDUCE = {}
for _, op in ipairs(select_ops(function(op) return kind(op) == KIND.reduction and OPS[op].params[2] ~= nil end)) do
  FO.REDUCE[#FO.REDUCE + 1] = { op, dims = OPS[op].params[2].type == "Ds", float = not accepts_int(op),
    bool = bool_result(op, FLOATS), index = int_result(op) }
end
-- ops along one dim with a dtype option (softmax, log_softmax, cumsum)
FO.ALONG = select_ops(function(op) return param_types(op) == "T,D" and has_opt(op, "dtype") end)
-- views: the registry's, x[i] (select by indexing) and contiguous() (the input itself when contiguous)
FO.VIEWS = select_ops(function(op) return kind(op) == KIND.view end)
table.insert(FO.VIEWS, "index")
table.insert(FO.VIEWS, "contiguous")
-- views that in-place statements write through: not those that may copy (the write would miss the
-- variable) or expand (writes into stride-0 dims are refused)
local NOT_TARGET = { reshape = true, flatten = true, contiguous = true, expand = true }
FO.TARGET_VIEWS = {}
for _, v in ipairs(FO.VIEWS) do if not NOT_TARGET[v] then FO.TARGET_VIEWS[#FO.TARGET_VIEWS + 1] = v end end
FO.INPLACE = select_ops(in_place)
-- conversions of one tensor: {name, int = makes integers from floats (NaN and inf guarded first)}
FO.CONVERT = {}
local function converts(op) return kind(op) == KIND.convert and param_types(op) == "T" and not in_place(op) end
for _, op in ipairs(select_ops(converts)) do
  FO.CONVERT[#FO.CONVERT + 1] = { op, int = int_result(op) }
end
-- creations from sizes, and from a tensor (*_like)
FO.CREATE_SIZED = select_ops(function(op) return kind(op) == KIND.creation and param_types(op) == "Is" end)
FO.CREATE_LIKE = select_ops(function(op) return kind(op) == KIND.creation and param_types(op) == "T" end)

-- ---- coverage ----------------------------------------------------------------------------------

-- The registry ops in no pool, form, MISC call or exclusion (sorted), and EXCLUDED entries that
-- name no registry op.
function FO.unplaced()
  local placed = {}
  for op in pairs(FO.FORMS) do placed[op] = true end
  for op in pairs(FO.EXCLUDED) do placed[op] = true end
  for _, e in ipairs(FO.MISC) do
    for op in e:gmatch(":([%w_]+)%(") do placed[op] = true end
    for op in e:gmatch("T%.([%w_]+)%(") do placed[op] = true end
  end
  for _, pool in ipairs({ FO.UNARY, FO.BINARY, FO.COMPARE, FO.REDUCE, FO.ALONG, FO.VIEWS, FO.INPLACE, FO.CONVERT,
    FO.CREATE_SIZED, FO.CREATE_LIKE }) do
    for _, e in ipairs(pool) do placed[type(e) == "table" and e[1] or e] = true end
  end
  local missing, stale = {}, {}
  for op in pairs(OPS) do if not placed[op] then missing[#missing + 1] = op end end
  for op in pairs(FO.EXCLUDED) do if not OPS[op] then stale[#stale + 1] = op end end
  table.sort(missing)
  table.sort(stale)
  return missing, stale
end

return FO
