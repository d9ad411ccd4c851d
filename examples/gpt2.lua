-- Text generation with a GPT-2-style decoder (examples/models/gpt2.lua): a prompt of token ids
-- goes through the model once (prefill), then one token at a time with a KV cache (decode).
-- Runs eagerly, then compiled with T.compile, prints the generated ids and tokens/s of both and
-- checks that greedy decoding gives the same ids either way.
--
--   crescent examples/gpt2.lua [options]
--     --config tiny|small|gpt2   model size (default small; gpt2 = GPT-2 small, 124M parameters)
--     --weights FILE             a GPT-2 safetensors file (Hugging Face names) instead of random
--                                weights (use --config gpt2 for the original GPT-2 small)
--     --prompt "464 3290 318"    prompt token ids (GPT-2's, 0-based; default: random ids)
--     --prompt-len N             length of the random prompt (default 16)
--     --new N                    tokens to generate (default 48)
--     --batch B                  sequences generated together (default 1)
--     --top-k K --temperature T  sample from the K most likely tokens (default: greedy)
--     --mode eager|compiled|both (default both)   --seed N (default 0)
--     --device cpu|cuda          where the model runs (default cpu)
--     --dtype float32|bfloat16|float16  the weights' dtype (default float32)
--     --kv-cache static|dynamic  static: the cache written in place and the decode step replayed
--                                with mode = "reduce-overhead" (CUDA graphs on CUDA); default
--                                static on CUDA, dynamic on the CPU
--     --quant int8               int8 weight-only quantisation of the projections and the LM head
--                                (T.nn.quantize_int8; the int8 product kernels)
local T = require "crescent"

local function script_dir()
  local src = debug.getinfo(1, "S").source
  return (src:sub(1, 1) == "@" and src:sub(2):match("^(.*)/") or ".")
end
package.path = script_dir() .. "/?.lua;" .. package.path
local G = require "models.gpt2"

local function parse_args(argv)
  local o = { config = "small", prompt_len = 16, new = 48, batch = 1, mode = "both", seed = 0, device = "cpu" }
  local i = 1
  while argv[i] do
    local key, val = argv[i]:match("^%-%-([%w%-]+)$"), argv[i + 1]
    if not key or val == nil then error("gpt2.lua: expected --option value pairs, got '" .. argv[i] .. "' (see the header of the script)", 0) end
    key = key:gsub("%-", "_")
    o[key] = tonumber(val) or val
    i = i + 2
  end
  o.kv_cache = o.kv_cache or (o.device == "cuda" and "static" or "dynamic")
  if o.quant ~= nil and o.quant ~= "int8" then error("gpt2.lua: --quant expected int8, got " .. tostring(o.quant), 0) end
  if o.kv_cache ~= "static" and o.kv_cache ~= "dynamic" then error("gpt2.lua: --kv-cache expected static or dynamic, got " .. tostring(o.kv_cache), 0) end
  if not G.configs[o.config] then error("gpt2.lua: --config expected tiny, small or gpt2, got " .. tostring(o.config), 0) end
  return o
end

local o = parse_args(arg or {})
T.manual_seed(o.seed)
local cfg = G.configs[o.config]
local model = G.new(cfg):eval()
if o.weights then G.load(model, o.weights) end
model:to(o.device)
if o.dtype then model:to(o.dtype) end
local nparams = model:num_parameters()
if o.quant == "int8" then G.quantize_int8(model) end

local prompt
if o.prompt then
  local ids = {}
  for w in tostring(o.prompt):gmatch("%d+") do ids[#ids + 1] = tonumber(w) end
  local rows = {}
  for b = 1, o.batch do rows[b] = ids end
  prompt = T.tensor(rows, { dtype = "int64" })
else
  prompt = T.randint(0, cfg.vocab, { o.batch, o.prompt_len })
end
prompt = prompt:to(o.device)
local P = prompt:size(2)
if P + o.new > cfg.n_ctx then error(string.format("gpt2.lua: prompt %d + new %d tokens exceed the context of %d", P, o.new, cfg.n_ctx), 0) end

print(string.format("crescent %s, %d threads, %s: GPT-2-style model '%s' (%d layers, d %d, %d heads, vocab %d), %.1fM parameters, %s weights%s",
  T.version, T.get_num_threads(), o.device, o.config, cfg.n_layer, cfg.d, cfg.n_head, cfg.vocab, nparams / 1e6,
  o.weights and "loaded" or "random", o.quant and ", quantised to " .. o.quant or ""))
print(string.format("prompt %d x %d tokens, %d new, %s KV cache, %s", o.batch, P, o.new, o.kv_cache,
  o.top_k and string.format("top-k %d sampling at temperature %g", o.top_k, o.temperature or 1) or "greedy"))


-- the static cache's decode step, shared by the compiled runs (one CUDA graph for all of them)
local decoder = o.kv_cache == "static" and G.decoder(model, o.batch, P + o.new, o.top_k, o.temperature) or nil

-- Generates with `step`, printing a progress line; returns the ids and tokens/s of the decode.
local function run(label, step)
  T.manual_seed(o.seed + 1)
  local t0 = T.time()
  local t_first
  local ids = G.generate(step, model, prompt, o.new, {
    top_k = o.top_k, temperature = o.temperature, kv_cache = label ~= "eager" and o.kv_cache or nil, decoder = decoder,
    on_token = function(i)
      if i == 1 then t_first = T.time() end
      if i % 8 == 0 or i == o.new then io.write(string.format("\r%-9s %d/%d tokens", label, i, o.new)); io.flush() end
    end,
  })
  ids:sum():item()  -- waits for the last step
  local t1 = T.time()
  local decode_tps = o.new > 1 and o.batch * (o.new - 1) / (t1 - t_first) or 0
  io.write(string.format("\r%-9s prefill + first token %.1f ms, decode %.1f tokens/s\n", label, (t_first - t0) * 1e3, decode_tps))
  return ids, decode_tps, (t1 - t0) * 1e3
end

local results = {}
if o.mode ~= "compiled" then
  results.eager = { run("eager", function(...) return model:forward(...) end) }
end
if o.mode ~= "eager" then
  -- the first run captures and compiles the prefill and the decode graph; the second is timed
  -- the static KV cache gives two shapes, prefill and decode: specialising on each (one graph
  -- each) beats making the sequence length symbolic, whose prefill and decode differ anyway
  local step = T.compile(model, { dynamic = false })
  local _, _, ms = run("compiling", step)
  local s = T.compiler.stats()
  print(string.format("compiling: %d graphs, %d kernels (%d from the disk cache), %d recompiles, %.0f ms in all",
    s.graphs_compiled, s.kernels_compiled, s.disk_cache_hits, s.recompiles, ms))
  results.compiled = { run("compiled", step) }
end

local ids = (results.compiled or results.eager)[1]
print("generated ids (row 1): " .. table.concat(ids[1]:narrow(1, P + 1, o.new):totable(), " "))
if results.eager and results.compiled then
  print(string.format("tokens/s: eager %.1f, compiled %.1f (%.2fx)", results.eager[2], results.compiled[2],
    results.compiled[2] / results.eager[2]))
  if not o.top_k then
    local same = results.eager[1]:eq(results.compiled[1]):all():item()
    print("greedy ids: compiled == eager: " .. tostring(same))
    if not same then os.exit(1) end
  end
end
