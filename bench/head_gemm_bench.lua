-- The three products of GPT-2's 50257-token head (batch x seq = 4096 rows, d = 768) and an MLP
-- product for comparison, float32 and bfloat16, on CUDA: the forward x W^T, dX = dY W and
-- dW = dY^T x. A dim of 50257 leaves cuBLAS only slow kernels for 16-bit types; crescent pads
-- (vm/cuda/blas.cpp). Median of 20 device-timed calls. Its twin: bench/torch_head_gemm.py.
--   crescent bench/head_gemm_bench.lua [rows=4096]
local T = require "crescent"
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/bench/") or "."
package.path = dir .. "/bench/?.lua;" .. package.path
local B = require "lib.timing"

local rows = tonumber(arg[1] or 4096)
for _, dt in ipairs { "bfloat16", "float32" } do
  local function r(...) return T.randn(...):to("cuda"):to(dt) end
  local x, W, dY, W3 = r(rows, 768), r(50257, 768), r(rows, 50257), r(3072, 768)
  local cases = {
    { "head x W^T", function(a, b) return T.matmul(a, b:t()) end, { x, W } },
    { "head dY W", function(a, b) return T.matmul(a, b) end, { dY, W } },
    { "head dY^T x", function(a, b) return T.matmul(a:t(), b) end, { dY, x } },
    { "mlp x W^T", function(a, b) return T.matmul(a, b:t()) end, { x, W3 } },
  }
  for _, c in ipairs(cases) do
    local us = T.bench(c[2], c[3], { warmup = 3, reps = 20 }).median_us
    print(B.json { { "side", "crescent" }, { "dtype", dt }, { "case", c[1] }, { "us", us } })
  end
end
