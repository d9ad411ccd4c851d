-- A GPT-2-style decoder in crescent's nn library: token + position embeddings, N blocks of
-- LayerNorm -> causal self-attention -> LayerNorm -> MLP (GELU, tanh form), a final LayerNorm and
-- an LM head tied to the token embedding. Parameter names and layouts are GPT-2's (Hugging Face
-- "gpt2" checkpoints): `wte.weight`, `h.0.attn.c_attn.weight`, ... with the Conv1D weights stored
-- {in, out}, so a GPT-2 safetensors file loads as it is.
--
-- Token ids are GPT-2's (0-based, as tokenizers give them); the model adds 1 where it indexes
-- its embedding tables (crescent's indices are 1-based).
--
-- Generation keeps a static KV cache: {2, B, heads, S, head_dim} per layer (k and v), allocated for the whole
-- generation, written at the positions of the new tokens and read through a mask of the
-- positions written so far. Prefill and each decode step then have fixed shapes, so a compiled
-- model compiles one graph for the prompt and one for every decode step. With `kv_cache =
-- "static"` the cache is also written in place, only the new tokens' slots (index_copy_ at the
-- positions, held on the device: not a guard), and the decode step - model, cache update and the
-- pick of the next token - takes only tensors (the token ids and the position), so mode =
-- "reduce-overhead" replays it as one CUDA graph for every position, with no host
-- synchronisation per token.
local T = require "crescent"
local nn, F = T.nn, T.F

local G = {}

G.configs = {
  tiny = { vocab = 96, n_ctx = 64, d = 32, n_head = 4, n_layer = 2 },
  small = { vocab = 4096, n_ctx = 512, d = 256, n_head = 8, n_layer = 4 },
  gpt2 = { vocab = 50257, n_ctx = 1024, d = 768, n_head = 12, n_layer = 12 },  -- GPT-2 small, 124M
}

-- GPT-2's Conv1D: y = x W + b with W {in, out}.
local Conv1D = nn.Module:extend("Conv1D")
function Conv1D:init(din, dout)
  self.weight = T.randn(din, dout) * 0.02
  self.bias = T.zeros(dout)
end
function Conv1D:forward(x) return T.matmul(x, self.weight) + self.bias end
-- (T.nn.quantize_int8: the Linear of the same product, weight {out, in})
function Conv1D:quantize_int8() return nn.Int8Linear(self.weight:t(), self.bias) end

local Attention = nn.Module:extend("Attention")
function Attention:init(cfg)
  self.n_head = cfg.n_head
  self.c_attn = Conv1D(cfg.d, 3 * cfg.d)
  self.c_proj = Conv1D(cfg.d, cfg.d)
end

-- The cache {B, H, S, hd} with k_new {B, H, L, hd} written at the positions `pos` (L of them).
-- One token: a select by a one-hot mask of S. Several: a 0/1 scatter matrix {S, L} times k_new
-- (exact: each row of the matrix has at most one 1).
local function write(cache, k_new, at)
  if k_new:size(3) == 1 then return T.where(at:view(1, 1, -1, 1), k_new, cache) end
  local written = at:any(2):view(1, 1, -1, 1)
  return T.where(written, T.matmul(at:to(k_new.dtype), k_new), cache)
end

-- x {B, L, D}; kv: nil (attend over x itself, causal) or {k =, v =, mask = {L, S} bool visible
-- keys, and at = {S, L} bool scatter (a new cache) or index = {L} 1-based slots and kv = the
-- layer's {2, B, H, S, hd} cache that k and v view (the static cache, written in place:
-- index_copy_ at positions held on the device, one slot per new token)}.
-- Returns the output and the updated k, v caches.
function Attention:forward(x, kv)
  local B, L, D = x:size(1), x:size(2), x:size(3)
  local H = self.n_head
  local c = self.c_attn(x)
  local qkv = c:split(D, 3)
  local function heads(t) return t:reshape(B, L, H, D / H):transpose(2, 3) end
  local q, k, v = heads(qkv[1]), heads(qkv[2]), heads(qkv[3])
  local y
  if kv and kv.index then
    -- k and v as one {2, B, H, L, hd} view of c_attn's output, written by one index_copy_
    local new = c:narrow(3, D + 1, 2 * D):reshape(B, L, 2, H, D / H):permute(3, 1, 4, 2, 5)
    local both = kv.kv:index_copy_(4, kv.index, new)
    k, v = both:select(1, 1), both:select(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, { mask = kv.mask })
  elseif kv then
    k, v = write(kv.k, k, kv.at), write(kv.v, v, kv.at)
    y = F.scaled_dot_product_attention(q, k, v, { mask = kv.mask })
  else
    y = F.scaled_dot_product_attention(q, k, v, { causal = true })
  end
  return self.c_proj(y:transpose(2, 3):reshape(B, L, D)), k, v
