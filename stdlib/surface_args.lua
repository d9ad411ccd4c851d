-- crescent.surface_args: the argument checks shared by the data-op modules (crescent.surface,
-- crescent.surface_more, crescent.einsum), so their errors read alike.
local core = require "crescent.core"
local fail, is_tensor, is_opts = core.fail, core.is_tensor, require("crescent.binding").is_opts

local A = {}

function A.describe(v)
  if is_tensor(v) then return v.dtype .. " tensor of shape " .. v:_shape_str() end
  return type(v)
end
function A.check_tensor(op, i, name, v)
  if not is_tensor(v) then fail(string.format("%s: argument %d (%s) expected a tensor, got %s", op, i, name, A.describe(v))) end
end
function A.check_operand(op, i, name, v)  -- a tensor or a number (a boolean too)
  if type(v) ~= "number" and type(v) ~= "boolean" and not is_tensor(v) then
    fail(string.format("%s: argument %d (%s) expected a tensor or a number, got %s", op, i, name, A.describe(v)))
  end
end
-- opts checked against the allowed keys ({} when nil)
function A.opts_of(op, opts, allowed)
  if opts == nil then return {} end
  if not is_opts(opts) then fail(string.format("%s: options expected a table, got %s", op, A.describe(opts))) end
  for k in pairs(opts) do
    if not allowed[k] then fail(string.format("%s: unknown option '%s'", op, tostring(k))) end
  end
  return opts
end
function A.dim0(op, x, d) return x._norm_dim(op, d, x:dim()) end  -- 0-based
function A.is_float(x) return x.dtype:find("float") ~= nil end  -- (bfloat16 included)

return A
