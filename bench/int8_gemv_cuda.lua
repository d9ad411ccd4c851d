-- Issue 38 item 4: the int8 weight-only product (`_int8_weight_mm`, vm/kernels/cuda/int8_mm) on
-- GPT-2 124M's decoding shapes against float32 cuBLAS (T.matmul with the transposed weight):
-- device time per product from a CUDA graph of `reps` back-to-back products replayed `rounds`
-- times between events (the host launch time hides), and GB/s of the weight bytes read (int8:
-- n x kp bytes + scales; float32: 4 n k).
--   DEVICE=cuda crescent bench/int8_gemv_cuda.lua [rows=1,4,16] [reps=20] [rounds=20] -> JSON lines
local T = require "crescent"

local rows_list = {}
for r in (arg[1] or "1,4,16"):gmatch("%d+") do rows_list[#rows_list + 1] = tonumber(r) end
local reps, rounds = tonumber(arg[2] or 20), tonumber(arg[3] or 20)

-- {name, k, n}: attention qkv and projection, MLP up and down, LM head
local shapes = { { "qkv", 768, 2304 }, { "attn_proj", 768, 768 }, { "fc", 768, 3072 }, { "fc_proj", 3072, 768 },
  { "lm_head", 768, 50257 } }

-- microseconds per fn() on the device: a graph of `reps` calls replayed `rounds` times
local function device_us(fn)
  fn()
  T.cuda.synchronize()
  local g = T.cuda.CUDAGraph()
  T.cuda.graph(g, function() for _ = 1, reps do fn() end end)
  g:replay()
  T.cuda.synchronize()
  local start, finish = T.cuda.Event { enable_timing = true }, T.cuda.Event { enable_timing = true }
  start:record()
  for _ = 1, rounds do g:replay() end
  finish:record()
  finish:synchronize()
  return start:elapsed_time(finish) * 1000 / (rounds * reps)
end

T.manual_seed(0)
for _, sh in ipairs(shapes) do
  local name, k, n = sh[1], sh[2], sh[3]
  local w = T.randn(n, k) * 0.02
  local q, s = T._int8_quantize(w)  -- (on the host, as nn.quantize_int8)
  q, s = q:cuda(), s:cuda()
  local wt = w:cuda():t()
  local qbytes = n * math.ceil(k / 16) * 16 + 4 * n
  for _, m in ipairs(rows_list) do
    local x = T.randn(m, k):cuda()
    local int8_us = device_us(function() return T._int8_weight_mm(x, q, s) end)
    local f32_us = device_us(function() return T.matmul(x, wt) end)
    print(string.format('{"shape": "%s", "m": %d, "k": %d, "n": %d, "int8_us": %.2f, "int8_GBps": %.0f, ' ..
      '"float32_cublas_us": %.2f, "float32_GBps": %.0f}', name, m, k, n, int8_us, qbytes / int8_us / 1e3, f32_us,
      4 * n * k / f32_us / 1e3))
  end
end
