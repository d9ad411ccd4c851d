-- The compile fuzzer's comparison with PyTorch (tests/lua/test_compile_fuzz.lua).
--
-- A program runs once more, eagerly, through a recording proxy: a proxy `T` and proxy tensors
-- (userdata with the tensor's operators, methods, properties, indexing and index assignment)
-- that call the real crescent functions and record a trace: each call's crescent name, its
-- arguments (tensor ids, numbers, tables), its results and whether it raised. Lua numbers
-- (item(), sizes) take crescent's values, so the trace fixes the control flow. Crescent's values
-- (every result, and after an in-place write every tensor sharing the target's storage) go to a
-- safetensors file per program, the traces to a manifest, and ONE python process replays a whole
-- batch (tests/diff/fuzz_replay.py: chain and per-op modes, described there).
--
--   local FT = require "fuzz_torch"
--   local batch = FT.batch(device)                  -- nil, reason when python3-torch is missing
--   batch:add(key, record)                          -- record(P): runs the program with proxy T P
--   local results = batch:run()                     -- key -> { findings = ..., chain = ... }
--
-- Findings are judged with tests/diff/recipes.lua's EXCUSES (known, documented differences) and
-- the list below. CRESCENT_FUZZ_KEEP=1 keeps the exchange files (manifest, values, status).
local T = require "crescent"
local ffi = require "ffi"
local core = require "crescent.core"
local here = debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./"
package.path = here .. "../diff/?.lua;" .. package.path
local X = require "exchange"
local C = require "compare"
local RC = require "recipes"

local FT = {}

-- ---- JSON (the manifest) ----------------------------------------------------------------------------

local ESC = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r" }
local function jstr(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return ESC[c] or ("\\u%04x"):format(c:byte()) end) .. '"'
end

-- v as JSON: integral numbers as Python ints, NaN and infinities as {"$f": ...}; a table with
-- `n` or an array part is a list (n counts trailing nils), else an object.
local function json(v, out)
  local ty = type(v)
  if v == nil then out[#out + 1] = "null"
  elseif ty == "boolean" then out[#out + 1] = tostring(v)
  elseif ty == "number" then
    if v ~= v then out[#out + 1] = '{"$f": "nan"}'
    elseif v == math.huge then out[#out + 1] = '{"$f": "inf"}'
    elseif v == -math.huge then out[#out + 1] = '{"$f": "-inf"}'
    elseif v == 0 and 1 / v < 0 then out[#out + 1] = "-0.0"
    elseif v == math.floor(v) and math.abs(v) < 2 ^ 53 then out[#out + 1] = ("%d"):format(v)
    else out[#out + 1] = ("%.17g"):format(v) end
  elseif ty == "string" then out[#out + 1] = jstr(v)
  elseif ty == "table" then
    local n = v.n or #v
    if v.n or n > 0 or next(v) == nil then
      out[#out + 1] = "["
      for i = 1, n do if i > 1 then out[#out + 1] = ", " end; json(v[i], out) end
      out[#out + 1] = "]"
    else
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = k end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      out[#out + 1] = "{"
      for i, k in ipairs(keys) do
        out[#out + 1] = (i > 1 and ", " or "") .. jstr(tostring(k)) .. ": "
        json(v[k], out)
      end
      out[#out + 1] = "}"
    end
  else error("fuzz_torch: cannot encode a " .. ty, 0) end
  return out
end
FT.json = function(v) return table.concat(json(v, {})) end

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

-- Known differences of the fuzzer's programs beyond recipes.lua's EXCUSES (same fields).
FT.EXCUSES = {
}

-- The excuse of a finding, or nil. The case the EXCUSES' predicates read: the op, its inputs
-- (crescent's values of the call's tensor arguments, loaded on demand) and a Python-like text.
local function excuse(f, call, file)
  local case = setmetatable({ op = f.op, expr = f.op .. FT.json(call.a) }, { __index = function(c, k)
    if k ~= "inputs" then return nil end
    local vals, inputs = T.load(file), {}
    local function walk(e)
      if type(e) ~= "table" then return end
      if e["$t"] then
        local s = C.snapshot(vals[e.s])
        inputs[#inputs + 1] = { shape = s.shape, values = s.v }
      else for _, x in pairs(e) do walk(x) end end
    end
    walk(call.a)
    rawset(c, "inputs", inputs)
    return inputs
  end })
  case.expr = case.expr:gsub('"dtype": "(%w+)"', "dtype=torch.%1")
  for _, list in ipairs({ FT.EXCUSES, RC.EXCUSES }) do
    for _, e in ipairs(list) do
      if (e.op == f.op or e.op == "*" or (type(e.op) == "table" and e.op[f.op])) and e.kind == f.kind
         and (not e.match or f.msg:find(e.match)) and (not e.when or e.when(case)) then
        return e
      end
    end
  end
end

-- ---- the batch ---------------------------------------------------------------------------------------

local Batch = {}
Batch.__index = Batch

-- A batch of programs for one python process, or nil and why not.
function FT.batch(device)
  if device == "cuda" and not T.cuda.is_available() then return nil, "crescent sees no GPU" end
  if not X.torch_available(X.python, device) then
    return nil, ("no python3 with torch%s at %s"):format(device == "cuda" and " and CUDA" or "", X.python)
  end
  return setmetatable({ progs = {}, keys = {} }, Batch)
end

-- Records program `key`: run(P, observe) runs it with proxy T P (see FT.record). An error that
-- escapes run is the harness's.
function Batch:add(key, run)
  local calls, values = FT.record(run)
  self.dir = self.dir or X.tmpdir()  -- the exchange files of this batch, removed by run()
  local file = ("%s/%s.safetensors"):format(self.dir, key)
  if next(values) == nil then values.none = T.zeros(1) end  -- no tensor at all: save needs one
  T.save(file, values)
  self.progs[key] = { calls = calls, file = file }
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
  local lines = { FT.json({ tol = C.TOL, reduce = reduce_ops() }) }
  for _, k in ipairs(self.keys) do
    local p = self.progs[k]
    lines[#lines + 1] = FT.json({ key = k, file = p.file, calls = p.calls })
  end
  local f = assert(io.open(self.dir .. "/manifest.jsonl", "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
  local status = self.dir .. "/status.lua"
  os.remove(status)
  local out, code = X.sh(("%s %sfuzz_replay.py %s/manifest.jsonl %s"):format(X.python, X.dir, self.dir, status))
  local ok, res = pcall(dofile, status)
  if code ~= 0 or not ok then
    res = {}
    for _, k in ipairs(self.keys) do res[k] = { failed = ("the torch side died (exit %d): %s"):format(code, out:sub(-2000)) } end
  end
  for _, k in ipairs(self.keys) do
    local r, p = res[k] or { failed = "no torch outcome" }, self.progs[k]
    res[k] = r
    for _, fd in ipairs(r.findings or {}) do
      local e = excuse(fd, p.calls[fd.call], p.file)
      fd.class, fd.why = e and e.class or "mismatch", e and e.why
    end
  end
  if os.getenv("CRESCENT_FUZZ_KEEP") then io.stderr:write("fuzz_torch: exchange files kept in ", self.dir, "\n")
  else X.sh("rm -rf " .. self.dir) end
  self.progs, self.keys, self.dir = {}, {}, nil
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
