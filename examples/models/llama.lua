-- A Llama-style decoder block in crescent's nn library: RMSNorm -> causal self-attention with
-- rotary position embeddings (the "rotate half" form of Llama's Hugging Face code) and grouped
-- key/value heads -> RMSNorm -> SiLU-gated MLP, each with a residual. Parameter names follow
-- Llama's checkpoints (`attention_norm`, `attention.wq`, `feed_forward.w1`, ...).
local T = require "crescent"
local nn, F = T.nn, T.F

local L = {}

-- cos and sin {S, hd} of positions 0..S-1 for head size hd (base 10000), each frequency twice
-- (once per half), so that rotate() is elementwise.
function L.rotary_tables(S, hd, base)
  local inv = T.pow(base or 10000, T.arange(0, hd, 2):double() / -hd)  -- {hd/2}
  local ang = T.arange(S):double():view(S, 1) * inv:view(1, -1)       -- {S, hd/2}
  ang = T.cat({ ang, ang }, 2)
  return ang:cos():float(), ang:sin():float()
end

-- x {B, H, S, hd} rotated by the tables: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
function L.rotate(x, cos, sin)
  local hd = x:size(-1)
  local x1, x2 = x:narrow(-1, 1, hd / 2), x:narrow(-1, hd / 2 + 1, hd / 2)
  return x * cos + T.cat({ -x2, x1 }, -1) * sin
end

local Attention = nn.Module:extend("LlamaAttention")
function Attention:init(cfg)
  self.n_head, self.n_kv = cfg.n_head, cfg.n_kv_head or cfg.n_head
  local hd = cfg.d / cfg.n_head
  self.wq = nn.Linear(cfg.d, cfg.d, { bias = false })
  self.wk = nn.Linear(cfg.d, self.n_kv * hd, { bias = false })
  self.wv = nn.Linear(cfg.d, self.n_kv * hd, { bias = false })
  self.wo = nn.Linear(cfg.d, cfg.d, { bias = false })
end
function Attention:forward(x, cos, sin)
  local B, S, D = x:size(1), x:size(2), x:size(3)
  local H, KV = self.n_head, self.n_kv
  local hd = D / H
  local q = L.rotate(self.wq(x):view(B, S, H, hd):transpose(2, 3), cos, sin)
  local k = L.rotate(self.wk(x):view(B, S, KV, hd):transpose(2, 3), cos, sin)
  local v = self.wv(x):view(B, S, KV, hd):transpose(2, 3)
  if KV ~= H then  -- each key/value head serves H / KV query heads
    k = k:unsqueeze(3):expand(B, KV, H / KV, S, hd):reshape(B, H, S, hd)
    v = v:unsqueeze(3):expand(B, KV, H / KV, S, hd):reshape(B, H, S, hd)
  end
  local y = F.scaled_dot_product_attention(q, k, v, { causal = true })
  return self.wo(y:transpose(2, 3):reshape(B, S, D))
end

local FeedForward = nn.Module:extend("LlamaFeedForward")
function FeedForward:init(cfg)
  self.w1 = nn.Linear(cfg.d, cfg.hidden, { bias = false })
  self.w2 = nn.Linear(cfg.hidden, cfg.d, { bias = false })
  self.w3 = nn.Linear(cfg.d, cfg.hidden, { bias = false })
end
function FeedForward:forward(x) return self.w2(T.silu(self.w1(x)) * self.w3(x)) end

local Block = nn.Module:extend("LlamaBlock")
function Block:init(cfg)
  self.attention_norm = nn.RMSNorm(cfg.d, { eps = cfg.eps or 1e-5 })
  self.attention = Attention(cfg)
  self.ffn_norm = nn.RMSNorm(cfg.d, { eps = cfg.eps or 1e-5 })
  self.feed_forward = FeedForward(cfg)
end
-- x {B, S, d}; cos, sin from L.rotary_tables(S, head size)
function Block:forward(x, cos, sin)
  x = x + self.attention(self.attention_norm(x), cos, sin)
  return x + self.feed_forward(self.ffn_norm(x))
end
L.Block = Block

return L
