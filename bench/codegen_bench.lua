-- CPU code generation (issue 4): eager vs T.compile (libgccjit kernels) on the CPU workloads of
-- the anchor (../shared/anchors/torch_anchor.py, CPU sizes: N = 2^22; R, C = 2048, 2048).
--   CRESCENT_NUM_THREADS=2 build/crescent bench/codegen_bench.lua [reps]
--   DEVICE=cuda build/crescent bench/codegen_bench.lua [reps]   (GPU sizes: N = 2^24; R, C = 8192, 4096)
-- Per workload: eager median µs and compiled median µs (T.bench, `reps` timed calls after a
-- warm-up), GB/s of the compiled call for the memory-bound ones (bytes as in the anchor), the max
-- abs difference compiled vs eager, the cold compile time and the disk-cache compile time. With
-- hot = 0 the first call of a compiled function records its trace (running eagerly) and the second
-- is the one that compiles: cold = that second call with an empty cache_dir (fusion + libgccjit in
-- the forked compiler + load + one run); disk-cache = the same second call after
-- T.compiler.reset() and a new T.compile of the same function with the same cache_dir (it loads
-- the cached .so). Both include one run of the graph (see compiled µs). Also a copy bandwidth
-- baseline (y:copy_(x), 2^24 floats, GB/s = 2 * bytes / time), and per workload a copy of the
-- same bytes. Prints a markdown table; JSON lines go to stdout, or to the file
-- named by env OUT.
local T = require "crescent"
local now = require("crescent.core").api.now_us
local reps = tonumber(arg and arg[1]) or 50
local warmup = 60  -- steady state: LuaJIT compiles a hot loop after 56 iterations

T.manual_seed(0)
T.config.sync_compile = true
local tmp = (os.getenv("TMPDIR") or "/tmp") .. string.format("/crescent_codegen_bench_%d_%d",
  os.time(), math.floor(os.clock() * 1e6) % 1000000)
os.execute("mkdir -p '" .. tmp .. "'")

-- DEVICE=cuda: the anchor's GPU sizes, inputs on the device, T.bench's device timer
local DEVICE = os.getenv("DEVICE") or "cpu"
local GPU = DEVICE ~= "cpu"
package.path = ((arg and arg[0] or ""):match("^(.*)/") or ".") .. "/?.lua;" .. package.path  -- bench/workloads.lua
local work = require("workloads")(DEVICE)

local out = io.stdout
if os.getenv("OUT") then out = assert(io.open(os.getenv("OUT"), "w")) end

