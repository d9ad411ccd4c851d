-- T.attention on the GPU (the fused kernels, vm/kernels/cuda/attention.hpp: tensor cores for 16-bit, FMA
-- for float32): median device µs (T.bench) and TFLOP/s, the anchor's attention shape and three more.
--   crescent bench/attention_bench.lua [reps]   (bench/run_attention.sh prints it beside PyTorch's SDPA)
local T = require "crescent"
local reps = tonumber(arg and arg[1]) or 30
for _, dt in ipairs({ "float16", "bfloat16", "float32" }) do
  for _, c in ipairs({ { 16, 8, 1024, 64, false }, { 16, 8, 1024, 64, true }, { 4, 12, 2048, 64, true }, { 8, 8, 1024, 128, false } }) do
    local B, H, L, E, causal = unpack(c)
    local q, k, v = T.randn(B, H, L, E, { device = "cuda" }):to(dt), T.randn(B, H, L, E, { device = "cuda" }):to(dt),
      T.randn(B, H, L, E, { device = "cuda" }):to(dt)
    local r = T.bench(function(a, b, d) return T.attention(a, b, d, nil, causal) end, { q, k, v }, { warmup = 5, reps = reps })
    local flops = 4 * B * H * L * L * E * (causal and 0.5 or 1)
    print(string.format("crescent %s %dx%dx%dx%d causal=%s: %.1f us, %.0f TFLOP/s", dt, B, H, L, E, tostring(causal),
      r.median_us, flops / r.median_us / 1e6))
  end
end
