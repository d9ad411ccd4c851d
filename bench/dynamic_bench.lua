-- Dynamic shapes (issue 6): the anchor's workloads compiled with symbolic sizes (dynamic = true:
-- every dim of every input symbolic, so the kernels read all sizes and strides at run time)
-- against the same workloads specialised on their sizes (dynamic = false), in one run.
--   CRESCENT_NUM_THREADS=2 build/crescent bench/dynamic_bench.lua [reps]
--   DEVICE=cuda build/crescent bench/dynamic_bench.lua [reps]
-- Prints a markdown table: median µs of each (T.bench: wall time on the CPU, CUDA events on the
-- GPU), symbolic / specialised, and the max abs difference between the two results. On the GPU
-- each timed sample is BATCH calls back to back (default 8; the time is per call): the host's
-- work for a call then overlaps the kernels of the one before, so large workloads show their
-- kernels' time, and host-bound ones (small_chain) the host's. BATCH=1 gives one call's latency.
-- ONLY=<workload> runs one workload, DYNAMIC=true|false one of the two modes (for profilers).
local T = require "crescent"
package.path = ((arg and arg[0] or ""):match("^(.*)/") or ".") .. "/?.lua;" .. package.path  -- bench/workloads.lua
local reps = tonumber(arg and arg[1]) or 30
local DEVICE = os.getenv("DEVICE") or "cpu"
T.manual_seed(0)
T.config.sync_compile = true
local work = require("workloads")(DEVICE)
local unpack = unpack or table.unpack

local only = os.getenv("ONLY")
local mode = ({ ["true"] = true, ["false"] = false })[os.getenv("DYNAMIC") or ""]  -- DYNAMIC=true|false: that mode alone
local batch = tonumber(os.getenv("BATCH") or (DEVICE == "cpu" and 1 or 8))
local function timed(f, args)  -- median µs per call, `batch` calls a sample
  local function calls(...) for _ = 1, batch do f(...) end end
  return T.bench(calls, args, { warmup = 10, reps = reps }).median_us / batch
end
print(string.format("dynamic shapes, %s, %d threads, median of %d samples of %d calls", DEVICE, T.get_num_threads(), reps, batch))
print("| workload | specialised µs | symbolic µs | symbolic / specialised | max abs diff | graphs compiled (spec, sym) |")
print("|---|---|---|---|---|---|")
for _, w in ipairs(work) do if not only or w[1] == only then
  local name, fn, args = w[1], w[2], w[3]
  local res, us, compiles = {}, {}, {}
  for i, dyn in ipairs { false, true } do if mode == nil or mode == dyn then
    T.compiler.reset()
    local f = T.compile(fn, { hot = 0, dynamic = dyn })
    f(unpack(args)); f(unpack(args))  -- record, compile
    res[i] = f(unpack(args)):float()
    collectgarbage()
    us[i] = timed(f, args)
    compiles[i] = T.compiler.stats().graphs_compiled
  end end
  if mode ~= nil then  -- (one mode: for profilers)
    local i = mode and 2 or 1
    res[3 - i], us[3 - i], compiles[3 - i] = res[i], 0 / 0, 0
  end
  local diff = (res[1] - res[2]):abs():max():item()
  print(string.format("| %s | %.1f | %.1f | %.2f | %.2g | %d, %d |", name, us[1], us[2], us[2] / us[1], diff, compiles[1], compiles[2]))
  io.stdout:flush()
end end
