-- Recipes of the scatter-add ops (index_add(_), scatter_add(_)) for the differential test
-- (tests/diff/recipes.lua builds the table; see there for what a recipe is).
local T = require "crescent"
local G = require "gen"
local pd = G.pd

return function(R, H)
local ANY, FLOAT = H.ANY, H.FLOAT

-- self, source and index of one case: the source mostly of self's dtype and shape off dim d,
-- sometimes not (both must raise); the index in range but for a rare case that is not
local function operands(c, scatter)
  local s = c:shape(0, 3, { nonzero = c.r:chance(0.9) })
  local d = c:dim(#s)
  local di = #s == 0 and 1 or (d > 0 and d or #s + d + 1)
  local n = #s == 0 and 1 or s[di]
  local dt = c:dtype(c.r:chance(0.7) and FLOAT or ANY)
  local a = c:tensor(s, dt)
  local ss, is = {}, {}
  for i = 1, #s do
    if scatter then
      is[i] = i == di and c.r:int(0, 5) or c.r:int(math.min(s[i], 1), s[i])
      ss[i] = is[i] + (c.r:chance(0.3) and 1 or 0)
    else
      ss[i] = i == di and c.r:int(0, 5) or (c.r:chance(0.03) and s[i] + 1 or s[i])
    end
  end
  if not scatter then is = #s == 0 and {} or { ss[di] } end
  local range = c.r:chance(0.05) and { lo = 0, hi = n + 1 } or { lo = 1, hi = math.max(n, 1) }
  local b = c:tensor(ss, c.r:chance(0.95) and dt or c:dtype(ANY))
  local idx = c:tensor(is, "int64", range)
  return a, b, idx, d
end

for _, name in ipairs({ "index_add", "index_add_" }) do
  R[name] = { gen = function(c)
    local a, b, idx, d = operands(c, false)
    local alpha = c.r:chance(0.3) and c.r:pick({ 2, -1, 0.5 }) or nil
    local opts = alpha and { alpha = alpha } or nil
    local pyalpha = alpha and (", alpha=" .. G.py(alpha)) or ""
    local call = function(I) return a(I)[name](a(I), d, idx(I), b(I), opts) end
    if name == "index_add" then call = function(I) return T.index_add(a(I), d, idx(I), b(I), opts) end end
    return call, ("a.%s(%s, c - 1, b%s)"):format(name, pd(d), pyalpha), name == "index_add_" and { inplace = a } or nil
  end }
end

for _, name in ipairs({ "scatter_add", "scatter_add_" }) do
  R[name] = { gen = function(c)
    local a, b, idx, d = operands(c, true)
    return function(I) local x = a(I); return x[name](x, d, idx(I), b(I)) end,
      ("a.%s(%s, c - 1, b)"):format(name, pd(d)), name == "scatter_add_" and { inplace = a } or nil
  end }
end
end
