-- Recipes of the convolution ops (im2col, col2im, conv2d) for the differential test
-- (tests/diff/recipes.lua builds the table; see there for what a recipe is). Values are finite:
-- PyTorch's CPU convolution skips padded positions, so inf * 0 there is not compared.
local T = require "crescent"
local G = require "gen"
local py = G.py

return function(R, H)
local FLOAT = H.FLOAT

-- a window geometry whose output is non-empty for an H x W input (now and then not: both raise)
local function geometry(c)
  local g = { k = { c.r:int(1, 3), c.r:int(1, 3) }, d = { c.r:int(1, 2), 1 }, p = { c.r:int(0, 1), c.r:int(0, 1) },
              s = { c.r:int(1, 2), c.r:int(1, 2) } }
  g.H, g.W = c.r:int(1, 6), c.r:int(1, 6)
  if c.r:chance(0.9) then
    g.H = math.max(g.H, g.d[1] * (g.k[1] - 1) + 1)
    g.W = math.max(g.W, g.d[2] * (g.k[2] - 1) + 1)
  end
  g.Ho = math.floor((g.H + 2 * g.p[1] - g.d[1] * (g.k[1] - 1) - 1) / g.s[1]) + 1
  g.Wo = math.floor((g.W + 2 * g.p[2] - g.d[2] * (g.k[2] - 1) - 1) / g.s[2]) + 1
  g.py = ("%s, dilation=%s, padding=%s, stride=%s"):format(py(g.k), py(g.d), py(g.p), py(g.s))
  return g
end

R.im2col = { reduce = true, gen = function(c)
  local g = geometry(c)
  local x = c:tensor({ c.r:int(1, 2), c.r:int(1, 3), g.H, g.W }, c:dtype(FLOAT), { finite = true })
  return function(I) return T.im2col(x(I), g.k, g.d, g.p, g.s) end,
    ("F.unfold(a, %s)"):format(g.py)
end }

R.col2im = { reduce = true, gen = function(c)
  local g = geometry(c)
  local C = c.r:int(1, 3)
  local x = c:tensor({ c.r:int(1, 2), C * g.k[1] * g.k[2], math.max(g.Ho, 0) * math.max(g.Wo, 0) }, c:dtype(FLOAT), { finite = true })
  return function(I) return T.col2im(x(I), { g.H, g.W }, g.k, g.d, g.p, g.s) end,
    ("F.fold(a, %s, %s)"):format(py({ g.H, g.W }), g.py)
end }

R.conv2d = { reduce = true, gen = function(c)
  local g = geometry(c)
  local groups = c.r:pick({ 1, 1, 2 })
  local cin, cout = groups * c.r:int(1, 2), groups * c.r:int(1, 2)
  local dt = c:dtype(FLOAT)
  local x = c:tensor({ c.r:int(1, 2), cin, g.H, g.W }, dt, { finite = true })
  local w = c:tensor({ cout, cin / groups, g.k[1], g.k[2] }, dt, { finite = true })
  local bias = c.r:chance(0.5) and c:tensor({ cout }, dt, { finite = true }) or nil
  local pyargs = ("stride=%s, padding=%s, dilation=%s, groups=%d"):format(py(g.s), py(g.p), py(g.d), groups)
  return function(I) return T.conv2d(x(I), w(I), bias and bias(I), g.s, g.p, g.d, groups) end,
    ("F.conv2d(a, b, %s, %s)"):format(bias and "c" or "None", pyargs)
end }
end
