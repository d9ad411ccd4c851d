-- Eager time of the data ops on 16M-element (2^24) tensors: masked_select, nonzero,
-- index_select, gather, scatter_add, index_add and bincount into 1000 bins, unique of 1000 values,
-- sort and cumsum
-- (float32 values, int64 1-based indices).
-- Medians over repeated runs (T.bench, wall time on the CPU); bench/torch_data_ops.py has the
-- same cases for PyTorch and bench/run_data_ops.sh runs both.
--   crescent bench/data_ops_bench.lua [reps]          (threads: CRESCENT_NUM_THREADS)
--   DEVICE=cuda crescent bench/data_ops_bench.lua     (device time; a copy of 16M is the yardstick)
-- Prints a table, then one line per case: RESULT <name> <median_us> <bytes> B
local T = require "crescent"
local reps = tonumber(arg and arg[1]) or 5

local N = 2 ^ 24
local dev = os.getenv("DEVICE") or "cpu"
local results = {}
local function case(name, fn, args, bytes)
  local r = T.bench(fn, args, { warmup = 1, reps = reps })
  results[#results + 1] = { name = name, r = r, bytes = bytes }
end

T.manual_seed(0)
local x = T.randn(N):to(dev)
local mask = x:gt(0)
local idx = T.randint(1, N + 1, { N }):to(dev)  -- int64
local src = T.randn(N):to(dev)
case("copy 16M", function(a) return a:clone() end, { x }, 8 * N)
-- bytes: what a pass reads and writes (half the mask is true; int64 indices)
case("masked_select 16M", function(a, m) return a:masked_select(m) end, { x, mask }, 4 * N + N + 2 * N)
case("nonzero 16M", function(m) return T.nonzero(m) end, { mask }, N + 4 * N)
case("index_select 16M", function(a, i) return a:index_select(1, i) end, { x, idx }, 8 * N + 8 * N)
case("gather 16M", function(a, i) return a:gather(1, i) end, { x, idx }, 8 * N + 8 * N)
case("scatter_add 16M", function(a, i, s) return a:scatter_add(1, i, s) end, { x, idx, src }, 8 * N + 4 * N + 12 * N)
local small = T.randint(1, 1001, { N }):to(dev)  -- (a histogram's bins: one long line into a small target)
case("index_add 16M into 1000", function(a, i, s) return a:index_add(1, i, s) end, { T.zeros(1000):to(dev), small, src }, 8 * N + 4 * N)
case("bincount 16M into 1000", function(i) return T.bincount(i) end, { small - 1 }, 8 * N)
case("unique 16M in 1000", function(i) return T.unique(i) end, { small }, 8 * N)
case("sort 16M", function(a) return a:sort() end, { x }, 4 * N + 12 * N)
case("cumsum 16M", function(a) return a:cumsum(1) end, { x }, 8 * N)

print(string.format("crescent eager %s, %d threads, median of %d runs", dev, T.get_num_threads(), reps))
print(string.format("%-24s %12s %12s %12s", "case", "median us", "min us", "GB/s"))
for _, c in ipairs(results) do
  print(string.format("%-24s %12.0f %12.0f %12.2f", c.name, c.r.median_us, c.r.min_us, c.bytes / c.r.median_us / 1e3))
end
for _, c in ipairs(results) do
  print(string.format("RESULT %s %.3f %d B", c.name:gsub(" ", "_"), c.r.median_us, c.bytes))
end
