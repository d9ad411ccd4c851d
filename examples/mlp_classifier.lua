-- An MLP classifier in crescent's nn library: 784 -> 256 -> 128 -> 10 (Linear, ReLU, Dropout) on a
-- batch of synthetic "images" drawn around 10 class prototypes. The weights are random, except that
-- a --weights file (safetensors, the names that state_dict prints) loads trained ones. Prints the model, the loss, the accuracy and the
-- predictions of a few samples, the timings of the forward pass, then the same forward through
-- T.compile, checked equal to eager.
--   crescent examples/mlp_classifier.lua [batch] [--weights FILE]
local T = require "crescent"
local nn, F = T.nn, T.F

local batch, weights = 64, nil
local i = 1
while arg and arg[i] do
  if arg[i] == "--weights" then weights, i = arg[i + 1], i + 2
  else batch, i = assert(tonumber(arg[i]), "mlp_classifier.lua: expected a batch size or --weights FILE"), i + 1 end
end
T.manual_seed(0)
-- inference only: parameters require grad (as in PyTorch), and T.compile captures a model only
-- with grad mode off (compiled training is issue 35)
T.set_grad_enabled(false)

local MLP = nn.Module:extend("MLP")
function MLP:init(sizes, p)
  self.layers = nn.ModuleList()
  for k = 1, #sizes - 1 do self.layers:append(nn.Linear(sizes[k], sizes[k + 1])) end
  self.drop = nn.Dropout(p)
end
function MLP:forward(x)
  for k, layer in ipairs(self.layers) do
    x = layer(x)
    if k < #self.layers then x = self.drop(x:relu()) end
  end
  return x  -- logits
end

local model = MLP({ 784, 256, 128, 10 }, 0.1):eval()
if weights then model:load_state_dict(T.load(weights)) end

-- synthetic data: sample n is its class prototype plus noise; labels are 1-based classes
local prototypes = T.randn(10, 784)
local labels = T.randint(1, 11, { batch })
local x = T.embedding(labels, prototypes) + T.randn(batch, 784) * 0.5

print(string.format("crescent %s, %d threads", T.version, T.get_num_threads()))
print(tostring(model))
print(string.format("%d parameters; input %s %s", model:num_parameters(), x.dtype, table.concat(x.shape, "x")))

local function evaluate(logits)
  local loss = F.cross_entropy(logits, labels):item()
  local pred = logits:argmax(-1)
  local acc = pred:eq(labels):float():mean():item()
  return loss, acc, pred
end

local logits = model(x)
local loss, acc, pred = evaluate(logits)
local probs = logits:softmax(-1)
print(string.format("cross-entropy %.4f (ln 10 = %.4f for an untrained model), accuracy %.1f%%", loss, math.log(10), 100 * acc))
local shown = {}
for n = 1, math.min(batch, 4) do
  shown[n] = string.format("sample %d: class %d, predicted %d (p = %.3f)", n, labels[n]:item(), pred[n]:item(),
    probs[n][pred[n]:item()]:item())
end
print(table.concat(shown, "\n"))

-- every row of a softmax sums to 1
local worst = (probs:sum(-1) - 1):abs():max():item()
print(string.format("max |row sum - 1| = %.2e", worst))
assert(worst < 1e-5, "softmax rows must sum to 1")

local r = T.bench(model, { x }, { warmup = 3, reps = 20 })
local flops = 0
for _, layer in ipairs(model.layers) do flops = flops + 2 * batch * layer.in_features * layer.out_features end
print(string.format("forward pass: median %.1f us (min %.1f, max %.1f) over 20 runs, %.2f GFLOP/s",
  r.median_us, r.min_us, r.max_us, flops / r.median_us / 1e3))

-- the same forward, compiled: one graph guarded on the input's shape, the weights its inputs
local compiled = T.compile(model)
local diff = 0
for _ = 1, 3 do diff = math.max(diff, (compiled(x) - logits):abs():max():item()) end
local rc = T.bench(compiled, { x }, { warmup = 3, reps = 20 })
local e = T.explain(function(v) return model(v) end, x)
print(string.format("compiled: %d graph, %d ops, %d breaks; median %.1f us; max |compiled - eager| = %g",
  e.graph_count, e.ops_per_graph[1], e.graph_break_count, rc.median_us, diff))
assert(diff < 1e-5, "compiled and eager logits must agree")
