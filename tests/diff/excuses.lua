-- Known differences between crescent and PyTorch that the differential tests (tests/diff/
-- diff_torch.lua, the compile fuzzer's tests/lua/lib/fuzz_torch.lua) report without failing,
-- each with its reason. recipes.lua hands them on as RC.EXCUSES and RC.excuse.
local G = require "gen"

local M = {}

-- ---- known differences ---------------------------------------------------------------------------
-- { op = name | "*" | set of names, kind = "raises" (crescent raises, torch does not) | "accepts"
-- (the reverse) | "differs", match = pattern of the message, when = predicate on the case,
-- class = how the report counts it, why = }. class "limit": crescent's behaviour on purpose;
-- "torch": PyTorch's own gap or quirk (1.13, or 2.x where it differs); "extension": crescent
-- accepts more; "known": a crescent bug written down, not fixed yet. Every entry has its class and
-- its reason (diff_torch.lua checks both).

local function any_input(case, pred)
  for _, input in ipairs(case.inputs) do if pred(input) then return true end end
  return false
end
local function empty_input(case) return any_input(case, function(i) return G.numel(i.shape) == 0 end) end
local function huge_input(case)
  return any_input(case, function(i)
    for _, v in ipairs(i.values) do if type(v) == "number" and math.abs(v) >= 2 ^ 48 then return true end end
    return false
  end)
end
local function nonfinite_input(case)
  return any_input(case, function(i)
    for _, v in ipairs(i.values) do if type(v) == "number" and (v ~= v or math.abs(v) == math.huge) then return true end end
    return false
  end)
end
-- an integer dtype asked for (a recipe's keyword, or a misuse case's options table)
local function int_dtype(case) return case.expr:find("dtype=torch.int") or case.expr:find('"dtype": "int', 1, true) end
-- a misuse case (tests/diff/misuse.lua) with a boolean among sizes or dims (a list or varargs)
local function bool_in_list(case)
  local m = case.misuse or ""
  return m:find("a boolean in a list of integers", 1, true) ~= nil or m:find("a boolean as integers", 1, true) ~= nil
end
-- an input with two equal values (a tie for topk to break)
local function tied_input(case)
  return any_input(case, function(i)
    local seen = {}
    for _, v in ipairs(i.values) do
      if seen[v] then return true end
      seen[v] = true
    end
    return false
  end)
end
local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
local WRITES = { add_ = true, sub_ = true, mul_ = true, div_ = true, fill_ = true, zero_ = true, copy_ = true,
                 masked_fill_ = true, clamp_ = true, index_put_ = true }
for _, n in ipairs({ "neg", "abs", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
  "tanh", "sigmoid", "relu", "erf", "floor", "ceil", "trunc", "sign", "reciprocal", "square", "pow", "fmod", "remainder",
  "atan2", "hypot", "lerp", "addcmul" }) do
  WRITES[n .. "_"] = true  -- (the in-place forms of vm/registry.hpp CR_INPLACE_OPS)
end

M.EXCUSES = {
  { op = "scatter_reduce", kind = "raises", match = "self expected a numeric tensor, got a bool tensor", class = "limit",
    why = "crescent's scatter_reduce takes numeric tensors; torch 1.13 also reduces bool ones" },
  { op = "index_put_", kind = "accepts", match = "argument 'values' %(position 2%) must be Tensor", class = "extension",
    why = "x:index_put_ takes a number as values too, as x[idx] = v does" },
  { op = "std", kind = "differs", class = "torch", when = function(c)
      return any_input(c, function(i)
        for _, v in ipairs(i.values) do if v ~= i.values[1] then return false end end
        return #i.values > 0
      end)
    end,
    why = "std of equal values: torch 1.13's mean rounds, x - mean is not 0 and the gradient is rounding noise of O(1); "
      .. "crescent's is 0 (the subgradient at a zero std)" },
  { op = "scatter_reduce", kind = "raises", match = 'derivative not implemented for reduce = "prod"', class = "known",
    why = "scatter_reduce's prod has no derivative rule yet (zeros among the factors need PyTorch's special case)" },
  { op = "*", kind = "accepts", match = "not implemented for '", class = "torch",
    why = "torch 1.13 has no CPU kernel for this dtype (bool argmax/topk, bfloat16 eye, ...); crescent computes it" },
  { op = WRITES, kind = "raises", match = "cannot write into an expanded tensor", class = "limit",
    why = "crescent refuses writes into an expanded (stride-0) tensor but fill_ / zero_; torch skips its overlap "
      .. "check on empty tensors" },
  { op = { sin = true, cos = true, tan = true, sin_ = true, cos_ = true, tan_ = true }, kind = "differs", when = huge_input, class = "limit",
    why = "|x| >= 2^48 (float) / 2^50 (double) gives NaN by design (vm/kernels/vmath.hpp: no Payne-Hanek reduction)" },
  { op = "addcmul", kind = "raises", match = "value must be an integer for integer inputs", class = "limit",
    why = "crescent rejects a fractional value for integer tensors (as torch does for add's alpha); torch 1.13 truncates it" },
  { op = { index_add = true, index_add_ = true }, kind = "raises", match = "source expected self's shape",
    class = "torch", when = empty_input,
    why = "torch 1.13 checks no shape when the index is empty; crescent checks source's shape against self's always" },
  { op = { index_add = true, index_add_ = true }, kind = "raises", match = "alpha must be an integer for", class = "limit",
    why = "crescent rejects a fractional alpha for integer tensors (as torch does for add's alpha); torch 1.13's "
      .. "index_add truncates it" },
  { op = "linspace", kind = "differs", class = "torch", when = int_dtype,
    why = "torch 1.13 steps an integer linspace by the truncated integer step ((951-1)//22 = 43); crescent truncates "
      .. "the exact values, as numpy does" },
  { op = { softmax = true, log_softmax = true }, kind = "raises", match = "expected a floating tensor", when = empty_input,
    class = "torch", why = "torch skips softmax's dtype check on zero-size input" },
  { op = { mm = true, bmm = true, matmul = true, linear = true }, kind = "raises", when = empty_input, class = "torch",
    why = "torch checks neither dtypes nor bool support when the product is empty" },
  { op = "norm", kind = "differs", when = huge_input, class = "torch",
    why = "torch 1.13 sums float32 squares in float32 (1e30^2 overflows to inf); crescent accumulates in double" },
  { op = "norm", kind = "accepts", match = "cannot compute the inf norm", class = "extension",
    why = "crescent defines the inf-norm of an empty reduction as 0 on purpose (vm/ops/reductions.cpp)" },
  { op = "aminmax", kind = "accepts", match = "derivative for aten::aminmax is not implemented", class = "extension",
    why = "torch 1.13 has no derivative for aminmax; crescent's is amin's and amax's (ties split evenly), checked "
      .. "against finite differences in test_autograd_ops.lua" },
  { op = "aminmax", kind = "differs", match = "shape {}, torch {1}", class = "torch",
    when = function(c) return c.expr:find("keepdim=True") ~= nil end,
    why = "torch 1.13 gives a 0-d input's aminmax along a dim with keepdim the shape {1}; its amax and max keep {} "
      .. "(and so does crescent)" },
  { op = "linspace", kind = "differs", class = "torch", when = function(c) return c.expr:find("inf") ~= nil end,
    why = "an infinite end: torch fills the upper half from the end (inf - inf = nan); crescent gives inf" },
  { op = "lerp", kind = "differs", class = "torch", when = nonfinite_input,
    why = "infinite operands: lerp's two formulas (a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w)) give inf or "
      .. "nan; crescent follows torch's scalar formula, torch 1.13's CPU kernel took the other one here" },
  { op = "lerp", kind = "accepts", match = "expected dtype", class = "extension",
    why = "crescent promotes lerp's operands; torch requires one dtype" },
  { op = "pow", kind = "raises", match = "not bool", class = "torch",
    why = "torch 2.x's CUDA pow takes bool ** bool (bool, True); its CPU kernel and torch 1.13 have no bool pow, and "
      .. "crescent refuses it as they do (pow(bool, 2) is int64 in all)" },
  { op = "abs", kind = "raises", match = "not bool", class = "torch",
    why = "torch 2.x's CUDA abs(bool) is bool; its CPU kernel and torch 1.13 raise, as crescent does" },
  { op = { argmax = true, argmin = true, topk = true }, kind = "accepts", match = "bool", class = "torch",
    why = "torch 2.x has no bool kernel for these either (\"does not support bool\", on CUDA too); crescent computes them" },
  { op = { fmod = true, remainder = true, div = true, _div_floor = true, _div_trunc = true }, kind = "raises",
    match = "integer division by zero", class = "torch",
    when = function(c) return c.device == "cuda" end,
    why = "torch's CUDA kernels do not check integer division by zero (its CPU kernels raise, as crescent does)" },
  { op = { hardsigmoid = true, hardswish = true }, kind = "differs", class = "torch",
    when = function(c) return any_input(c, function(i) return i.dtype == "float64" end) end,
    why = "torch scales float64 by a float32 1 / 6 (0.166666672) in its CUDA hardsigmoid / hardswish and in "
      .. "hardsigmoid's CPU gradient; crescent by the float64 one" },
  { op = "hardswish", kind = "differs", match = "^gradient", class = "torch",
    when = function(c)
      return c.device ~= "cuda" and any_input(c, function(i)
        for _, v in ipairs(i.values) do if v == 3 then return true end end
        return false
      end)
    end,
    why = "torch's vectorised CPU hardswish gradient gives grad at x == 3, its scalar tail (the last elements) and "
      .. "its CUDA kernel 1.5 grad (x / 3 + 0.5), as crescent does" },
  { op = "hardtanh", kind = "raises", match = "min_val cannot be greater than max_val", class = "torch",
    why = "torch 1.13's F.hardtanh clamps with min_val > max_val; torch 2.x raises (F.hardtanh's ValueError), as "
      .. "crescent does" },
  { op = "_gelu_backward", kind = "accepts", match = "memory descriptor", class = "torch",
    why = "torch 1.13's oneDNN gelu_backward refuses some strided float32 inputs (\"could not construct a memory "
      .. "descriptor using strides\"); crescent computes them" },
  { op = "tensor", kind = "raises", match = "data is ragged", class = "torch",
    why = "torch 1.13 takes an empty first row's length for every row: [[], [1]] is a {2, 0} tensor and the "
      .. "values are dropped; crescent raises, as it does for any ragged data" },
  { op = "embedding", kind = "raises", match = "out of range", class = "torch",
    when = function(c) return c.device == "cuda" and empty_input(c) end,
    why = "torch's CUDA embedding launches nothing for an empty weight or index, so it checks no index; crescent does" },
  { op = "*", kind = "raises", match = "list of integers, got boolean", when = bool_in_list, class = "torch",
    why = "torch's argument parser takes True as 1 inside a list of ints after its first element (torch.zeros(2, True) "
      .. "is {2, 1}, x.amin((0, True)) reduces dims 0 and 1; 1.13 and 2.11 alike) and refuses it as the first one; "
      .. "crescent refuses a boolean as a size or dim wherever it is, as torch's TypeError for the first" },
  { op = { var = true, std = true }, kind = "raises", match = "correction expected a number, got boolean", class = "torch",
    why = "torch 2.x takes correction as a number, True counting 1; torch 1.13 refuses a boolean there, as crescent "
      .. "does (unbiased is the boolean form)" },
  -- the gradient mode (grad.lua)
  { op = "remainder", kind = "accepts", match = "derivative for aten::remainder is not implemented", class = "torch",
    why = "torch 1.13 has no derivative of remainder(number, tensor) for the tensor; crescent's is PyTorch's "
      .. "tensor-tensor formula, -grad * floor(self / other)" },
  { op = { atan2 = true, atan2_ = true, hypot = true, hypot_ = true }, kind = "accepts", match = "must be Tensor, not",
    class = "extension", why = "crescent's atan2 and hypot take a number operand as maximum / minimum do (torch's only tensors)" },
  { op = "atan2", kind = "accepts", match = "on a bool tensor is not supported",
    class = "torch",
    why = "a bool first operand: torch 1.13's atan2 backward negates it for the other operand's gradient and fails; "
      .. "crescent gives that gradient" },
  { op = "topk", kind = "differs", when = tied_input, class = "limit",
    why = "tied values: which of the equal elements topk returns is unspecified (torch's docs), and its gradient goes "
      .. "to the ones chosen; the values agree (the forward test compares them)" },
  { op = "clamp", kind = "accepts", match = "doesn't match the broadcast shape", class = "torch",
    why = "min / max tensors broadcasting the result beyond the input: torch 1.13's clamp_backward combines the masks "
      .. "with an in-place logical_and_ into the input's shape and fails; crescent gives the gradient" },
  { op = { std = true, var = true }, kind = "accepts", match = "Backward0 returned an invalid gradient",
    class = "torch",
    when = function(c) return any_input(c, function(i) return G.numel(i.shape) == 1 end) end,
    why = "std / var over all dims of a one-element tensor: torch 1.13's backward returns a 0-d gradient and fails its "
      .. "own shape check; crescent gives the gradient (NaN, 0 / 0)" },
  { op = "elu", kind = "differs", when = function(c) return c.grad and nonfinite_input(c) end, class = "torch",
    why = "elu's gradient at a NaN input: torch 1.13's vectorised CPU loop gives NaN, its scalar loop (tensors of "
      .. "a few elements) the incoming gradient, as its formula (x <= 0 ? ... : grad) and crescent do" },
  { op = { var = true, std = true }, kind = "differs",
    when = function(c) return c.grad and any_input(c, function(i) return G.numel(i.base_shape) == 1 and G.numel(i.shape) > 1 end) end,
    class = "torch", why = "a constant input (one value expanded): torch 1.13's mean of the copies is rounded, so its std "
      .. "is a tiny nonzero and the gradient finite; crescent's mean is exact, the std 0 and the gradient 0 (torch's rule at 0)" },
  { op = "var", kind = "differs", when = function(c) return any_input(c, function(i) return G.numel(i.shape) == 1 end) end,
    class = "torch", why = "one element, no degree of freedom (N == correction): torch 1.13's var_backward gives inf; "
      .. "crescent computes 2 (x - mean) / 0 = 0 / 0, NaN (the variance is NaN for every x)" },
  { op = "addcmul", kind = "differs", when = function(c) return c.grad and any_input(c, function(i) return i.dtype == "int64" end) end,
    class = "torch", why = "an int64 tensor1 / tensor2: torch 1.13's rule multiplies it by value in the default dtype "
      .. "(float32: 3 * 0.3 = 0.90000004) before the float64 gradient; crescent computes in the result's dtype" },
  { op = { var = true, std = true }, kind = "differs", match = "torch inf", class = "torch",
    when = function(c) return c.device == "cuda" end,
    why = "torch's CUDA var / std sum a float32 input's squared deviations in float32, which overflow past 3.4e38; "
      .. "crescent sums in float64, as torch's CPU kernel, and a std such as 5.8e29 is finite" },
  { op = "pow", kind = "differs", class = "torch",
    when = function(c) return c.grad and c.device ~= "cuda" and any_input(c, function(i) return i.dtype == "int64" end) end,
    why = "an int64 base: torch 1.13's exponent gradient takes its log in float32 (3e-8 off in float64); torch 2.x "
      .. "promotes the base to the result's dtype first, as crescent does" },
  { op = "masked_select", kind = "differs", class = "torch",
    when = function(c) return c.grad and #c.inputs[1].chain > 0 end,
    why = "a strided self (a transpose): torch 1.13's masked_select_backward scatters the gradient into a tensor "
      .. "of self's strides in memory order, not the order the forward read (its own gradcheck fails); crescent's "
      .. "puts each value where the forward took it (test_autograd_ops checks it by finite differences)" },
  { op = "prod", kind = "differs", when = nonfinite_input, class = "limit",
    why = "infinite inputs with zeros in the tensor: torch's rule multiplies exclusive cumulative products (0 * inf = "
      .. "NaN); crescent's gives 0 to every element of a slice with two zeros and result / x elsewhere" },
  { op = "scatter_reduce", kind = "accepts", class = "extension",
    when = function(c) return c.grad and #c.inputs == 3 and not same_shape(c.inputs[2].shape, c.inputs[3].shape) end,
    why = "src larger than the index: torch's scatter_reduce_backward (1.13: tensors of src's and of the "
      .. "index's shape combined; 2.11: a gradient of the index's shape) fails; crescent gives the src elements "
      .. "no index reaches zeros (checked by finite differences in test_autograd_ops.lua)" },
  { op = { scatter_add = true, scatter_add_ = true }, kind = "accepts", match = "ScatterAddBackward0 returned an invalid gradient",
    class = "extension", why = "src larger than the index: torch's rule gathers a gradient of the index's shape and fails "
      .. "its own shape check; crescent gives the src elements no index reaches zeros" },
}

-- The entry of EXCUSES (or of `list`, entries of the same fields) that explains a finding (kind
-- and message of a case, whose op, inputs and expr the `when` predicates read), or nil.
function M.excuse(case, kind, msg, list)
  for _, e in ipairs(list or M.EXCUSES) do
    if (e.op == case.op or e.op == "*" or (type(e.op) == "table" and e.op[case.op])) and e.kind == kind
       and (not e.match or msg:find(e.match)) and (not e.when or e.when(case)) then
      return e
    end
  end
end

return M
