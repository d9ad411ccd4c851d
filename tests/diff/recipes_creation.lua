-- Recipes of the creation ops for the differential test (tests/diff/recipes.lua builds the
-- table; see there for what a recipe is). A function of the table and recipes.lua's helpers.
local T = require "crescent"
local G = require "gen"
local py = G.py

return function(R, H)
local op, dt, maybe_dtype, ANY, NUM, FLOAT, CREATE = H.op, H.dt, H.maybe_dtype, H.ANY, H.NUM, H.FLOAT, H.CREATE

-- ---- creation ------------------------------------------------------------------------------------

-- opts for a creation op and the matching Python keywords
local function create_opts(c, p)
  local d = maybe_dtype(c, CREATE, p or 0.5)
  local o = c:opts({ dtype = d })
  return o, ("dtype=%s, device=DEV"):format(dt(d))
end

local function size_args(c, s)
  if c.r:chance(0.5) then return { s, n = 1 } end
  local t = { unpack(s) }
  t.n = #s
  return t
end

for _, name in ipairs({ "zeros", "ones" }) do
  R[name] = { gen = function(c)
    local s = c:shape()
    local o, kw = create_opts(c)
    local args = size_args(c, s)
    args.n = args.n + 1; args[args.n] = o
    return function() return T[name](unpack(args, 1, args.n)) end, ("torch.%s(%s, %s)"):format(name, py(s), kw)
  end }
end

-- random or uninitialised values: dtype and shape only
for _, name in ipairs({ "empty", "rand", "randn" }) do
  R[name] = { shape_only = true, gen = function(c)
    local s = c:shape()
    local o, kw = create_opts(c, name == "empty" and 0.5 or 0)
    if name ~= "empty" and c.r:chance(0.3) then
      o.dtype = c:dtype(FLOAT); kw = ("dtype=%s, device=DEV"):format(dt(o.dtype))
    end
    local args = size_args(c, s)
    args.n = args.n + 1; args[args.n] = o
    return function() return T[name](unpack(args, 1, args.n)) end, ("torch.%s(%s, %s)"):format(name, py(s), kw)
  end }
end

R.randint = { shape_only = true, gen = function(c)
  local s = c:shape()
  local lo = c.r:int(-5, 5)
  local hi = lo + c.r:int(c.r:chance(0.05) and -1 or 1, 10)
  local o, kw = create_opts(c, 0.3)
  return function() return T.randint(lo, hi, s, o) end, ("torch.randint(%d, %d, %s, %s)"):format(lo, hi, py(s), kw)
end }

R.empty_like = { shape_only = true, gen = function(c)
  local a = c:tensor(c:shape(), c:dtype(ANY))
  local o, kw = create_opts(c)
  return function(I) return T.empty_like(a(I), o) end, ("torch.empty_like(a, %s)"):format(kw)
end }
for _, name in ipairs({ "zeros_like", "ones_like" }) do
  R[name] = { gen = function(c)
    local a = c:tensor(c:shape(), c:dtype(ANY))
    local o, kw = create_opts(c)
    return function(I) return T[name](a(I), o) end, ("torch.%s(a, %s)"):format(name, kw)
  end }
end

R.full = { gen = function(c)
  local s = c:shape()
  local v = c:number(c:dtype(NUM))
  local o, kw = create_opts(c, 0.4)
  return function() return T.full(s, v.value, o) end, ("torch.full(%s, %s, %s)"):format(py(s), v.py, kw)
end }

R.arange = { gen = function(c)
  local r = c.r
  local ints = r:chance(0.6)
  local function num(lo, hi) return ints and r:int(lo, hi) or (r:int(lo * 4, hi * 4) / 4 + (r:chance(0.5) and 0.1 or 0)) end
  local start, stop = num(-10, 10), num(-10, 20)
  local step = num(1, 4)
  if start > stop then step = -step end
  if r:chance(0.03) then step = 0 end
  local o, kw = create_opts(c, 0.3)
  local form = r:int(1, 3)
  if form == 1 then return function() return T.arange(math.abs(stop), o) end, ("torch.arange(%s, %s)"):format(py(math.abs(stop)), kw) end
  if form == 2 then
    if start > stop then start, stop = stop, start end
    return function() return T.arange(start, stop, o) end, ("torch.arange(%s, %s, %s)"):format(py(start), py(stop), kw)
  end
  return function() return T.arange(start, stop, step, o) end, ("torch.arange(%s, %s, %s, %s)"):format(py(start), py(stop), py(step), kw)
end }

R.linspace = { gen = function(c)
  local a, b = c:number("float32").value, c:number(c:dtype(NUM)).value
  local n = c.r:int(c.r:chance(0.05) and -1 or 0, 40)
  local o, kw = create_opts(c, 0.3)
  return function() return T.linspace(a, b, n, o) end, ("torch.linspace(%s, %s, %d, %s)"):format(py(a), py(b), n, kw)
end }

R.eye = { gen = function(c)
  local n = c.r:int(c.r:chance(0.03) and -1 or 0, 9)
  local o, kw = create_opts(c, 0.4)
  if c.r:chance(0.5) then return function() return T.eye(n, o) end, ("torch.eye(%d, %s)"):format(n, kw) end
  local m = c.r:int(0, 9)
  return function() return T.eye(n, m, o) end, ("torch.eye(%d, %d, %s)"):format(n, m, kw)
end }

-- T.tensor(data): a nested table of numbers (integral ones make int64, as Python ints do) or of
-- booleans, sometimes ragged (both raise)
R.tensor = { gen = function(c)
  local s = c:shape(0, 3, { max_numel = 64 })
  local kind = c.r:pick({ "float32", "int64", "bool" })
  local vals = c:values(G.numel(s), kind)
  local pos = 0
  local function build(d)
    if d > #s then pos = pos + 1; return vals[pos] end
    local t = {}
    for i = 1, s[d] do t[i] = build(d + 1) end
    return t
  end
  local data = build(1)
  if #s >= 2 and s[1] >= 2 and s[2] >= 1 and c.r:chance(0.05) then table.remove(data[1]) end  -- ragged
  local function pylist(v)
    if type(v) ~= "table" then return py(v) end
    local parts = {}
    for i, x in ipairs(v) do parts[i] = pylist(x) end
    return "[" .. table.concat(parts, ", ") .. "]"
  end
  local o, kw = create_opts(c, 0.3)
  return function() return T.tensor(data, o) end, ("torch.tensor(%s, %s)"):format(pylist(data), kw)
end }

end
