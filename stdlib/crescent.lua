-- crescent: the module users require (`local T = require "crescent"`). Every registry op is
-- here as T.op (and as a method, see crescent.tensor); the rest of API.md is assembled below.
local core = require "crescent.core"
local tensor = require "crescent.tensor"
local autograd = require "crescent.autograd"  -- (before T takes the ops: it wraps creation ops)
local ffi, api, ctx = core.ffi, core.api, core.ctx

local T = { _VERSION = "crescent 0.1.0", version = "0.1.0" }

for name, o in pairs(tensor.ops) do
  if o.func then T[name] = o.fn end
end

T.index = tensor.methods.index  -- (x:index's list form: crescent.indexing)

-- dtype constants
for _, d in pairs(core.dtypes) do T[d] = d end

T.is_tensor = core.is_tensor

-- threads, tensor printing, a clock
for name, fn in pairs(require "crescent.controls") do T[name] = fn end

-- os.exit ends the process without closing the Lua state: a graph still compiling on the
-- background thread finishes first (its compile would otherwise run while exit destroys what it
-- uses), the queued ones are dropped. Once per VM (each has its own os table), however many
-- times the module is loaded.
if not core.exit_waits then
  core.exit_waits = true
  local exit = os.exit
  os.exit = function(...)
    api.cancel_compiles(ctx)
    return exit(...)
  end
end

-- devices (crescent.cuda) ----------------------------------------------------------------------
local cuda = require "crescent.cuda"
local device_index = cuda.device_index
T.cuda = cuda.cuda
T.backends = cuda.backends
require("crescent.random").bind(T)  -- (seeding: T.manual_seed, T.get_rng_state, ...)
-- PyTorch's torch.backends.cpu.get_cpu_capability() and torch.__config__.show(): what the CPU
-- kernels and products run with (vm/cpu_blas.hpp names OpenBLAS's core), the devices.
T.backends.cpu = { get_cpu_capability = function() return ffi.string(api.cpu_info(0)) end }
T.__config__ = {
  show = function()
    local n = T.cuda.is_available() and T.cuda.device_count() or 0
    return table.concat({
      T._VERSION .. " (" .. jit.version .. ")",
      "  - CPU capability: " .. ffi.string(api.cpu_info(0)),
      "  - BLAS: " .. ffi.string(api.cpu_info(1)),
      "  - CUDA: " .. (n > 0 and (n .. " device" .. (n > 1 and "s" or "")) or "no device"),
    }, "\n") .. "\n"
  end,
}

-- The CUDA device among fn's arguments (tensors, also inside tables), or nil.
local function cuda_device_of(args, seen)
  for _, v in pairs(args) do
    if core.is_tensor(v) then
      local d = v.device
      if d ~= "cpu" then return device_index(d) end
    elseif type(v) == "table" and not seen[v] then
      seen[v] = true
      local d = cuda_device_of(v, seen)
      if d then return d end
    end
  end
end

local MS, STATS = ffi.new("double[1]"), ffi.new("double[?]", ffi.C.CR_CAP_STATS)  -- (api.cap_stats)
-- T.bench(fn, args[, {warmup =, reps =, batch =}]) -> {median_us =, min_us =, max_us =}: wall time
-- on the CPU; with CUDA tensors among args, device time between two events around each call.
-- batch = K: each rep times K calls issued back to back and reports a K-th of it, so the host
-- work of a call overlaps the device work of the one before (as triton's do_bench measures).
function T.bench(fn, args, opts)
  if type(fn) ~= "function" and not (type(fn) == "table" and getmetatable(fn) and getmetatable(fn).__call) then
    core.fail("bench: argument 1 (fn) expected a function, got " .. type(fn))
  end
  if args ~= nil and (type(args) ~= "table" or core.is_tensor(args)) then
    core.fail("bench: argument 2 (args) expected a table of fn's arguments, got " .. (core.is_tensor(args) and "a tensor" or type(args)))
  end
  args = args or {}
  opts = require("crescent.functional")._check_opts("bench", 3, opts, { warmup = true, reps = true, batch = true })
  local function count(name, v, default, least)
    if v == nil then return default end
    if type(v) ~= "number" or v ~= math.floor(v) or v < least or v == math.huge then
      core.fail(("bench: option %s expected an integer >= %d, got %s"):format(name, least, tostring(v)))
    end
    return v
  end
  local warmup, reps, batch = count("warmup", opts.warmup, 3, 0), count("reps", opts.reps, 20, 1), count("batch", opts.batch, 1, 1)
  local unpack = unpack or table.unpack
  local dev = cuda_device_of(args, {})
  local function call() fn(unpack(args)) end  -- (one call site: a compiled function's graphs are per site)
  for _ = 1, warmup do call() end
  -- compiles are not timed: wait for those the calls started and call again, until a call starts
  -- none (a graph compiles from its second call on; a recompile may follow)
  for _ = 1, 8 do
    api.wait_compiles()
    call()
    api.cap_stats(ctx, STATS)
    if STATS[ffi.C.CR_STAT_COMPILES_PENDING] == 0 then break end
  end
  local times = {}
  for i = 1, reps do
    if dev then
      if api.cuda_time(ctx, dev, 0, MS) ~= 0 then core.raise(-1) end
      for _ = 1, batch do call() end
      if api.cuda_time(ctx, dev, 1, MS) ~= 0 then core.raise(-1) end
      times[i] = MS[0] * 1000 / batch
    else
      local t0 = api.now_us()
      for _ = 1, batch do call() end
      times[i] = (api.now_us() - t0) / batch
    end
  end
  table.sort(times)
  return { median_us = times[math.floor((reps + 1) / 2)], min_us = times[1], max_us = times[reps] }
end

-- IO
local io_ = require "crescent.io"
T.save, T.load, T.save_npy, T.load_npy = io_.save, io_.load, io_.save_npy, io_.load_npy

-- neural networks (API.md section 4)
T.F = require "crescent.functional"
T.nn = require "crescent.nn"
T.F.bind(T)
T.nn.bind(T)
require("crescent.surface").bind(T, tensor.methods, tensor.ops)  -- data ops made of registry ops

-- autograd, training and mixed precision (API.md section 9)
autograd.bind(T)
T.optim = require "crescent.optim"
T.optim.bind(T)
require("crescent.amp").bind(T)

-- several GPUs: NCCL collectives (crescent.distributed)
T.distributed = require "crescent.distributed"
T.distributed.bind(T)
require("crescent.ddp").bind(T)
require("crescent.zero").bind(T)

-- compilation (API.md section 5)
local compile = require "crescent.compile"
T.compile, T.explain, T.compiler, T.config, T.mark_dynamic =
  compile.compile, compile.explain, compile.compiler, compile.config, compile.mark_dynamic

-- The op table, for tools and tests that enumerate the registry.
T._ops = tensor.ops
T._methods = tensor.methods

return T
