-- mode = "max-autotune" vs the default mode (issue 39) on the workloads of bench/workloads.lua:
--   CRESCENT_NUM_THREADS=2 build/crescent bench/autotune_bench.lua [rounds] [reps]
--   DEVICE=cuda build/crescent bench/autotune_bench.lua [rounds] [reps]
-- Each workload is compiled twice (its own cache directory, so the tuning is cold), the tuned one
-- with a budget of 20 s a graph, and both wait for their background work. Then `rounds`
-- alternating rounds time each (T.bench's median of `reps` calls); the best round counts, as a
-- loaded machine slows some rounds. Also the tuning time and the candidates timed. Prints a
-- markdown table (GB/s: the workload's bytes moved over the tuned time, memory-bound ones).
-- ONLY=name,name,... runs those workloads; OUT=file also writes one JSON line per workload.
local T = require "crescent"
local rounds, reps = tonumber(arg and arg[1]) or 5, tonumber(arg and arg[2]) or 30
local DEVICE = os.getenv("DEVICE") or "cpu"
package.path = ((arg and arg[0] or ""):match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local work = require("workloads")(DEVICE)
local unpack = unpack or table.unpack

T.manual_seed(0)
T.config.sync_compile = true
T.config.autotune_budget_ms = 20000
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p '" .. tmp .. "'")

print(("autotune_bench: %s, %d threads, best of %d alternating rounds of %d calls"):format(DEVICE, T.get_num_threads(), rounds, reps))
print("| workload | default µs | max-autotune µs | speed-up | GB/s tuned | tuning ms | candidates timed | max abs diff |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
local only = os.getenv("ONLY") and ("," .. os.getenv("ONLY") .. ",")
local out = os.getenv("OUT") and assert(io.open(os.getenv("OUT"), "w"))
for _, w in ipairs(work) do if not only or only:find("," .. w[1] .. ",", 1, true) then
  local name, fn, args, bytes = w[1], w[2], w[3], w[4]
  T.config.cache_dir = tmp .. "/" .. name
  local default = T.compile(fn, { hot = 0 })
  default(unpack(args)); default(unpack(args))
  local s0 = T.compiler.stats()
  local tuned = T.compile(fn, { hot = 0, mode = "max-autotune" })
  tuned(unpack(args)); tuned(unpack(args))
  T.compiler.wait()
  local s1 = T.compiler.stats()
  local diff = (tuned(unpack(args)):float() - default(unpack(args)):float()):abs():max():item()
  local best = { math.huge, math.huge }
  for _ = 1, rounds do
    for i, f in ipairs({ default, tuned }) do
      collectgarbage()
      best[i] = math.min(best[i], T.bench(f, args, { warmup = 10, reps = reps }).median_us)
    end
  end
  local gbps = bytes and bytes / best[2] / 1e3
  print(("| %s | %.1f | %.1f | %.2fx | %s | %.0f | %d | %.3g |"):format(name, best[1], best[2], best[1] / best[2],
    gbps and ("%.0f"):format(gbps) or "-", s1.autotune_ms - s0.autotune_ms, s1.autotune_candidates - s0.autotune_candidates, diff))
  io.stdout:flush()
  if out then
    out:write(('{"name": "%s", "default_us": %.3f, "tuned_us": %.3f, "tuning_ms": %.1f, "candidates": %d, "bytes": %s}\n'):format(
      name, best[1], best[2], s1.autotune_ms - s0.autotune_ms, s1.autotune_candidates - s0.autotune_candidates, bytes or "null"))
    out:flush()
  end
  T.compiler.reset()
end end
if out then out:close() end
os.execute("rm -rf '" .. tmp .. "'")
