-- Known differences between crescent and PyTorch that the differential tests (tests/diff/
-- diff_torch.lua, the compile fuzzer's tests/lua/fuzz_torch.lua) report without failing, each with
-- its reason. recipes.lua hands them on as RC.EXCUSES and RC.excuse.
local G = require "gen"

local M = {}

-- ---- known differences ---------------------------------------------------------------------------
-- { op = name | "*" | set of names, kind = "raises" (crescent raises, torch does not) | "accepts"
-- (the reverse) | "differs", match = pattern of the message, when = predicate on the case,
-- class = how the report counts it, why = }. class "limit": crescent's behaviour on purpose;
-- "torch": PyTorch 1.13's own gap or quirk; "extension": crescent accepts more; "known": a
-- crescent bug written down, not fixed yet.

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
local WRITES = { add_ = true, sub_ = true, mul_ = true, div_ = true, fill_ = true, zero_ = true, copy_ = true,
                 masked_fill_ = true, clamp_ = true }

M.EXCUSES = {
  { op = "*", kind = "accepts", match = "not implemented for '", class = "torch",
    why = "torch 1.13 has no CPU kernel for this dtype (bool argmax/topk, bfloat16 eye, ...); crescent computes it" },
  { op = WRITES, kind = "raises", match = "cannot write into an expanded tensor", class = "limit",
    why = "crescent refuses every write into an expanded (stride-0) tensor; torch allows fill_/zero_ there and "
      .. "skips its overlap check on empty tensors" },
  { op = { sin = true, cos = true, tan = true }, kind = "differs", when = huge_input, class = "limit",
    why = "|x| >= 2^48 (float) / 2^50 (double) gives NaN by design (vm/kernels/vmath.hpp: no Payne-Hanek reduction)" },
  { op = "addcmul", kind = "raises", match = "value must be an integer for integer inputs", class = "limit",
    why = "crescent rejects a fractional value for integer tensors (as torch does for add's alpha); torch 1.13 truncates it" },
  { op = "linspace", kind = "differs", class = "torch",
    when = function(c) return c.expr:find("dtype=torch.int") ~= nil end,
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
  { op = "randint", kind = "accepts", match = "out of bounds for", class = "known",
    why = "crescent does not check randint's range against the dtype (randint(-4, -3, {dtype = \"bool\"}) works)" },
  { op = "arange", kind = "differs", class = "known",
    when = function(c) return c.expr:find("dtype=torch.int") and c.expr:find("%d%.%d") ~= nil end,
    why = "fractional start/step with an integer dtype: torch casts start and step to the integer type first "
      .. "(arange(-7.15, 9.25, 1.75, int32) = -7, -6, ...); crescent truncates start + i*step (-7, -5, ...)" },
  { op = "linspace", kind = "differs", class = "torch", when = function(c) return c.expr:find("inf") ~= nil end,
    why = "an infinite end: torch fills the upper half from the end (inf - inf = nan); crescent gives inf" },
  { op = "lerp", kind = "differs", class = "torch", when = nonfinite_input,
    why = "infinite operands: lerp's two formulas (a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w)) give inf or "
      .. "nan; crescent follows torch's scalar formula, torch 1.13's CPU kernel took the other one here" },
  { op = "lerp", kind = "accepts", match = "expected dtype", class = "extension",
    why = "crescent promotes lerp's operands; torch requires one dtype" },
  { op = { sign = true, square = true, abs = true }, kind = "raises", match = "not bool", class = "known",
    why = "crescent rejects bool; torch: sign(bool) is bool, square(bool) is int64, abs(bool) is bool (torch 2.x; "
      .. "1.13 raised as crescent does)" },
  { op = { argmax = true, argmin = true, topk = true }, kind = "accepts", match = "bool", class = "torch",
    why = "torch 2.x has no bool kernel for these either (\"does not support bool\", on CUDA too); crescent computes them" },
  { op = { fmod = true, remainder = true, div = true }, kind = "raises", match = "integer division by zero", class = "torch",
    when = function(c) return c.device == "cuda" end,
    why = "torch's CUDA kernels do not check integer division by zero (its CPU kernels raise, as crescent does)" },
  { op = "embedding", kind = "raises", match = "out of range", class = "torch",
    when = function(c) return c.device == "cuda" and empty_input(c) end,
    why = "torch's CUDA embedding launches nothing for an empty weight or index, so it checks no index; crescent does" },
  { op = { cuda = true, to = true }, kind = "accepts", when = empty_input, class = "known",
    why = "a zero-size tensor moves to \"cuda\" on a machine without a GPU (nothing is allocated); torch raises" },
}

-- The entry of EXCUSES that explains a finding (kind and message of a case, whose op, inputs and
-- expr the `when` predicates read), or nil.
function M.excuse(case, kind, msg)
  for _, e in ipairs(M.EXCUSES) do
    if (e.op == case.op or e.op == "*" or (type(e.op) == "table" and e.op[case.op])) and e.kind == kind
       and (not e.match or msg:find(e.match)) and (not e.when or e.when(case)) then
      return e
    end
  end
end

return M
