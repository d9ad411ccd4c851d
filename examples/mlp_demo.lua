-- A small MLP forward pass: 784 -> 256 -> 128 -> 10 with ReLU and a softmax, on a batch of
-- random "images". Shows the tensor API (randn weights, matmul, broadcasting adds, relu,
-- softmax), prints shapes, a few values, a sanity check and timings, then the same forward
-- captured by T.compile (graphs run on the eager kernels until the native code generators land).
--   crescent examples/mlp_demo.lua [batch]
local T = require "crescent"

local batch = tonumber(arg and arg[1]) or 64
local sizes = { 784, 256, 128, 10 }
T.manual_seed(0)

-- Kaiming-style initialisation: weights {in, out} scaled by sqrt(2 / in), zero biases
local layers = {}
for i = 1, #sizes - 1 do
  local n_in, n_out = sizes[i], sizes[i + 1]
  layers[i] = { w = T.randn(n_in, n_out) * math.sqrt(2 / n_in), b = T.zeros(n_out) }
end

local function forward(x)
  for i, l in ipairs(layers) do
    x = T.matmul(x, l.w) + l.b  -- {batch, in} x {in, out} + {out} (broadcast)
    if i < #layers then x = x:relu() end
  end
  return x:softmax(-1)
end

local x = T.randn(batch, sizes[1])
local probs
local first_us = T.bench(function() probs = forward(x) end, {}, { warmup = 0, reps = 1 }).median_us

print(string.format("crescent %s, %d threads", T.version, T.get_num_threads()))
print("input  " .. x.dtype .. " " .. table.concat(x.shape, "x"))
for i, l in ipairs(layers) do
  print(string.format("layer %d  w %s  b %s", i, table.concat(l.w.shape, "x"), table.concat(l.b.shape, "x")))
end
print("output " .. probs.dtype .. " " .. table.concat(probs.shape, "x"))

local row = probs[1]:totable()
local parts, best, best_p = {}, 0, -1
for k, p in ipairs(row) do
  parts[k] = string.format("%.4f", p)
  if p > best_p then best, best_p = k, p end
end
print("probabilities of sample 1: " .. table.concat(parts, " "))
print(string.format("sample 1 -> class %d (p = %.4f)", best, best_p))

-- every row of a softmax sums to 1
local sums = probs:sum(-1):totable()
local worst = 0
for _, s in ipairs(sums) do worst = math.max(worst, math.abs(s - 1)) end
print(string.format("max |row sum - 1| = %.2e", worst))
assert(worst < 1e-5, "softmax rows must sum to 1")

local r = T.bench(forward, { x }, { warmup = 3, reps = 20 })
print(string.format("forward pass: first call %.1f us, median %.1f us (min %.1f, max %.1f) over 20 runs",
  first_us, r.median_us, r.min_us, r.max_us))
local flops = 0
for i = 1, #sizes - 1 do flops = flops + 2 * batch * sizes[i] * sizes[i + 1] end
print(string.format("matmul work: %.1f MFLOP per pass, %.2f GFLOP/s", flops / 1e6, flops / r.median_us / 1e3))

-- the same forward, captured: one graph, guarded on the input's shape; the weights are inputs
local compiled = T.compile(forward)
local same = compiled(x)
local diff = (same - probs):abs():amax():item()
assert(diff == 0, "compiled and eager results must be identical")
local rc = T.bench(compiled, { x }, { warmup = 3, reps = 20 })
local e = T.explain(forward, x)
print(string.format("compiled: %d graph, %d ops, %d breaks; median %.1f us; max |compiled - eager| = %g",
  e.graph_count, e.ops_per_graph[1], e.graph_break_count, rc.median_us, diff))
