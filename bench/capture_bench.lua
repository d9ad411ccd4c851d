-- Host overhead of compiled calls whose graphs are cached (issue: graph capture).
--   build/crescent bench/capture_bench.lua [calls]
-- For a chain of n adds on a 1-element tensor (n = 1, 10, 100) it times, per call: eager; a
-- compiled function in trace mode (Lua runs, ops are matched against the trace tree and replayed
-- lazily); and mode = "reduce-overhead" (guards + graph only). The graph itself runs on the eager
-- kernels; the time spent inside it (T.compiler.stats().graph_run_us) is measured separately and
-- subtracted, so "host" is what capture adds around the kernels. Means over `calls` calls, best of
-- 5 rounds.
local T = require "crescent"
T.config.sync_compile = true  -- compiles in line: the timed calls run native code
local now = require("crescent.core").api.now_us
local calls = tonumber(arg and arg[1]) or 3000

local function chain(n)
  return function(x)
    local y = x
    for _ = 1, n do y = y + 1 end
    return y
  end
end

-- mean wall time per call, and mean graph time per call, best round of 5
local function measure(f, x)
  for _ = 1, 20 do f(x) end
  local best, best_run = math.huge, 0
  for _ = 1, 5 do
    local s0 = T.compiler.stats().graph_run_us
    local t0 = now()
    for _ = 1, calls do f(x) end
    local t = (now() - t0) / calls
    local run = (T.compiler.stats().graph_run_us - s0) / calls
    if t < best then best, best_run = t, run end
  end
  return best, best_run
end

print(string.format("%-8s %10s | %10s %10s %10s | %10s %10s %10s", "ops", "eager",
  "trace", "graph", "host", "r-o", "graph", "host"))
for _, n in ipairs { 1, 10, 100 } do
  local x = T.ones(1)
  local f = chain(n)
  local eager = measure(f, x)
  T.compiler.reset()
  local tr, tr_run = measure(T.compile(f), x)
  local ro, ro_run = measure(T.compile(f, { mode = "reduce-overhead" }), x)
  print(string.format("%-8d %10.2f | %10.2f %10.2f %10.2f | %10.2f %10.2f %10.2f", n, eager,
    tr, tr_run, tr - tr_run, ro, ro_run, ro - ro_run))
end
print("(microseconds per call; host = total - graph; targets: trace host <= 20 + 0.3/op, " ..
      "reduce-overhead host <= 5; torch.compile ~48 us per call on the H100 host)")
