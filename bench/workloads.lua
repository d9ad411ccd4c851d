-- The anchor's workloads (../shared/anchors/torch_anchor.py) at its CPU or GPU sizes, for
-- codegen_bench.lua and dynamic_bench.lua: { name, fn, args, bytes moved (memory-bound ones) }.
-- Beyond the anchor: sum_all (sum of N), row_sum_long (8 rows of N / 4), mse_1d (mean of (x - y)^2).
-- DTYPE=float16 / bfloat16 (environment) makes every input of that dtype; bytes scale with it.
local T = require "crescent"

return function(DEVICE)
  local GPU = DEVICE ~= "cpu"
  local N = GPU and 2 ^ 24 or 2 ^ 22
  local R, C = GPU and 8192 or 2048, GPU and 4096 or 2048
  local DTYPE = os.getenv("DTYPE") or "float32"
  local e = ({ float32 = 4, float64 = 8, float16 = 2, bfloat16 = 2 })[DTYPE]

  local function gelu(x)
    return x * 0.5 * (1 + T.tanh(0.7978845608028654 * (x + 0.044715 * T.pow(x, 3))))
  end
  local function layernorm(x, w, b)  -- as F.layer_norm: biased variance, eps 1e-5
    local mu = x:mean(2, true)
    local xc = x - mu
    local var = (xc * xc):mean(2, true)
    return xc * T.rsqrt(var + 1e-5) * w + b
  end
  local function small_chain(x)
    for _ = 1, 20 do x = T.sin(x) * 1.01 + 0.1 end
    return x
  end

  local work = {
    { "pw_chain", function(x) return T.sin((x + 1) * 2) end, { T.randn(N) }, 2 * e * N },
    { "gelu", gelu, { T.randn(N) }, 2 * e * N },
    { "add_mul_sum", function(x, y) return ((x + y) * 2):sum() end, { T.randn(R, C), T.randn(R, C) }, 2 * e * R * C },
    { "row_sum", function(x) return x:sum(2) end, { T.randn(R, C) }, e * R * C },
    { "bias_relu", function(x, b) return T.relu(x + b) end, { T.randn(R, C), T.randn(C) }, 2 * e * R * C },
    { "softmax", function(x) return x:softmax(2) end, { T.randn(R, C) }, 2 * e * R * C },
    { "layernorm", layernorm, { T.randn(R, C), T.randn(C), T.randn(C) }, 2 * e * R * C },
    { "small_chain", small_chain, { T.randn(1024) }, nil },
    -- the anchor's mlp (gelu in its tanh form between two products) and attention (no mask)
    { "mlp", function(x, w1, b1, w2, b2) return T.matmul(gelu(T.matmul(x, w1) + b1), w2) + b2 end,
      { T.randn(GPU and 4096 or 512, 1024), T.randn(1024, 4096), T.randn(4096), T.randn(4096, 1024), T.randn(1024) }, nil },
    { "attention", function(q, k, v) return T.matmul((T.matmul(q, k:transpose(-2, -1)) / 8):softmax(-1), v) end,
      { T.randn(GPU and 16 or 2, 8, GPU and 1024 or 256, 64), T.randn(GPU and 16 or 2, 8, GPU and 1024 or 256, 64),
        T.randn(GPU and 16 or 2, 8, GPU and 1024 or 256, 64) }, nil },
    -- few long rows and a whole-tensor sum: split reductions (issue 39)
    { "sum_all", function(x) return x:sum() end, { T.randn(N) }, e * N },
    { "row_sum_long", function(x) return x:sum(2) end, { T.randn(8, N / 4) }, e * 2 * N },
    -- a whole-tensor sum with a pointwise prologue (a loss): split with the prologue fused
    { "mse_1d", function(x, y) local d = x - y; return (d * d):mean() end, { T.randn(N), T.randn(N) }, 2 * e * N },
  }
  for _, w in ipairs(work) do  -- every workload's inputs in DTYPE, on the device
    for i, a in ipairs(w[3]) do w[3][i] = a:to(DTYPE):to(DEVICE) end
  end
  return work
end
