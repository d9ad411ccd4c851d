-- crescent.amp: mixed precision (API.md section 9). T.autocast sets the per-thread autocast state
-- that the op-call path applies from each op's registry policy (vm/autograd/autocast.hpp);
-- T.amp.GradScaler is PyTorch's torch.amp.GradScaler (loss scaling for float16 training).
local core = require "crescent.core"
local api = core.api
local ag = api.autograd
local fail, is_tensor = core.fail, core.is_tensor
local unpack = unpack or table.unpack

local M = {}
local T  -- crescent, bound by M.bind

-- autocast ------------------------------------------------------------------------------------
local C = core.ffi.C  -- (vm/abi.h enum cr_dtype; vm/lua/ffi_api.h enum cr_ag_mode)
-- ag.mode's slot of each device type's autocast state
local MODE = { cpu = C.CR_AG_AUTOCAST_CPU, cuda = C.CR_AG_AUTOCAST_CUDA }
local DTYPE_CODE = { float16 = C.CR_FLOAT16, bfloat16 = C.CR_BFLOAT16 }
local DTYPE_NAME = { [C.CR_FLOAT16] = "float16", [C.CR_BFLOAT16] = "bfloat16" }
local DEFAULT_DTYPE = { cpu = "bfloat16", cuda = "float16" }  -- as PyTorch's
local AUTOCAST_OPTS = { dtype = true, enabled = true, cache_enabled = true }

local function state(slot) -- enabled, dtype code
  local s = ag.mode(slot, -1)
  return s % 2 == 1, math.floor(s / 16) % 16
end
local function pack_state(on, dt) return (on and 1 or 0) + dt * 16 end

-- the ag.mode slot of device type `device`
local function device_slot(op, device)
  local code = type(device) == "string" and MODE[device]
  if not code then
    fail(op .. ": argument 1 (device_type) expected \"cuda\" or \"cpu\", got " ..
      (type(device) == "string" and '"' .. device .. '"' or type(device)))
  end
  return code
end

local function check_opts(opts)
  if type(opts) ~= "table" or is_tensor(opts) then fail("autocast: argument 2 (opts) expected a table, got " .. type(opts)) end
  for k in pairs(opts) do
    if not AUTOCAST_OPTS[k] then
      fail("autocast: unknown option '" .. tostring(k) .. "' (expected one of: cache_enabled, dtype, enabled)")
    end
  end
  if opts.enabled ~= nil and type(opts.enabled) ~= "boolean" then
    fail("autocast: option enabled expected a boolean, got " .. type(opts.enabled))
  end
end

local pack = core.pack

-- T.autocast(device_type[, {dtype =, enabled =}], fn, ...): runs fn(...) with autocast on (or off
-- with enabled = false) and returns its results; the previous state comes back even on error.
function M.autocast(device, opts, fn, ...)
  local args
  if type(opts) == "function" then
    opts, fn, args = {}, opts, pack(fn, ...)
  else
    args = pack(...)
  end
  local dev = device_slot("autocast", device)
  check_opts(opts or {})
  opts = opts or {}
  if type(fn) ~= "function" and not (type(fn) == "table" and getmetatable(fn) and getmetatable(fn).__call) then
    fail("autocast: argument 3 (fn) expected a function, got " .. type(fn))
  end
  local dtype = opts.dtype or DEFAULT_DTYPE[device]
  local dt = DTYPE_CODE[dtype]
  if not dt then
    fail("autocast: option dtype expected \"float16\" or \"bfloat16\" (the lower precision), got " .. tostring(dtype))
  end
  local on = opts.enabled ~= false
  local prev = ag.mode(dev, -1)
  ag.mode(dev, pack_state(on, dt))
  local r = pack(pcall(fn, unpack(args, 1, args.n)))
  ag.mode(dev, prev)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

-- T.is_autocast_enabled([device_type = "cuda"]), T.get_autocast_dtype(device_type)
function M.is_autocast_enabled(device)
  return (state(device_slot("is_autocast_enabled", device or "cuda")))
end
function M.get_autocast_dtype(device)
  local on, dt = state(device_slot("get_autocast_dtype", device))
  return on and DTYPE_NAME[dt] or DEFAULT_DTYPE[device]
end

M.scaler = require "crescent.grad_scaler"

function M.bind(t)
  T = t
  M.scaler.bind(t)
  T.autocast = M.autocast
  T.is_autocast_enabled, T.get_autocast_dtype = M.is_autocast_enabled, M.get_autocast_dtype
  T.amp = { autocast = M.autocast, GradScaler = M.scaler.GradScaler }
end

return M
