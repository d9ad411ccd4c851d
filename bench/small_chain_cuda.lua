-- Issue 38 item 5: the small_chain workload (20 fused pointwise steps on 1024 floats) on CUDA,
-- compiled with mode = "reduce-overhead": host time per call (calls issued back to back, then one
-- synchronisation) against the device time of one replay (events around 1000 launches), and the
-- same for mode = "default"; the device work queued per reduce-overhead call (T.cuda.stats:
-- kernels launched, copies are not counted, graph launches and nodes), and the fused kernel's own
-- device time: default-mode calls captured back to back in a CUDA graph of 100 (the target of
-- issue 38: a reduce-overhead call within 2x of it).
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

-- the device work one call of f queues: {kernels, graph launches, graph nodes} per call
local function work_per_call(f, x)
  local a = T.cuda.stats()
  for _ = 1, 100 do f(x) end
  local b = T.cuda.stats()
  return (b.kernel_launches - a.kernel_launches) / 100, (b.graph_launches - a.graph_launches) / 100,
    (b.graph_nodes - a.graph_nodes) / 100
end

-- device microseconds of one default-mode call (the fused kernel): 100 calls in one CUDA graph
local function kernel_us()
  local f = T.compile(small_chain)
  local x = T.randn(1024):cuda()
  for _ = 1, 50 do f(x) end
  T.compiler.wait()
  f(x)
  T.cuda.synchronize()
  local g = T.cuda.CUDAGraph()
  T.cuda.graph(g, function() for _ = 1, 100 do f(x) end end)
  g:replay()
  T.cuda.synchronize()
  local start, finish = T.cuda.Event { enable_timing = true }, T.cuda.Event { enable_timing = true }
  start:record()
  for _ = 1, 20 do g:replay() end
  finish:record()
  finish:synchronize()
  return start:elapsed_time(finish) * 1000 / 2000
end

local ro_us, ro_dev = measure("reduce-overhead")
local s = T.compiler.stats()
local ro = T.compile(small_chain, { mode = "reduce-overhead" })
local xw = T.randn(1024):cuda()
for _ = 1, 50 do ro(xw) end
T.compiler.wait()
local kernels, launches, nodes = work_per_call(ro, xw)
local d_us, d_dev = measure("default")
local ok, k_us = pcall(kernel_us)
print(string.format('{"workload": "small_chain", "reduce_overhead_us_per_call": %.2f, "reduce_overhead_device_us": %.2f, ' ..
  '"default_us_per_call": %.2f, "default_device_us": %.2f, "kernel_device_us": %s, "ratio_to_kernel": %s, ' ..
  '"per_call_kernels": %.2f, "per_call_graph_launches": %.2f, "per_call_graph_nodes": %.2f, "cudagraph_replays": %d}',
  ro_us, ro_dev, d_us, d_dev, ok and string.format("%.2f", k_us) or '"' .. tostring(k_us):gsub('"', "'") .. '"',
  ok and string.format("%.2f", math.max(ro_us, ro_dev) / k_us) or "null", kernels, launches, nodes, s.cudagraph_replays))
