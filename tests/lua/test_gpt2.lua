-- The GPT-2-style example model (examples/models/gpt2.lua) against PyTorch: a small random model
-- written by tests/fixtures/gpt2_reference.py (Debian's python3-torch) as a safetensors file with
-- GPT-2's names, its logits and its greedy continuation. Eager and compiled, with the KV cache,
-- quantised to int8 (T.nn.quantize_int8); and 20 AdamW training steps against torch's
-- (tests/fixtures/gpt2_train_reference.py).
local T = require "crescent"
local SH = require "shell"
local dumps = require "graph_dumps"
local TB = require "torch_bridge"

local root = debug.getinfo(1, "S").source:sub(2):match("^(.*)/tests/lua/") or "."
package.path = root .. "/examples/?.lua;" .. package.path
local G = require "models.gpt2"

local CFG = { vocab = 96, d = 32, n_head = 4, n_layer = 2, n_ctx = 64 }
local NEW = 20

-- the fixture, written once into a temporary directory (nil, reason without python3-torch)
local fixture_dir
local function fixture()
  local have, why = TB.have("torch")
  if not have then expect.skip(why) end
  if fixture_dir then return fixture_dir end
  local dir = SH.tmpdir()
  local out = TB.script(root .. "/tests/fixtures/gpt2_reference.py", dir, CFG.vocab, CFG.d, CFG.n_head, CFG.n_layer,
    CFG.n_ctx, NEW)
  if not out:find("ok") then error("gpt2_reference.py failed: " .. out) end
  fixture_dir = dir
  return dir
end

local function model()
  return G.load(G.new(CFG):eval(), fixture() .. "/model.safetensors")
end

describe("GPT-2-style model vs PyTorch", function()
  it("gives PyTorch's logits within 1e-4, eager and compiled", function()
    local m, ref = model(), T.load(fixture() .. "/ref.safetensors")
    expect.close(m(ref.ids), ref.logits, 0, 1e-4)
    local f = T.compile(function(ids) return m(ids) end)
    for _ = 1, 3 do expect.close(T.no_grad(f, ref.ids), ref.logits, 0, 1e-4) end
    -- with grad mode on, the parameters require grad: recorded eagerly, then training graphs
    for _ = 1, 3 do
      local logits = f(ref.ids)
      expect.truthy(logits.requires_grad, "logits require grad")
      expect.close(logits:detach(), ref.logits, 0, 1e-4)
    end
  end)
  it("continues the prompt greedily with PyTorch's 20 tokens, eager and compiled, with a KV cache", function()
    local m, ref = model(), T.load(fixture() .. "/ref.safetensors")
    local eager = G.generate(function(...) return m:forward(...) end, m, ref.prompt, NEW)
    expect.eq(eager:totable(), ref.greedy:totable())
    T.compiler.reset()
    local step = T.compile(m, { dynamic = false })  -- as examples/gpt2.lua: prefill and decode
    expect.eq(G.generate(step, m, ref.prompt, NEW):totable(), ref.greedy:totable())
    local warm = T.compiler.stats()
    expect.eq(G.generate(step, m, ref.prompt, NEW):totable(), ref.greedy:totable())
    -- one graph for the prompt, one for every decode step: the cache does not grow, and a second
    -- generation after the warm-up recompiles nothing
    local s = T.compiler.stats()
    expect.truthy(s.graphs_compiled <= 2, "graphs " .. s.graphs_compiled)
    expect.eq(s.recompiles, warm.recompiles, "recompiles after the warm-up")
    if T.compiler.native_available("cpu") then expect.eq(s.eager_fallbacks, 0) end
  end)
  it("loads GPT-2 checkpoints with a transformer. prefix and mask buffers, and names missing keys", function()
    local sd = T.load(fixture() .. "/model.safetensors")
    local hf = {}
    for k, v in pairs(sd) do hf["transformer." .. k] = v end
    hf["transformer.h.0.attn.bias"] = T.ones(1, 1, 64, 64)
    hf["lm_head.weight"] = sd["wte.weight"]
    local path = os.tmpname()
    T.save(path, hf)
    local m = G.load(G.new(CFG), path)
    expect.close(m.h[1].attn.c_attn.weight, sd["h.0.attn.c_attn.weight"], 0, 0)
    hf["transformer.h.1.mlp.c_fc.bias"] = nil
    T.save(path, hf)
    expect.errors(function() G.load(G.new(CFG), path) end, "load_state_dict: GPT: missing keys: h%.1%.mlp%.c_fc%.bias")
    os.remove(path)
  end)
end)

describe("GPT-2-style decoding with a static KV cache", function()
  it("gives PyTorch's greedy tokens, its decode step replayed without Lua", function()
    local m, ref = model(), T.load(fixture() .. "/ref.safetensors")
    local step = T.compile(m, { dynamic = false })
    local d = G.decoder(m, ref.prompt:size(1), ref.prompt:size(2) + NEW)
    local r0 = T.compiler.stats().replays
    for _ = 1, 3 do
      expect.eq(G.generate(step, m, ref.prompt, NEW, { kv_cache = "static", decoder = d }):totable(), ref.greedy:totable())
      T.compiler.wait()
    end
    expect.truthy(T.compiler.stats().replays - r0 >= NEW, "the decode steps replay")
    expect.errors(function() G.generate(step, m, ref.prompt, NEW + 1, { kv_cache = "static", decoder = d }) end,
                  "the decoder is for batch %d+ and")
  end)
  it("writes one slot a step at the position held as a tensor: the dynamic cache's 128 ids, one graph for every position", function()
    T.manual_seed(11)
    local cfg = { vocab = 96, d = 32, n_head = 4, n_layer = 2, n_ctx = 160 }
    local m, n = G.new(cfg):eval(), 128
    local prompt = T.randint(0, cfg.vocab, { 2, 5 })
    local want = G.generate(function(...) return m:forward(...) end, m, prompt, n):totable()
    T.compiler.reset()
    local step = T.compile(m, { dynamic = false })
    local d = G.decoder(m, 2, 5 + n)
    expect.eq(G.generate(step, m, prompt, n, { kv_cache = "static", decoder = d }):totable(), want, "first run")
    T.compiler.wait()
    local s0 = T.compiler.stats()
    expect.eq(G.generate(step, m, prompt, n, { kv_cache = "static", decoder = d }):totable(), want, "second run")
    local s = T.compiler.stats()
    -- the prompt's graph and the decode step's: the position (a device scalar) is no guard
    expect.truthy(s.graphs_compiled <= 2, "graphs " .. s.graphs_compiled)
    expect.eq(s.recompiles, 0, "recompiles")
    expect.eq(s.graphs_compiled, s0.graphs_compiled, "graphs compiled by the second run")
    expect.truthy(s.replays - s0.replays >= n - 1, "decode steps replayed: " .. (s.replays - s0.replays))
  end)
end)

describe("GPT-2-style model on CUDA vs PyTorch", function()
  it("gives PyTorch's logits and greedy tokens on the GPU, eager and compiled", function()
    if not T.cuda.is_available() then expect.skip("no CUDA device: " .. T.cuda.unavailable_reason()) end
    local m, ref = model():to("cuda"), T.load(fixture() .. "/ref.safetensors")
    local ids = ref.ids:cuda()
    expect.close(m(ids):cpu(), ref.logits, 0, 1e-4)
    local f = T.compile(function(i) return m(i) end)
    for _ = 1, 3 do expect.close(T.no_grad(f, ids):cpu(), ref.logits, 0, 1e-4) end
    local prompt = ref.prompt:cuda()
    local eager = G.generate(function(...) return m:forward(...) end, m, prompt, NEW)
    expect.eq(eager:cpu():totable(), ref.greedy:totable())
    local step = T.compile(m)
    for _ = 1, 2 do expect.eq(G.generate(step, m, prompt, NEW):cpu():totable(), ref.greedy:totable()) end
    -- the static cache: its decode step replayed as one CUDA graph for every position
    local d = G.decoder(m, prompt:size(1), prompt:size(2) + NEW)
    local r0 = T.compiler.stats().cudagraph_replays
    for _ = 1, 2 do
      expect.eq(G.generate(step, m, prompt, NEW, { kv_cache = "static", decoder = d }):cpu():totable(), ref.greedy:totable())
    end
    expect.truthy(T.compiler.stats().cudagraph_replays - r0 >= NEW, "the decode steps replay a CUDA graph")
  end)
end)

describe("GPT-2-style static-cache decoding on CUDA", function()
  it("gives the dynamic cache's 128 ids from one CUDA graph a step (split-K attention over 133 keys)", function()
    expect.need_gpu()
    T.manual_seed(12)
    local cfg = { vocab = 96, d = 128, n_head = 2, n_layer = 2, n_ctx = 160 }  -- (head size 64)
    local m, n = G.new(cfg):eval():to("cuda"), 128
    local prompt = T.randint(0, cfg.vocab, { 2, 5 }):cuda()
    local want = G.generate(function(...) return m:forward(...) end, m, prompt, n):cpu():totable()
    local step = T.compile(m, { dynamic = false })
    local d = G.decoder(m, 2, 5 + n)
    local r0 = T.compiler.stats().cudagraph_replays
    local texts = dumps.capture(function()  -- (the decode step's optimised graph)
      for run = 1, 2 do
        local ids = G.generate(step, m, prompt, n, { kv_cache = "static", decoder = d })
        expect.eq(ids:cpu():totable(), want, "run " .. run)
        T.compiler.wait()
      end
    end)
    expect.truthy(T.compiler.stats().cudagraph_replays - r0 >= n, "the decode steps replay a CUDA graph")
    -- each layer's cache write and attention are one op (vm/graph/patterns.cpp): one kernel
    local fused = 0
    for _, text in ipairs(texts) do
      local optimised = dumps.optimised(text) or ""
      if optimised:find("= argmax(", 1, true) then
        fused = math.max(fused, select(2, optimised:gsub("= _attention_cache%(", "")))
      end
    end
    expect.eq(fused, cfg.n_layer, "_attention_cache nodes in the decode step's graph")
  end)
end)

-- int8 logits vs float32: within 3 % of the largest logit (a weight moves by up to scale / 2;
-- 1.5 % measured on the fixture)
local LOGIT_TOL = 0.03

describe("GPT-2-style model quantised to int8", function()
  it("gives float32's logits within 3 % of the largest and its greedy tokens, eager and compiled", function()
    local m, ref = G.quantize_int8(model()), T.load(fixture() .. "/ref.safetensors")
    expect.eq(m.h[1].attn.c_attn.__name, "Int8Linear")
    expect.eq(m.lm_head.__name, "Int8Linear")
    local logits = T.no_grad(m, ref.ids)
    local scale = ref.logits:abs():max():item()
    expect.close(logits, ref.logits, 0, LOGIT_TOL * scale)
    local f = T.compile(function(ids) return m(ids) end)
    for _ = 1, 3 do expect.close(T.no_grad(f, ref.ids), logits, 1e-5, 1e-5) end
    local step = T.compile(m, { dynamic = false })
    expect.eq(G.generate(step, m, ref.prompt, NEW):totable(), ref.greedy:totable())
    for _ = 1, 2 do
      expect.eq(G.generate(step, m, ref.prompt, NEW, { kv_cache = "static" }):totable(), ref.greedy:totable())
    end
  end)

  it("decodes on CUDA through a CUDA graph with the CPU int8 model's tokens", function()
    expect.need_gpu()
    local m, ref = G.quantize_int8(model()), T.load(fixture() .. "/ref.safetensors")
    local step = T.compile(m, { dynamic = false })
    local want = G.generate(step, m, ref.prompt, NEW):totable()
    m:to("cuda")
    local prompt = ref.prompt:cuda()
    local dstep = T.compile(m, { dynamic = false })
    local d = G.decoder(m, prompt:size(1), prompt:size(2) + NEW)
    local r0 = T.compiler.stats().cudagraph_replays
    for _ = 1, 2 do
      expect.eq(G.generate(dstep, m, prompt, NEW, { kv_cache = "static", decoder = d }):cpu():totable(), want,
        "int8 ids on CUDA (static cache, CUDA graph) vs CPU")
    end
    expect.truthy(T.compiler.stats().cudagraph_replays - r0 >= NEW, "the int8 decode steps replay a CUDA graph")
  end)
end)

describe("GPT-2-style generation", function()
  it("samples from the top k tokens only, reproducibly under a seed", function()
    local m = G.new(CFG):eval()
    local prompt = T.randint(0, CFG.vocab, { 3, 4 })
    local step = function(...) return m:forward(...) end
    T.manual_seed(5)
    local a = G.generate(step, m, prompt, 6, { top_k = 3, temperature = 0.8 })
    T.manual_seed(5)
    local b = G.generate(step, m, prompt, 6, { top_k = 3, temperature = 0.8 })
    expect.eq(a:totable(), b:totable())
    -- every sampled id is among the 3 largest logits of its step (recomputed without a cache)
    for t = 5, 10 do
      local logits = m(a:narrow(2, 1, t - 1)):select(2, t - 1)
      local _, top = logits:topk(3)
      local want = (top - 1):totable()
      local got = a:select(2, t):totable()
      for r = 1, 3 do
        local ok = got[r] == want[r][1] or got[r] == want[r][2] or got[r] == want[r][3]
        expect.truthy(ok, string.format("row %d step %d: %d not in the top 3", r, t, got[r]))
      end
    end
  end)
  it("batches rows independently: each row equals its own generation", function()
    local m = G.new(CFG):eval()
    local prompt = T.randint(0, CFG.vocab, { 2, 5 })
    local step = function(...) return m:forward(...) end
    local both = G.generate(step, m, prompt, 8)
    for r = 1, 2 do
      local one = G.generate(step, m, prompt:narrow(1, r, 1), 8)
      expect.eq(one:totable()[1], both:totable()[r])
    end
  end)
end)

describe("Llama-style block (examples/models/llama.lua)", function()
  local L = require "models.llama"
  it("rotates pairs of dims by position x frequency", function()
    local cos, sin = L.rotary_tables(3, 4, 100)
    local x = T.tensor({ 1, 0, 0, 1 }, { dtype = "float32" }):view(1, 1, 1, 4):expand(1, 1, 3, 4)
    local y = L.rotate(x, cos, sin):view(3, 4):totable()
    -- pairs (1, 3) and (2, 4); frequencies 1 and 1/10; position p turns pair 1 by p, pair 2 by p / 10
    for p = 0, 2 do
      local want = { math.cos(p), -math.sin(p / 10), math.sin(p), math.cos(p / 10) }
      for j = 1, 4 do expect.truthy(math.abs(y[p + 1][j] - want[j]) < 1e-6, "position " .. p .. " dim " .. j) end
    end
  end)
  it("matches its float64 twin, eager and compiled, with grouped key/value heads", function()
    T.manual_seed(9)
    local cfg = { d = 32, n_head = 4, n_kv_head = 2, hidden = 48 }
    local block = L.Block(cfg):eval()
    local ref = L.Block(cfg):eval()
    ref:load_state_dict(block:state_dict())
    ref:to("float64")
    local x = T.randn(2, 7, 32)
    local cos, sin = L.rotary_tables(7, 8)
    local want = ref(x:double(), cos:double(), sin:double())
    expect.close(block(x, cos, sin), want, 1e-4, 1e-5)
    local f = T.compile(block)
    for _ = 1, 3 do expect.close(T.no_grad(f, x, cos, sin), want, 1e-4, 1e-5) end
    -- causal: the first position's output depends on nothing after it
    local x2 = x:clone()
    x2:narrow(2, 2, 6):fill_(0)
    expect.close(block(x2, cos, sin):narrow(2, 1, 1), block(x, cos, sin):narrow(2, 1, 1), 1e-5, 1e-6)
  end)
end)

describe("GPT-2-style model trained against PyTorch", function()
  it("20 AdamW steps give torch's loss at every step and its final weights (float32, 1e-4)", function()
    local have, why = TB.have("torch")
    if not have then expect.skip(why) end
    local dir = SH.tmpdir()
    local steps, B, L = 20, 4, 16
    local out = TB.script(root .. "/tests/fixtures/gpt2_train_reference.py", dir, CFG.vocab, CFG.d, CFG.n_head,
      CFG.n_layer, CFG.n_ctx, steps, B, L)
    if not out:find("ok") then error("gpt2_train_reference.py failed: " .. out) end
    local m = G.load(G.new(CFG), dir .. "/model.safetensors")
    local ref = T.load(dir .. "/train.safetensors")
    SH.rm(dir)
    local opt = T.optim.AdamW(m:parameters(), { lr = 1e-3 })
    local losses = {}
    for s = 1, steps do
      opt:zero_grad()
      local logits = m(ref.ids[s])
      local loss = T.F.cross_entropy(logits:view(-1, CFG.vocab), ref.targets[s]:flatten() + 1)
      loss:backward()
      opt:step()
      losses[s] = loss:item()
    end
    expect.close(T.tensor(losses, { dtype = "float32" }), ref.losses, 1e-4, 1e-6)
    local n = 0
    local D = CFG.d
    for name, t in pairs(m:state_dict()) do
      local r = ref["final." .. name]
      if name:match("attn%.c_attn%.bias$") then
        -- the key bias's gradient is zero in exact arithmetic (softmax ignores a shift common to
        -- all keys): Adam normalises rounding noise there, so only the size of its steps is bounded
        expect.truthy((t:narrow(1, D + 1, D) - r:narrow(1, D + 1, D)):abs():max():item() <= 2 * steps * 1e-3, name)
        t, r = T.cat({ t:narrow(1, 1, D), t:narrow(1, 2 * D + 1, D) }), T.cat({ r:narrow(1, 1, D), r:narrow(1, 2 * D + 1, D) })
      end
      expect.close(t:detach(), r, 1e-4, 1e-6)
      n = n + 1
    end
    expect.eq(n, 4 + 12 * CFG.n_layer)
  end)
end)
