-- crescent's side of the data-parallel GPT-2 benchmark (bench/torch_ddp_gpt2.py is PyTorch's;
-- both run from bench/run_dist.sh): the training step of bench/train_gpt2_bench.lua on every
-- rank of `crescent --nproc N` (a 1-rank run has no process group), the model wrapped in
-- T.nn.parallel.DistributedDataParallel, BATCH rows per rank. After WARM steps, the median step
-- time over STEPS steps; tokens/s counts every rank's rows. Rank 0 prints one JSON line.
--   crescent --nproc N bench/ddp_gpt2_bench.lua CONFIG BATCH SEQ STEPS
--   (AUTOCAST=bfloat16 by default; COMPILE=1: the model's forward and backward compiled;
--   DEVICE=cpu AUTOCAST=none: a smoke run on the simulated process group, without GPUs)
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/examples/?.lua;" .. package.path
local G = require "models.gpt2"
local now = require("crescent.core").api.now_us
local D = T.distributed

local name, batch, seq, steps = arg[1] or "gpt2", tonumber(arg[2] or 8), tonumber(arg[3] or 1024), tonumber(arg[4] or 10)
local warm = tonumber(os.getenv("WARM") or 3)
local autocast = os.getenv("AUTOCAST") or "bfloat16"
if autocast == "" or autocast == "none" then autocast = nil end
local world = tonumber(os.getenv("WORLD_SIZE") or 1)
local device = os.getenv("DEVICE") or "cuda"
if world > 1 then
  D.init_process_group(device == "cpu" and "simulated" or "nccl")
  device = D.device()
end
local rank = world > 1 and D.get_rank() or 0
T.manual_seed(0)
local cfg = G.configs[name]
local model = G.new(cfg):to(device)
for _, p in ipairs(model:parameters()) do p:requires_grad_(true) end
local wrapped = world > 1 and T.nn.parallel.DistributedDataParallel(model) or model
local forward = os.getenv("COMPILE") == "1" and T.compile(wrapped) or wrapped
local opt = T.optim.AdamW(model:parameters(), { lr = 3e-4 })
T.manual_seed(1 + rank)
local data = T.randint(0, cfg.vocab, { batch, seq + 1 }):to(device)
local ids, targets = data:narrow(2, 1, seq), data:narrow(2, 2, seq):reshape(-1) + 1  -- classes 1-based

local function loss_of()
  return T.F.cross_entropy(forward(ids):reshape(batch * seq, cfg.vocab), targets)
end

local function step()
  local loss = autocast and T.autocast(device:match("^%a+"), { dtype = autocast }, loss_of) or loss_of()
  loss:backward()
  opt:step()
  opt:zero_grad()
  return loss:item()
end

local first_loss, last_loss
for i = 1, warm do
  local l = step()
  if i == 1 then first_loss = l end
end
local times = {}
for i = 1, steps do
  local t0 = tonumber(now())
  last_loss = step()
  times[i] = (tonumber(now()) - t0) / 1e3
end
table.sort(times)
local ms = times[math.floor((#times + 1) / 2)]
if rank == 0 then
  print(string.format('{"side": "crescent", "config": "%s", "world": %d, "batch_per_rank": %d, "seq": %d, "compile": %s, ' ..
    '"autocast": "%s", "step_ms": %.3f, "tokens_per_s": %.1f, "first_loss": %.4f, "last_loss": %.4f}', name, world, batch,
    seq, tostring(os.getenv("COMPILE") == "1"), autocast or "none", ms, world * batch * seq / (ms / 1e3), first_loss, last_loss))
end
if world > 1 then D.destroy_process_group() end
