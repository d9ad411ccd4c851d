-- A sequence-length sweep in training (bench/torch_train_sweep.py is PyTorch's side): the GPT of
-- examples/models/gpt2.lua trained with AdamW on batches whose length cycles through LENS, the
-- positions made inside the forward (T.arange of the length). MODE eager, model
-- (T.compile(model) in an eager loop) or step (the whole step compiled). ROUNDS passes over LENS:
-- the first is timed from the cold start, the last after the background compiles; the compiler's
-- counters are the whole run's. CONFIG: "bench" (bench/train_bench.lua's GPT, the default) or one
-- of G.configs. One JSON line.
--   crescent bench/train_sweep.lua [MODE=model] [ROUNDS=8] [LENS=64,60,...,20] [BATCH=16] [CONFIG=bench]
--   (DEVICE=cuda: on the GPU)
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/examples/?.lua;" .. dir .. "/bench/?.lua;" .. package.path
local G = require "models.gpt2"
local Bt = require "lib.timing"

local a = arg or {}
local MODE, ROUNDS, B = a[1] or "model", tonumber(a[2]) or 8, tonumber(a[4]) or 16
local LENS = {}
for n in (a[3] or "64,60,56,52,48,44,40,36,32,28,24,20"):gmatch("%d+") do LENS[#LENS + 1] = tonumber(n) end
local BENCH = { vocab = 86, n_ctx = 64, d = 96, n_head = 4, n_layer = 3 }
local cfg = (a[5] or "bench") == "bench" and BENCH or G.configs[a[5]]
assert(cfg, "train_sweep: CONFIG expected bench or one of G.configs, got " .. tostring(a[5]))
local dev = os.getenv("DEVICE") or "cpu"
local V = cfg.vocab
T.manual_seed(0)
local m = G.new(cfg):to(dev)
local opt = T.optim.AdamW(m:parameters(), { lr = 3e-4 })
local fwd = MODE == "model" and T.compile(m) or m
local function step(ids, targets)
  local loss = T.F.cross_entropy(fwd(ids):view(-1, V), targets)
  loss:backward()
  opt:step()
  opt:zero_grad()
  return loss
end
local run = MODE == "step" and T.compile(step) or step
T.compiler.reset()
local t0, first_ms = Bt.now_ms(), nil
for r = 1, ROUNDS do
  if r == ROUNDS then
    T.compiler.wait()
    t0 = Bt.now_ms()
  end
  for _, n in ipairs(LENS) do
    local data = T.randint(0, V, { B, n + 1 }):to(dev)
    run(data:narrow(2, 1, n), data:narrow(2, 2, n):reshape(-1) + 1):item()
  end
  if r == 1 then first_ms = (Bt.now_ms() - t0) / #LENS end
end
local s = T.compiler.stats()
print(Bt.json { { "mode", MODE }, { "device", dev }, { "lengths", #LENS }, { "first_round_step_ms", first_ms },
  { "last_round_step_ms", (Bt.now_ms() - t0) / #LENS }, { "graphs_compiled", s.graphs_compiled },
  { "backward_graphs_compiled", s.backward_graphs_compiled }, { "recompiles", s.recompiles },
  { "kernels_compiled", s.kernels_compiled }, { "compile_ms", s.compile_ms }, { "eager_fallbacks", s.eager_fallbacks },
  { "graph_breaks", s.graph_breaks } })
