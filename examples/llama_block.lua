-- One Llama-style block (examples/models/llama.lua: RMSNorm, rotary embeddings, grouped
-- key/value heads, SiLU-gated MLP) on a random batch: eager, then compiled, checked equal, with
-- the time of each.   crescent examples/llama_block.lua [batch] [seq]
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/") or "."
package.path = dir .. "/?.lua;" .. package.path
local L = require "models.llama"

local B, S = tonumber(arg and arg[1]) or 2, tonumber(arg and arg[2]) or 64
local cfg = { d = 256, n_head = 8, n_kv_head = 2, hidden = 688 }
T.manual_seed(0)
T.set_grad_enabled(false)  -- inference: T.compile captures a model with grad mode off
local block = L.Block(cfg):eval()
local cos, sin = L.rotary_tables(S, cfg.d / cfg.n_head)
local x = T.randn(B, S, cfg.d)

print(tostring(block))
local y = block(x, cos, sin)
local f = T.compile(block)
local diff = 0
for _ = 1, 3 do diff = math.max(diff, (f(x, cos, sin) - y):abs():max():item()) end
local e = T.bench(block, { x, cos, sin }, { reps = 20 })
local c = T.bench(f, { x, cos, sin }, { reps = 20 })
print(string.format("input {%d,%d,%d}: eager %.0f us, compiled %.0f us (%.2fx); max |compiled - eager| = %.2e",
  B, S, cfg.d, e.median_us, c.median_us, e.median_us / c.median_us, diff))
assert(diff < 1e-4, "compiled and eager outputs must agree")
