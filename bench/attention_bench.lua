-- T.attention on the GPU (the fused kernels, vm/kernels/cuda/attention.hpp: tensor cores for 16-bit, FMA
-- for float32; cuDNN's for 16-bit where it loads, vm/cuda/cudnn_sdpa.hpp): median device µs (T.bench, 10
-- calls back to back per timing) and TFLOP/s, the anchor's attention shape and three more.
-- Mode bwd: the fused backward (vm/kernels/cuda/attention_bwd.hpp) on GPT-2 124M's training shapes,
-- the backward op alone (and under T.use_deterministic_algorithms) and forward + backward through
-- autograd (FLOPs: 2.5x the forward's).
--   crescent bench/attention_bench.lua [reps] [fwd|bwd]   (bench/run_attention.sh prints it beside PyTorch's SDPA)
local T = require "crescent"
local reps = tonumber(arg and arg[1]) or 30
local mode = arg and arg[2] or "fwd"

local function randn(dt, B, H, L, E) return T.randn(B, H, L, E, { device = "cuda" }):to(dt) end

local function forward()
  for _, dt in ipairs({ "float16", "bfloat16", "float32" }) do
    for _, c in ipairs({ { 16, 8, 1024, 64, false }, { 16, 8, 1024, 64, true }, { 4, 12, 2048, 64, true }, { 8, 8, 1024, 128, false } }) do
      local B, H, L, E, causal = unpack(c)
      local q, k, v = randn(dt, B, H, L, E), randn(dt, B, H, L, E), randn(dt, B, H, L, E)
      local r = T.bench(function(a, b, d) return T.attention(a, b, d, nil, causal) end, { q, k, v },
        { warmup = 5, reps = reps, batch = 10 })
      local flops = 4 * B * H * L * L * E * (causal and 0.5 or 1)
      print(string.format("crescent %s %dx%dx%dx%d causal=%s: %.1f us, %.0f TFLOP/s", dt, B, H, L, E, tostring(causal),
        r.median_us, flops / r.median_us / 1e6))
    end
  end
end

local function backward()
  for _, L in ipairs({ 512, 1024 }) do
    local B, H, E = 8, 12, 64
    local scale = 1 / math.sqrt(E)
    for _, dt in ipairs({ "bfloat16", "float16", "float32" }) do
      local q, k, v, go = randn(dt, B, H, L, E), randn(dt, B, H, L, E), randn(dt, B, H, L, E), randn(dt, B, H, L, E)
      local o, lse = T._attention(q, k, v, scale, true)
      local function bwd()
        return T.bench(function(...) return T._attention_backward(...) end, { go, q, k, v, o, lse, scale, true },
          { warmup = 5, reps = reps, batch = 10 })
      end
      local one = bwd()
      T.use_deterministic_algorithms(true)  -- (16-bit: the two ordered passes instead of dq by atomics)
      local ordered = bwd()
      T.use_deterministic_algorithms(false)
      local leaves = { q:requires_grad_(), k:requires_grad_(), v:requires_grad_() }
      local step = T.bench(function(a, b, c, g)
        return T.autograd.grad(T.F.scaled_dot_product_attention(a, b, c, { causal = true }), leaves, g)
      end, { q, k, v, go }, { warmup = 5, reps = reps, batch = 10 })
      local flops = 2.5 * 4 * B * H * L * L * E * 0.5
      print(string.format("crescent bwd %s %dx%dx%dx%d causal=true: backward %.1f us (%.0f TFLOP/s; deterministic %.1f us), "
        .. "forward + backward %.1f us", dt, B, H, L, E, one.median_us, flops / one.median_us / 1e6, ordered.median_us,
        step.median_us))
    end
  end
end

if mode == "bwd" then backward() else forward() end
