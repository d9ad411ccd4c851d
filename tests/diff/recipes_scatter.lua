-- Recipes of the scatter-add ops (index_add(_), scatter_add(_)) and of the selections
-- (masked_select, nonzero, index, index_put(_)) for the differential test
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

R.scatter_reduce = { gen = function(c)
  local a, b, idx, d = operands(c, true)
  local reduce = c.r:pick({ "sum", "prod", "mean", "amax", "amin" })
  local inc = c.r:chance(0.5)
  return function(I) return T.scatter_reduce(a(I), d, idx(I), b(I), reduce, { include_self = inc }) end,
    ("a.scatter_reduce(%s, c - 1, b, %q, include_self=%s)"):format(pd(d), reduce, inc and "True" or "False")
end }

-- bincount: values 0..hi (now and then a -1: both must raise), int64 or int32, strided too;
-- float32 / float64 weights of their length; a minlength
R.bincount = { gen = function(c)
  local n = c.r:int(0, 40)
  local a = c:tensor({ n }, c.r:pick({ "int64", "int32" }), { lo = c.r:chance(0.05) and -1 or 0, hi = c.r:pick({ 0, 4, 50 }) })
  local m = c.r:chance(0.3) and c.r:int(0, 60) or nil
  local pym = m and (", minlength=" .. m) or ""
  if c.r:chance(0.5) then return function(I) return T.bincount(a(I), nil, m) end, ("torch.bincount(a%s)"):format(pym) end
  local b = c:tensor({ n }, c.r:pick({ "float32", "float64" }))
  return function(I) return T.bincount(a(I), b(I), m) end, ("torch.bincount(a, b%s)"):format(pym)
end }

R.masked_select = { gen = function(c)
  local s = c:shape(0, 3)
  local a = c:tensor(s, c:dtype(ANY))
  local m = c:tensor(c:bshape(s, 0.05), "bool")
  return function(I) return T.masked_select(a(I), m(I)) end, "torch.masked_select(a, b)"
end }

R.nonzero = { gen = function(c)
  local a = c:tensor(c:shape(0, 3), c:dtype(ANY))
  return function(I) return T.nonzero(a(I)) end, "torch.nonzero(a) + 1"
end }

-- self, k index tensors broadcasting together (in range but for a rare case), and for
-- index_put values of the selection's shape (or one broadcasting to it) and their Python names
local function bcast(x, y)
  local r, n = {}, math.max(#x, #y)
  for i = 1, n do
    local p, q = x[#x - n + i] or 1, y[#y - n + i] or 1
    r[i] = p == 1 and q or p
  end
  return r
end
-- (put: accumulate, or one position: torch leaves which of repeated positions' values lands open)
local function advanced(c, put, acc)
  local s = c:shape(1, 3, { nonzero = c.r:chance(0.95) })
  local dt = c:dtype(c.r:chance(0.7) and FLOAT or ANY)
  local a = c:tensor(s, dt)
  local k = c.r:int(1, math.min(#s, 2))
  local is = (put and not acc) and {} or c:shape(0, 2)
  local idx, names, b = {}, {}, {}
  for j = 1, k do
    local bad = c.r:chance(0.03)
    local js = (j == 1 or #is == 0) and is or c:bshape(is)
    b = bcast(b, js)
    idx[j] = c:tensor(js, "int64", { lo = 1, hi = math.max(s[j], 1) + (bad and 1 or 0) })
    names[j] = string.char(97 + j) .. " - 1"
  end
  local py_idx = "(" .. table.concat(names, ", ") .. ",)"
  if not put then return a, idx, py_idx end
  local vs = b
  for j = k + 1, #s do vs[#vs + 1] = s[j] end
  local form = c.r:weighted({ { "full", 5 }, { "suffix", 3 }, { "scalar", 2 } })
  if form == "scalar" then vs = {} elseif form == "suffix" then table.remove(vs, 1) end
  return a, idx, py_idx, c:tensor(vs, c.r:chance(0.97) and dt or c:dtype(ANY)), string.char(98 + k)
end
local function list(I, idx)
  local l = {}
  for j, t in ipairs(idx) do l[j] = t(I) end
  return l
end

R.index = { gen = function(c)
  local a, idx, py_idx = advanced(c, false)
  return function(I) return T.index(a(I), list(I, idx)) end, ("a[%s]"):format(py_idx)
end }

for _, name in ipairs({ "index_put", "index_put_" }) do
  R[name] = { gen = function(c)
    local acc = c.r:chance(0.5)
    local a, idx, py_idx, v, vname = advanced(c, true, acc)
    local call = function(I) return T.index_put(a(I), list(I, idx), v(I), acc) end
    if name == "index_put_" then call = function(I) local x = a(I); return x:index_put_(list(I, idx), v(I), acc) end end
    return call,
      ("a.%s(%s, %s, accumulate=%s)"):format(name, py_idx, vname, acc and "True" or "False"),
      name == "index_put_" and { inplace = a } or nil
  end }
end
end
