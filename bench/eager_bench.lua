-- Eager CPU throughput of crescent: the memory-bound pointwise ops, a full reduction, softmax and
-- a matmul on 4M-element / 1024x1024 float32 inputs, plus the per-op cost of the Lua -> C++
-- dispatch on a 4-element tensor. Medians over repeated runs (T.bench, wall time on the CPU).
--   crescent bench/eager_bench.lua [reps]          (threads: CRESCENT_NUM_THREADS)
-- Prints a table, then one machine-readable line per case for bench/run_eager.sh:
--   RESULT <name> <median_us> <bytes_moved_or_flops> <unit>       or     RESULT <name> MISSING <why>
local T = require "crescent"
local reps = tonumber(arg and arg[1]) or 20

local N = 2048 * 2048  -- 4M elements
local results = {}

local function report(name, r, work, unit)
  results[#results + 1] = { name = name, r = r, work = work, unit = unit }
end
local function missing(name, why) results[#results + 1] = { name = name, missing = why } end

-- runs fn(args...) under T.bench unless one of the ops it needs is not in this build
local function case(name, needs, fn, args, work, unit, opts)
  for _, op in ipairs(needs) do
    if not T._ops[op] then return missing(name, "op '" .. op .. "' is not in this build") end
  end
  local ok, r = pcall(T.bench, fn, args, opts or { warmup = 3, reps = reps })
  if not ok then return missing(name, tostring(r):gsub("\n.*", "")) end
  report(name, r, work, unit)
end

T.manual_seed(0)
local x, y = T.randn(2048, 2048), T.randn(2048, 2048)
local bytes = 4 * N
case("add 4M", { "add" }, function(a, b) return a + b end, { x, y }, 3 * bytes, "B")
case("mul 4M", { "mul" }, function(a, b) return a * b end, { x, y }, 3 * bytes, "B")
case("exp 4M", { "exp" }, function(a) return a:exp() end, { x }, 2 * bytes, "B")
case("sum 4M", { "sum" }, function(a) return a:sum() end, { x }, bytes, "B")
case("softmax 2048x2048 dim -1", { "softmax" }, function(a) return a:softmax(-1) end, { x }, 2 * bytes, "B")
local m1, m2 = T.randn(1024, 1024), T.randn(1024, 1024)
case("matmul 1024x1024x1024", { "matmul" }, function(a, b) return T.matmul(a, b) end, { m1, m2 }, 2 * 1024 ^ 3, "FLOP")

-- dispatch: 1000 adds of 4-element tensors per timed call, reported per op
local s1, s2 = T.randn(4), T.randn(4)
local LOOP = 1000
case("dispatch add 4 elements (per op)", { "add" }, function(a, b)
  for _ = 1, LOOP do local _ = a + b end
end, { s1, s2 }, nil, nil, { warmup = 5, reps = reps })
case("dispatch exp 4 elements (per op)", { "exp" }, function(a)
  for _ = 1, LOOP do local _ = a:exp() end
end, { s1 }, nil, nil, { warmup = 5, reps = reps })
for _, r in ipairs(results) do
  if r.name:find("per op", 1, true) and r.r then
    for _, k in ipairs({ "median_us", "min_us", "max_us" }) do r.r[k] = r.r[k] / LOOP end
  end
end

-- the table, then the machine-readable lines
print(string.format("crescent eager CPU, %d threads, float32, median of %d runs", T.get_num_threads(), reps))
print(string.format("%-36s %12s %12s %14s", "case", "median us", "min us", "rate"))
for _, r in ipairs(results) do
  if r.missing then
    print(string.format("%-36s %12s   (%s)", r.name, "MISSING", r.missing))
  else
    local rate = ""
    if r.unit == "B" then rate = string.format("%.1f GB/s", r.work / r.r.median_us / 1e3)
    elseif r.unit == "FLOP" then rate = string.format("%.1f GFLOP/s", r.work / r.r.median_us / 1e3) end
    print(string.format("%-36s %12.2f %12.2f %14s", r.name, r.r.median_us, r.r.min_us, rate))
  end
end
for _, r in ipairs(results) do
  local key = r.name:gsub(" ", "_")
  if r.missing then print("RESULT " .. key .. " MISSING " .. r.missing)
  else print(string.format("RESULT %s %.3f %s %s", key, r.r.median_us, r.work and string.format("%.0f", r.work) or "-", r.unit or "-")) end
end
