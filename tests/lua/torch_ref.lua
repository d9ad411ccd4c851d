-- Reference values from PyTorch (Debian's python3-torch 1.13 at /usr/bin/python3) for the Lua
-- specs. Cases are collected in a batch and evaluated by ONE python process (importing torch
-- takes about a second), inputs are passed as exact literals (%.17g round-trips every float32 /
-- float16 / bfloat16 / float64 value), results come back as a Lua table:
--
--   local R = require "torch_ref"
--   local B = R.batch()
--   B:add("exp_f32", "torch.exp(a)", { a = x })        -- x: a crescent tensor (or a number)
--   local res = B:run()            -- nil, reason when python3-torch is missing
--   R.check(res, "exp_f32", T.exp(x))                  -- dtype, shape and values
--
-- Torch 1.13 on the CPU lacks many float16 kernels ("exp_vml_cpu" not implemented for 'Half');
-- such a case is recomputed on float32 copies of the inputs and the result rounded back to the
-- low-precision dtype, which is what crescent computes (in float, stored as float16).
local T = require "crescent"
local S = require "spec"

local R = {}
R.python = os.getenv("CRESCENT_TEST_PYTHON") or "/usr/bin/python3"

local available
function R.available()
  if available == nil then
    local p = io.popen(R.python .. " -c 'import torch; print(\"torch-ok\")' 2>/dev/null")
    local out = p and p:read("*a") or ""
    if p then p:close() end
    available = out:find("torch-ok", 1, true) ~= nil
  end
  return available
end

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

-- a python expression that rebuilds x (tensor: same dtype, shape and values; number: itself)
function R.lit(x)
  if not T.is_tensor(x) then return num_lit(x) end
  local vals = flat_values(x)
  local parts = {}
  for i, v in ipairs(vals) do parts[i] = num_lit(v) end  -- torch.tensor converts to dtype
  return string.format("torch.tensor([%s], dtype=torch.%s).reshape(%s)", table.concat(parts, ","), x.dtype,
    "(" .. table.concat(x.shape, ",") .. (#x.shape == 1 and ",)" or ")"))
end

local PRELUDE = [[
import sys, math, torch
import torch.nn.functional as F
nan, inf = float('nan'), float('inf')
LOW = (torch.float16, torch.bfloat16)
def lua_str(s):
    return '"' + str(s).replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n') + '"'
def lua_num(v):
    if isinstance(v, bool): return 'true' if v else 'false'
    v = float(v)
    if v != v: return '(0/0)'
    if v == inf: return '(1/0)'
    if v == -inf: return '(-1/0)'
    return repr(v)
def emit(key, r):
    if isinstance(r, torch.Tensor):
        vals = r.detach().reshape(-1).tolist()
        print('R[%s] = {dtype = %s, shape = {%s}, v = {%s}}' % (lua_str(key), lua_str(str(r.dtype)[6:]),
              ','.join(str(s) for s in r.shape), ','.join(lua_num(v) for v in vals)))
    elif isinstance(r, (tuple, list)):
        print('R[%s] = {list = true}' % lua_str(key))
        for i, x in enumerate(r): emit(key + '#' + str(i + 1), x)
    else:
        print('R[%s] = {number = %s}' % (lua_str(key), lua_num(r)))
def run(key, expr, env):
    env = dict(env, torch=torch, F=F, math=math, nan=nan, inf=inf)
    try:
        r = eval(expr, env)
    except Exception as e:
        msg = str(e)
        low = [v.dtype for v in env.values() if isinstance(v, torch.Tensor) and v.dtype in LOW]
        if 'not implemented for' not in msg or not low:
            print('R[%s] = {error = %s}' % (lua_str(key), lua_str(msg.split('\n')[0])))
            return
        up = {k: (v.float() if isinstance(v, torch.Tensor) and v.dtype in LOW else v) for k, v in env.items()}
        try:
            r = eval(expr, up)
        except Exception as e2:
            print('R[%s] = {error = %s}' % (lua_str(key), lua_str(str(e2).split('\n')[0])))
            return
        if isinstance(r, torch.Tensor) and r.dtype == torch.float32: r = r.to(low[0])
    emit(key, r)
]]

local Batch = {}
Batch.__index = Batch

function R.batch() return setmetatable({ lines = {}, keys = {} }, Batch) end

-- expr: python expression over the names of `inputs` (crescent tensors, numbers, booleans)
function Batch:add(key, expr, inputs)
  assert(not self.keys[key], "torch_ref: duplicate key " .. key)
  self.keys[key] = true
  local env = {}
  for name, v in pairs(inputs or {}) do env[#env + 1] = string.format("%q: %s", name, R.lit(v)) end
  self.lines[#self.lines + 1] = string.format("run(%q, %q, {%s})", key, expr, table.concat(env, ", "))
end

-- Runs every case in one python process. Returns the results table, or nil and the reason.
function Batch:run()
  if not R.available() then return nil, "no python3-torch at " .. R.python end
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(PRELUDE, "\n", table.concat(self.lines, "\n"), "\n")
  f:close()
  local p = io.popen(R.python .. " " .. path .. " 2>&1")
  local out = p:read("*a")
  p:close()
  os.remove(path)
  local chunk, err = loadstring("local R = {}\n" .. out .. "\nreturn R", "=torch_ref")
  if not chunk then error("torch_ref: python output is not a Lua table: " .. err .. "\n" .. out:sub(1, 2000)) end
  return chunk()
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
R.nest = nest

-- Compares a crescent result with the reference `key`: dtype, shape, values (expect.close
-- tolerances unless given). A reference that raised in torch is an error here.
function R.check(res, key, got, rtol, atol)
  local r = res[key]
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
  local res, why = self.batch:run()
  S.describe(title or "torch references", function()
    for _, name in ipairs(self.order) do
      local cases = self.groups[name]
      S.it(name .. " agrees with torch 1.13", function()
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

return R