end

local MLP = nn.Module:extend("MLP")
function MLP:init(cfg)
  self.c_fc = Conv1D(cfg.d, 4 * cfg.d)
  self.c_proj = Conv1D(4 * cfg.d, cfg.d)
end
function MLP:forward(x) return self.c_proj(T.gelu(self.c_fc(x), { approximate = "tanh" })) end

local Block = nn.Module:extend("Block")
function Block:init(cfg)
  self.ln_1 = nn.LayerNorm(cfg.d, { eps = cfg.eps or 1e-5 })
  self.attn = Attention(cfg)
  self.ln_2 = nn.LayerNorm(cfg.d, { eps = cfg.eps or 1e-5 })
  self.mlp = MLP(cfg)
end
function Block:forward(x, kv)
  local a, k, v = self.attn(self.ln_1(x), kv)
  x = x + a
  return x + self.mlp(self.ln_2(x)), k, v
end

local GPT = nn.Module:extend("GPT")
function GPT:init(cfg)
  self.cfg = cfg
  self.wte = nn.Embedding(cfg.vocab, cfg.d)
  self.wpe = nn.Embedding(cfg.n_ctx, cfg.d)
  T.no_grad(function()  -- (scaled in place: the parameters stay leaves)
    self.wte.weight:mul_(0.02)
    self.wpe.weight:mul_(0.01)
  end)
  local blocks = {}
  for i = 1, cfg.n_layer do blocks[i] = Block(cfg) end
  self.h = nn.ModuleList(blocks)
  self.ln_f = nn.LayerNorm(cfg.d, { eps = cfg.eps or 1e-5 })
end

