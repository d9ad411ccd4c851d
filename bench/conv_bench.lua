-- Conv2d forward at the shapes of ResNet-18's convolutions (224 x 224 input), eager, beside
-- PyTorch eager (bench/torch_conv.py, run here with the same device, shapes and dtypes):
--   CRESCENT_NUM_THREADS=2 crescent bench/conv_bench.lua [reps [batch]]       (CPU, float32, batch 4)
--   DEVICE=cuda PYTHON=python3 crescent bench/conv_bench.lua [reps [batch]]   (batch 32, float32 and
--     bfloat16; device time; cuDNN, and the gather + cuBLAS path it replaces, T.backends.cudnn.enabled = false)
-- DTYPES=float32,float16 picks the dtypes; PYTHON the interpreter with torch (default /usr/bin/python3);
-- BENCHMARK=1 times cuDNN's algorithms on both sides (T.backends.cudnn.benchmark, torch's the same);
-- CRESCENT_CUDNN_API=graph | legacy cuDNN's API (default graph: the backend API).
-- ratio = crescent median / torch median (below 1: crescent is faster). Both frameworks keep their
-- default TF32 rule for cuDNN convolutions (allowed).
local T = require "crescent"
local dev = os.getenv("DEVICE") or "cpu"
local cuda = dev ~= "cpu"
local reps, batch = tonumber(arg[1]) or (cuda and 50 or 10), tonumber(arg[2]) or (cuda and 32 or 4)
local dtypes = {}
for d in (os.getenv("DTYPES") or (cuda and "float32,bfloat16" or "float32")):gmatch("[^,]+") do dtypes[#dtypes + 1] = d end
local python = os.getenv("PYTHON") or "/usr/bin/python3"
local benchmark = os.getenv("BENCHMARK") == "1"
if cuda then T.backends.cudnn.benchmark = benchmark end

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

-- torch's medians by "<case>_<dtype>" (nil without torch)
local function torch_medians()
  local cmd = string.format("DEVICE=%s DTYPES=%s BENCHMARK=%s %s bench/torch_conv.py %d %d 2>/dev/null", dev,
    table.concat(dtypes, ","), benchmark and 1 or 0, python, reps, batch)
  local p = io.popen(cmd)
  local out = {}
  for line in p:lines() do
    local name, us = line:match("^RESULT (%S+) (%S+)")
    if name then out[name] = tonumber(us) end
  end
  p:close()
  return next(out) and out or nil
end

local function time_conv(x, w, b, stride, pad)
  return T.bench(function(a, c, d) return T.F.conv2d(a, c, d, stride, pad) end, { x, w, b }, { warmup = 3, reps = reps }).median_us
end

T.manual_seed(0)
local rows = {}
for _, dt in ipairs(dtypes) do
  for _, s in ipairs(SHAPES) do
    local name, cin, cout, k, stride, pad, hw = unpack(s)
    local x, w, b = T.randn(batch, cin, hw, hw):to(dt):to(dev), T.randn(cout, cin, k, k):to(dt):to(dev), T.randn(cout):to(dt):to(dev)
    local us = time_conv(x, w, b, stride, pad)
    local plain
    if cuda then
      T.backends.cudnn.enabled = false
      plain = time_conv(x, w, b, stride, pad)
      T.backends.cudnn.enabled = true
    end
    local ho = math.floor((hw + 2 * pad - k) / stride) + 1
    rows[#rows + 1] = { name, dt, us, 2 * batch * cout * ho * ho * cin * k * k / (us * 1e3), plain }
  end
end
local ref = torch_medians() or {}
local api = cuda and T.backends.cudnn.api
local lib = cuda and (T.backends.cudnn.is_available() and "cuDNN " .. T.backends.cudnn.version() .. ", " .. api ..
  " API" or "no cuDNN") or "CPU"
print(string.format("conv2d forward on %s (%s%s), batch %d, %d threads, median of %d runs; torch eager beside", dev, lib,
  benchmark and ", benchmark mode" or "", batch, T.get_num_threads(), reps))
print(string.format("| %-14s | %-8s | %14s | %9s | %12s | %16s | %17s |", "case", "dtype", "crescent (us)", "TFLOP/s",
  "torch (us)", "crescent / torch", "without cuDNN (us)"))
for _, r in ipairs(rows) do
  local t = ref[r[1]:gsub(" ", "_") .. "_" .. r[2]]
  print(string.format("| %-14s | %-8s | %14.1f | %9.2f | %12s | %16s | %17s |", r[1], r[2], r[3], r[4] / 1e3,
    t and string.format("%.1f", t) or "-", t and string.format("%.2f", r[3] / t) or "-", r[5] and string.format("%.1f", r[5]) or "-"))
end
for _, r in ipairs(rows) do print(string.format("RESULT %s_%s %.2f", r[1]:gsub(" ", "_"), r[2], r[3])) end
