-- Recipes of the reductions (sum, mean, amax, aminmax, var, norm, argmax, max, sort, topk, cumsum,
-- softmax, ...) for the differential test (tests/diff/recipes.lua builds the table; see there for
-- what a recipe is).
local T = require "crescent"
local G = require "gen"
local py, pd = G.py, G.pd

return function(R, H)
local ANY, FLOAT, dt, maybe_dtype = H.ANY, H.FLOAT, H.dt, H.maybe_dtype

-- A reduction's dim argument: nil, one dim or a table of dims; keepdim only with a dim.
local function red_args(c, n, single)
  local r = c.r
  local dim
  if r:chance(0.3) then dim = nil
  elseif single or r:chance(0.6) then dim = c:dim(n)
  else dim = c:dims(n) end
  local kd = dim ~= nil and r:pick({ nil, true, false }) or nil
  return dim, kd
end

-- sum / mean / amax / ...: torch function f(a, dim=..., keepdim=...[, **kw]).
-- style "dimkw": torch takes dim tuples; "multi": one dim only (multi() in crescent_ops.py);
-- "alldims": the dim may not be None (alldims(a)); "nonekw": keywords need dim=None (var, std).
local function reduction(name, f, style, dtypes, opt_fn)
  return { reduce = true, gen = function(c)
    local s = c:shape()
    local a = c:tensor(s, c:dtype(dtypes or ANY))
    local dim, kd = red_args(c, #s)
    local opts, pykw = nil, ""
    if opt_fn then opts, pykw = opt_fn(c) end
    local pdim = dim == nil and (style == "alldims" and "alldims(a)" or "None") or pd(dim)
    local pykd = kd == nil and "False" or py(kd)
    local expr
    if style == "multi" then expr = ("multi(%s, a, %s, %s%s)"):format(f, pdim, pykd, pykw)
    elseif dim == nil and style == "nonekw" then expr = ("%s(a, dim=None%s)"):format(f, pykw)
    elseif dim == nil and style ~= "alldims" then expr = ("%s(a%s)"):format(f, pykw)
    else expr = ("%s(a, dim=%s, keepdim=%s%s)"):format(f, pdim, pykd, pykw) end
    local args = { dim, kd, opts, n = opts and 3 or (dim ~= nil and 2 or 0) }
    return function(I) return T[name](a(I), unpack(args, 1, args.n)) end, expr
  end }
end

local function dtype_kw(c)
  local d = maybe_dtype(c, { "float32", "float64", "int64" })
  if not d then return nil, "" end
  return { dtype = d }, ", dtype=" .. dt(d)
end

R.sum = reduction("sum", "torch.sum", "dimkw", ANY, dtype_kw)
R.mean = reduction("mean", "torch.mean", "dimkw", ANY, dtype_kw)
R.prod = reduction("prod", "torch.prod", "multi", ANY, dtype_kw)
R.amax = reduction("amax", "torch.amax", "alldims", ANY)
R.amin = reduction("amin", "torch.amin", "alldims", ANY)
R.all = reduction("all", "torch.all", "multi", ANY)
R.any = reduction("any", "torch.any", "multi", ANY)
R.logsumexp = reduction("logsumexp", "torch.logsumexp", "alldims", ANY)
R.norm = reduction("norm", "torch.linalg.vector_norm", "dimkw", ANY, function(c)
  local p = c.r:pick({ false, 1, 2, 3, 0.5, math.huge, 0 })
  if not p then return nil, "" end
  return { p = p }, ", ord=" .. py(p)
end)
for _, name in ipairs({ "var", "std" }) do
  R[name] = reduction(name, "torch." .. name, "nonekw", ANY, function(c)
    local k = c.r:pick({ false, "correction", "unbiased" })
    if k == "correction" then
      local v = c.r:pick({ 0, 1, 2 })
      return { correction = v }, ", correction=" .. py(v)
    elseif k == "unbiased" then
      local v = c.r:chance(0.5)
      return { unbiased = v }, ", unbiased=" .. py(v)
    end
    return nil, ""
  end)
end

-- argmax / argmin: 1-based indices; ties go to the first occurrence in both
for _, name in ipairs({ "argmax", "argmin" }) do
  R[name] = { gen = function(c)
    local s = c:shape()
    local a = c:tensor(s, c:dtype(ANY))
    local dim, kd = red_args(c, #s, true)
    if dim == nil then return function(I) return T[name](a(I)) end, ("torch.%s(a) + 1"):format(name) end
    return function(I) return T[name](a(I), dim, kd) end,
      ("torch.%s(a, %s, keepdim=%s) + 1"):format(name, pd(dim), py(kd or false))
  end }
end

-- x gathered at 1-based indices i along d (i has x's rank when keepdim): the values the indices
-- point at, compared with torch's values, so that ties may pick any index.
local function gathered(x, d, i, keepdim)
  if x:dim() == 0 then return x:clone() end
  local g = T.gather(x, d, keepdim and i or i:unsqueeze(d))
  return keepdim and g or g:squeeze(d)
end

for _, name in ipairs({ "max", "min" }) do
  R[name] = { gen = function(c)
    local s = c:shape()
    local a = c:tensor(s, c:dtype(ANY))
    local dim, kd = red_args(c, #s, true)
    if dim == nil then return function(I) return T[name](a(I)) end, ("torch.%s(a)"):format(name) end
    return function(I)
      local v, i = T[name](a(I), dim, kd)
      return v, gathered(a(I), dim, i, kd)
    end, ("(lambda r: (r[0], r[0]))(torch.%s(a, %s, keepdim=%s))"):format(name, pd(dim), py(kd or false))
  end }
end

-- aminmax: torch's keyword dim / keepdim as crescent's options
R.aminmax = { gen = function(c)
  local s = c:shape()
  local a = c:tensor(s, c:dtype(ANY))
  local dim, kd = red_args(c, #s, true)
  return function(I) return T.aminmax(a(I), { dim = dim, keepdim = kd }) end,
    ("tuple(torch.aminmax(a%s, keepdim=%s))"):format(dim and ", dim=" .. pd(dim) or "", py(kd or false))
end }

R.sort = { gen = function(c)
  local s = c:shape()
  local a = c:tensor(s, c:dtype(ANY))
  local dim = c.r:chance(0.7) and c:dim(#s) or nil
  local desc = c.r:pick({ nil, true, false })
  return function(I)
    local v, i = T.sort(a(I), dim, desc)
    return v, gathered(a(I), dim or -1, i, true)
  end, ("(lambda r: (r[0], r[0]))(torch.sort(a, %s, descending=%s))"):format(dim and pd(dim) or "-1", py(desc or false))
end }

R.topk = { gen = function(c)
  local s = c:shape()
  local a = c:tensor(s, c:dtype(ANY))
  local dim = c.r:chance(0.7) and c:dim(#s) or nil
  local n = #s == 0 and 1 or s[dim and (dim > 0 and dim or #s + dim + 1) or #s]
  local k = c.r:chance(0.05) and n + 1 or c.r:int(0, n)
  if #s == 0 then k = 1 end  -- torch's topk(0-d, 0) returns an uninitialised 0-d tensor
  local largest, sorted = c.r:pick({ nil, true, false }), c.r:pick({ nil, true, false })
  local d = dim or -1
  local pyd = pd(d)
  local sort_after = sorted == false  -- the order is unspecified: compare sorted values
  return function(I)
    local v, i = T.topk(a(I), k, dim, largest, sorted)
    local g = gathered(a(I), d, i, true)
    if sort_after and v:dim() > 0 then v, g = T.sort(v, d), T.sort(g, d) end
    return v, g
  end, ("(lambda v: (v, v))(%s)"):format(sort_after and #s > 0
    and ("torch.sort(torch.topk(a, %d, %s, largest=%s)[0], %s)[0]"):format(k, pyd, py(largest ~= false), pyd)
    or ("torch.topk(a, %d, %s, largest=%s)[0]"):format(k, pyd, py(largest ~= false)))
end }

R.cumsum = { reduce = true, gen = function(c)
  local s = c:shape()
  local a = c:tensor(s, c:dtype(ANY))
  local d = c:dim(#s)
  local dtype = maybe_dtype(c, { "float32", "float64", "int64" })
  if dtype then return function(I) return T.cumsum(a(I), d, { dtype = dtype }) end, ("torch.cumsum(a, %s, dtype=%s)"):format(pd(d), dt(dtype)) end
  return function(I) return T.cumsum(a(I), d) end, ("torch.cumsum(a, %s)"):format(pd(d))
end }

for _, name in ipairs({ "softmax", "log_softmax" }) do
  R[name] = { reduce = true, gen = function(c)
    local s = c:shape()
    local a = c:tensor(s, c:dtype(ANY))
    local d = c:dim(#s)
    local dtype = maybe_dtype(c, FLOAT)
    if dtype then return function(I) return T[name](a(I), d, { dtype = dtype }) end, ("torch.%s(a, %s, dtype=%s)"):format(name, pd(d), dt(dtype)) end
    return function(I) return T[name](a(I), d) end, ("torch.%s(a, %s)"):format(name, pd(d))
  end }
end
end
