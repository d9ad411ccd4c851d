-- crescent's side of the GPT-2 generation benchmark (bench/torch_gpt2.py is PyTorch's; both run
-- from bench/run_gpt2.sh). The model of examples/models/gpt2.lua with random weights, greedy
-- decoding with its static KV cache, eager and compiled (T.compile of the model: one graph for
-- the prompt, one for the decode steps). Per mode, after one warm-up generation (which compiles),
-- the medians over ROUNDS of prefill ms and decode tokens/s = batch * (NEW - 1) / decode time.
--   crescent bench/gpt2_bench.lua CONFIG BATCH PROMPT NEW ROUNDS      -> one JSON line
--   (DEVICE=cuda: the model and the prompt on the GPU; DTYPE=bfloat16; QUANT=int8; KV=static; AUTOTUNE=1)
local T = require "crescent"
T.config.sync_compile = true  -- compiles in line: the timed calls run native code
T.config.autotune = os.getenv("AUTOTUNE") == "1"  -- every compile tunes its kernels (max-autotune's)
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/examples/?.lua;" .. package.path
local G = require "models.gpt2"
local now = require("crescent.core").api.now_us

local name, batch, plen, new, rounds = arg[1] or "small", tonumber(arg[2] or 1), tonumber(arg[3] or 16),
  tonumber(arg[4] or 32), tonumber(arg[5] or 3)
T.manual_seed(0)
local cfg = G.configs[name]
local device = os.getenv("DEVICE") or "cpu"  -- DEVICE=cuda on a GPU machine
local dtype = os.getenv("DTYPE") or "float32"  -- DTYPE=bfloat16: weights, activations and cache
local model = G.new(cfg):eval():to(device):to(dtype)
local quant = os.getenv("QUANT")  -- QUANT=int8: int8 weight-only projections and LM head (G.quantize_int8)
if quant == "int8" then G.quantize_int8(model) elseif quant and quant ~= "" then error("QUANT expected int8, got " .. quant) end
local prompt = T.randint(0, cfg.vocab, { batch, plen }):to(device)

local kv = os.getenv("KV") or "dynamic"  -- KV=static: the compiled side decodes with G.decoder's CUDA-graph step
local decoder = kv == "static" and G.decoder(model, batch, plen + new) or nil

-- the device work of the decode steps (T.cuda.stats): kernels + cuBLAS calls + CUDA-graph nodes
local function device_ops()
  if device ~= "cuda" then return 0 end
  local c = T.cuda.stats()
  return c.kernel_launches + c.blas_calls + c.graph_nodes
end
local ops_per_token = 0

local function generate(step, kv_cache)
  local t0, t1, o1 = tonumber(now()), nil, nil
  local ids = G.generate(step, model, prompt, new, { kv_cache = kv_cache, decoder = kv_cache == "static" and decoder or nil,
    on_token = function(i) if i == 1 then t1, o1 = tonumber(now()), device_ops() end end })
  ids:sum():item()
  local t2 = tonumber(now())
  ops_per_token = (device_ops() - o1) / (new - 1)
  return (t1 - t0) / 1e3, batch * (new - 1) / ((t2 - t1) / 1e6)
end

local function median(xs)
  table.sort(xs)
  return xs[math.floor((#xs + 1) / 2)]
end

local function measure(step, kv_cache)
  local t0 = tonumber(now())
  generate(step, kv_cache)
  local first_ms = (tonumber(now()) - t0) / 1e3
  T.compiler.wait()  -- (background tuning done before the timed generations)
  local pre, tps = {}, {}
  for r = 1, rounds do pre[r], tps[r] = generate(step, kv_cache) end
  return median(pre), median(tps), first_ms
end

local weight_bytes = 0  -- read once per decode step (the embedding's rows aside)
local BYTES = { float32 = 4, bfloat16 = 2, float16 = 2, float64 = 8 }
for _, p in ipairs(model:parameters()) do weight_bytes = weight_bytes + p:numel() * BYTES[p.dtype] end
local e_pre, e_tps = measure(function(...) return model:forward(...) end)
local mode = os.getenv("MODE") or "default"  -- MODE=reduce-overhead: replay without re-running Lua
local c_pre, c_tps, first = measure(T.compile(model, { mode = mode, dynamic = false }), kv)
local s = T.compiler.stats()
print(string.format('{"side": "crescent", "mode": "' .. mode .. '", "dtype": "' .. dtype .. '", "quant": "' .. (quant or "") .. '", "kv": "' .. kv .. '", "cudagraph_replays": ' .. s.cudagraph_replays .. ', "config": "%s", "batch": %d, "prompt": %d, "new": %d, ' ..
  '"eager_prefill_ms": %.3f, "eager_decode_tps": %.2f, "compiled_prefill_ms": %.3f, "compiled_decode_tps": %.2f, ' ..
  '"first_compiled_run_ms": %.1f, "graphs_compiled": %d, "recompiles": %d, "weight_mb": %.1f, "compiled_weight_gbps": %.1f, ' ..
  '"compiled_device_ops_per_token": %.1f}',
  name, batch, plen, new, e_pre, e_tps, c_pre, c_tps, first, s.graphs_compiled, s.recompiles, weight_bytes / 2 ^ 20,
  weight_bytes * c_tps / batch / 1e9, ops_per_token))
