-- Random inputs the spec files share: the dtypes, values of a dtype and 1-based indices.
local T = require "crescent"

local M = {}

M.DTYPES = { "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" }

-- values of dtype: normal floats, integers in [-50, 50), fair bools
function M.rnd(shape, dtype)
  if dtype == "bool" then return T.rand(shape):gt(0.5) end
  if dtype == "int32" or dtype == "int64" then return T.randint(-50, 50, shape, { dtype = dtype }) end
  return T.randn(shape):to(dtype)
end

-- 1-based random indices into a dim of size n (int64 unless dtype says)
function M.idx(n, shape, dtype) return T.randint(1, n + 1, shape, { dtype = dtype or "int64" }) end

return M
