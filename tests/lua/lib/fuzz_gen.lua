-- The program generator of the compile fuzzer (tests/lua/test_compile_fuzz.lua): random Lua
-- functions over tensors, each from its own seed. Every proposed statement is type-checked by
-- running it on a "shadow" environment holding the program's first-call inputs: only statements
-- that run there are kept, and the shadow gives the shapes and dtypes the next proposals work with.
-- A few programs get a statement that fails on purpose. CRESCENT_FUZZ_DEVICE=cuda makes the inputs
-- and every created tensor CUDA tensors. The ops come from the registry (fuzz_ops.lua).
--   local FG = require "fuzz_gen"; local prog = FG.program(seed); FG.source(prog) -> Lua text
local T = require "crescent"
local FO = require "fuzz_ops"
local new_rng = require("rng").new  -- the differential test's xorshift32: the same draws
local S = expect

local DEVICE = os.getenv("CRESCENT_FUZZ_DEVICE") or "cpu"
local DEV = DEVICE ~= "cpu" and (", device = %q"):format(DEVICE) or ""         -- inside an options table
local DEV_ARG = DEVICE ~= "cpu" and (", {device = %q}"):format(DEVICE) or ""   -- as the options argument
local function opts_src(dtype) return ("{dtype = %q%s}"):format(dtype, DEV) end

-- ---- the op pools (fuzz_ops.lua) -----------------------------------------------------------------

local UNARY, BINARY, COMPARE, REDUCE, ALONG = FO.UNARY, FO.BINARY, FO.COMPARE, FO.REDUCE, FO.ALONG
local VIEWS, TARGET_VIEWS, INPLACE, CREATE_SIZED, CREATE_LIKE = FO.VIEWS, FO.TARGET_VIEWS, FO.INPLACE, FO.CREATE_SIZED,
  FO.CREATE_LIKE
