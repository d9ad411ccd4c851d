-- Random inputs for the differential test against PyTorch (tests/diff/diff_torch.lua).
--
-- A case is built by a recipe (recipes.lua) through the builder below: it asks for tensors of
-- some shape and dtype, numbers, dims, and gets back operands that are both a Lua value (called
-- with the table of materialised inputs) and a Python expression (`.py`). Every tensor input is
-- stored once as a contiguous base tensor; the operand is a view of that base made by a short
-- chain of layout transforms (transpose, a slice with a step, a storage offset, an expand),
-- applied the same way in Lua and in Python, so both sides see the same strides and aliasing
-- (in-place ops on expanded inputs must fail the same way).
local T = require "crescent"

local G = {}

G.rng = require("rng").new  -- (tests/lua/lib/rng.lua: the compile fuzzer draws from it too)

-- A Lua value as Python source (the bridge's: integral numbers as Python ints, tables as tuples).
local py = require("torch_bridge").py
G.py = py

-- A 1-based Lua dim (negative counts from the end, as in PyTorch) as a 0-based Python dim.
function G.pd(d)
  if type(d) == "table" then
    local t = {}
    for i, x in ipairs(d) do t[i] = { py = G.pd(x) } end
    return py(t)
  end
  if d == nil then return "None" end
  return py(d > 0 and d - 1 or d)
end
-- A 1-based index value (negative counts from the end) as a 0-based Python index.
function G.pi(i) return py(i > 0 and i - 1 or i) end

-- ---- shapes -----------------------------------------------------------------------------------

local function numel(s) local n = 1; for _, d in ipairs(s) do n = n * d end; return n end
G.numel = numel

local SIZES = { { 0, 3 }, { 1, 18 }, { 2, 16 }, { 3, 16 }, { 4, 8 }, { 5, 8 }, { 7, 6 }, { 8, 4 },
                { 13, 4 }, { 17, 3 }, { 33, 2 }, { 64, 1 }, { 130, 1 } }
local RANKS = { { 0, 2 }, { 1, 5 }, { 2, 6 }, { 3, 4 }, { 4, 2 } }

-- ---- the case builder ---------------------------------------------------------------------------

local Case = {}
Case.__index = Case

-- key: the case's name in files ("c12"); device: "cpu" or "cuda"
function G.case(rng, key, device)
  return setmetatable({ r = rng, key = key, device = device, inputs = {}, max_numel = 2048 }, Case)
end

-- A random shape: rank in [lo, hi] (default 0..4), sizes mostly small, sometimes 0, 1 or odd
-- sizes past a vector width; numel stays under the case's bound.
function Case:shape(lo, hi, opts)
  opts = opts or {}
  local r = self.r
  local rank
  repeat rank = r:weighted(RANKS) until rank >= (lo or 0) and rank <= (hi or 4)
  local s = {}
  for i = 1, rank do
    local d
    repeat d = r:weighted(SIZES) until not (opts.nonzero and d == 0)
    s[i] = d
  end
  while numel(s) > (opts.max_numel or self.max_numel) do  -- shrink the largest dim
    local k = 1
    for i = 2, #s do if s[i] > s[k] then k = i end end
    s[k] = math.max(1, math.floor(s[k] / 2))
  end
  return s
end

-- A shape that broadcasts with s: some dims set to 1, leading dims dropped or added. With a small
-- probability (bad) one that does not broadcast, so both libraries must raise.
function Case:bshape(s, bad)
  local r = self.r
  local b = {}
  local drop = #s > 0 and r:chance(0.3) and r:int(1, #s) or 0
  for i = drop + 1, #s do b[#b + 1] = r:chance(0.25) and 1 or s[i] end
  if r:chance(0.15) then table.insert(b, 1, r:pick({ 1, 2, 3 })) end
  if bad and r:chance(bad) and #b > 0 then
    local i = r:int(1, #b)
    if b[i] ~= 1 then b[i] = b[i] + 1 else b[i] = 3 end
    if #s > 0 and s[#s - #b + i] == 3 then b[i] = 4 end
  end
  return b
end

function Case:dtype(list) return self.r:pick(list) end

-- A random dim of a rank-n tensor (a 0-d tensor takes 1 / -1, as in PyTorch); extra = 1 allows
-- one past the end (unsqueeze, stack).
function Case:dim(n, extra)
  local m = math.max(n, 1) + (extra or 0)
  if n == 0 and (extra or 0) > 0 then m = 1 end
  local d = self.r:int(1, m)
  return self.r:chance(0.3) and d - m - 1 or d
end

-- 1 to n distinct dims of a rank-n tensor as a table ({1} or {-1} for a 0-d one)
function Case:dims(n)
  if n == 0 then return { self.r:pick({ 1, -1 }) } end
  local all = {}
  for i = 1, n do all[i] = i end
  for i = n, 2, -1 do local j = self.r:int(1, i); all[i], all[j] = all[j], all[i] end
  local t = {}
  for i = 1, self.r:int(1, math.max(1, n)) do t[i] = all[i] and (self.r:chance(0.3) and all[i] - n - 1 or all[i]) end
  return t
end

-- ---- values ----------------------------------------------------------------------------------------

local SPECIAL = { 0 / 0, 1 / 0, -1 / 0, 0, -0.0, 1e30, -1e30, 1e-30 }

-- n values of dtype. opts.lo/hi: an integer range (indices); opts.finite: no specials or
-- huge values (float -> int conversions are undefined there); opts.positive.
function Case:values(n, dtype, opts)
  opts = opts or {}
  local r, v = self.r, {}
  if opts.lo then
    for i = 1, n do v[i] = r:int(opts.lo, opts.hi) end
    return v
  end
  if dtype == "bool" then
    for i = 1, n do v[i] = r:chance(0.5) end
    return v
  end
  if dtype:find("int") then
    local hi = r:pick({ 5, 5, 5, 100, 1000 })
    for i = 1, n do v[i] = r:int(opts.positive and 1 or -hi, hi) end
    return v
  end
  -- floats: normals at a random scale, or small integers (ties, exact zeros, .5 cases)
  local style = r:weighted({ { "normal", 6 }, { "ints", 2 }, { "halves", 1 } })
  local scale = r:pick({ 1, 1, 1, 3, 100, 1e-3 })
  local specials = not opts.finite and r:chance(0.15)
  for i = 1, n do
    local x
    if specials and r:chance(0.1) then x = r:pick(SPECIAL)
    elseif style == "ints" then x = r:int(-3, 3)
    elseif style == "halves" then x = r:int(-6, 6) / 2
    else x = r:normal() * scale end
    if opts.positive and x == x then x = math.abs(x) + (x == 0 and 0.5 or 0) end
    v[i] = x
  end
  return v
end

-- ---- layouts ---------------------------------------------------------------------------------

-- A transform maps a tensor of shape `pre` to one of shape `s`; each picks `pre` from `s`.
-- lua(x) applies it to a crescent tensor, py(e) to a Python expression.
local LAYOUTS = {}
function LAYOUTS.transpose(r, s)
  if #s < 2 then return end
  local i = r:int(1, #s - 1)
  local j = r:int(i + 1, #s)
  local pre = { unpack(s) }
  pre[i], pre[j] = s[j], s[i]
  return pre, function(x) return x:transpose(i, j) end, function(e) return ("%s.transpose(%d, %d)"):format(e, i - 1, j - 1) end
end
function LAYOUTS.step(r, s)
  local ds = {}
  for d = 1, #s do if s[d] >= 1 then ds[#ds + 1] = d end end
  if #ds == 0 then return end
  local d, k = r:pick(ds), r:int(2, 3)
  local pre = { unpack(s) }
  pre[d] = (s[d] - 1) * k + 1 + r:int(0, k - 1)  -- a ragged end sometimes
  return pre, function(x) return x:slice(d, 1, pre[d], k) end,
    function(e) return ("%s[(slice(None),) * %d + (slice(None, None, %d),)]"):format(e, d - 1, k) end
end
function LAYOUTS.offset(r, s)
  if #s == 0 then return end
  local d = r:int(1, #s)
  local pre = { unpack(s) }
  pre[d] = s[d] + 1
  return pre, function(x) return x:narrow(d, 2, s[d]) end, function(e) return ("%s.narrow(%d, 1, %d)"):format(e, d - 1, s[d]) end
end
function LAYOUTS.expand(r, s)
  local pre, changed = {}, false
  local drop = #s > 0 and r:chance(0.3) and r:int(1, #s) or 0
  if drop > 0 then changed = true end
  for d = drop + 1, #s do
    if s[d] ~= 1 and r:chance(0.5) then pre[#pre + 1] = 1; changed = true else pre[#pre + 1] = s[d] end
  end
  if not changed then return end
  local sizes = { unpack(s) }
  return pre, function(x) return x:expand(sizes) end, function(e) return ("%s.expand(%s)"):format(e, py(sizes)) end
end
local LAYOUT_NAMES = { "transpose", "step", "offset", "expand" }

-- A tensor input of shape s and dtype: returns its operand. opts.layout = false keeps it
-- contiguous; opts.values as for Case:values.
function Case:tensor(s, dtype, opts)
  opts = opts or {}
  local r = self.r
  local name = string.char(96 + #self.inputs + 1)  -- a, b, c, ...
  local chain = {}  -- transforms, outermost first
  local cur = s
  if opts.layout ~= false and r:chance(0.5) then
    for _ = 1, r:int(1, 2) do
      local pre, lua, pyf = LAYOUTS[r:pick(LAYOUT_NAMES)](r, cur)
      if pre then
        chain[#chain + 1] = { lua = lua, py = pyf }
        cur = pre
      end
    end
  end
  local input = { name = name, shape = s, base_shape = cur, dtype = dtype, chain = chain,
                  values = self:values(numel(cur), dtype, opts) }
  self.inputs[#self.inputs + 1] = input
  local op = setmetatable({ py = name, input = input }, {
    __call = function(_, I) return I[name] end,
  })
  return op
end

-- A number operand (a Lua number), for ops that take tensor-or-number arguments.
function Case:number(dtype, opts)
  local v = self:values(1, dtype == "bool" and "int64" or dtype, opts)[1]
  return setmetatable({ py = py(v), value = v }, { __call = function() return v end })
end

-- A tensor of the same dtype and shape s, or (with probability p) a number of a compatible kind.
function Case:operand(s, dtype, p)
  if self.r:chance(p or 0.25) then
    return self:number(self.r:chance(0.7) and dtype or self.r:pick({ "float32", "int64" }))
  end
  return self:tensor(s, dtype)
end

-- Options for creation ops: the case's device added when it is not the CPU.
function Case:opts(t)
  t = t or {}
  if self.device ~= "cpu" then t.device = self.device end
  return t
end

-- ---- materialising inputs ---------------------------------------------------------------------

-- The contiguous base of an input as a crescent tensor (fresh each call).
function G.base_tensor(input)
  local s, v = input.base_shape, input.values
  if #s == 0 then return T.tensor(v[1], { dtype = input.dtype }) end
  if numel(s) == 0 then return T.zeros(s, { dtype = input.dtype }) end
  return T.tensor(v, { dtype = input.dtype }):view(s)
end

-- Fresh inputs for one run on device: I[name] = the view, I[name .. "_base"] = its base.
function G.materialise(case, device)
  local I = {}
  for _, input in ipairs(case.inputs) do
    local base = G.base_tensor(input)
    if device ~= "cpu" then base = base:to(device) end
    local x = base
    for i = #input.chain, 1, -1 do x = input.chain[i].lua(x) end
    I[input.name], I[input.name .. "_base"] = x, base
  end
  return I
end

-- Python statements that build the same inputs from the saved bases (L loads one, on DEV).
function G.python_setup(case)
  local lines = {}
  for _, input in ipairs(case.inputs) do
    local e = input.name .. "_base"
    lines[#lines + 1] = ("%s = L(%q)"):format(e, case.key .. "." .. input.name)
    for i = #input.chain, 1, -1 do e = input.chain[i].py(e) end
    lines[#lines + 1] = ("%s = %s"):format(input.name, e)
  end
  return table.concat(lines, "; ")
end

-- A short description of the inputs for reports: a: float32{3,4} transpose(1,2)+offset.
function G.describe(case)
  local parts = {}
  for _, input in ipairs(case.inputs) do
    local chain = {}
    for i = #input.chain, 1, -1 do chain[#chain + 1] = input.chain[i].py("x"):gsub("^x", "") end
    parts[#parts + 1] = ("%s: %s{%s}%s"):format(input.name, input.dtype, table.concat(input.shape, ","),
      #chain > 0 and (" from {" .. table.concat(input.base_shape, ",") .. "} " .. table.concat(chain)) or "")
  end
  return table.concat(parts, "; ")
end

return G
