-- The cold start of the compiled GPT training step (bench/lib/gpt2_train.lua, MODE=step): one line
-- per step from the model's creation on - when it ended, the graphs compiled, the background compiles
-- pending (eager speed-ups included), kernels built or loaded - and the step whose call first ran
-- the step's native code (its kernels counted, built or from the disk cache).
--   crescent bench/train_gpt2_cold.lua CONFIG BATCH SEQ STEPS   (DEVICE=cuda, AUTOCAST=bfloat16,
--   CRESCENT_CACHE_DIR: an empty directory for a cold compile, the same again for the disk cache)
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/bench/?.lua;" .. package.path

local name, batch, seq, steps = arg[1] or "small", tonumber(arg[2] or 4), tonumber(arg[3] or 32), tonumber(arg[4] or 16)
local autocast = os.getenv("AUTOCAST")
if autocast == "" or autocast == "none" then autocast = nil end
local S = require("lib.gpt2_train").new { config = name, batch = batch, seq = seq,
  device = os.getenv("DEVICE") or "cpu", mode = "step", autocast = autocast }
local t0 = T.time()
local landed
for i = 1, steps do
  S.step()
  local s = T.compiler.stats()
  local ms = (T.time() - t0) * 1e3
  print(string.format("step %d ended at %.0f ms: graphs %d, pending %d, kernels built %d, loaded %d", i, ms,
    s.graphs_compiled, s.compiles_pending, s.kernels_compiled, s.kernels_loaded))
  -- (kernels are counted once the recorder takes the landed code up, at the start of a call)
  if not landed and s.kernels_compiled + s.kernels_loaded > 0 then landed = { i, ms } end
end
print(landed and string.format("landed: step %d, %.0f ms after the start", landed[1], landed[2])
  or "landed: not within the steps")
