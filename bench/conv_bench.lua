-- Conv2d forward on the CPU at the shapes of ResNet-18's convolutions (224 x 224 input, a small
-- batch for the CPU), eager, beside PyTorch 1.13 eager (bench/torch_conv.py, run here) at the
-- same thread count:
--   CRESCENT_NUM_THREADS=2 crescent bench/conv_bench.lua [reps [batch]]
-- ratio = crescent median / torch median (below 1: crescent is faster).
local T = require "crescent"
local reps, batch = tonumber(arg[1]) or 10, tonumber(arg[2]) or 4

-- name, in, out, kernel, stride, padding, input size (ResNet-18: conv1, then a 3x3 of each
-- stage, each stage's strided 3x3 and 1x1 downsample)
local SHAPES = {
  { "conv1 7x7/2", 3, 64, 7, 2, 3, 224 },
  { "layer1 3x3", 64, 64, 3, 1, 1, 56 },
  { "layer2 3x3/2", 64, 128, 3, 2, 1, 56 },
  { "layer2 3x3", 128, 128, 3, 1, 1, 28 },
  { "layer2 1x1/2", 64, 128, 1, 2, 0, 56 },
  { "layer3 3x3", 256, 256, 3, 1, 1, 14 },
  { "layer4 3x3", 512, 512, 3, 1, 1, 7 },
}

-- torch's medians by case name (nil without python3-torch)
local function torch_medians()
  local cmd = string.format("/usr/bin/python3 bench/torch_conv.py %d %d 2>/dev/null", reps, batch)
  local p = io.popen(cmd)
  local out = {}
  for line in p:lines() do
    local name, us = line:match("^RESULT (%S+) (%S+)")
    if name then out[name] = tonumber(us) end
  end
  p:close()
  return next(out) and out or nil
end

T.manual_seed(0)
local rows = {}
for _, s in ipairs(SHAPES) do
  local name, cin, cout, k, stride, pad, hw = unpack(s)
  local x, w, b = T.randn(batch, cin, hw, hw), T.randn(cout, cin, k, k), T.randn(cout)
  local r = T.bench(function(a, c, d) return T.F.conv2d(a, c, d, stride, pad) end, { x, w, b }, { warmup = 2, reps = reps })
  local ho = math.floor((hw + 2 * pad - k) / stride) + 1
  rows[#rows + 1] = { name, r.median_us, 2 * batch * cout * ho * ho * cin * k * k / (r.median_us * 1e3) }
end
local ref = torch_medians() or {}
print(string.format("conv2d forward, float32, batch %d, %d threads (torch 1.13 eager beside)", batch, T.get_num_threads()))
print(string.format("| %-14s | %14s | %9s | %12s | %16s |", "case", "crescent (us)", "GFLOP/s", "torch (us)", "crescent / torch"))
for _, r in ipairs(rows) do
  local t = ref[r[1]:gsub(" ", "_")]
  print(string.format("| %-14s | %14.1f | %9.1f | %12s | %16s |", r[1], r[2], r[3], t and string.format("%.1f", t) or "-",
    t and string.format("%.2f", r[2] / t) or "-"))
end
