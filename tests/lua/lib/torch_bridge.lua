-- The one bridge between the Lua tests and PyTorch (Debian's python3-torch at /usr/bin/python3, or
-- CRESCENT_TEST_PYTHON): the spec files' references (torch_ref.lua), the differential test
-- (tests/diff/diff_torch.lua) and the compile fuzzer (fuzz_torch.lua) all send their jobs to ONE
-- python process per batch (importing torch takes about a second), through one exchange format:
--
--   DIR/jobs.jsonl           a header {"handler": "eval" | "replay", options...}, then a job a line
--   DIR/inputs.safetensors   the tensors the jobs name (exact values of every dtype)
--   DIR/status.lua           written by python: a Lua chunk returning {[job key] = record}
--   DIR/outputs.safetensors  written by python: the tensors the records name
--
-- The Python side is tests/torch_bridge/ (bridge.py; evaluate.py and replay.py are the handlers).
--
--   local B = require "torch_bridge"
--   local ok, why = B.have("torch")        -- why: "python3-torch missing: skipped (...)"
--   local batch = B.batch({ device = "cpu" })
--   batch:add("exp", "torch.exp(a)", { a = x })   -- x: a crescent tensor, a number or a boolean
--   local res, why = batch:run()           -- key -> record (tensor records carry .t, the tensor)
local T = require "crescent"
local SH = require "shell"

