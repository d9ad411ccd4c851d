-- Reference values from PyTorch (Debian's python3-torch 1.13 at /usr/bin/python3) for the spec
-- files, and the checks against them. The cases of a file are collected in a batch and evaluated by
-- ONE python process through the bridge (torch_bridge.lua): inputs travel as exact values
-- (safetensors), results come back with their dtype, shape and strides.
--
--   local R = require "torch_ref"
--   local B = R.batch()
--   B:add("exp_f32", "torch.exp(a)", { a = x })        -- x: a crescent tensor (or a number)
--   local res, why = B:run()       -- nil and "python3-torch missing: skipped (...)" without torch
--   R.check(res, "exp_f32", T.exp(x))                  -- dtype, shape and values
--
-- Torch 1.13 on the CPU lacks many float16 kernels ("exp_vml_cpu" not implemented for 'Half');
-- such a case is recomputed on float32 copies of the inputs and the result rounded back to the
-- low-precision dtype, which is what crescent computes (in float, stored as float16).
local T = require "crescent"
local S = require "spec"
local TB = require "torch_bridge"

local R = {}

-- flat list of the values of a tensor in row-major order
local function flat_values(x)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for i = 1, #v do walk(v[i]) end else out[#out + 1] = v end
  end
  walk(x:totable())
  return out
end
R.flat_values = flat_values

-- A Python literal of a Lua number or boolean, and an expression rebuilding a tensor (same dtype,
-- shape and values), for cases whose Python is written out rather than given inputs.
local function num_lit(v)
  if type(v) == "boolean" then return v and "True" or "False" end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" end
  if v == -math.huge then return "-inf" end
  if v == 0 and 1 / v < 0 then return "-0.0" end
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
  return string.format("%.17g", v)
end
R.num_lit = num_lit

function R.lit(x)
  if not T.is_tensor(x) then return num_lit(x) end
  local parts = {}
  for i, v in ipairs(flat_values(x)) do parts[i] = num_lit(v) end  -- torch.tensor converts to dtype
  return string.format("torch.tensor([%s], dtype=torch.%s).reshape(%s)", table.concat(parts, ","), x.dtype,
    "(" .. table.concat(x.shape, ",") .. (#x.shape == 1 and ",)" or ")"))
end

-- ---- batches of references ------------------------------------------------------------------------

-- A tensor record gets v, its flat values (lists: every item).
local function with_values(rec)
  if rec.t then rec.v = flat_values(rec.t) end
  for _, item in ipairs(rec.list or {}) do with_values(item) end
end

local Batch = {}
Batch.__index = Batch
-- prelude: Python statements run once before the cases (helpers their expressions call)
function R.batch(prelude) return setmetatable({ b = TB.batch({ upcast_low = true, prelude = prelude }) }, Batch) end

-- expr: python expression over the names of `inputs` (crescent tensors, numbers, booleans)
function Batch:add(key, expr, inputs) self.b:add(key, expr, inputs) end

-- Runs every case in one python process. Returns the results (key -> {dtype =, shape =, v = flat
-- values} | {error =} | {number =} | {list = {...}}), or nil and the reason.
function Batch:run()
  local res, why = self.b:run()
  if not res then return nil, why end
  for _, rec in pairs(res) do with_values(rec) end
  return res
end

-- Batch:run once, when a spec first asks (a spec file loaded for the coverage check alone, whose
-- it() bodies do not run, starts no python)
function Batch:results()
  if not self.ran then self.ran = { self:run() } end
  return self.ran[1], self.ran[2]
end

-- nested table of shape `shape` from the flat list v (a number for a 0-d shape)
local function nest(v, shape)
  local pos = 0
  local function build(d)
    if d > #shape then pos = pos + 1; return v[pos] end
    local t = {}
    for i = 1, shape[d] do t[i] = build(d + 1) end
    return t
  end
  return build(1)
end

-- Compares a crescent result with the reference `key`: dtype, shape, values (expect.close
-- tolerances unless given). A reference that raised in torch is an error here.
-- (key "name#i": item i of a case whose torch result is a tuple or list)
function R.check(res, key, got, rtol, atol)
  local r = res[key]
  local base, item = key:match("^(.*)#(%d+)$")
  if r == nil and base and res[base] then r = res[base].error and res[base] or (res[base].list or {})[tonumber(item)] end
  if r == nil then error("torch_ref: no reference for " .. key, 2) end
  if r.error then error(string.format("torch raised for %s: %s", key, r.error), 2) end
  if r.dtype ~= got.dtype then error(string.format("%s: dtype %s, torch gives %s", key, got.dtype, r.dtype), 2) end
  if not S.deep_eq(got.shape, r.shape) then
    error(string.format("%s: shape %s, torch gives %s", key, S.fmt(got.shape), S.fmt(r.shape)), 2)
  end
  local ok, e = pcall(S.close, got, nest(r.v, r.shape), rtol, atol)
  if not ok then error(key .. ": " .. tostring(e), 2) end
end

-- True when torch raised for `key` (used where both libraries must reject an input).
function R.raised(res, key) return res[key] ~= nil and res[key].error ~= nil end

-- ---- suites: one `it` per group of cases ---------------------------------------------------------

-- A suite of reference cases checked in groups, one `it` per group. A case passes when crescent
-- and torch agree: the same dtype, shape and values, or both raise.
--   local suite = R.suite()
--   suite:case("unary exp", "exp float32", "torch.exp(a)", { a = x }, function() return T.exp(x) end)
--   suite:check()    -- one python run, then describe("torch references", ...)
local Suite = {}
Suite.__index = Suite
function R.suite() return setmetatable({ batch = R.batch(), groups = {}, order = {} }, Suite) end

function Suite:case(group, key, expr, inputs, fn, rtol, atol)
  self.batch:add(key, expr, inputs)
  if not self.groups[group] then self.groups[group] = {}; self.order[#self.order + 1] = group end
  table.insert(self.groups[group], { key = key, fn = fn, rtol = rtol, atol = atol })
end

local function agree(res, c)
  local r = res[c.key]
  local ok, got = pcall(c.fn)
  if r.error then
    if ok then error(string.format("%s: crescent gives a %s result, torch raises: %s", c.key, got.dtype, r.error), 0) end
    return
  end
  if not ok then error(string.format("%s: crescent raises %s; torch gives a %s result", c.key, tostring(got), r.dtype), 0) end
  R.check(res, c.key, got, c.rtol, c.atol)
end

function Suite:check(title)
  S.describe(title or "torch references", function()
    for _, name in ipairs(self.order) do
      local cases = self.groups[name]
      S.it(name .. " agrees with torch 1.13", function()
        local res, why = self.batch:results()
        if not res then S.skip(why) end
        local bad = {}
        for _, c in ipairs(cases) do
          local ok, e = pcall(agree, res, c)
          if not ok then bad[#bad + 1] = tostring(e) end
        end
        if #bad > 0 then error(#bad .. " of " .. #cases .. " cases differ:\n" .. table.concat(bad, "\n"), 0) end
      end)
    end
  end)
end

-- A list of reference cases, one `it` each: crescent's result (it must not raise) against torch's
-- with R.check; tol(got) gives the tolerances (rtol, atol) or none for expect.close's.
-- (case's arguments are Batch:add's with the crescent function second)
--   local L = R.list(); L:case(key, fn, expr, inputs); L:check("linalg vs PyTorch", tol)
local List = {}
List.__index = List
function R.list() return setmetatable({ batch = R.batch(), cases = {} }, List) end

function List:case(key, fn, expr, inputs)
  self.cases[#self.cases + 1] = { key = key, fn = fn }
  self.batch:add(key, expr, inputs)
end

function List:check(title, tol)
  S.describe(title, function()
    for _, c in ipairs(self.cases) do
      S.it(c.key, function()
        local res, why = self.batch:results()
        if not res then S.skip(why) end
        local got = c.fn()
        if tol then R.check(res, c.key, got, tol(got)) else R.check(res, c.key, got) end
      end)
    end
  end)
end

-- ---- exact layouts: views and joins ---------------------------------------------------------------

-- A(2, 3) = arange(6):view(2, 3), in Lua and in the Python of R.exact's expressions (int64 in both)
function R.A(...)
  local n = 1
  for _, s in ipairs({ ... }) do n = n * s end
  return T.arange(n):view(...)
end
local A_PY = "def A(*s):\n    n = 1\n    for k in s: n *= k\n    return torch.arange(n).view(*s)\n"

local function layout(rec)
  if rec.error then return { error = rec.error } end
  if rec.list then
    local out = {}
    for i, item in ipairs(rec.list) do out[i] = layout(item) end
    return out
  end
  return { shape = rec.shape, stride = rec.stride, values = rec.t:totable(), dtype = rec.dtype }
end

-- The PyTorch expressions of `cases` ({name, lua_fn, py_expr}) in one python process: name ->
-- {shape =, stride =, values =, dtype =}, a list of those (a list of tensors), or {error =};
-- nil and why without torch.
local function exact(cases)
  local b = TB.batch({ prelude = A_PY })
  for _, c in ipairs(cases) do b:add(c[1], c[3]) end
  local res, why = b:run()
  if not res then return nil, why end
  local refs = {}
  for name, rec in pairs(res) do refs[name] = layout(rec) end
  return refs
end

-- got (a tensor) has the shape, strides, dtype and values of ref.
local function same_as(got, ref, what)
  what = what or "result"
  S.truthy(ref.error == nil, "PyTorch raised " .. tostring(ref.error))
  S.eq(got.shape, ref.shape, what .. " shape")
  S.eq(got:stride(), ref.stride, what .. " strides")
  S.eq(got.dtype, ref.dtype, what .. " dtype")
  S.eq(got:totable(), ref.values, what .. " values")
end

-- got (a list of tensors) matches ref piece by piece.
local function same_list(got, ref)
  S.truthy(ref.error == nil, "PyTorch raised " .. tostring(ref.error))
  S.eq(#got, #ref, "number of pieces")
  for i = 1, #ref do same_as(got[i], ref[i], "piece " .. i) end
end

-- One `it` per case of `cases` ({name, lua_fn, py_expr}; R.A builds inputs on both sides): the
-- result (a tensor or a list of tensors) has torch's shapes, strides, dtypes and exact values.
function R.check_exact(title, cases)
  local refs, why = exact(cases)
  S.describe(title, function()
    for _, c in ipairs(cases) do
      S.it(c[1], function()
        if not refs then S.skip(why) end
        local got, ref = c[2](), refs[c[1]]
        if T.is_tensor(got) then same_as(got, ref) else same_list(got, ref) end
      end)
    end
  end)
end

return R
