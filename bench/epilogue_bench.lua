-- Products with fused epilogues (vm/ops/epilogue.cpp): compiled median µs of the anchor's mlp
-- (workloads.lua: matmul -> bias -> gelu as tanh arithmetic -> matmul -> bias) and of GPT-2's MLP
-- (T.gelu tanh, then bias + residual: both products take their whole epilogue), and the CPU time
-- a call takes (all threads: steadier than wall time on a shared machine), on the CPU or
-- (DEVICE=cuda) the GPU. bench/run_epilogue.sh alternates two builds (before / after) round by round.
--   CRESCENT_NUM_THREADS=2 build/crescent bench/epilogue_bench.lua [reps]
local T = require "crescent"
local reps = tonumber(arg and arg[1]) or 30
local DEVICE = os.getenv("DEVICE") or "cpu"
package.path = ((arg and arg[0] or ""):match("^(.*)/") or ".") .. "/?.lua;" .. package.path
T.manual_seed(0)
T.config.sync_compile = true

local work = {}
for _, w in ipairs(require("workloads")(DEVICE)) do
  if w[1] == "mlp" then work[#work + 1] = w end
end
local rows, d = DEVICE == "cpu" and 512 or 4096, 768
local function gpt2_mlp(x, w1, b1, w2, b2)
  return x + (T.matmul(T.gelu(T.matmul(x, w1) + b1, { approximate = "tanh" }), w2) + b2)
end
local args = { T.randn(rows, d), T.randn(d, 4 * d) * 0.02, T.randn(4 * d), T.randn(4 * d, d) * 0.02, T.randn(d) }
for i, a in ipairs(args) do args[i] = a:to(DEVICE) end
work[#work + 1] = { "gpt2_mlp", gpt2_mlp, args }

for _, w in ipairs(work) do
  local f = T.compile(w[2])
  local call = function(...) return T.no_grad(f, ...) end
  local r = T.bench(call, w[3], { warmup = 5, reps = reps })
  local c0 = os.clock()  -- (the process's CPU time, all threads: steadier than wall time on a loaded machine)
  for _ = 1, reps do call(unpack(w[3])) end
  local cpu = (os.clock() - c0) / reps * 1e6
  print(string.format('{"name": "%s", "compiled_us": %.1f, "cpu_us": %.1f}', w[1], r.median_us, cpu))
end
