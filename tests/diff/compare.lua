-- Comparing crescent's results with PyTorch's for tests/diff/diff_torch.lua.
--
-- A run's outcome is { results = { snapshot, ... } } or { error = message }; a snapshot is a
-- tensor read back into Lua: { dtype =, shape =, v = flat values }. Results must agree in count,
-- dtype and shape, and in values: ints and bools exactly, floats within
--   |got - want| <= rtol * |want| + atol * scale
-- NaN equal to NaN, infinities exact. scale is 1 for elementwise ops; for reductions (sums of many
-- terms round differently) it grows with the inputs' magnitude and size.
local T = require "crescent"

local C = {}

C.TOL = {  -- rtol, atol by result dtype (also sent to the compile fuzzer's torch replayer)
  float32 = { 1e-5, 1e-5 }, float64 = { 1e-11, 1e-11 }, float16 = { 1e-3, 1e-3 }, bfloat16 = { 1e-2, 1e-2 },
}

local function flatten(v, out)
  if type(v) == "table" then
    for i = 1, #v do flatten(v[i], out) end
  else
    out[#out + 1] = v
  end
  return out
end

function C.snapshot(t)
  if t.device ~= "cpu" then t = t:cpu() end
  return { dtype = t.dtype, shape = t.shape, v = flatten(t:totable(), {}) }
end

-- Largest finite |value| of a snapshot (0 when none).
local function max_abs(s)
  local m = 0
  for _, x in ipairs(s.v) do
    if type(x) == "number" and x == x and math.abs(x) < math.huge then m = math.max(m, math.abs(x)) end
  end
  return m
end

-- The tolerance scale for a reduction: the product of the inputs' magnitudes (a matmul multiplies
-- two) times the square root of the largest input's size.
function C.reduce_scale(inputs)
  local m, n = 1, 1
  for _, s in ipairs(inputs) do
    m = m * math.max(1, max_abs(s))
    n = math.max(n, #s.v)
  end
  return m * math.sqrt(n)
end

local function shape_str(s) return "{" .. table.concat(s, ",") .. "}" end

local function fmt(x)
  if type(x) == "number" then return ("%.9g"):format(x) end
  return tostring(x)
end

-- nil when got matches want (both snapshots), else a message
local function compare_one(got, want, scale, shape_only, tol)
  if got.dtype ~= want.dtype then return ("dtype %s, torch %s"):format(got.dtype, want.dtype) end
  if #got.shape ~= #want.shape then return ("shape %s, torch %s"):format(shape_str(got.shape), shape_str(want.shape)) end
  for i = 1, #got.shape do
    if got.shape[i] ~= want.shape[i] then return ("shape %s, torch %s"):format(shape_str(got.shape), shape_str(want.shape)) end
  end
  if shape_only then return nil end
  tol = tol or C.TOL[got.dtype]
  local s = math.max(1, max_abs(want), scale or 1)
  local bad, first = 0, nil
  for i = 1, #want.v do
    local a, b = got.v[i], want.v[i]
    local ok
    if tol then
      ok = a == b or (a ~= a and b ~= b)
        or (a == a and b == b and math.abs(b) < math.huge and math.abs(a - b) <= tol[1] * math.abs(b) + tol[2] * s)
    else
      ok = a == b
    end
    if not ok then
      bad = bad + 1
      first = first or i
    end
  end
  if bad == 0 then return nil end
  return ("%d of %d values differ; first at flat index %d: got %s, torch %s"):format(bad, #want.v, first,
    fmt(got.v[first]), fmt(want.v[first]))
end

-- Compares a crescent outcome with torch's ({ results = ... } or { error = ... }). Returns nil or
-- kind, message; kind is "raises" (crescent raises, torch does not), "accepts" (the reverse) or
-- "differs". tol: {rtol, atol} for every float result instead of their dtype's.
function C.compare(got, want, scale, shape_only, tol)
  if want.error and got.error then return nil end
  if want.error then return "accepts", "crescent returns a result; torch raises " .. want.error end
  if got.error then return "raises", "crescent raises: " .. got.error end
  if #got.results ~= #want.results then
    return "differs", ("%d results, torch %d"):format(#got.results, #want.results)
  end
  for i, w in ipairs(want.results) do
    local m = compare_one(got.results[i], w, scale, shape_only, tol)
    if m then return "differs", (#want.results > 1 and ("result %d: "):format(i) or "") .. m end
  end
  return nil
end

-- The results of a call as a list of tensors: multiple returns, or one table of tensors (split).
function C.results(...)
  local n = select("#", ...)
  local list = { ... }
  if n == 1 and type(list[1]) == "table" and not T.is_tensor(list[1]) then list, n = list[1], #list[1] end
  local out = {}
  for i = 1, n do
    local x = list[i]
    if not T.is_tensor(x) then error(("result %d is a %s, not a tensor"):format(i, type(x)), 0) end
    out[i] = C.snapshot(x)
  end
  return out
end

return C
