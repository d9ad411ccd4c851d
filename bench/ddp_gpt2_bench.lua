-- crescent's side of the data-parallel GPT-2 benchmark (bench/torch_ddp_gpt2.py is PyTorch's;
-- both run from bench/run_dist.sh): the training step of bench/lib/gpt2_train.lua on every
-- rank of `crescent --nproc N` (a 1-rank run has no process group), the model wrapped in
-- T.nn.parallel.DistributedDataParallel (gradient_as_bucket_view, as PyTorch's side), BATCH rows
-- per rank. After WARM steps and the compiles they start (all ranks agreeing: lib.timing's
-- settle), the median step time over STEPS steps; tokens/s counts every rank's rows. Rank 0
-- prints one JSON line.
--   crescent --nproc N bench/ddp_gpt2_bench.lua CONFIG BATCH SEQ STEPS
--   (AUTOCAST=bfloat16 by default; COMPILE=1: the model's forward and backward compiled;
--   DEVICE=cpu AUTOCAST=none: a smoke run on the simulated process group, without GPUs;
--   BUCKET_MB: DDP's bucket_cap_mb; NO_SYNC=1: every step inside ddp:no_sync, the steps
--   without their reductions, to time what the reductions add; PHASES=1: rank 0's device ms of
--   forward, backward and update over the timed steps, from events between them)
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/bench/?.lua;" .. package.path
local B = require "lib.timing"
local D = T.distributed

local name, batch, seq, steps = arg[1] or "gpt2", tonumber(arg[2] or 8), tonumber(arg[3] or 1024), tonumber(arg[4] or 10)
local autocast = os.getenv("AUTOCAST") or "bfloat16"
if autocast == "" or autocast == "none" then autocast = nil end
local world = tonumber(os.getenv("WORLD_SIZE") or 1)
local device = os.getenv("DEVICE") or "cuda"
if world > 1 then
  D.init_process_group(device == "cpu" and "simulated" or "nccl")
  device = D.device()
end
local rank = world > 1 and D.get_rank() or 0
local compile = os.getenv("COMPILE") == "1"
local ddp
local S = require("lib.gpt2_train").new { config = name, batch = batch, seq = seq, device = device,
  autocast = autocast, mode = compile and "model" or "eager", data_seed = 1 + rank, phases = os.getenv("PHASES") == "1",
  wrap = world > 1 and function(m)
    ddp = T.nn.parallel.DistributedDataParallel(m, { gradient_as_bucket_view = true,
      bucket_cap_mb = tonumber(os.getenv("BUCKET_MB") or 25) })
    return ddp
  end or nil }
local step = S.step
if ddp and os.getenv("NO_SYNC") == "1" then step = function() return ddp:no_sync(S.step) end end
-- every rank quiet, or none (a 0/1 flag all-reduced with max)
local function agree(quiet)
  if world == 1 then return quiet end
  local flag = T.tensor({ quiet and 0 or 1 }, { dtype = "float32" }):to(device)
  D.all_reduce(flag, { op = "max" })
  return flag:item() == 0
end
local first_loss
for _ = 1, tonumber(os.getenv("WARM") or 3) do first_loss = first_loss or step() end
B.settle(step, 20, 3, agree)
if os.getenv("PHASES") == "1" then S.phases() end
local run = B.train_loop(step, 0, steps)
local ph = os.getenv("PHASES") == "1" and S.phases() or nil
if rank == 0 then
  print(B.json {
    { "side", "crescent" }, { "config", name }, { "world", world }, { "batch_per_rank", batch }, { "seq", seq },
    { "compile", compile }, { "autocast", autocast or "none" }, { "step_ms", run.step_ms },
    { "tokens_per_s", world * batch * seq / (run.step_ms / 1e3) }, { "no_sync", os.getenv("NO_SYNC") == "1" or nil },
    { "bucket_mb", os.getenv("BUCKET_MB") and tonumber(os.getenv("BUCKET_MB")) or nil }, { "first_loss", first_loss or run.first_loss },
    { "last_loss", run.last_loss }, { "forward_ms", ph and ph.forward }, { "backward_ms", ph and ph.backward },
    { "update_ms", ph and ph.update },
  })
end
if world > 1 then D.destroy_process_group() end
