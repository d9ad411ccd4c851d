-- Reductions over the outer dim of a 2048 x 2048 float32 matrix (a column each), compiled against
-- eager, on the CPU: T.bench medians of `reps` calls, µs.
--   CRESCENT_NUM_THREADS=2 build/crescent bench/column_reductions_bench.lua [reps]
local T = require "crescent"
local reps = tonumber(arg and arg[1]) or 10
T.config.sync_compile = true
T.manual_seed(0)
local y = T.randn(2048, 2048)
local ops = {
  { "sum", function(a) return a:sum(1) end }, { "mean", function(a) return a:mean(1) end },
  { "var", function(a) return a:var(1) end }, { "std", function(a) return a:std(1) end },
  { "amax", function(a) return a:amax(1) end }, { "amin", function(a) return a:amin(1) end },
  { "prod of 1 + x / 100", function(a) return (a * 0.01 + 1):prod(1) end }, { "norm", function(a) return a:norm(1) end },
  { "logsumexp", function(a) return a:logsumexp(1) end }, { "argmax", function(a) return a:argmax(1) end },
  { "max with positions", function(a) return (a:max(1)) end }, { "any of x > 3", function(a) return a:gt(3):any(1) end },
  { "softmax", function(a) return a:softmax(1) end },
}
print("| reduction over dim 1 | compiled µs | eager µs | compiled / eager |")
print("|---|---:|---:|---:|")
for _, o in ipairs(ops) do
  local c = T.compile(o[2])
  for _ = 1, 4 do c(y) end
  local ce = T.bench(c, { y }, { warmup = 3, reps = reps }).median_us
  local ee = T.bench(o[2], { y }, { warmup = 3, reps = reps }).median_us
  print(("| %s | %.0f | %.0f | %.2f |"):format(o[1], ce, ee, ce / ee))
end
