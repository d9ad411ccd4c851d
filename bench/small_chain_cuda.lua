-- Issue 38 item 5: the small_chain workload (20 fused pointwise steps on 1024 floats) on CUDA,
-- compiled with mode = "reduce-overhead": host time per call (calls issued back to back, then one
-- synchronisation) against the device time of one replay (events around 1000 launches), and the
-- same for mode = "default".
--   DEVICE=cuda crescent bench/small_chain_cuda.lua [calls=20000]      -> one JSON line
local T = require "crescent"
T.config.sync_compile = true
local now = require("crescent.core").api.now_us
local calls = tonumber(arg[1] or 20000)

local function small_chain(x)
  for _ = 1, 20 do x = T.sin(x) * 1.01 + 0.1 end
  return x
end

local function measure(mode)
  local f = T.compile(small_chain, { mode = mode })
  local x = T.randn(1024):cuda()
  for _ = 1, 50 do f(x) end
  T.compiler.wait()
  for _ = 1, 50 do f(x) end
  T.cuda.synchronize()
  local best = math.huge
  for _ = 1, 3 do
    local t0 = tonumber(now())
    for _ = 1, calls do f(x) end
    T.cuda.synchronize()
    best = math.min(best, (tonumber(now()) - t0) / calls)
  end
  local start, finish = T.cuda.Event { enable_timing = true }, T.cuda.Event { enable_timing = true }
  start:record()
  for _ = 1, 1000 do f(x) end
  finish:record()
  finish:synchronize()
  return best, start:elapsed_time(finish) * 1000 / 1000
end

local ro_us, ro_dev = measure("reduce-overhead")
local s = T.compiler.stats()
local d_us, d_dev = measure("default")
print(string.format('{"workload": "small_chain", "reduce_overhead_us_per_call": %.2f, "reduce_overhead_device_us": %.2f, ' ..
  '"default_us_per_call": %.2f, "default_device_us": %.2f, "cudagraph_replays": %d}', ro_us, ro_dev, d_us, d_dev, s.cudagraph_replays))
