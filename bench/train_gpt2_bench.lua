-- crescent's side of the GPT training-step benchmark (bench/torch_train_gpt2.py is PyTorch's; both
-- run from bench/run_train_gpt2.sh): the step of bench/lib/gpt2_train.lua (forward, cross entropy,
-- backward, AdamW, zero_grad, loss:item()). MODE=eager: as written; MODE=model: T.compile(model)
-- in the eager loop; MODE=step: T.compile of the whole step. The first FIRST steps (eager: WARM)
-- are timed one by one from the cold start (compiles land in the background meanwhile); then the
-- compiles are waited for (and calls made until one starts none), and the median step over STEPS
-- steps is the steady state; tokens/s = batch * seq / step time.
--   crescent bench/train_gpt2_bench.lua CONFIG BATCH SEQ STEPS      -> one JSON line
--   (DEVICE=cuda: on the GPU; AUTOCAST=bfloat16: under T.autocast; FIRST: default 50; WARM:
--   default 3; CRESCENT_CACHE_DIR: the kernel cache a second process reuses)
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/bench/?.lua;" .. package.path
local B = require "lib.timing"

local name, batch, seq, steps = arg[1] or "small", tonumber(arg[2] or 8), tonumber(arg[3] or 128), tonumber(arg[4] or 10)
local mode = os.getenv("MODE") or "eager"
local first_n = tonumber(mode == "eager" and (os.getenv("WARM") or 3) or (os.getenv("FIRST") or 50))
local device = os.getenv("DEVICE") or "cpu"
local autocast = os.getenv("AUTOCAST")
if autocast == "" or autocast == "none" then autocast = nil end
local S = require("lib.gpt2_train").new { config = name, batch = batch, seq = seq, device = device,
  autocast = autocast, mode = mode }

-- the cold start: each step's time, and the first step after which no compile was pending or new
local t_start = B.now_ms()
local pending, state, ends, landed, first_loss = {}, {}, {}, nil, nil
local first_ms = B.time_calls(S.step, first_n, function(i, loss)
  state[i], pending[i] = B.compile_state()
  ends[i] = B.now_ms() - t_start
  first_loss = first_loss or loss
end)
for i = first_n, 1, -1 do
  if pending[i] ~= 0 or state[i] ~= state[first_n] then break end
  landed = i
end
local settle_calls, changed = B.settle(S.step, 20, 3)
-- when the last compile was taken up: in the first steps, or after them
local ready_ms = changed and changed - t_start or landed and ends[landed] or B.now_ms() - t_start
if changed then landed = nil end
local settled = B.compile_state()
collectgarbage()
local first_mem = B.device_memory(device)  -- (the peaks of the cold start)
T.reset_peak_memory()  -- (CPU tensor storage: the timed steps' peak, weights and state included)
if device ~= "cpu" then T.cuda.reset_peak_memory_stats(device) end
local run = B.train_loop(S.step, 0, steps)
local host_peak_mib = T.memory_stats().peak / 2 ^ 20
local cs = T.compiler.stats()  -- (a compile while the steps were timed shows in timed_compiles)
local mem = B.device_memory(device)
local compiled = mode ~= "eager"
print(B.json {
  { "config", name }, { "batch", batch }, { "seq", seq }, { "device", device }, { "autocast", autocast or "none" },
  { "mode", mode }, { "step_ms", run.step_ms }, { "tokens_per_s", batch * seq / (run.step_ms / 1e3) },
  { "first_loss", first_loss }, { "last_loss", run.last_loss }, { "params", S.model:num_parameters() },
  { "reserved_mib", first_mem and math.max(first_mem.reserved_mib, mem.reserved_mib) },
  { "first_in_use_mib", first_mem and first_mem.in_use_mib }, { "steady_in_use_mib", mem and mem.in_use_mib },
  { "host_ops", mem and mem.host_ops },
  { "host_peak_mib", host_peak_mib },
  { "first_ms", first_ms }, { "first_pending", compiled and pending or nil },
  { "ready_ms", compiled and ready_ms or nil }, { "landed_step", compiled and landed or nil },
  { "settle_calls", compiled and settle_calls or nil },
  { "timed_compiles", compiled and B.compile_state() - settled or nil }, { "compile_ms", compiled and cs.compile_ms or nil },
  { "graphs", compiled and cs.graphs_compiled or nil }, { "backward_graphs", compiled and cs.backward_graphs_compiled or nil },
  { "graph_breaks", compiled and cs.graph_breaks or nil }, { "recompiles", compiled and cs.recompiles or nil }, { "grad_fallbacks", compiled and cs.grad_fallbacks or nil },
  { "eager_fallbacks", compiled and cs.eager_fallbacks or nil },
  { "kernels_compiled", compiled and cs.kernels_compiled or nil }, { "kernels_loaded", compiled and cs.kernels_loaded or nil },
  { "disk_cache_hits", compiled and cs.disk_cache_hits or nil },
})