local OPERATOR = { add = "+", sub = "-", mul = "*", div = "/", pow = "^", remainder = "%" }  -- the tensor metatable's
local MISC = {}
for i, e in ipairs(FO.MISC) do MISC[i] = e:gsub("DEV_ARG", DEV_ARG) end
-- conversions: x:op() and x:to(dtype); int: to integers (floats' NaN and inf are guarded first)
local CONVERT = { { 'to("float64")' }, { 'to("float32")' } }
for _, c in ipairs(FO.CONVERT) do CONVERT[#CONVERT + 1] = { c[1] .. "()", int = c.int } end
local FLOAT_LITS = { "0.5", "-1.5", "2", "0", "1e-3", "-0.25", "3", "100", "-1" }
local INT_LITS = { "0", "1", "2", "-1", "3", "-2" }
local DTYPES = { "float32", "float32", "float32", "float32", "float64", "float64", "int64" }
local OPTIONS = { { "default", nil }, { "{hot = 0}", { hot = 0 } },
  { "{mode = \"reduce-overhead\"}", { mode = "reduce-overhead" } },
  { "{mode = \"reduce-overhead\", hot = 0}", { mode = "reduce-overhead", hot = 0 } },
  { "{dynamic = true, hot = 0}", { dynamic = true, hot = 0 } },
  { "{dynamic = true, mode = \"reduce-overhead\"}", { dynamic = true, mode = "reduce-overhead" } } }

-- statement kinds and their weights (generators in GEN below)
local STATEMENTS = {
  { "unary", 10 }, { "binary", 12 }, { "compare_where", 5 }, { "reduce", 6 }, { "along", 3 },
  { "view", 12 }, { "join", 4 }, { "matmul", 3 }, { "create", 2 }, { "convert", 2 },
  { "inplace", 9 }, { "index_assign", 3 }, { "item", 4 }, { "number", 2 }, { "branch", 4 },
  { "loop", 2 }, { "store", 3 }, { "seed", 0.5 }, { "misc", 5 }, { "dup", 2 },
}
local MAX_NUMEL, MAX_RANK, MAX_INT = 2048, 4, 2 ^ 40  -- intermediates kept small; no int64 overflow

-- ---- shapes ---------------------------------------------------------------------------------------

local function numel(s) local n = 1; for _, d in ipairs(s) do n = n * d end; return n end
local function shape_str(s) return "{" .. table.concat(s, ", ") .. "}" end
local function is_float(t) return t.dtype:find("float") ~= nil end
local function bcast(a, b)  -- NumPy broadcasting of two shapes
  for i = 1, math.min(#a, #b) do local x, y = a[#a - i + 1], b[#b - i + 1]; if x ~= y and x ~= 1 and y ~= 1 then return false end end
  return true
end
local function bcast_to(a, b)  -- a broadcasts to exactly b
  if #a > #b then return false end
  for i = 1, #a do local x, y = a[#a - i + 1], b[#b - i + 1]; if x ~= y and x ~= 1 then return false end end
  return true
end
local function union(a, b) local u = {}; for k in pairs(a) do u[k] = true end; for k in pairs(b) do u[k] = true end; return u end
local function overlap(a, b) for k in pairs(a) do if b[k] then return true end end; return false end

-- ---- the generator -------------------------------------------------------------------------------

local G = {}
G.__index = G
local GEN = {}

-- vars: {name, bases = set of storage ids it may alias}; nums: {name, int = integral on every call}
function G:fresh() self.nbase = self.nbase + 1; return { [self.nbase] = true } end
function G:tensor_of(v) return self.env[v.name] end

-- a random live tensor var (the recent ones more often) satisfying pred(tensor, var), and its value
function G:pick(pred)
  local c = {}
  for _, v in ipairs(self.vars) do
    local t = self.env[v.name]
    if T.is_tensor(t) and (not pred or pred(t, v)) then c[#c + 1] = v end
  end
  if #c == 0 then return nil end
  local v = self.r:chance(0.5) and c[self.r:int(math.max(1, #c - 2), #c)] or self.r:pick(c)
  return v, self.env[v.name]
end
local function not_bool(t) return t.dtype ~= "bool" end

function G:scalar(t)  -- a Lua number expression usable with tensor t (integral unless t is float)
  local fl = is_float(t)
  if self.r:chance(0.3) then
    local c = {}
    for _, n in ipairs(self.nums) do if fl or n.int then c[#c + 1] = n.name end end
    if #c > 0 then return self.r:pick(c) end
  end
  return self.r:pick(fl and FLOAT_LITS or INT_LITS)
end

function G:operand(t, p)  -- a tensor var broadcastable with t (probability p), else a scalar
  local b = self.r:chance(p or 0.6) and self:pick(function(u) return not_bool(u) and bcast(u.shape, t.shape) end)
  if b then return b.name, true end
  return self:scalar(t), false
end

function G:dim(t, extra)  -- a valid dim of t (extra: one past the end allowed), sometimes negative
  local n = t:dim() + (extra or 0)
  local d = n > 0 and self.r:int(1, n)
  return d and self.r:chance(0.25) and d - n - 1 or d
end

function G:exec(code)
  local f, err = loadstring(code, "=shadow")
  if not f then error("the generator wrote invalid Lua: " .. err .. "\n" .. code) end
  return pcall(setfenv(f, self.env))
end
function G:eval(expr) local ok, v = self:exec("return " .. expr); if ok then return v end end

local function tensor_ok(t)
  if not T.is_tensor(t) or t:numel() > MAX_NUMEL or t:dim() > MAX_RANK then return false end
  return is_float(t) or t.dtype == "bool" or t:numel() == 0 or t:abs():amax():item() <= MAX_INT
end

-- Validates a proposal on the shadow and appends it. A proposal is {tensor = expr, bases = set},
-- {number = expr, int = bool}, {code = effect} or {done = finished statement}.
function G:accept(p)
  local st = p.done
  if p.tensor or p.number then
    local name = (p.tensor and "t" or "n") .. (#self.stmts + 1)
    local code = name .. " = " .. (p.tensor or p.number)
    local ok = self:exec(code)
    local v = self.env[name]
    if not ok or (p.tensor and not tensor_ok(v)) or (p.number and type(v) ~= "number") then
      self.env[name] = nil
      return false
    end
    if p.tensor then self.vars[#self.vars + 1] = { name = name, bases = p.bases or self:fresh() }
    else self.nums[#self.nums + 1] = { name = name, int = p.int } end
    st = { code = code, def = name, expr = p.tensor and not p.tensor:find("_%(") and p.tensor, bases = p.bases }
  elseif p.code then
    if not self:exec(p.code) then return false end
    st = { code = p.code }
  end
  self.stmts[#self.stmts + 1] = st
  return true
end

-- A view expression of var v (for in-place targets and the view statement), or nil.
function G:view_expr(v, kinds)
  local r, t = self.r, self:tensor_of(v)
  local s, n, name = t.shape, t:dim(), v.name
  local k = r:pick(kinds or VIEWS)
  local d = n >= 1 and r:int(1, n)
  if k == "transpose" and n >= 2 then return ("%s:transpose(%d, %d)"):format(name, self:dim(t), self:dim(t))
  elseif k == "t" and n <= 2 then return name .. ":t()"
  elseif k == "permute" and n >= 2 then
    return name .. ":permute(" .. table.concat(r:shuffle(({ {}, { 1, 2 }, { 1, 2, 3 }, { 1, 2, 3, 4 } })[n]), ", ") .. ")"
  elseif k == "narrow" and d then
    local st = r:int(1, math.max(1, s[d]))
    return ("%s:narrow(%d, %d, %d)"):format(name, d, st, r:int(0, s[d] - st + 1))
  elseif k == "select" and d then return ("%s:select(%d, %d)"):format(name, d, r:int(1, math.max(1, s[d])))
  elseif k == "slice" and d then
    local a = r:int(1, math.max(1, s[d]))
    return ("%s:slice(%d, %d, %d, %d)"):format(name, d, a, r:int(a, math.max(a, s[d])), r:int(1, 2))
  elseif k == "index" and d then return ("%s[%d]"):format(name, r:int(1, math.max(1, s[1])))
  elseif k == "unsqueeze" then return ("%s:unsqueeze(%d)"):format(name, self:dim(t, 1))
  elseif k == "squeeze" then
    return (d and r:chance(0.7)) and ("%s:squeeze(%d)"):format(name, self:dim(t)) or name .. ":squeeze()"
  elseif k == "expand" then  -- size-1 dims grow, maybe a new leading dim
    local sz = {}
    if r:chance(0.3) then sz[1] = r:int(1, 3) end
    for i = 1, n do sz[#sz + 1] = s[i] == 1 and r:pick({ 1, 2, 3, 4 }) or (r:chance(0.3) and -1 or s[i]) end
    return ("%s:expand(%s)"):format(name, shape_str(sz))
  elseif k == "reshape" or k == "view" then
    local sz, left = {}, numel(s)
    for _ = 1, r:int(0, 2) do  -- random divisors of what is left (1 when nothing is)
      local divs = {}
      for q = 1, math.max(1, left) do if left % q == 0 then divs[#divs + 1] = q end end
      sz[#sz + 1] = r:pick(divs)
      left = left / sz[#sz]
    end
    sz[#sz + 1] = left
    if numel(s) > 0 and r:chance(0.3) then sz[r:int(1, #sz)] = -1 end
    return ("%s:%s(%s)"):format(name, k, r:chance(0.5) and shape_str(sz) or table.concat(sz, ", "))
  elseif k == "flatten" then
    if n < 2 or r:chance(0.5) then return name .. ":flatten()" end
    local a = r:int(1, n - 1)
    return ("%s:flatten(%d, %d)"):format(name, a, r:int(a, n))
  elseif k == "contiguous" then return name .. ":contiguous()"
  end
end

-- ---- statement generators (each returns a proposal or nil) ---------------------------------------

function GEN.unary(g)
  local v, t = g:pick(not_bool)
  if not v then return end
  local ops = {}
  for _, op in ipairs(UNARY) do if is_float(t) or op.int then ops[#ops + 1] = op end end
  local op = g.r:pick(ops)
  local src = op.abs and v.name .. ":abs()" or v.name
  if op[1] == "neg" and g.r:chance(0.3) then return { tensor = "-" .. v.name } end
  return { tensor = g.r:chance(0.2) and ("T.%s(%s)"):format(op[1], src) or ("%s:%s()"):format(src, op[1]) }
end

function GEN.binary(g)
  local a, ta = g:pick(not_bool)
  if not a then return end
  local r, op = g.r, g.r:pick(BINARY)
  local rhs, is_t = g:operand(ta)
  if OPERATOR[op] and r:chance(0.5) then
    if not is_t and r:chance(0.3) then return { tensor = ("%s %s %s"):format(rhs, OPERATOR[op], a.name) } end
    return { tensor = ("%s %s %s"):format(a.name, OPERATOR[op], rhs) }
  elseif FO.ALPHA[op] and r:chance(0.4) then
    return { tensor = ("T.%s(%s, %s, {alpha = %s})"):format(op, a.name, rhs, g:scalar(ta)) }
  end
  return { tensor = r:chance(0.5) and ("T.%s(%s, %s)"):format(op, a.name, rhs) or ("%s:%s(%s)"):format(a.name, op, rhs) }
end

function GEN.compare_where(g)
  local a, ta = g:pick(not_bool)
  if not a then return end
  local r = g.r
  local cond = ("%s:%s(%s)"):format(a.name, r:pick(COMPARE), (g:operand(ta, 0.4)))
  if r:chance(0.35) then return { tensor = cond } end
  local c = g:pick(function(t) return t.dtype == "bool" and bcast(t.shape, ta.shape) end)
  if c and r:chance(0.5) then cond = c.name end
  local b = g:operand(ta, 0.5)
  if r:chance(0.3) then return { tensor = ("T.where(%s, %s, %s)"):format(cond, b, a.name) } end
  return { tensor = ("T.where(%s, %s, %s)"):format(cond, a.name, b) }
end

function GEN.reduce(g)
  local a, ta = g:pick()
  if not a then return end
  local r, red = g.r, g.r:pick(REDUCE)
  local op = (red.float and not is_float(ta)) and "sum" or red[1]
  local d, kd = g:dim(ta), r:pick({ "", ", true", ", false" })
  if not d or r:chance(0.2) then return { tensor = ("%s:%s()"):format(a.name, op) } end
  if ta:dim() >= 2 and r:chance(0.2) and red.dims then d = ("{%d, %d}"):format(1, r:int(2, ta:dim())) end
  if r:chance(0.3) then return { tensor = ("T.%s(%s, %s%s)"):format(op, a.name, d, kd) } end
  return { tensor = ("%s:%s(%s%s)"):format(a.name, op, d, kd) }
end

function GEN.along(g)  -- softmax, log_softmax, cumsum
  local a, ta = g:pick(function(t) return is_float(t) and t:dim() >= 1 end)
  local op = g.r:pick(ALONG)
  return a and { tensor = g.r:chance(0.3) and ("T.%s(%s, %d)"):format(op, a.name, g:dim(ta))
    or ("%s:%s(%d)"):format(a.name, op, g:dim(ta)) }
end

function GEN.misc(g)
  local a, ta = g:pick(is_float)
  if not a then return end
  local b = g:pick(function(t) return is_float(t) and bcast(t.shape, ta.shape) end) or a
  local e = g.r:pick(MISC):gsub("A", a.name):gsub("B", b.name):gsub("D", g:dim(ta) or 1)
  return { tensor = e }
end

function GEN.view(g)
  local a = g:pick()
  local e = a and g:view_expr(a)
  return e and { tensor = e, bases = a.bases }
end

function GEN.join(g)
  local r = g.r
  local a, ta = g:pick(function(t) return t:dim() >= 1 end)
  if not a then return end
  local parts = { a.name }
  if r:chance(0.5) then  -- cat along d: partners equal but along d
    local d = r:int(1, ta:dim())
    for _ = 1, r:int(1, 2) do
      local b = g:pick(function(t)
        if t:dim() ~= ta:dim() then return false end
        for i = 1, t:dim() do if i ~= d and t.shape[i] ~= ta.shape[i] then return false end end
        return true
      end)
      parts[#parts + 1] = b and b.name or ("(%s * 2)"):format(a.name)
    end
    return { tensor = ("T.cat({%s}, %d)"):format(table.concat(r:shuffle(parts), ", "), d) }
  end
  parts[2] = g:pick(function(t) return S.deep_eq(t.shape, ta.shape) end).name
  return { tensor = ("T.stack({%s}, %d)"):format(table.concat(r:shuffle(parts), ", "), r:int(1, ta:dim() + 1)) }
end

function GEN.matmul(g)
  local a, ta = g:pick(function(t) return is_float(t) and t:dim() >= 1 and t:dim() <= 3 end)
  if not a then return end
  local n = ta:dim()
  local b = g:pick(function(t)
    local m = t:dim()
    return t.dtype == ta.dtype and m >= 1 and m <= 3 and t.shape[m == 1 and 1 or m - 1] == ta.shape[n]
  end)
  local bn = b and b.name or (n == 1 and a.name or ("%s:transpose(%d, %d)"):format(a.name, n - 1, n))
  return { tensor = g.r:chance(0.3) and ("T.matmul(%s, %s)"):format(a.name, bn) or ("%s:matmul(%s)"):format(a.name, bn) }
end

function GEN.create(g)
  local r, a, ta = g.r, g:pick()
  local shape, dt, k = shape_str(a and ta.shape or { r:int(1, 4) }), r:pick(DTYPES), r:int(1, 5)
  if k <= 2 then return { tensor = ("T.%s(%s, %s)"):format(r:pick(CREATE_SIZED), shape, opts_src(dt)) }
  elseif k == 3 and a then return { tensor = ("T.%s(%s)"):format(r:pick(CREATE_LIKE), a.name) }
  elseif k == 4 then return { tensor = ("T.arange(%d, %s):view(%s)"):format(a and ta:numel() or 4, opts_src(dt), a and shape or "{4}") }
  end
  return { tensor = ("T.full(%s, %s, %s)"):format(shape, g:scalar({ dtype = dt }), opts_src(dt)) }
end

function GEN.convert(g)
  local a, ta = g:pick()
  if not a then return end
  local c = g.r:pick(CONVERT)
  if c.int and is_float(ta) then  -- NaN, inf and huge floats have no integer value (UB in C++)
    return { tensor = ("T.where(%s:eq(%s), %s, 0):clamp(-1e9, 1e9):%s"):format(a.name, a.name, a.name, c[1]) }
  end
  return { tensor = a.name .. ":" .. c[1], bases = c[1] ~= "clone()" and a.bases or nil }
end

-- In place on a var or a view of it; a tensor operand must not share storage with the target
-- (partially overlapping reads and writes have no defined order) unless it is the target itself.
function GEN.inplace(g)
  local r = g.r
  local a = g:pick(not_bool)
  if not a then return end
  local target = r:chance(0.4) and g:view_expr(a, TARGET_VIEWS) or a.name
  local tt = g:eval(target)
  if not T.is_tensor(tt) then return end
  local op = r:pick(INPLACE)
  local function operand()
    local b = r:chance(0.6) and g:pick(function(t, v)
      return not_bool(t) and bcast_to(t.shape, tt.shape) and (is_float(tt) or not is_float(t))  -- no float -> int copies
        and (not overlap(v.bases, a.bases) or target == v.name)
    end)
    if b then return b.name, true end
    return g:scalar(tt), false
  end
  local e
  if op == "clamp_" then
    local lo, hi = r:pick({ "-1", "0", "nil" }), r:pick({ "1", "2", "nil" })
    if is_float(tt) and r:chance(0.5) then lo, hi = r:pick({ "-0.5", "nil" }), r:pick({ "0.75", "nil" }) end
    e = ("%s:clamp_(%s, %s)"):format(target, lo, (lo == "nil" and hi == "nil") and "1" or hi)
  elseif op == "fill_" then e = ("%s:fill_(%s)"):format(target, g:scalar(tt))
  elseif op == "masked_fill_" then e = ("%s:masked_fill_(%s:gt(0), %s)"):format(target, target, g:scalar(tt))
  elseif op == "zero_" then e = target .. ":zero_()"
  elseif op == "copy_" then
    local b, is_t = operand()
    e = ("%s:%s(%s)"):format(target, is_t and "copy_" or "fill_", b)
  else
    if op == "div_" and not is_float(tt) then op = "mul_" end
    local b = operand()
    if op == "add_" and r:chance(0.3) then e = ("%s:add_(%s, {alpha = %s})"):format(target, b, g:scalar(tt))
    else e = ("%s:%s(%s)"):format(target, op, b) end
  end
  if r:chance(0.2) then return { tensor = e, bases = a.bases } end  -- local tN = target:op_(...)
  return { code = e }
end

function GEN.index_assign(g)  -- v[i] = number or tensor, v[i][j] = ...
  local r = g.r
  local a, ta = g:pick(function(t) return t:dim() >= 1 and t.shape[1] >= 1 and not_bool(t) end)
  if not a then return end
  local lhs = ("%s[%d]"):format(a.name, r:int(1, ta.shape[1]))
  if ta:dim() >= 2 and ta.shape[2] >= 1 and r:chance(0.3) then lhs = ("%s[%d]"):format(lhs, r:int(1, ta.shape[2])) end
  local tl = g:eval(lhs)
  if not T.is_tensor(tl) then return end
  local b = r:chance(0.4) and g:pick(function(t, v)
    return not_bool(t) and bcast_to(t.shape, tl.shape) and (is_float(tl) or not is_float(t)) and not overlap(v.bases, a.bases)
  end)
  return { code = lhs .. " = " .. (b and b.name or g:scalar(tl)) }
end

function GEN.item(g)  -- a Lua number from a graph break (or a shape query, which is none)
  local r = g.r
  local a, ta = g:pick()
  if not a then return end
  local int = not is_float(ta)
  local k = r:int(1, 6)
  if k == 1 and ta:numel() == 1 and not_bool(ta) then return { number = a.name .. ":item()", int = int }
  elseif k == 2 and ta:dim() >= 1 then return { number = ("%s:size(%d)"):format(a.name, r:int(1, ta:dim())), int = true }
  elseif k == 3 then return { number = ("#tostring(%s)"):format(a.name), int = true }
  end
  local red = r:pick(REDUCE)  -- (a boolean item is no number)
  local op = ((red.float and int) or red.bool or ta:numel() == 0) and "sum" or red[1]
  return { number = ("%s:%s():item()"):format(a.name, op), int = int or (op == red[1] and red.index) }
end

function GEN.number(g)  -- Lua arithmetic on numbers (math.floor keeps NaN and inf: integral if its input is)
  if #g.nums == 0 then return end
  local a, b = g.r:pick(g.nums), g.r:pick(g.nums)
  return g.r:pick({ { number = ("math.floor(%s)"):format(a.name), int = a.int },
    { number = ("%s * 2 - %s"):format(a.name, b.name), int = a.int and b.int },
    { number = ("math.abs(%s) + 1"):format(a.name), int = a.int },
    { number = ("(%s > %s) and %s or 0.5"):format(a.name, b.name, a.name), int = false } })
end

function GEN.dup(g)  -- an earlier tensor expression again (common subexpressions, aliases of one view)
  local c = {}
  for _, st in ipairs(g.stmts) do if st.expr then c[#c + 1] = st end end
  local st = #c > 0 and g.r:pick(c)
  local bases = st and st.bases and {}  -- a view: of whatever its vars may alias now (a loop may rebind them)
  for _, v in ipairs(bases and g.vars or {}) do if st.expr:find("%f[%w]" .. v.name .. "%f[%W]") then bases = union(bases, v.bases) end end
  return st and { tensor = st.expr, bases = bases or nil }
end

function GEN.store(g)  -- store.sK = value read by the caller after the call
  local r = g.r
  local key, a = "s" .. r:int(1, 4), g:pick()
  if not a then return end
  if r:chance(0.3) then
    local p = GEN[r:pick({ "unary", "binary", "reduce", "view" })](g)
    if p and p.tensor and T.is_tensor(g:eval(p.tensor)) then return { code = ("store.%s = %s"):format(key, p.tensor) } end
  end
  if #g.nums > 0 and r:chance(0.3) then return { code = ("store.%s = {%s, %s}"):format(key, a.name, r:pick(g.nums).name) } end
  return { code = ("store.%s = %s"):format(key, a.name) }
end

function GEN.seed(g) return { code = ("T.manual_seed(%d)"):format(g.r:int(1, 99)) } end

function G:condition()  -- a data-dependent (or argument-dependent) condition
  local k, a = self.r:int(1, 3), self:pick(not_bool)
  if k == 1 and #self.nums > 0 then return ("%s > 0"):format(self.r:pick(self.nums).name) end
  return (k == 2 or not a) and "k > 1" or ("%s:sum():item() > 0"):format(a.name)
end

-- local tN = E0; if cond then tN = EA; effect else tN = EB; effect end (EA, EB typed as E0).
function GEN.branch(g)
  local r = g.r
  local kinds = { "unary", "binary", "reduce", "view", "compare_where", "along" }
  local p0 = GEN[r:pick(kinds)](g)
  if not p0 or not p0.tensor then return end
  local name, t0, cond = "t" .. (#g.stmts + 1), g:eval(p0.tensor), g:condition()
  if not tensor_ok(t0) or g:eval(cond) == nil then return end
  local bases, sides = p0.bases or g:fresh(), {}
  for side = 1, 2 do
    local lines = {}
    local p = GEN[r:pick(kinds)](g)
    local t = p and p.tensor and g:eval(p.tensor)
    if r:chance(0.7) and tensor_ok(t) and t.dtype == t0.dtype and S.deep_eq(t.shape, t0.shape) then
      lines[#lines + 1] = "\n  " .. name .. " = " .. p.tensor
      bases = union(bases, p.bases or g:fresh())
    end
    local e = r:chance(0.6) and GEN[r:pick({ "inplace", "store", "index_assign" })](g)
    if e and e.code and g:exec(e.code) then lines[#lines + 1] = "\n  " .. e.code end
    sides[side] = table.concat(lines)
  end
  g.env[name] = t0
  g.vars[#g.vars + 1] = { name = name, bases = bases }
  local code = ("%s = %s\nif %s then%s\n"):format(name, p0.tensor, cond, sides[1])
  code = code .. (sides[2] ~= "" and "else" .. sides[2] .. "\n" or "") .. "end"
  return { done = { code = code, def = name } }
end

-- for j = 1, n do v = <v op ...> end: v keeps its shape and dtype; the body may break with item().
function GEN.loop(g)
  local r = g.r
  local v, tv = g:pick(is_float)
  if not v then return end
  local b = g:pick(function(t) return is_float(t) and bcast_to(t.shape, tv.shape) end)
  local n = v.name
  local body = r:pick({ ("%s = %s * 0.5 + j"):format(n, n), ("%s = (%s + %s):tanh()"):format(n, n, b and b.name or "1"),
    ("%s = %s - %s:sum():item()"):format(n, n, n), ("%s:mul_(0.5):add_(j)"):format(n),
    ("store.l%d = %s * j"):format(r:int(1, 2), n) })
  local code = ("for j = 1, %d do\n  %s\nend"):format(r:int(1, 3), body)
  if not g:exec(code) then return end
  local t = g:tensor_of(v)
  if not T.is_tensor(t) or t.dtype ~= tv.dtype or not S.deep_eq(t.shape, tv.shape) then g.env[n] = tv; return end
  if body:find("^" .. n .. " =") then v.bases = union(v.bases, g:fresh()) end
  return { done = { code = code } }
end

-- A statement that fails on some calls: eager's error must be the compiled one.
function G:bad_statement()
  local a = (self:pick(function(t) return t:dim() >= 1 end) or { name = "x" }).name
  local bad = self.r:pick({ a .. " + T.zeros(7" .. DEV_ARG .. ")", a .. ":select(1, 99)", a .. ":amax(9)", "(" .. a .. " * 2):view(1000)",
    "error(\"boom\")", a .. ":sum(1):item() + nil" })
  return { code = ("if %s then\n  local _ = %s\nend"):format(self:condition(), bad) }
end

-- ---- programs ------------------------------------------------------------------------------------

local function input_expr(inp)  -- the Lua expression making one input
  local s, mk, post = inp.shape, {}, ""
  for i, d in ipairs(s) do mk[i] = d end
  if inp.layout == "t" and #s >= 2 then  -- made transposed, permuted back: not contiguous
    local perm = {}
    for i = #s, 1, -1 do mk[#s - i + 1] = s[i]; perm[#perm + 1] = i end
    post = ":permute(" .. table.concat(perm, ", ") .. ")"
  elseif inp.layout == "expand" then  -- one dim has stride 0
    for i, d in ipairs(s) do if d > 1 then mk[i] = 1; post = ":expand(" .. shape_str(s) .. ")"; break end end
  end
  if inp.dtype == "int64" then return ("T.randint(-5, 6, {%d}%s):view(%s)%s"):format(numel(mk), DEV_ARG, shape_str(mk), post) end
  return ("T.randn(%s, %s)%s"):format(shape_str(mk), opts_src(inp.dtype), post)
end

-- inputs x, y, z (shapes mostly broadcast-compatible), k (a Lua number), and the call plan
local function gen_inputs(r)
  local master, inputs = {}, {}
  for i = 1, r:int(0, 3) do master[i] = r:chance(0.05) and 0 or r:int(1, 5) end
  for i = 1, 3 do
    local s = {}
    if r:chance(0.75) then
      for j = r:int(1, #master + 1), #master do s[#s + 1] = r:chance(0.2) and 1 or master[j] end
    else
      for j = 1, r:int(0, 3) do s[j] = r:int(1, 5) end
    end
    inputs[i] = { shape = s, dtype = r:pick(DTYPES), layout = r:chance(0.15) and r:pick({ "t", "expand" }) or "plain" }
  end
  local kint, ks = r:chance(0.5), {}
  for c = 1, 8 do ks[c] = kint and r:pick({ 2, 3, -1 }) or r:pick({ 1.5, -0.75, 2.25 }) end
  local plan = { calls = r:int(4, 6), variant = r:pick({ "none", "none", "scalar", "shape", "layout" }),
    alias = r:chance(0.06), k = ks, kint = kint, delayed = r:chance(0.3), mutate = r:chance(0.3) }
  if plan.variant ~= "scalar" then for c = 2, 8 do ks[c] = ks[1] end end
  if plan.variant == "shape" or plan.variant == "layout" then  -- calls 3 and 4 get other inputs
    local sizes, flip = {}, r:int(1, 3)
    for _, inp in ipairs(inputs) do for _, d in ipairs(inp.shape) do if d >= 2 then sizes[#sizes + 1] = d end end end
    local from = plan.variant == "shape" and #sizes > 0 and r:pick(sizes)  -- this size grows by one
    plan.alt = {}
    for i, inp in ipairs(inputs) do
      local s, lay = {}, inp.layout
      for j, d in ipairs(inp.shape) do s[j] = d == from and d + 1 or d end
      if plan.variant == "layout" and i == flip then lay = lay == "plain" and "t" or "plain" end
      plan.alt[i] = { shape = s, dtype = inp.dtype, layout = lay }
    end
  end
  return inputs, plan
end

local function args_source(inputs, plan, seed)
  local function list(ins) local e = {}; for i, inp in ipairs(ins) do e[i] = input_expr(inp) end; return table.concat(e, ", ") end
  local ks = {}
  for c = 1, 8 do ks[c] = tostring(plan.k[c]) end
  local lines = { "return function(T, call)", ("  T.manual_seed(%d + call)"):format(seed % 100000), "  local x, y, z" }
  if plan.alt then
    lines[#lines + 1] = "  if call == 3 or call == 4 then x, y, z = " .. list(plan.alt) .. " else x, y, z = " .. list(inputs) .. " end"
  else
    lines[#lines + 1] = "  x, y, z = " .. list(inputs)
  end
  if plan.alias then lines[#lines + 1] = "  z = x" end
  lines[#lines + 1] = ("  return x, y, z, ({%s})[call]\nend"):format(table.concat(ks, ", "))
  return table.concat(lines, "\n")
end

local function gen_program(seed)
  local r = new_rng(seed)
  local inputs, plan = gen_inputs(r)
  local prog = { plan = plan, args_src = args_source(inputs, plan, seed), opts = r:pick(OPTIONS) }
  local env = setmetatable({ T = T, store = {} }, { __index = _G })
  env.x, env.y, env.z, env.k = loadstring(prog.args_src, "=args")()(T, 1)
  local g = setmetatable({ r = r, env = env, stmts = {}, nbase = 3, nums = { { name = "k", int = plan.kint } },
    vars = { { name = "x", bases = { true } }, { name = "y", bases = { [2] = true } },
      { name = "z", bases = plan.alias and { true } or { [3] = true } } } }, G)
  local want = r:int(5, 40)
  for _ = 1, want * 4 do
    if #g.stmts >= want then break end
    local p = GEN[r:weighted(STATEMENTS)](g)
    if p then g:accept(p) end
  end
  if r:chance(0.05) then table.insert(g.stmts, r:int(1, #g.stmts + 1), g:bad_statement()) end
  local rets = {}  -- recent tensors, numbers, a table of tensors, literals
  for i = 1, r:chance(0.05) and 0 or r:int(1, 4) do
    local k, a, b = r:int(1, 10), g:pick(), g:pick()
    if k <= 5 and a then rets[i] = a.name
    elseif k == 6 and #g.nums > 0 then rets[i] = r:pick(g.nums).name
    elseif k == 7 and a and b then rets[i] = ("{%s, key = %s}"):format(a.name, b.name)
    elseif k == 8 then rets[i] = r:pick({ "\"tag\"", "true", "nil", "k" })
    else rets[i] = "x" end
  end
  prog.stmts, prog.rets = g.stmts, rets
  return prog
end

local function source(prog)
  local out = { "return function(T, store)", "  return function(x, y, z, k)" }
  for _, st in ipairs(prog.stmts) do out[#out + 1] = "    " .. ((st.def and "local " or "") .. st.code):gsub("\n", "\n    ") end
  out[#out + 1] = "    return " .. table.concat(prog.rets, ", ") .. "\n  end\nend"
  return table.concat(out, "\n")
end


return { DEVICE = DEVICE, program = gen_program, source = source }