local B = {}
B.python = os.getenv("CRESCENT_TEST_PYTHON") or "/usr/bin/python3"
B.dir = (debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./") .. "../../torch_bridge/"

-- ---- starting python -------------------------------------------------------------------------------

local PROBES = {
  torch = { "import torch; print('probe-ok')", "python3-torch missing: skipped (%s cannot import torch)" },
  ["torch-cuda"] = { "import torch; assert torch.cuda.is_available(); print('probe-ok')",
    "python3-torch with CUDA missing: skipped (%s cannot import torch, or torch sees no GPU)" },
  numpy = { "import numpy; print('probe-ok')", "python3-numpy missing: skipped (%s cannot import numpy)" },
}
local probed = {}

-- Whether python has `what` ("torch", "torch-cuda", "numpy"): true, or false and the skip reason.
function B.have(what)
  local p = assert(PROBES[what], "torch_bridge: no probe for " .. tostring(what))
  if probed[what] == nil then
    probed[what] = SH.run(("%s -c %s"):format(SH.quote(B.python), SH.quote(p[1]))):find("probe-ok", 1, true) ~= nil
  end
  if probed[what] then return true end
  return false, p[2]:format(B.python)
end

-- The probe for a batch on `device`.
function B.need(device) return device == "cuda" and "torch-cuda" or "torch" end

-- Runs a Python script (a path, with arguments): its output (stdout and stderr) and exit status.
function B.script(path, ...)
  local cmd = { SH.quote(B.python), SH.quote(path) }
  for _, a in ipairs({ ... }) do cmd[#cmd + 1] = SH.quote(a) end
  return SH.run(table.concat(cmd, " "))
end

-- ---- JSON (the jobs) ---------------------------------------------------------------------------------

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
  else error("torch_bridge: cannot encode a " .. ty, 0) end
  return out
end
function B.json(v) return table.concat(json(v, {})) end

-- A Lua value as Python source: integral numbers as Python ints (crescent, like PyTorch with
-- Python ints, treats them as integer scalars), tables as tuples, {py = text} as that text.
function B.py(v)
  if v == nil then return "None" end
  if type(v) == "boolean" then return v and "True" or "False" end
  if type(v) == "string" then return ("%q"):format(v) end
  if type(v) == "table" then
    if v.py then return v.py end
    local parts = {}
    for i, x in ipairs(v) do parts[i] = B.py(x) end
    return "(" .. table.concat(parts, ", ") .. (#parts == 1 and ",)" or ")")
  end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" end
  if v == -math.huge then return "-inf" end
  if v == 0 and 1 / v < 0 then return "-0.0" end
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return ("%d"):format(v) end
  return ("%.17g"):format(v)
end

-- ---- one exchange ------------------------------------------------------------------------------------

-- Tensor records get .t, their tensor from the outputs (lists: every item).
local function resolve(rec, outputs)
  if type(rec) ~= "table" then return end
  if rec.tensor then rec.t = outputs[rec.tensor] end
  for _, item in ipairs(rec.list or {}) do resolve(item, outputs) end
end

-- A python process over `jobs` in dir: status (key -> record), or nil, its exit status and output.
-- A handler that lost its CUDA context (a torch kernel's device-side assert) says so with the key
-- "=context_lost"; the jobs it did not reach go to a new process.
local function attempt(dir, header, jobs)
  local status = {}
  while #jobs > 0 do
    local lines = { B.json(header) }
    for i, job in ipairs(jobs) do lines[i + 1] = B.json(job) end
    SH.write(dir .. "/jobs.jsonl", table.concat(lines, "\n") .. "\n")
    os.remove(dir .. "/status.lua")
    local out, code = SH.run(("%s %s %s"):format(SH.quote(B.python), SH.quote(B.dir .. "bridge.py"), SH.quote(dir)))
    local ok, got = pcall(dofile, dir .. "/status.lua")
    if code ~= 0 or not ok then return nil, code, out end
    local outputs = T.load(dir .. "/outputs.safetensors")
    local lost = got["=context_lost"]
    got["=context_lost"] = nil
    for k, rec in pairs(got) do
      resolve(rec, outputs)
      status[k] = rec
    end
    local rest = {}
    for _, job in ipairs(lost and jobs or {}) do if not got[job.key] then rest[#rest + 1] = job end end
    jobs = rest
  end
  return status
end

-- Why a python process died: its exit status and the tail of its output.
local function died(code, out, tail) return ("the torch side died (exit %d): %s"):format(code, tail or out:sub(-2000)) end

-- Jobs that kill python (torch 1.13 has memory bugs: see tests/diff/recipes.lua's index_select)
-- are retried in halves; a single job that still kills it gets {crashed = why}.
local function bisect(dir, header, jobs, status)
  local got, code, out = attempt(dir, header, jobs)
  if got then
    for k, rec in pairs(got) do status[k] = rec end
    return
  end
  local last = out:gsub("%s+$", ""):match("[^\n]*$")
  if #jobs == 1 then
    status[jobs[1].key] = { crashed = died(code, out, last) }
    return
  end
  io.stderr:write(("torch_bridge: the torch side died on %d jobs (%s); retrying in halves\n"):format(#jobs, last))
  local h = math.floor(#jobs / 2)
  bisect(dir, header, { unpack(jobs, 1, h) }, status)
  bisect(dir, header, { unpack(jobs, h + 1) }, status)
end

-- Runs jobs (tables with a unique `key`) through the handler header.handler with `inputs` (name ->
-- crescent tensor). opts: bisect (retry the jobs of a dying process in halves), keep (keep the
-- exchange files). Returns status (key -> record), or nil and why (python is missing or died).
function B.run(header, jobs, inputs, opts)
  opts = opts or {}
  local ok, why = B.have(B.need(header.device))
  if not ok then return nil, why end
  local dir = SH.tmpdir()
  if next(inputs or {}) then T.save(dir .. "/inputs.safetensors", inputs) end
  local status
  if opts.bisect then
    status = {}
    bisect(dir, header, jobs, status)
  else
    local code, out
    status, code, out = attempt(dir, header, jobs)
    if not status then why = died(code, out) end
  end
  if opts.keep then io.stderr:write("torch_bridge: exchange files kept in ", dir, "\n") else SH.rm(dir) end
  return status, why
end

-- ---- a batch of Python expressions (the "eval" handler, tests/torch_bridge/evaluate.py) -------------

local Batch = {}
Batch.__index = Batch

-- opts: the header's options (device, prelude, tensors_only, upcast_low) and B.run's (bisect, keep).
function B.batch(opts)
  return setmetatable({ opts = opts or {}, jobs = {}, keys = {}, inputs = {}, ninputs = 0 }, Batch)
end

-- An input tensor under `name`, for setup code that loads it with L(name).
function Batch:input(name, t)
  assert(self.inputs[name] == nil, "torch_bridge: duplicate input " .. name)
  self.inputs[name] = t
end

-- Job `key`: the Python expression expr over env (name -> crescent tensor, number or boolean),
-- after the Python statements `setup` (optional).
function Batch:add(key, expr, env, setup)
  assert(not self.keys[key], "torch_bridge: duplicate key " .. key)
  self.keys[key] = true
  local enc = {}
  for name, v in pairs(env or {}) do
    if T.is_tensor(v) then
      self.ninputs = self.ninputs + 1
      local id = "e" .. self.ninputs
      self:input(id, v)
      v = { s = id }
    end
    enc[name] = v
  end
  self.jobs[#self.jobs + 1] = { key = key, expr = expr, env = next(enc) and enc or nil, setup = setup }
end

function Batch:size() return #self.jobs end

-- Runs every job in one python process: key -> record, or nil and why.
function Batch:run()
  local o = self.opts
  local header = { handler = "eval", device = o.device, prelude = o.prelude, tensors_only = o.tensors_only,
    upcast_low = o.upcast_low }
  return B.run(header, self.jobs, self.inputs, { bisect = o.bisect, keep = o.keep })
end

return B
