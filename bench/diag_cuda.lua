local T = require "crescent"
T.config.sync_compile = true  -- compiles in line: the timed calls run native code
local x = T.randn(8192, 4096):cuda()
local b = T.randn(4096):cuda()
local now = require("crescent.core").api.now_us
local function thr(f, n)
  f() T.cuda.synchronize()
  local t0 = now()
  for _ = 1, n do f() end
  T.cuda.synchronize()
  return (now() - t0) / n
end
print("copy_ events", T.bench(function(a) local y = T.empty(8192, 4096, {device="cuda"}) y:copy_(a) end, {x}, {reps=20}).median_us)
print("add eager events", T.bench(function(a, c) return a + c end, {x, b}, {reps=20}).median_us, "throughput", thr(function() return x + b end, 50))
local f = T.compile(function(a, c) return T.relu(a + c) end)
print("bias_relu compiled events", T.bench(f, {x, b}, {reps=20}).median_us, "throughput", thr(function() return f(x, b) end, 50))
local y = T.randn(2^24):cuda()
local g = T.compile(function(a) return T.sin((a + 1) * 2) end)
print("pw_chain compiled events", T.bench(g, {y}, {reps=20}).median_us, "throughput", thr(function() return g(y) end, 50))
print("host overhead: compiled call on a tiny tensor", thr(function() return g(T.randn(4):cuda()) end, 1))
