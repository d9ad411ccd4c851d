-- One GPT training step in its steady state on CUDA, for profilers and memory: the step of
-- bench/lib/gpt2_train.lua (MODE eager | model | step, AUTOCAST), compiled in line; after 4 steps
-- the peak memory so far (the first compiled step's trace included), then the mean of 8 steps
-- (PROF=1: 2, to keep an `ncu` run short), their peaks and the launches a step makes.
--   DEVICE=cuda MODE=model AUTOCAST=bfloat16 crescent bench/train_probe.lua [config] [batch] [seq]
--   ncu --csv --metrics gpu__time_duration.sum (PROF=1 ...): the last two steps' kernels
-- Its twin for PyTorch: bench/torch_train_probe.py.
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/bench/?.lua;" .. package.path
local B = require "lib.timing"

local mode, ac = os.getenv("MODE") or "eager", os.getenv("AUTOCAST")
if ac == "" or ac == "none" then ac = nil end
T.config.sync_compile = true
local S = require("lib.gpt2_train").new { config = arg[1] or "gpt2", batch = tonumber(arg[2] or 8),
  seq = tonumber(arg[3] or 512), device = "cuda", autocast = ac, mode = mode }
for _ = 1, 4 do S.step() end
T.cuda.synchronize()
collectgarbage()
local warm_alloc, warm_reserved = T.cuda.max_memory_allocated() / 2 ^ 20, T.cuda.max_memory_reserved() / 2 ^ 20
T.cuda.reset_peak_memory_stats()
local s0 = T.cuda.stats()
local n = os.getenv("PROF") and 2 or 8
local t0 = B.now_ms()
for _ = 1, n do S.step() end
T.cuda.synchronize()
local ms = (B.now_ms() - t0) / n
local s1 = T.cuda.stats()
print(B.json {
  { "mode", mode }, { "autocast", ac or "none" }, { "step_ms", ms },
  { "first_steps_peak_allocated_mib", warm_alloc }, { "first_steps_peak_reserved_mib", warm_reserved },
  { "peak_allocated_mib", T.cuda.max_memory_allocated() / 2 ^ 20 }, { "peak_reserved_mib", T.cuda.max_memory_reserved() / 2 ^ 20 },
  { "kernel_launches", (s1.kernel_launches - s0.kernel_launches) / n }, { "blas_calls", (s1.blas_calls - s0.blas_calls) / n },
})
