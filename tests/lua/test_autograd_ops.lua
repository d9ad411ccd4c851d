-- gradcheck (float64 central differences, PyTorch's tolerances) of every registry op with a
-- derivative rule, on broadcast, 0-d, size-1 and non-contiguous inputs; and the registry's
-- derivative status: an op with a rule but no case here fails.
local T = require "crescent"
expect.covers("_gelu_backward", "_gelu_tanh_backward")  -- (gelu's gradient; tests/diff compares their values with aten's)

local function R(...) return T.randn({ ... }, { dtype = "float64" }):requires_grad_() end
local function pos(...) return T.no_grad(function(...) return T.rand({ ... }, { dtype = "float64" }) + 0.5 end, ...):requires_grad_() end
local function nc(a, b) return T.randn(b, a, { dtype = "float64" }):t():requires_grad_() end  -- non-contiguous
local function idx(t) return T.tensor(t, { dtype = "int64" }) end

-- op -> list of {fn, inputs}
local C = {}
local function case(op, fn, ...) C[op] = C[op] or {}; table.insert(C[op], { fn, { ... } }) end

for _, u in ipairs({ "neg", "abs", "exp", "exp2", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "silu", "erf",
                     "floor", "ceil", "round", "trunc", "sign", "square", "gelu" }) do
  case(u, function(x) return x[u](x) end, R(2, 3))
  case(u, function(x) return x[u](x) end, nc(2, 3))
  case(u, function(x) return x[u](x) end, T.tensor(0.3, { dtype = "float64" }):requires_grad_())
end
for _, u in ipairs({ "log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal", "expm1" }) do
  case(u, function(x) return x[u](x) end, pos(3, 1))
end
case("gelu", function(x) return T.gelu(x, { approximate = "tanh" }) end, R(4))
case("erfinv", function(x) return (x * 0.3):erfinv() end, R(2, 3))  -- (inside (-1, 1))
case("erfinv", function(x) return (x * 0.3):erfinv() end, nc(2, 3))
for _, u in ipairs({ "leaky_relu", "elu", "softplus" }) do  -- (their number: slope, alpha, beta)
  case(u, function(x) return T[u](x, 0.3) end, R(2, 3))
  case(u, function(x) return T[u](x, 1.7) end, nc(2, 3))
end
case("hardtanh", function(x) return T.hardtanh(x * 2, -1, 1.5) end, R(2, 3))  -- (away from the bounds)
case("hardtanh", function(x) return T.hardtanh(x, -0.7, 0.2) end, nc(2, 3))
for _, u in ipairs({ "mish", "logsigmoid", "hardsigmoid", "hardswish" }) do  -- (x * 2: past hardswish's bends too)
  case(u, function(x) return T[u](x * 2) end, R(2, 3))
  case(u, function(x) return T[u](x) end, nc(2, 3))
end
for _, b in ipairs({ "_gelu_backward", "_gelu_tanh_backward" }) do  -- (gelu's gradient: double backward)
  case(b, function(g, x) return T[b](g, x) end, R(2, 3), R(2, 3))
  case(b, function(g, x) return T[b](g, x) end, R(3), nc(2, 3))
end
for _, b in ipairs({ "add", "sub", "mul", "div", "maximum", "minimum", "atan2", "hypot" }) do
  case(b, function(x, y) return T[b](x, y) end, R(2, 3), pos(3))
  case(b, function(x, y) return T[b](x, y) end, R(1, 3), nc(2, 3))
  case(b, function(x) return T[b](x, 1.5) end, R(2))
end
for mode, b in pairs({ floor = "_div_floor", trunc = "_div_trunc" }) do  -- (div's rounding modes: zero gradients)
  case(b, function(x, y) return T.div(x * 3, y, { rounding_mode = mode }) end, R(2, 3), pos(3))
  case(b, function(x) return x:div(0.7, { rounding_mode = mode }) end, nc(2, 3))
end
case("add", function(x, y) return T.add(x, y, { alpha = 2.5 }) end, R(3), R(3))
case("sub", function(x, y) return T.sub(x, y, { alpha = 2.5 }) end, R(3), R(2, 1))
case("pow", function(x, y) return T.pow(x, y) end, pos(2, 3), R(3))
case("pow", function(x) return x ^ 3 end, R(4))
case("pow", function(y) return T.pow(2.5, y) end, R(4))
case("fmod", function(x, y) return T.fmod(x * 3, y) end, R(3), pos(3))
case("remainder", function(x, y) return T.remainder(x * 3, y) end, R(3), pos(3))
case("where", function(x, y) return T.where(T.tensor({ true, false, true }), x, y) end, R(2, 3), R(3))
case("clamp", function(x) return x:clamp(-0.5, 0.5) end, R(2, 3))
case("clamp", function(x, lo, hi) return x:clamp(lo - 1, hi + 1) end, R(5), R(5), R(5))
case("lerp", function(a, b, w) return T.lerp(a, b, w) end, R(3), R(2, 3), R(3))
case("lerp", function(a, b) return T.lerp(a, b, 0.3) end, R(3), R(3))
case("addcmul", function(x, a, b) return T.addcmul(x, a, b, 0.5) end, R(3), R(2, 3), R(3))
for _, n in ipairs({ "add_", "sub_", "mul_", "div_" }) do
  case(n, function(x, y) local z = x * 1; return z[n](z, y) end, R(2, 3), pos(3))
end
case("clamp_", function(x) local z = x * 1; return z:clamp_(-0.3, 0.3) end, R(5))
for _, u in ipairs({ "neg", "abs", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
  "tanh", "sigmoid", "relu", "erf", "floor", "ceil", "trunc", "sign", "reciprocal", "square" }) do  -- (CR_INPLACE_OPS)
  case(u .. "_", function(x) local z = x * 1; return z[u .. "_"](z) end, pos(3, 1))
end
for _, b in ipairs({ "pow", "fmod", "remainder", "atan2", "hypot" }) do
  case(b .. "_", function(x, y) local z = x * 3; return z[b .. "_"](z, y) end, pos(3), pos(3))
end
case("lerp_", function(a, b, w) local z = a * 1; return z:lerp_(b, w) end, R(3), R(3), R(3))
case("addcmul_", function(x, a, b) local z = x * 1; return z:addcmul_(a, b, 0.5) end, R(3), R(3), R(3))
case("copy_", function(x) local z = T.zeros(2, 3, { dtype = "float64" }); return z:copy_(x) * 2 end, R(3))
case("fill_", function(v) local z = T.zeros(2, { dtype = "float64" }); return z:fill_(v) end, R())
case("zero_", function(x) local z = x * 2; z:zero_(); return z + x end, R(3))
for _, r in ipairs({ "sum", "mean", "prod", "amax", "amin", "logsumexp", "norm" }) do
  case(r, function(x) return x[r](x) end, R(2, 3))
  case(r, function(x) return x[r](x, 2) end, nc(2, 3))
  case(r, function(x) return x[r](x, { 1, 3 }, true) end, R(2, 1, 3))
end
case("prod", function(x) return x:prod(2) end, T.tensor({ { 0, 2, 3 }, { 0, 0, 2 }, { 1, 2, 3 } }, { dtype = "float64" }):requires_grad_())
case("norm", function(x) return x:norm(nil, nil, { p = 3 }) end, R(4))
case("norm", function(x) return x:norm(1, nil, { p = 1 }) end, R(4))
case("norm", function(x) return x:norm(1, nil, { p = math.huge }) end, R(4))
case("aminmax", function(x) local lo, hi = x:aminmax(); return lo * 2 + hi end, R(2, 3))
case("aminmax", function(x) local lo, hi = x:aminmax({ dim = 2, keepdim = true }); return lo - hi * 3 end, nc(2, 3))
for _, r in ipairs({ "max", "min" }) do
  case(r, function(x) return x[r](x) end, R(2, 3))
  case(r, function(x) return (x[r](x, 2)) end, R(2, 3))
  case(r, function(x) return (x[r](x, 1, true)) end, nc(3, 2))
end
for _, r in ipairs({ "var", "std" }) do
  case(r, function(x) return x[r](x) end, R(2, 3))
  case(r, function(x) return x[r](x, 2, true, { correction = 0 }) end, R(2, 3))
end
-- (0-d inputs reduced along their dim 1, a 1-D empty input that cat skips)
local function R0() return T.tensor(0.3, { dtype = "float64" }):requires_grad_() end
case("mean", function(x) return x:mean(1) end, R0())
case("max", function(x) return (x:max(1)) end, R0())
case("cat", function(a, b) return T.cat({ a, b }, 2) end, R(0), R(2, 3))
case("softmax", function(x) return T.softmax(x, 2) end, R(2, 3))
case("log_softmax", function(x) return T.log_softmax(x, 1) end, nc(3, 2))
case("cumsum", function(x) return T.cumsum(x, 2) end, R(2, 3))
for _, v in ipairs({ { "view", { 3, 2 } }, { "reshape", { 6 } }, { "expand", { 4, 2, 3 } } }) do
  case(v[1], function(x) return x[v[1]](x, v[2]) end, R(2, 3))
end
case("expand", function(x) return x:expand(2, 3) end, R(1, 3))
case("flatten", function(x) return x:flatten() end, R(2, 3))
case("squeeze", function(x) return x:squeeze() end, R(2, 1, 3))
case("unsqueeze", function(x) return x:unsqueeze(2) end, R(2, 3))
case("permute", function(x) return x:permute(3, 1, 2) end, R(2, 3, 2))
case("transpose", function(x) return x:transpose(1, 2) end, R(2, 3))
case("t", function(x) return x:t() end, R(2, 3))
case("narrow", function(x) return x:narrow(2, 2, 2) end, R(2, 4))
case("select", function(x) return x:select(1, 2) end, R(3, 2))
case("slice", function(x) return x:slice(2, 1, 4, 2) end, R(2, 4))
-- as_strided: a window, an output overlapping itself (sliding rows), a stride-0 dim, an input
-- overlapping itself (expanded), a non-contiguous input, 0-d and empty outputs, an offset of
-- its own inside a narrowed input
case("as_strided", function(x) return x:as_strided({ 2, 2 }, { 3, 1 }, 1) end, R(4, 3))
case("as_strided", function(x) return x:as_strided({ 3, 3 }, { 1, 1 }) end, R(6))
case("as_strided", function(x) return x:as_strided({ 2, 3 }, { 0, 2 }, 1) end, R(8))
case("as_strided", function(x) return x:expand(4, 3):as_strided({ 2, 2 }, { 1, 1 }) end, R(3))
case("as_strided", function(x) return x:as_strided({ 2, 2 }, { 1, 2 }) end, nc(2, 3))
case("as_strided", function(x) return x:as_strided({}, {}, 2) end, R(4))
case("as_strided", function(x) return x:as_strided({ 0, 2 }, { 1, 1 }) end, R(4))
case("as_strided", function(x) return x:narrow(1, 3, 4):as_strided({ 2 }, { 2 }, 3) end, R(8))
case("contiguous", function(x) return x:contiguous() end, nc(2, 3))
case("clone", function(x) return x:clone() end, R(3))
-- (values and steps exact in the narrow dtypes: the differences are exact too)
local EXACT = { to = true, float = true, double = true, half = true, bfloat16 = true, cpu = true }
local function exact() return T.tensor({ 0.25, 0.5, 1.5 }, { dtype = "float64" }):requires_grad_() end
for _, c in ipairs({ "to", "float", "double", "half", "bfloat16", "cpu" }) do
  case(c, function(x) return c == "to" and x:to("float32"):double() or x[c](x):double() end, exact())
end
case("cuda", function(x) return x end, R(1))  -- (no device here: the rule is the identity)
case("cat", function(a, b) return T.cat({ a, b }, 2) end, R(2, 1), R(2, 3))
case("stack", function(a, b) return T.stack({ a, b }, 2) end, R(2, 3), R(2, 3))
case("split", function(x) local p = x:split(2, 2); return p[1] * 2, p[2] end, R(2, 3))
case("chunk", function(x) local p = x:chunk(3); return p[3] end, R(3, 2))
case("mm", function(a, b) return T.mm(a, b) end, R(2, 3), nc(3, 2))
case("bmm", function(a, b) return T.bmm(a, b) end, R(2, 2, 3), R(2, 3, 2))
case("matmul", function(a, b) return T.matmul(a, b) end, R(2, 1, 2, 3), R(3, 3, 2))
case("matmul", function(a, b) return T.matmul(a, b) end, R(3), R(2, 3, 2))
case("matmul", function(a, b) return T.matmul(a, b) end, R(2, 3), R(3))
case("matmul", function(a, b) return T.matmul(a, b) end, R(3), R(3))
case("linear", function(x, w, b) return T.linear(x, w, b) end, R(2, 2, 3), R(4, 3), R(4))
case("linear", function(x, w) return T.linear(x, w) end, R(3), R(4, 3))
case("tril", function(x) return T.tril(x, -1) end, R(3, 3))
case("triu", function(x) return T.triu(x) end, R(3, 4))
case("embedding", function(w) return T.embedding(idx({ { 1, 3 }, { 3, 2 } }), w) end, R(4, 2))
-- (padding_idx: the padding row gets no gradient by design, so only rows other than it are used)
case("embedding", function(w) return T.embedding(idx({ 1, 2, 2, 4 }), w, { padding_idx = 3 }) end, R(4, 2))
case("embedding", function(w) return T.embedding(idx(2), w) end, R(3, 2))
case("index_select", function(x) return x:index_select(2, idx({ 3, 1, 3 })) end, R(2, 3))
case("index_select", function(x) return x:index_select(1, idx({ 2, 2 })) end, nc(3, 2))
case("index_select", function(x) return x:index_select(1, idx(1)) end, T.tensor(0.7, { dtype = "float64" }):requires_grad_())
case("gather", function(x) return x:gather(2, idx({ { 1, 1 }, { 3, 2 } })) end, R(2, 3))
case("gather", function(x) return x:gather(1, idx({ { 2, 1, 2 } })) end, nc(2, 3))
case("sort", function(x) return (x:sort(2)) end, R(2, 4))
case("sort", function(x) return (x:sort(1, true)) end, R(3))
case("topk", function(x) return (x:topk(2, 1)) end, R(4, 2))
case("index_add", function(x, s) return x:index_add(1, idx({ 2, 4, 2 }), s, { alpha = 1.5 }) end, R(4, 2), R(3, 2))
case("index_add", function(x, s) return T.index_add(x, 2, idx({ 3, 3 }), s) end, nc(2, 3), R(2, 2))
case("index_add", function(x, s) return x:index_add(1, idx({ 1 }), s) end, R(), R())
case("index_add_", function(x, s) local z = x * 1; return z:index_add_(2, idx({ 1, 1 }), s) end, R(2, 3), R(2, 2))
case("scatter_add", function(x, s) return x:scatter_add(1, idx({ { 1, 3 }, { 1, 1 } }), s) end, R(3, 2), R(2, 2))
case("index", function(x) return T._ops.index.fn(x, { idx({ 2, 1, 2 }), idx({ { 3 }, { 1 } }) }) end, R(2, 3, 2))
case("index", function(x) return x[idx({ 2, 2 })] end, nc(2, 3))
case("index", function(x) return x:index({ T.all, idx({ 3, 1 }), idx({ 1, 1 }) }) end, R(2, 3, 2))
for _, n in ipairs({ "index_put", "index_put_" }) do
  for _, acc in ipairs({ false, true }) do
    case(n, function(x, v)
      local z = n == "index_put" and x or x * 1
      -- (repeated positions only accumulating: written over, which value lands is unspecified)
      return T._ops[n].fn(z, { idx({ 2, 1, 2 }), idx({ 1, 3, acc and 1 or 3 }) }, v, acc)
    end, R(2, 3), R(3))
  end
end
case("index_put", function(x, v) return T._ops.index_put.fn(x, { idx({ 2 }) }, v) end, R(3, 2), R(2))
case("masked_select", function(x) return x:masked_select(T.tensor({ { true, false, true } })) end, R(2, 3))
case("masked_select", function(x) return x[T.tensor({ { true, false }, { false, true } })] end, nc(2, 2))
case("masked_select", function(x) return x:masked_select(T.tensor({ true, false })) end, R())
case("masked_select", function(x) return x:transpose(1, 3):masked_select(T.tensor({ true, false, true })) end,
  R(3, 2, 4))
for _, red in ipairs({ "sum", "mean", "prod", "amax", "amin" }) do
  for _, inc in ipairs({ true, false }) do
    case("scatter_reduce", function(x, s) return x:scatter_reduce(1, idx({ { 1, 3 }, { 1, 1 } }), s, red, { include_self = inc }) end,
      R(3, 2), R(2, 2))
  end
  -- a src larger than the index: its elements out of the index's reach get zeros
  case("scatter_reduce", function(x, s) return x:scatter_reduce(1, idx({ { 1, 3 }, { 1, 1 } }), s, red) end,
    R(3, 2), R(3, 3))
end
-- prod at zeros: one zero of src at a position, two, and a zero of self
local function with_zeros(t) return T.tensor(t, { dtype = "float64" }):requires_grad_() end
for _, inc in ipairs({ true, false }) do
  case("scatter_reduce", function(x, s) return x:scatter_reduce(1, idx({ 1, 1, 2, 2, 3, 3, 1 }), s, "prod", { include_self = inc }) end,
    with_zeros({ 0, 1.5, -2 }), with_zeros({ 0.5, 0, 0, 0, -1.5, 2, 3 }))
end
case("scatter_add", function(x, s) return x:scatter_add(2, idx({ { 2 }, { 2 } }), s) end, R(2, 3), nc(2, 3))
case("scatter_add_", function(x, s) local z = x * 1; return z:scatter_add_(1, idx({ 2, 2 }), s) end, R(3), R(2))
case("_layer_norm", function(x, w, b) return (T._layer_norm(x, { 3 }, w, b, 1e-3)) end, R(2, 3), R(3), R(3))
case("_layer_norm", function(x) return (T._layer_norm(x, { 3, 2 })) end, R(2, 3, 2))
case("_layer_norm", function(x) return (T._layer_norm(x, { 3 })) end, nc(4, 3))
case("_layer_norm", function(x, w) return (T._layer_norm(x, { 4 }, w)) end, R(4), R(4))
case("_layer_norm", function(x, b) return (T._layer_norm(x, { 1 }, nil, b)) end, R(3, 1), R(1))
local cw = T.rand(4, { dtype = "float64" }) + 0.5  -- (class weights get no gradient, as PyTorch's)
local function prob(...) return T.no_grad(function(...) return T.rand({ ... }, { dtype = "float64" }) * 0.6 + 0.2 end, ...):requires_grad_() end
case("_binary_cross_entropy", function(p, y) return T._binary_cross_entropy(p, y) end, prob(2, 3), prob(2, 3))
case("_binary_cross_entropy_backward", function(g, p, y) return T._binary_cross_entropy_backward(g, p, y) end, R(2, 3), prob(2, 3), prob(2, 3))
case("_cross_entropy", function(x) return (T._cross_entropy(x, idx({ 2, 1, 4 }))) end, R(3, 4))
case("_cross_entropy", function(x) return (T._cross_entropy(x, idx({ 2, 1, 4 }), cw, 1, 0.2, "sum")) end, R(3, 4))
case("_cross_entropy", function(x) return (T._cross_entropy(x, idx({ { 2, 4 }, { 3, 3 } }), cw, -100, 0.1, "none")) end, R(2, 4, 2))
case("_cross_entropy", function(x) return (T._cross_entropy(x, idx(3), nil, -100, 0.3)) end, R(4))
case("attention", function(q, k, v) return T.attention(q, k, v) end, R(2, 3, 4), R(2, 5, 4), R(2, 5, 3))
case("attention", function(q, k, v) return T.attention(q, k, v, 0.7, true) end, R(1, 4, 2), R(1, 3, 2), R(1, 3, 2))
case("attention", function(q, k, v, m) return T.attention(q, k, v, nil, nil, m) end, R(2, 3, 2), T.randn(2, 2, 4, { dtype = "float64" }):transpose(2, 3):detach():requires_grad_(), R(2, 4, 2), R(3, 1))
case("attention", function(q, k, v) return T.attention(q, k, v, nil, nil, T.tensor({ true, false, true })) end, R(2, 2), R(3, 2), R(3, 2))
case("_attention", function(q, k, v) return (T._attention(q, k, v, 0.6, true)) end, R(2, 3, 4), R(2, 5, 4), R(2, 5, 3))
case("_attention", function(q, k, v, m) return (T._attention(q, k, v, nil, nil, m)) end, R(3, 2), R(4, 2), R(4, 3), R(3, 4))
case("im2col", function(x) return T.im2col(x, { 2, 2 }, 1, 1, { 2, 1 }) end, R(1, 2, 3, 4))
case("im2col", function(x) return T.im2col(x:unsqueeze(1), 2, { 2, 1 }) end, nc(4, 3))
case("col2im", function(x) return T.col2im(x, { 3, 4 }, { 2, 2 }, 1, 1, { 2, 1 }) end, R(1, 8, 10))
case("col2im", function(x) return T.col2im(x, 3, 2) end, R(4, 4))
case("conv2d", function(x, w, b) return T.conv2d(x, w, b, { 2, 1 }, 1, { 1, 2 }, 2) end, R(2, 4, 5, 5), R(4, 2, 2, 2), R(4))
case("conv2d", function(x, w) return T.conv2d(x, w:unsqueeze(3):unsqueeze(4)) end, R(3, 4, 4), nc(2, 3))
-- conv2d's gradients as ops (cuDNN's on CUDA): x {2, 4, 5, 5}, w {4, 2, 2, 2}, y {2, 4, 3, 5}
case("_conv2d_input_grad", function(gy, w) return T._conv2d_input_grad(gy, w, { 2, 4, 5, 5 }, { 2, 1 }, 1, { 1, 2 }, 2) end,
  R(2, 4, 3, 5), R(4, 2, 2, 2))
case("_conv2d_weight_grad", function(gy, x) return T._conv2d_weight_grad(gy, x, { 4, 2, 2, 2 }, { 2, 1 }, 1, { 1, 2 }, 2) end,
  R(2, 4, 3, 5), R(2, 4, 5, 5))
case("masked_fill", function(x) return x:masked_fill(T.tensor({ true, false, true }), 0.5) end, R(2, 3))
case("masked_fill", function(x, v) return x:masked_fill(T.tensor({ false, true }), v) end, R(2, 2), R())
case("masked_fill_", function(x) local z = x * 1; return z:masked_fill_(T.tensor({ true, false }), 2) end, R(2))

-- Gradients at NaN, infinite and zero inputs as torch 1.13 gives them (found by tests/diff's
-- gradient mode, seed 7; values from torch).
local NAN, INF = 0 / 0, math.huge
local function grads(fn, ...)
  local xs = { ... }
  for i, x in ipairs(xs) do xs[i] = T.tensor(x, { dtype = "float64" }):requires_grad_() end
  return T.autograd.grad(fn(unpack(xs)):sum(), xs)
end

describe("gradients at special values, as PyTorch's", function()
  it("relu passes the gradient at NaN (threshold_backward: 0 only where y <= 0)", function()
    expect.close(grads(T.relu, { NAN, 1, -1, 0 })[1], { 1, 1, 0, 0 })
  end)
  it("elu's slope at 0 is alpha, its second derivative there 0 (elu_double_backward's x < 0)", function()
    local x = T.tensor({ 0, -1, 2 }, { dtype = "float64" }):requires_grad_()
    local g = T.autograd.grad({ T.F.elu(x, 0.7):sum() }, { x }, nil, { create_graph = true })[1]
    expect.close(g, { 0.7, 0.7 * math.exp(-1), 1 })
    expect.close(T.autograd.grad({ g:sum() }, { x })[1], { 0, 0.7 * math.exp(-1), 0 })
  end)
  it("min / max over everything split between the NaNs when the result is NaN, 0 elsewhere", function()
    expect.close(grads(T.min, { 1, NAN, 3, NAN })[1], { 0, 0.5, 0, 0.5 })
    expect.close(grads(T.max, { 1, 3, 3 })[1], { 0, 0.5, 0.5 })
    expect.close(grads(T.amin, { 1, NAN, 3 })[1], { NAN, NAN, NAN })  -- amin keeps torch's mask * g / count
  end)
  it("remainder's divisor gradient is -div(x, y, rounding_mode='floor'): NaN for infinite x", function()
    local g = grads(T.remainder, { INF, 5, -5, 7, 3, -INF, 1e300 }, { 2, -3, 3, 0, 0, 2, 1e-300 })
    expect.close(g[2], { NAN, 2, 2, -INF, -INF, NAN, -INF })
    local b = T.tensor({ 2, -3 }, { dtype = "float32" }):requires_grad_()
    local gb = T.autograd.grad(T.remainder(T.tensor({ true, false }), b):sum(), { b })[1]
    expect.close(gb, { -0.0, 0 })  -- a bool dividend is computed in the result's dtype
  end)
  it("maximum / minimum give both inputs the gradient where either is NaN, half on ties", function()
    local a, b = { 1, 2, NAN, NAN, 3 }, { NAN, 1, 2, NAN, 3 }
    local g = grads(T.maximum, a, b)
    expect.close(g[1], { 1, 1, 1, 1, 0.5 })
    expect.close(g[2], { 1, 0, 1, 1, 0.5 })
    g = grads(T.minimum, a, b)
    expect.close(g[1], { 1, 0, 1, 1, 0.5 })
    expect.close(g[2], { 1, 1, 1, 1, 0.5 })
  end)
  it("pow with a number base 0: the exponent's gradient is 0 where it is >= 0", function()
    expect.close(grads(function(y) return T.pow(0, y) end, { 0, 2, -1, 0.5 })[1], { 0, 0, -INF, 0 })
    expect.close(grads(function(y) return 0 ^ y end, { 0, 2 })[1], { 0, 0 })
  end)
  it("median splits its gradient between the elements equal to it (the NaNs when NaN)", function()
    local function med(x) return x:median() end
    expect.close(grads(med, { 3, 1, 2, 5, 4 })[1], { 1, 0, 0, 0, 0 })
    expect.close(grads(med, { 3, 1, 3, 5 })[1], { 0.5, 0, 0.5, 0 })
    expect.close(grads(med, { 3, NAN, 2, 5, 4 })[1], { 0, 1, 0, 0, 0 })
    expect.close(grads(med, { 3, NAN, 2, NAN, 4 })[1], { 0, 0.5, 0, 0.5, 0 })
    expect.close(grads(med, { -INF, -INF, 1 })[1], { 0.5, 0.5, 0 })
    -- along a dim: the first NaN of a line (value, index and gradient)
    local function med_dim(x) return (x:view(1, 5):median(2)) end
    expect.close(grads(med_dim, { 3, NAN, 2, NAN, 4 })[1], { 0, 1, 0, 0, 0 })
    expect.eq(select(2, T.tensor({ { 3, NAN, 2, NAN, 4 } }):median(2)):totable(), { 2 })
  end)
  it("nanmedian: the gradient of the median of the values that are not NaN", function()
    local function med(x) return x:nanmedian() end
    expect.close(grads(med, { 3, NAN, 2, 5, 4 })[1], { 1, 0, 0, 0, 0 })
    expect.close(grads(med, { NAN, 1, 1, 2, NAN })[1], { 0, 0.5, 0.5, 0, 0 })
    local function med_dim(x) return (x:view(1, 5):nanmedian(2)) end
    expect.close(grads(med_dim, { 3, NAN, 2, NAN, 4 })[1], { 1, 0, 0, 0, 0 })
    expect.eq(select(2, T.tensor({ { 3, NAN, 2, NAN, 4 } }):nanmedian(2)):totable(), { 1 })
  end)
  it("pow's exponent gradient takes an integer base's log in the result's dtype", function()
    local b = T.tensor({ 11.9, -2.5 }, { dtype = "float64" }):requires_grad_()
    local y = T.pow(T.tensor({ 7, 3 }), b)
    local gb = T.autograd.grad(y:sum(), { b })[1]
    expect.eq(gb.dtype, "float64")
    for i, x in ipairs({ 7, 3 }) do
      local want = y[i]:item() * math.log(x)
      expect.truthy(math.abs(gb[i]:item() - want) <= 1e-15 * math.abs(want), ("%.17g against %.17g"):format(gb[i]:item(), want))
    end
  end)
end)

local STATUS = { [0] = "none", "rule", "not differentiable" }
local ag = require("crescent.core").api.autograd

describe("gradcheck of every op with a derivative", function()
  local names = {}
  for name in pairs(T._ops) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    if C[name] then
      it(name, function()
        for i, c in ipairs(C[name]) do
          local ok, err = pcall(T.autograd.gradcheck, c[1], c[2], { eps = EXACT[name] and 0.125 or nil })
          if not ok then error(string.format("case %d: %s", i, tostring(err)), 0) end
        end
      end)
    end
  end
end)

describe("the registry's derivative status", function()
  it("every op with a rule has a gradcheck case; ops without one say so when reached", function()
    local missing, none = {}, {}
    for name in pairs(T._ops) do
      local id
      for op = 0, require("crescent.core").api.op_count - 1 do
        if require("crescent.core").ffi.string(require("crescent.core").api.op_info(op).name) == name then id = op end
      end
      local s = STATUS[ag.status(id)]
      if s == "rule" and not C[name] then missing[#missing + 1] = name end
      if s == "none" then none[#none + 1] = name end
    end
    table.sort(missing)
    table.sort(none)
    expect.eq(missing, {}, "ops with a rule and no gradcheck case")
    expect.eq(none, { "_addmm_epilogue", "_attention_backward", "_attention_cache", "_cross_entropy_backward",
                     "_int8_weight_mm", "_layer_norm_backward" }, "ops without a derivative")
  end)
end)
