-- crescent's side of the training-step benchmark (bench/torch_train.py is PyTorch's; both run from
-- bench/run_train.sh). One eager step of the GPT of examples/models/gpt2.lua (forward, cross
-- entropy, backward, AdamW) on random next-token batches; and an AdamW step alone over 20
-- parameters of 256 x 256 (the fused registry op, and {fused = false}: torch's single-tensor
-- formulas as registry ops). Medians over REPS after a warm-up (and the compiles it started), and
-- the step's CPU time per call.
-- MODE "compiled": the model's forward is T.compile(model) (compiled autograd: forward and
-- backward graphs), the rest as eager; "step": the whole step (zero_grad, forward, backward,
-- AdamW update) is one compiled function.
--   crescent bench/train_bench.lua VOCAB D HEADS LAYERS CTX BATCH REPS [MODE]      -> one JSON line
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/examples/?.lua;" .. dir .. "/bench/?.lua;" .. package.path
local G = require "models.gpt2"
local Bt = require "lib.timing"

local V, D, H, NL, L, B, REPS = (function(a)
  local r = {}
  for i, dflt in ipairs({ 86, 96, 4, 3, 64, 16, 30 }) do r[i] = tonumber(a[i]) or dflt end
  return unpack(r)
end)(arg or {})
local MODE = (arg or {})[8] or "eager"
T.manual_seed(0)
local m = G.new({ vocab = V, n_ctx = L, d = D, n_head = H, n_layer = NL })
local opt = T.optim.AdamW(m:parameters(), { lr = 1e-3 })
local ids, targets = T.randint(0, V, { B, L }), T.randint(1, V + 1, { B * L })
local fwd = MODE == "compiled" and T.compile(m) or m
local function step()
  opt:zero_grad()
  T.F.cross_entropy(fwd(ids):view(-1, V), targets):backward()
  opt:step()
end
if MODE == "step" then step = T.compile(step) end
local step_ms, step_cpu_ms = Bt.measure(step, 5, REPS)

local function adamw(fused)
  local ps = {}
  for i = 1, 20 do
    ps[i] = T.randn(256, 256, { requires_grad = true })
    ps[i].grad = T.randn(256, 256)
  end
  local o = T.optim.AdamW(ps, { lr = 1e-3, fused = fused })
  return T.bench(function() o:step() end, {}, { warmup = 3, reps = REPS }).median_us / 1e3
end
print(Bt.json { { "mode", MODE }, { "step_ms", step_ms }, { "step_cpu_ms", step_cpu_ms }, { "tokens_per_s", B * L / (step_ms / 1e3) },
  { "adamw_fused_ms", adamw(nil) }, { "adamw_per_tensor_ms", adamw(false) }, { "params", m:num_parameters() } })
