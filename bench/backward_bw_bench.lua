-- Issue 34's memory-bound backward target: the backward of gelu (erf and tanh forms) and of a
-- product on float32 tensors of 2^log2 elements (default 2^26: 256 MiB each), against the copy
-- bandwidth measured in the same run (y:copy_(x), 2 x bytes / time). GB/s counts the bytes the
-- backward must move at least: gelu reads x and the incoming gradient and writes dx (3 tensors);
-- x * w reads the gradient, x and w and writes dx and dw (5). Target: >= 80 % of the copy.
--   build/crescent bench/backward_bw_bench.lua [device=cuda] [log2=26] [reps=20]
-- One JSON line per case (bench/lib/timing.lua), then a table.
package.path = arg[0]:gsub("[^/]*$", "") .. "?.lua;" .. package.path
local T = require "crescent"
local B = require "lib.timing"

local device, log2, reps = arg[1] or "cuda", tonumber(arg[2] or 26), tonumber(arg[3] or 20)
local n = 2 ^ log2
local bytes = 4 * n
local opts = { warmup = 3, reps = reps }

local x = T.randn(n):to(device)
local copy_to = T.empty(n, { device = device })
local copy_us = T.bench(function(a, b) b:copy_(a) end, { x, copy_to }, opts).median_us
copy_to = nil
local copy_gbps = 2 * bytes / copy_us / 1e3
print(B.json({ { "name", "copy" }, { "device", device }, { "elements", n }, { "us", copy_us }, { "GBps", copy_gbps } }))

local g = T.randn(n):to(device)
-- name, the forward of the leaves (made to require grad), the leaves, the tensors moved
local cases = {
  { "gelu_backward", function(a) return T.F.gelu(a) end, { x }, 3 },
  { "gelu_tanh_backward", function(a) return T.F.gelu(a, { approximate = "tanh" }) end, { x }, 3 },
  { "mul_backward", function(a, b) return a * b end, { x, T.randn(n):to(device) }, 5 },
}
local rows = {}
for _, c in ipairs(cases) do
  local name, fwd, leaves, moved = c[1], c[2], c[3], c[4]
  local ins = {}
  for i, l in ipairs(leaves) do ins[i] = l:detach():requires_grad_(true) end
  local y = fwd(unpack(ins))
  -- (g among the arguments: T.bench times device work only when it sees a CUDA tensor there)
  local us = T.bench(function(gy) return T.autograd.grad(y, ins, gy, { retain_graph = true }) end, { g }, opts).median_us
  local gbps = moved * bytes / us / 1e3
  rows[#rows + 1] = { name, us, gbps, 100 * gbps / copy_gbps }
  print(B.json({ { "name", name }, { "device", device }, { "elements", n }, { "us", us }, { "GBps", gbps },
                 { "pct_of_copy", 100 * gbps / copy_gbps } }))
  y = nil
  collectgarbage()
end

print(string.format("\n%s, %d float32 elements (%d MiB each); copy %.0f us, %.1f GB/s", device, n, bytes / 2 ^ 20,
                    copy_us, copy_gbps))
print(string.format("%-20s %10s %10s %12s", "case", "us", "GB/s", "% of copy"))
for _, r in ipairs(rows) do print(string.format("%-20s %10.0f %10.1f %11.0f%%", r[1], r[2], r[3], r[4])) end
local mem = B.device_memory(device)
if mem then print(string.format("reserved %.0f MiB", mem.reserved_mib)) end
