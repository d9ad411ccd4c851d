-- A sequence-length sweep in training: the GPT of examples/models/gpt2.lua (bench/train_bench.lua's
-- default size) trained with AdamW on batches whose length cycles through LENS, its positions made
-- inside the forward (T.arange of the length). MODE eager, model (T.compile(model) in an eager
-- loop) or step (the whole step compiled). ROUNDS passes over LENS; the last one is timed after
-- the background compiles, the compiler's counters are those of the whole run. One JSON line.
--   crescent bench/train_sweep.lua [MODE=model] [ROUNDS=8] [LENS=64,60,...,20]
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/examples/?.lua;" .. dir .. "/bench/?.lua;" .. package.path
local G = require "models.gpt2"
local Bt = require "lib.timing"

local MODE, ROUNDS = (arg or {})[1] or "model", tonumber((arg or {})[2]) or 8
local LENS = {}
for n in ((arg or {})[3] or "64,60,56,52,48,44,40,36,32,28,24,20"):gmatch("%d+") do LENS[#LENS + 1] = tonumber(n) end
local V, B = 86, 16
T.manual_seed(0)
local m = G.new({ vocab = V, n_ctx = 64, d = 96, n_head = 4, n_layer = 3 })
local opt = T.optim.AdamW(m:parameters(), { lr = 1e-3 })
local fwd = MODE == "model" and T.compile(m) or m
local function step(ids, targets)
  opt:zero_grad()
  local loss = T.F.cross_entropy(fwd(ids):view(-1, V), targets)
  loss:backward()
  opt:step()
  return loss
end
if MODE == "step" then step = T.compile(step) end
T.compiler.reset()
local t0, first_ms = Bt.now_ms(), nil
for r = 1, ROUNDS do
  if r == ROUNDS then
    T.compiler.wait()
    t0 = Bt.now_ms()
  end
  for _, n in ipairs(LENS) do step(T.randint(0, V, { B, n }), T.randint(1, V + 1, { B * n })) end
  if r == 1 then first_ms = (Bt.now_ms() - t0) / #LENS end
end
local s = T.compiler.stats()
print(Bt.json { { "mode", MODE }, { "lengths", #LENS }, { "first_round_step_ms", first_ms },
  { "last_round_step_ms", (Bt.now_ms() - t0) / #LENS }, { "graphs_compiled", s.graphs_compiled },
  { "backward_graphs_compiled", s.backward_graphs_compiled }, { "recompiles", s.recompiles },
  { "kernels_compiled", s.kernels_compiled }, { "compile_ms", s.compile_ms }, { "eager_fallbacks", s.eager_fallbacks },
  { "graph_breaks", s.graph_breaks } })