-- forward(ids {B, L} int64[, pos {L} int64 (0-based positions)[, cache]]) -> logits {B, L, V}
-- and, with a cache, the next cache. Without a cache the positions default to 0..L-1.
function GPT:forward(ids, pos, cache)
  local L = ids:size(2)
  local on = { device = ids.device }
  pos = pos or T.arange(L, on)
  local x = self.wte(ids + 1) + self.wpe(pos + 1)
  local kv, next_cache
  if cache then
    local slots = cache.slots  -- 0..S-1, made once with the cache
    kv = { mask = slots:view(1, -1):le(pos:view(-1, 1)) }
    if cache.static then kv.index = pos + 1  -- (written in place: the decode step's graph keeps the addresses)
    else kv.at = slots:view(-1, 1):eq(pos:view(1, -1)) end
    next_cache = { k = {}, v = {}, slots = slots }
  end
  for i, block in ipairs(self.h) do
    if kv then kv.k, kv.v, kv.kv = cache.k[i], cache.v[i], cache.kv and cache.kv[i] end
    local k, v
    x, k, v = block(x, kv)
    if kv then next_cache.k[i], next_cache.v[i] = k, v end
  end
  -- the LM head is the token table (or its int8 copy: G.quantize_int8)
  local h = self.ln_f(x)
  local logits = self.lm_head and self.lm_head(h) or T.linear(h, self.wte.weight)
  return logits, cache and cache.static and cache or next_cache
end

-- An empty cache for batch B and S positions.
function GPT:new_cache(B, S)
  local cfg = self.cfg
  local w = self.wte.weight
  -- the slot numbers, for the masks of every step (an arange per step would be one more op that
  -- has no CUDA kernel yet: a host round trip)
  -- k and v of a layer in one tensor {2, B, H, S, hd}: the static cache writes both with one op
  local c = { k = {}, v = {}, kv = {}, slots = T.arange(S, { device = w.device }) }
  for i = 1, cfg.n_layer do
    c.kv[i] = T.zeros(2, B, cfg.n_head, S, cfg.d / cfg.n_head, { dtype = w.dtype, device = w.device })
    c.k[i], c.v[i] = c.kv[i]:select(1, 1), c.kv[i]:select(1, 2)
  end
  return c
end

function G.new(cfg) return GPT(cfg) end

-- int8 weight-only quantisation (T.nn.quantize_int8) of every projection and of the LM head (an
-- Int8Linear copy of the token table, which the embedding lookup keeps reading in float).
function G.quantize_int8(model)
  T.nn.quantize_int8(model)
  model.lm_head = nn.Int8Linear(model.wte.weight)
  return model
end

-- GPT-2 checkpoints carry the causal-mask buffers (`h.N.attn.bias`, `masked_bias`) and
-- sometimes a "transformer." prefix and an `lm_head.weight` equal to `wte.weight`: none of them
-- are parameters here.
function G.load(model, path)
  local sd, clean = T.load(path), {}
  for name, t in pairs(sd) do
    local n = name:gsub("^transformer%.", "")
    local mask_buffer = n:match("%.attn%.bias$") and t:dim() == 4 or n:match("%.attn%.masked_bias$")
    if not mask_buffer and n ~= "lm_head.weight" then clean[n] = t end
  end
  model:load_state_dict(clean)
  return model
end

-- Picks the next token of each row of logits {B, V}: greedy (top_k == nil) or sampled from the
-- top_k most likely tokens at `temperature`. Returns ids {B, 1} (0-based).
function G.pick(logits, top_k, temperature)
  local B = logits:size(1)
  if not top_k then return logits:argmax(-1, true) - 1 end
  local vals, idx = logits:topk(top_k, -1)
  local p = (vals / (temperature or 1)):softmax(-1)
  local u = T.rand(B, 1, { device = logits.device })
  local choice = p:cumsum(-1):lt(u):sum(-1, true):clamp(nil, top_k - 1) + 1
  return idx:gather(2, choice) - 1
end

-- generate(step, model, prompt {B, P}, n[, {top_k =, temperature =, on_token = fn(i)}]) -> ids
-- {B, P + n}. `step(ids, pos, cache)` is model:forward or a compiled version of it. Runs without
-- gradients (as transformers' generate), so a compiled step captures graphs.
-- opts.kv_cache = "static": the decode steps run a G.decoder's compiled step (step runs the
-- prefill); opts.decoder: the one to use (made for this batch, length and sampling), so that
-- several generations share its cache and its CUDA graph - by default a new one.
function G.generate(step, model, prompt, n, opts)
  if opts and opts.kv_cache == "static" then return T.no_grad(G._generate_static, step, model, prompt, n, opts) end
  return T.no_grad(G._generate, step, model, prompt, n, opts)
end

-- A static cache for batch B and S positions and its decode step, compiled with reduce-overhead:
-- step(ids {B, 1}, pos {1}) -> the next ids {B, 1}, pos + 1 (0-based ids and positions, int64 on
-- the model's device).
function G.decoder(model, B, S, top_k, temperature)
  local cache = model:new_cache(B, S)
  cache.static = true
  local pick = G.pick  -- (an upvalue: a replay checks the Lua state the step reads)
  local function decode(ids, pos)
    local logits = model:forward(ids, pos, cache)
    return pick(logits:select(2, 1), top_k, temperature), pos + 1
  end
  return { cache = cache, B = B, S = S, step = T.compile(decode, { mode = "reduce-overhead", dynamic = false }) }
end

function G._generate_static(step, model, prompt, n, opts)
  local B, P = prompt:size(1), prompt:size(2)
  local d = opts.decoder or G.decoder(model, B, P + n, opts.top_k, opts.temperature)
  if d.B ~= B or d.S < P + n then error(("generate: the decoder is for batch %d and %d positions, the call needs %d and %d"):format(d.B, d.S, B, P + n), 2) end
  local on = { device = prompt.device }
  local logits = step(prompt, T.arange(P, on), d.cache)  -- (writes the prompt's keys and values)
  local out = { prompt }
  local nxt, pos = nil, T.full({ 1 }, P, { dtype = "int64", device = prompt.device })
  for i = 1, n do
    if i == 1 then nxt = G.pick(logits:select(2, P), opts.top_k, opts.temperature)
    else nxt, pos = d.step(nxt, pos) end
    out[#out + 1] = nxt
    if opts.on_token then opts.on_token(i) end
  end
  return T.cat(out, 2)
end
function G._generate(step, model, prompt, n, opts)
  opts = opts or {}
  local B, P = prompt:size(1), prompt:size(2)
  local cache = model:new_cache(B, P + n)
  local logits
  local on = { device = prompt.device }
  logits, cache = step(prompt, T.arange(P, on), cache)
  local out = { prompt }
  for i = 1, n do
    local nxt = G.pick(logits:select(2, logits:size(2)), opts.top_k, opts.temperature)
    out[#out + 1] = nxt
    if opts.on_token then opts.on_token(i) end
    if i == n then break end
    logits, cache = step(nxt, T.full({ 1 }, P + i - 1, { dtype = "int64", device = prompt.device }), cache)
  end
  return T.cat(out, 2)
end

return G
