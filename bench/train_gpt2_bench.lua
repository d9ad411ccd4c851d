-- crescent's side of the training-step benchmark (bench/torch_train_gpt2.py is PyTorch's; both run
-- from bench/run_train_gpt2.sh). The model of examples/models/gpt2.lua with random weights, one
-- training step = forward, cross-entropy over the next tokens, backward, AdamW step, zero_grad,
-- loss:item() (so the step's device work is done). After WARM steps, the median step time over
-- STEPS steps; tokens/s = batch * seq / step time.
--   crescent bench/train_gpt2_bench.lua CONFIG BATCH SEQ STEPS      -> one JSON line
--   (DEVICE=cuda: on the GPU; AUTOCAST=bfloat16: the step under T.autocast)
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/examples/?.lua;" .. package.path
local G = require "models.gpt2"
local now = require("crescent.core").api.now_us

local name, batch, seq, steps = arg[1] or "small", tonumber(arg[2] or 8), tonumber(arg[3] or 128), tonumber(arg[4] or 10)
local warm = tonumber(os.getenv("WARM") or 3)
local device = os.getenv("DEVICE") or "cpu"
local autocast = os.getenv("AUTOCAST")
if autocast == "" then autocast = nil end
T.manual_seed(0)
local cfg = G.configs[name]
local model = G.new(cfg):to(device)
local params = model:parameters()
for _, p in ipairs(params) do p:requires_grad_(true) end
local opt = T.optim.AdamW(params, { lr = 3e-4 })
local data = T.randint(0, cfg.vocab, { batch, seq + 1 }):to(device)
local ids, targets = data:narrow(2, 1, seq), data:narrow(2, 2, seq):reshape(-1) + 1  -- classes 1-based

local function loss_of()
  local logits = model(ids)
  return T.F.cross_entropy(logits:reshape(batch * seq, cfg.vocab), targets)
end

local function step()
  local loss = autocast and T.autocast(device, { dtype = autocast }, loss_of) or loss_of()
  loss:backward()
  opt:step()
  opt:zero_grad()
  return loss:item()
end

local function median(xs)
  table.sort(xs)
  return xs[math.floor((#xs + 1) / 2)]
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
local ms = median(times)
-- on a GPU: what the caching allocator holds from the driver (it keeps its peak: nothing is given back
-- during the run), against torch.cuda.max_memory_reserved
local stats = device ~= "cpu" and T.cuda.stats(device) or nil
local reserved = stats and stats.reserved / 2 ^ 20 or nil
print(string.format('{"config": "%s", "batch": %d, "seq": %d, "device": "%s", "autocast": "%s", "step_ms": %.3f, ' ..
  '"tokens_per_s": %.1f, "first_loss": %.4f, "last_loss": %.4f, "params": %d%s}', name, batch, seq, device,
  autocast or "none", ms, batch * seq / (ms / 1e3), first_loss, last_loss, model:num_parameters(),
  reserved and string.format(', "reserved_mib": %.1f, "host_ops": %d', reserved, stats.host_ops) or ""))