-- minimal JSON for flat rows of strings / numbers
local function json(row, keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = row[k]
    if v ~= nil then
      if type(v) == "string" then v = string.format("%q", v)
      elseif v ~= v or v == math.huge then v = "null"
      else v = string.format("%.6g", v) end
      parts[#parts + 1] = string.format("%q: %s", k, v)
    end
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end
local KEYS = { "name", "eager_us", "compiled_us", "compiled_min_us", "compiled_GBps", "eager_GBps", "compiled_batch_us",
  "compiled_batch_GBps",
  "copy_fraction", "same_copy_GBps", "same_copy_fraction", "max_abs_diff", "record_ms", "cold_compile_ms", "disk_compile_ms", "kernels_compiled",
  "disk_cache_hits", "eager_fallbacks", "GBps", "bytes", "threads", "reps" }

local unpack = unpack or table.unpack
local function timed_call(f, args)
  collectgarbage()
  local t0 = now()
  f(unpack(args))
  T.cuda.synchronize()
  return (now() - t0) / 1e3
end

-- copy bandwidth baseline
local cx, cy = T.randn(2 ^ 24):to(DEVICE), T.empty(2 ^ 24, { device = DEVICE })
local copy_us = T.bench(function(a, b) b:copy_(a) end, { cx, cy }, { warmup = warmup, reps = reps }).median_us
local copy_GBps = 2 * 4 * 2 ^ 24 / copy_us / 1e3
cx, cy = nil, nil
collectgarbage()
out:write(json({ name = "copy", eager_us = copy_us, GBps = copy_GBps, bytes = 2 * 4 * 2 ^ 24,
  threads = T.get_num_threads(), reps = reps }, KEYS), "\n")
out:flush()

local rows = {}
local only = os.getenv("ONLY")  -- one workload by name
for _, w in ipairs(work) do if not only or w[1] == only then
  local name, fn, args, nbytes = w[1], w[2], w[3], w[4]
  local row = { name = name, reps = reps }
  collectgarbage()
  -- steady state: CUDA eager ops start on size-generic kernels and take ones specialised to the
  -- sizes after 16 calls, compiled in the background (jit/cuda/eager.cpp)
  if GPU then for _ = 1, 20 do fn(unpack(args)) end; require("crescent.core").api.wait_compiles() end
  row.eager_us = T.bench(fn, args, { warmup = warmup, reps = reps }).median_us

  -- cold: nothing cached in memory or on disk
  T.config.cache_dir = tmp .. "/" .. name
  os.execute("rm -rf '" .. T.config.cache_dir .. "'")
  T.compiler.reset()
  local s0 = T.compiler.stats()
  local cf = T.compile(fn, { hot = 0 })
  row.record_ms = timed_call(cf, args)        -- call 1 records the trace (runs eagerly)
  row.cold_compile_ms = timed_call(cf, args)  -- call 2 compiles the graph and runs it
  local s1 = T.compiler.stats()
  row.kernels_compiled = s1.kernels_compiled - s0.kernels_compiled
  row.eager_fallbacks = s1.eager_fallbacks - s0.eager_fallbacks

  -- correctness vs eager
  local ref, got = fn(unpack(args)), cf(unpack(args))
  row.max_abs_diff = (got:float() - ref:float()):abs():max():item()

  collectgarbage()
  local b = T.bench(cf, args, { warmup = warmup, reps = reps })
  row.compiled_us, row.compiled_min_us = b.median_us, b.min_us
  if DEVICE ~= "cpu" then  -- calls issued back to back: the device time without host gaps
    row.compiled_batch_us = T.bench(cf, args, { warmup = warmup, reps = reps, batch = 10 }).median_us
    if nbytes then row.compiled_batch_GBps = nbytes / row.compiled_batch_us / 1e3 end
  end
  if nbytes then
    row.compiled_GBps = nbytes / row.compiled_us / 1e3
    row.eager_GBps = nbytes / row.eager_us / 1e3
    row.copy_fraction = row.compiled_GBps / copy_GBps
    -- and against a copy of the same bytes (nbytes / 2 each way): bandwidth depends on the size
    -- (caches, pages), and the 2^24 copy moves 4x pw_chain's bytes
    local n = math.floor(nbytes / 8)
    local sx, sy = T.randn(n):to(DEVICE), T.empty(n, { device = DEVICE })
    local sc = T.bench(function(a, c) c:copy_(a) end, { sx, sy }, { warmup = warmup, reps = reps }).median_us
    row.same_copy_GBps = 8 * n / sc / 1e3
    row.same_copy_fraction = row.compiled_GBps / row.same_copy_GBps
  end
  cf = nil

  -- warm from disk: the kernel cache in memory is dropped, the .so files stay in cache_dir
  collectgarbage()
  T.compiler.reset()
  local d0 = T.compiler.stats()
  local cf2 = T.compile(fn, { hot = 0 })
  timed_call(cf2, args)
  row.disk_compile_ms = timed_call(cf2, args)
  row.disk_cache_hits = T.compiler.stats().disk_cache_hits - d0.disk_cache_hits
  cf2 = nil
  T.compiler.reset()

  rows[#rows + 1] = row
  out:write(json(row, KEYS), "\n")
  out:flush()
end end
if out ~= io.stdout then out:close() end
os.execute("rm -rf '" .. tmp .. "'")

local function f(v, fmt) return v and string.format(fmt, v) or "-" end
print(string.format("\ncopy 2^24 float32: %.1f us, %.1f GB/s (2 x bytes / time); threads %d; medians of %d",
  copy_us, copy_GBps, T.get_num_threads(), reps))
print("| workload | eager µs | compiled µs | GB/s | % of copy | % of same-size copy | compiled/eager | max abs diff | cold compile ms | disk-cache compile ms | kernels | disk hits |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for _, r in ipairs(rows) do
  print(string.format("| %s | %.1f | %.1f | %s | %s | %s | %.2f | %.3g | %.1f | %.2f | %d | %d |", r.name,
    r.eager_us, r.compiled_us, f(r.compiled_GBps, "%.1f"), f(r.copy_fraction and r.copy_fraction * 100, "%.0f"),
    f(r.same_copy_fraction and r.same_copy_fraction * 100, "%.0f"),
    r.compiled_us / r.eager_us, r.max_abs_diff, r.cold_compile_ms, r.disk_compile_ms, r.kernels_compiled,
    r.disk_cache_hits))
end
