-- The compile fuzzer's comparison with PyTorch (tests/lua/test_compile_fuzz.lua).
--
-- A program runs once more, eagerly, through a recording proxy: a proxy `T` and proxy tensors
-- (userdata with the tensor's operators, methods, properties, indexing and index assignment)
-- that call the real crescent functions and record a trace: each call's crescent name, its
-- arguments (tensor ids, numbers, tables), its results and whether it raised. Lua numbers
-- (item(), sizes) take crescent's values, so the trace fixes the control flow. Crescent's values
-- (every result, and after an in-place write every tensor sharing the target's storage) and the
-- traces go through the PyTorch bridge (torch_bridge.lua): ONE python process replays a whole
-- batch (tests/torch_bridge/replay.py: chain and per-op modes, described there).
--
--   local FT = require "fuzz_torch"
--   local batch = FT.batch(device)                  -- nil, reason when python3-torch is missing
--   batch:add(key, record)                          -- record(P): runs the program with proxy T P
--   local results = batch:run()                     -- key -> { findings = ..., chain = ... }
--
-- Findings are judged with tests/diff/excuses.lua (known, documented differences) and the list
-- below. CRESCENT_FUZZ_KEEP=1 keeps the exchange files (jobs, values, status).
local T = require "crescent"
local ffi = require "ffi"
local core = require "crescent.core"
local TB = require "torch_bridge"
local C = require "compare"
local RC = require "recipes"

local FT = {}

FT.json = TB.json  -- the encoding of the traces

-- ---- the recording proxy ---------------------------------------------------------------------------

-- Methods that read the handle and make no tensor: passed through, not recorded.
local PASS = { dim = true, numel = true, size = true, stride = true, is_contiguous = true, totable = true,
  _shape_str = true, data_ptr = true }
local PROPS = { shape = true, dtype = true, device = true }
local OPERATORS = { __add = "add", __sub = "sub", __mul = "mul", __div = "div", __pow = "pow", __mod = "remainder" }
-- T's functions that are passed through (they make no tensor, or only change the generator)
local T_PASS = { manual_seed = true, is_tensor = true, compile = true }

local REC      -- the recorder of the program running now
local DATA = setmetatable({}, { __mode = "k" })  -- proxy -> { id =, t = real tensor }
local PROTO = newproxy(true)
local MT = getmetatable(PROTO)

local function is_proxy(v) return DATA[v] ~= nil end
local function storage(t) return tonumber(ffi.cast("intptr_t", core.ptr(t)._storage)) end
local function key(t) return tonumber(ffi.cast("intptr_t", core.ptr(t))) end
local function snapshot(t) return t.device == "cpu" and t:clone() or t:cpu() end

local Rec = {}
Rec.__index = Rec

local function new_recorder()
  return setmetatable({ calls = {}, values = {}, nvalue = 0, real = {}, proxy = {}, by_key = {}, cur = {} }, Rec)
end

function Rec:save(id)  -- crescent's value of tensor id now, by name
  self.nvalue = self.nvalue + 1
  local name = "v" .. self.nvalue
  self.values[name] = snapshot(self.real[id])
  self.cur[id] = name
  return name
end

function Rec:wrap(t)  -- the proxy of real tensor t (one per crescent tensor)
  local k = key(t)
  local p = self.by_key[k]
  if p then return p end
  p = newproxy(PROTO)
  local id = #self.real + 1
  self.real[id], self.proxy[id], self.by_key[k] = t, p, p
  DATA[p] = { id = id, t = t }
  return p
end

-- An argument as the manifest encodes it, and as crescent takes it (proxies unwrapped).
function Rec:arg(v)
  if is_proxy(v) then
    local d = DATA[v]
    local e = { ["$t"] = d.id, s = self.cur[d.id], st = d.t:stride() }
    if d.t.device ~= "cpu" then e.d = d.t.device end
    return e, d.t
  end
  if type(v) ~= "table" then return v, v end
  local enc, real = {}, {}
  for k, x in pairs(v) do enc[k], real[k] = self:arg(x) end
  return enc, real
end

-- A result: the proxy given to the program and its encoding (values saved).
function Rec:result(v, fresh)
  if T.is_tensor(v) then
    local p = self:wrap(v)
    local id = DATA[p].id
    local e = { ["$t"] = id, s = fresh[id] or self:save(id), st = v:stride() }
    if v.device ~= "cpu" then e.d = v.device end
    return p, e
  end
  if type(v) == "table" then  -- split / chunk: a list of tensors
    local out, enc = {}, {}
    for i, x in ipairs(v) do out[i], enc[i] = self:result(x, fresh) end
    return out, enc
  end
  return v, v
end

-- After a write into target: every tensor sharing its storage gets a new saved value.
function Rec:written(target)
  local s, post, fresh = storage(target), {}, {}
  for id, t in ipairs(self.real) do
    if storage(t) == s then fresh[id] = self:save(id); post[tostring(id)] = fresh[id] end
  end
  return post, fresh
end

local function pack(...) return { n = select("#", ...), ... } end

-- Calls the real function for a recorded call; how = "T" (T.name), "method", "set" (x[k] = v).
local function invoke(how, name, real, n)
  if how == "T" then return T[name](unpack(real, 1, n)) end
  if how == "set" then real[1][real[2]] = real[3]; return end
  if name == "index" then return real[1][real[2]] end
  return real[1][name](unpack(real, 1, n))
end

local function record(how, name, args)
  local r = REC
  local enc, real = {}, {}
  for i = 1, args.n do enc[i], real[i] = r:arg(args[i]) end
  enc.n = args.n
  local res = pack(pcall(invoke, how, name, real, args.n))
  local call = { f = name, a = enc }
  r.calls[#r.calls + 1] = call
  local fresh = {}
  local target = real[1]
  if (name:sub(-1) == "_" or how == "set") and T.is_tensor(target) then call.post, fresh = r:written(target) end
  if not res[1] then
    call.e = tostring(res[2])
    error(res[2], 0)
  end
  local out, renc = {}, {}
  for i = 2, res.n do out[i - 1], renc[i - 1] = r:result(res[i], fresh) end
  renc.n = res.n - 1
  call.r = renc
  return unpack(out, 1, res.n - 1)
end

local method_fns = {}
local function method(name)
  method_fns[name] = method_fns[name] or function(...) return record("method", name, pack(...)) end
  return method_fns[name]
end

MT.__index = function(p, k)
  local t = DATA[p].t
  if type(k) == "number" then return record("method", "index", pack(p, k)) end
  if PROPS[k] then return t[k] end
  if PASS[k] then return function(self, ...) return t[k](DATA[self] and DATA[self].t or self, ...) end end
  local m = t[k]
  if type(m) == "function" then return method(k) end
  return m
end
MT.__newindex = function(p, k, v) record("set", "setindex", pack(p, k, v)) end
MT.__tostring = function(p) return tostring(DATA[p].t) end
MT.__len = function(p) return #DATA[p].t end
for mm, name in pairs(OPERATORS) do MT[mm] = function(a, b) return record("T", name, pack(a, b)) end end
MT.__unm = function(a) return record("T", "neg", pack(a)) end

local t_fns = {}
local PT = setmetatable({}, { __index = function(_, k)
  local v = T[k]
  if type(v) ~= "function" then return v end
  if k == "is_tensor" then return function(x) return is_proxy(x) or T.is_tensor(x) end end
  if T_PASS[k] then return v end
  t_fns[k] = t_fns[k] or function(...) return record("T", k, pack(...)) end
  return t_fns[k]
end })

-- The tensors in v (a value the caller sees: a tensor, or a table holding some), as arguments.
local function visible(v, out)
  if is_proxy(v) then out[#out + 1] = v
  elseif type(v) == "table" then for _, x in pairs(v) do visible(x, out) end end
  return out
end

-- Runs fn(P, observe) with P the proxy T; observe(...) records the tensors the caller sees.
-- Returns the trace and the values (name -> tensor).
function FT.record(fn)
  REC = new_recorder()
  local rec = REC
  local function observe(...)
    local seen = visible(pack(...), {})
    local enc = {}
    for i, p in ipairs(seen) do enc[i] = rec:arg(p) end
    rec.calls[#rec.calls + 1] = { f = "=observe", a = enc }
  end
  local ok, err = pcall(fn, PT, observe)
  REC = nil
  if not ok then error(err, 0) end
  return rec.calls, rec.values
end

-- ---- judging ---------------------------------------------------------------------------------------

-- Known differences of the fuzzer's programs beyond excuses.lua's (same fields).
FT.EXCUSES = {
  { op = "_gelu_backward", kind = "differs", class = "torch",
    when = function(c)
      local i = c.inputs
      return c.device == "cpu" and #i == 2 and i[1].dtype == "float32" and FT.json(i[1].strides) ~= FT.json(i[2].strides)
    end,
    why = "torch 1.13's oneDNN gelu_backward reads float32 operands of different layouts as if they shared one: "
      .. "gelu_backward(ones(4, 3).t(), x.contiguous()) gives values of 1e-38 to 1e22" },
}

-- The excuse of a finding, or nil. The case the excuses' predicates read: the op, the device, its
-- inputs (crescent's dtypes, strides and values of the call's tensor arguments, `vals` by name,
-- read on demand) and a Python-like text.
local function excuse(f, call, vals, device)
  local case = setmetatable({ op = f.op, expr = f.op .. FT.json(call.a), device = device }, { __index = function(c, k)
    if k ~= "inputs" then return nil end
    local inputs = {}
    local function walk(e)
      if type(e) ~= "table" then return end
      if e["$t"] then
        local s = C.snapshot(vals(e.s))
        inputs[#inputs + 1] = { shape = s.shape, values = s.v, dtype = s.dtype, strides = e.st }
      else for _, x in pairs(e) do walk(x) end end
    end
    walk(call.a)
    rawset(c, "inputs", inputs)
    return inputs
  end })
  case.expr = case.expr:gsub('"dtype": "(%w+)"', "dtype=torch.%1")
  return RC.excuse(case, f.kind, f.msg, FT.EXCUSES) or RC.excuse(case, f.kind, f.msg)
end

-- ---- the batch ---------------------------------------------------------------------------------------

local Batch = {}
Batch.__index = Batch

-- A batch of programs for one python process, or nil and why not.
function FT.batch(device)
  if device == "cuda" and not T.cuda.is_available() then return nil, "crescent sees no GPU" end
  local ok, why = TB.have(TB.need(device))
  if not ok then return nil, why end
  return setmetatable({ progs = {}, keys = {}, values = {}, device = device }, Batch)
end

-- Records program `key`: run(P, observe) runs it with proxy T P (see FT.record). An error that
-- escapes run is the harness's. Its values are the bridge's inputs "key/name".
function Batch:add(key, run)
  local calls, values = FT.record(run)
  for name, v in pairs(values) do self.values[key .. "/" .. name] = v end
  self.progs[key] = { calls = calls }
  self.keys[#self.keys + 1] = key
end

function Batch:size() return #self.keys end

local function reduce_ops()
  local out = {}
  for name, r in pairs(RC.RECIPES) do if r.reduce then out[#out + 1] = name end end
  table.sort(out)
  return out
end

-- Replays the batch: key -> { chain = "ok" | "diverged" | "stopped", at =, why =, calls =,
-- findings = { {call =, op =, kind =, msg =, mode =, class =, why =}, ... } } or { failed = msg }.
-- class is "mismatch" or an excuse's class. The batch is empty afterwards.
function Batch:run()
  if #self.keys == 0 then return {} end
  local jobs = {}
  for i, k in ipairs(self.keys) do jobs[i] = { key = k, calls = self.progs[k].calls } end
  local res, why = TB.run({ handler = "replay", device = self.device, tol = C.TOL, reduce = reduce_ops() }, jobs,
    self.values, { keep = os.getenv("CRESCENT_FUZZ_KEEP") })
  res = res or {}
  for _, k in ipairs(self.keys) do
    local r, p = res[k] or { failed = why or "no torch outcome" }, self.progs[k]
    res[k] = r
    local function vals(name) return self.values[k .. "/" .. name] end
    for _, fd in ipairs(r.findings or {}) do
      local e = excuse(fd, p.calls[fd.call], vals, self.device)
      fd.class, fd.why = e and e.class or "mismatch", e and e.why
    end
  end
  self.progs, self.keys, self.values = {}, {}, {}
  return res
end

-- The first finding of r that is a mismatch (or the replayer's failure), as a table, or nil.
function FT.mismatch(r)
  if r.failed then return { kind = "failed", op = "replay", msg = r.failed, call = 0 } end
  for _, f in ipairs(r.findings) do if f.class == "mismatch" then return f end end
end

-- A one-line description of a finding.
function FT.describe(f)
  return ("torch %s at call %d (%s, %s mode): %s"):format(f.kind, f.call, f.op, f.mode or "-", f.msg)
end

return FT
