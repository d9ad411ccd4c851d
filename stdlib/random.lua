-- crescent.random: the VM's generator (Philox: a seed and a counter, one for every device) through
-- torch's seeding functions, also under T.random and T.cuda; its state is 16 bytes (seed, counter,
-- little-endian) in an int32 tensor: torch's is uint8, a dtype crescent lacks.
local core = require "crescent.core"
local ffi, api, ctx, fail = core.ffi, core.api, core.ctx, core.fail

local R = {}
local STATE = ffi.new("uint64_t[2]")
local BYTES = ffi.cast("uint8_t*", STATE)

-- inside a compiled function: the ops recorded before must draw from the generator first
local function at_break(what)
  if ctx.capturing ~= 0 then
    local rc = api.cap_need(ctx, nil, what, core.where())
    if rc < 0 then core.raise(rc) end
  end
end

-- manual_seed(n): n an integer in [-2^63, 2^64); negative seeds wrap, as torch's
function R.manual_seed(n)
  if type(n) ~= "number" or n ~= math.floor(n) or n < -2 ^ 63 or n >= 2 ^ 64 then
    fail("manual_seed: expected an integer in [-2^63, 2^64), got " .. tostring(n))
  end
  at_break("manual_seed()")
  api.manual_seed(ctx, n < 0 and ffi.cast("uint64_t", ffi.cast("int64_t", n)) or n)
end

-- seed(): a non-deterministic seed (the system's random bytes), set and returned
function R.seed()
  local f = io.open("/dev/urandom", "rb")
  local b = f and f:read(7)
  if f then f:close() end
  local n = 0
  if b and #b == 7 then
    for i = 1, 7 do n = n * 256 + b:byte(i) end  -- (56 bits: exact as a Lua number)
  else
    n = math.floor((os.time() + os.clock()) * 1e6) % 2 ^ 53
  end
  R.manual_seed(n)
  return n
end

-- (a seed past 2^63 as the negative number it wraps from: manual_seed(initial_seed()) round-trips)
function R.initial_seed()
  api.rng_state(ctx, STATE, 0)
  return tonumber(ffi.cast("int64_t", STATE[0]))
end

function R.get_rng_state()
  at_break("get_rng_state()")
  api.rng_state(ctx, STATE, 0)
  local t = {}
  for i = 0, 15 do t[i + 1] = BYTES[i] end
  return R.T.tensor(t, { dtype = "int32" })
end

function R.set_rng_state(state)
  if not core.is_tensor(state) or state.dtype ~= "int32" or state:numel() ~= 16 then
    fail("set_rng_state: expected the int32 tensor of 16 bytes get_rng_state gives, got " ..
      (core.is_tensor(state) and state.dtype .. " tensor of " .. state:numel() .. " elements" or type(state)))
  end
  at_break("set_rng_state()")
  for i, v in ipairs(state:flatten():totable()) do
    if v < 0 or v > 255 then fail("set_rng_state: expected bytes (0 to 255), got " .. v) end
    BYTES[i - 1] = v
  end
  api.rng_state(ctx, STATE, 1)
end

function R.bind(T)
  R.T = T
  T.random = {}
  for _, name in ipairs({ "manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state" }) do
    T[name], T.random[name] = R[name], R[name]
  end
  T.cuda.manual_seed, T.cuda.manual_seed_all = R.manual_seed, R.manual_seed
end

return R
