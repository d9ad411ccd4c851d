-- The convolution, normalisation, pooling and resampling layers of T.nn / T.F against torch 1.13:
-- each function's value and the gradients of its inputs for a fixed upstream gradient, the
-- modules with weights copied from crescent into torch (a LeNet and a ResNet basic block in
-- train and eval mode, logits and gradients within 1e-4), and their refusals.
local T = require "crescent"
local R = require "torch_ref"
local nn, F = T.nn, T.F

T.manual_seed(11)
local errs = expect.error_checker("test_nn_layers.lua")

local B = R.batch([[
import torch.nn as nn
def fg(f, gy, *xs):
    xs = [x.clone().requires_grad_(True) if torch.is_tensor(x) and x.is_floating_point() else x for x in xs]
    y = f(*xs)
    (y * gy).sum().backward()
    return [y.detach()] + [x.grad for x in xs if torch.is_tensor(x) and x.requires_grad]
def run_module(m, sd, x, gy, train):
    m = m.double() if x.dtype == torch.float64 else m
    m.load_state_dict(sd)
    m.train(train)
    x = x.clone().requires_grad_(True)
    y = m(x)
    (y * gy).sum().backward()
    return [y.detach(), x.grad] + [p.grad for p in m.parameters()] + [b for b in m.buffers() if b.is_floating_point()]
def run_mha(m, sd, q, k, v, gy, kw):
    m.load_state_dict(sd)
    q, k, v = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out, w = m(q, k, v, **kw)
    (out * gy).sum().backward()
    return [out.detach(), w.detach(), q.grad, k.grad, v.grad] + [p.grad for p in m.parameters()]
class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
    def forward(self, x):
        return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + x)
]])

-- ---- functions: value and input gradients ---------------------------------------------------------

local cases = {}
local NAMES = { "a", "b", "c", "d", "e", "f" }

-- y = fn(inputs...) and the gradients of its floating inputs for the upstream gradient gy.
local function value_and_grads(fn, gy, inputs)
  local xs = {}
  for i, x in ipairs(inputs) do
    xs[i] = (T.is_tensor(x) and (x.dtype == "float32" or x.dtype == "float64")) and x:detach():clone():requires_grad_() or x
  end
  local y = fn(unpack(xs))
  local out = { y:detach() }
  if y.requires_grad then
    (y * gy):sum():backward()
    for _, x in ipairs(xs) do
      if T.is_tensor(x) and x.requires_grad then out[#out + 1] = x.grad end
    end
  end
  return out
end

-- case(key, lua fn, python expression over a, b, ..., inputs[, rtol, atol])
local function case(key, fn, py, inputs, rtol, atol)
  local ok, y = pcall(function() return T.no_grad(fn, unpack(inputs)) end)
  local c = { key = key, fn = fn, inputs = inputs, rtol = rtol, atol = atol, err = not ok and y or nil }
  cases[#cases + 1] = c
  if not ok then return end
  local floating = y.dtype == "float32" or y.dtype == "float64"
  c.gy = floating and T.randn(y.shape, { dtype = y.dtype }) or nil  -- (index results: the value alone)
  local env, names = { gy = c.gy }, {}
  for i, x in ipairs(inputs) do env[NAMES[i]], names[i] = x, NAMES[i] end
  local args = table.concat(names, ", ")
  B:add(key, floating and string.format("fg(lambda %s: %s, gy, %s)", args, py, args) or string.format("[(lambda %s: %s)(%s)]", args, py, args), env)
end

local function D(...) return T.randn({ ... }, { dtype = "float64" }) end
local function S(...) return T.randn({ ... }) end

-- conv2d
case("conv2d plain", function(x, w, b) return F.conv2d(x, w, b) end, "F.conv2d(a, b, c)", { D(2, 3, 7, 6), D(4, 3, 3, 2), D(4) })
case("conv2d stride padding dilation", function(x, w, b) return F.conv2d(x, w, b, { 2, 1 }, { 1, 2 }, { 2, 1 }) end,
  "F.conv2d(a, b, c, (2, 1), (1, 2), (2, 1))", { D(2, 3, 9, 8), D(5, 3, 3, 3), D(5) })
case("conv2d groups no bias", function(x, w) return F.conv2d(x, w, nil, { stride = 2, padding = 1, groups = 2 }) end,
  "F.conv2d(a, b, None, stride=2, padding=1, groups=2)", { D(3, 4, 6, 6), D(6, 2, 3, 3) })
case("conv2d depthwise", function(x, w) return F.conv2d(x, w, nil, { groups = 4, padding = 1 }) end,
  "F.conv2d(a, b, None, groups=4, padding=1)", { D(2, 4, 5, 5), D(4, 1, 3, 3) })
case("conv2d 1x1", function(x, w, b) return F.conv2d(x, w, b) end, "F.conv2d(a, b, c)", { D(2, 6, 4, 5), D(3, 6, 1, 1), D(3) })
case("conv2d 1x1 groups", function(x, w) return F.conv2d(x, w, nil, { groups = 3 }) end, "F.conv2d(a, b, None, groups=3)", { D(2, 6, 3, 4), D(9, 2, 1, 1) })
-- (the CUDA path, checked here on the CPU)
case("conv2d gather path", function(x, w, b) return F._conv2d_gather(x, w, b, { 2, 1 }, { 1, 2 }, { 1, 2 }, 2) end,
  "F.conv2d(a, b, c, (2, 1), (1, 2), (1, 2), 2)", { D(2, 4, 7, 6), D(6, 2, 3, 2), D(6) })
case("conv2d gather path unbatched", function(x, w) return F._conv2d_gather(x, w, nil, { 1, 1 }, { 0, 0 }, { 1, 1 }) end,
  "F.conv2d(a, b)", { D(3, 5, 4), D(2, 3, 2, 2) })
case("conv2d same", function(x, w) return F.conv2d(x, w, nil, { padding = "same", dilation = 2 }) end,
  "F.conv2d(a, b, None, padding='same', dilation=2)", { D(1, 2, 6, 7), D(3, 2, 2, 3) })
case("conv2d unbatched", function(x, w, b) return F.conv2d(x, w, b, 1, 1) end, "F.conv2d(a, b, c, 1, 1)", { D(3, 5, 5), D(2, 3, 3, 3), D(2) })
case("conv2d float32", function(x, w, b) return F.conv2d(x, w, b, 1, 1) end, "F.conv2d(a, b, c, 1, 1)", { S(4, 8, 10, 10), S(16, 8, 3, 3), S(16) }, 1e-4, 1e-4)
-- conv1d
case("conv1d", function(x, w, b) return F.conv1d(x, w, b, { stride = 2, padding = 1, dilation = 2 }) end,
  "F.conv1d(a, b, c, stride=2, padding=1, dilation=2)", { D(2, 3, 11), D(4, 3, 3), D(4) })
case("conv1d groups same", function(x, w) return F.conv1d(x, w, nil, { padding = "same", groups = 2 }) end,
  "F.conv1d(a, b, None, padding='same', groups=2)", { D(2, 4, 7), D(6, 2, 4) })
-- conv_transpose2d
case("conv_transpose2d", function(x, w, b) return F.conv_transpose2d(x, w, b, { stride = 2, padding = 1, output_padding = 1 }) end,
  "F.conv_transpose2d(a, b, c, stride=2, padding=1, output_padding=1)", { D(2, 3, 4, 5), D(3, 4, 3, 3), D(4) })
case("conv_transpose2d groups dilation", function(x, w) return F.conv_transpose2d(x, w, nil, { groups = 2, dilation = 2, stride = { 1, 2 } }) end,
  "F.conv_transpose2d(a, b, None, groups=2, dilation=2, stride=(1, 2))", { D(1, 4, 3, 4), D(4, 3, 2, 3) })
-- unfold / fold
case("unfold", function(x) return F.unfold(x, { 2, 3 }, { dilation = { 1, 2 }, padding = 1, stride = 2 }) end,
  "F.unfold(a, (2, 3), dilation=(1, 2), padding=1, stride=2)", { D(2, 3, 5, 6) })
case("fold", function(x) return F.fold(x, { 5, 6 }, { 2, 3 }, 1, 1, 2) end, "F.fold(a, (5, 6), (2, 3), 1, 1, 2)", { D(2, 12, 9) })
-- pad
for _, m in ipairs({ "constant", "reflect", "replicate", "circular" }) do
  case("pad " .. m, function(x) return F.pad(x, { 2, 1, 1, 2 }, m) end, ("F.pad(a, (2, 1, 1, 2), '%s')"):format(m), { D(2, 3, 4, 5) })
end
case("pad 1-d reflect", function(x) return F.pad(x, { 3, 2 }, "reflect") end, "F.pad(a, (3, 2), 'reflect')", { D(2, 3, 5) })
-- circular with a crop on one side: cropped first, then wrapped (torch 1.13)
for _, p in ipairs({ { 2, -1 }, { -1, 2 }, { -2, 1 }, { 1, -1 } }) do
  local ps = table.concat(p, ", ")
  case("pad circular crop " .. ps, function(x) return F.pad(x, p, "circular") end, ("F.pad(a, (%s), 'circular')"):format(ps), { D(1, 2, 4) })
end
for _, p in ipairs({ { 2, -1, -1, 2 }, { -2, 1, 1, -1 }, { -1, -1, 2, 1 } }) do
  local ps = table.concat(p, ", ")
  case("pad circular 2-d crop " .. ps, function(x) return F.pad(x, p, "circular") end, ("F.pad(a, (%s), 'circular')"):format(ps), { D(2, 3, 4, 5) })
end
case("pad constant value crop", function(x) return F.pad(x, { -1, 2, 1, 0 }, { value = 1.5 }) end, "F.pad(a, (-1, 2, 1, 0), value=1.5)", { D(2, 3, 4) })
-- pools
case("max_pool2d", function(x) return F.max_pool2d(x, 2) end, "F.max_pool2d(a, 2)", { D(2, 3, 6, 7) })
case("max_pool2d options", function(x) return F.max_pool2d(x, 3, { stride = 2, padding = 1, dilation = { 1, 2 }, ceil_mode = true }) end,
  "F.max_pool2d(a, 3, stride=2, padding=1, dilation=(1, 2), ceil_mode=True)", { D(2, 2, 8, 9) })
case("max_pool2d indices", function(x) return select(2, F.max_pool2d(x, 3, { stride = 2, padding = 1, dilation = { 1, 2 }, return_indices = true })) end,
  "F.max_pool2d(a, 3, stride=2, padding=1, dilation=(1, 2), return_indices=True)[1] + 1", { D(2, 2, 7, 9) })
-- windows whose real elements are all -inf: the first real one is picked, never a padding one
local NEG = D(2, 2, 5, 6):masked_fill(T.rand(2, 2, 5, 6):lt(0.6), -math.huge)
NEG[{ 1, 1, 1, 1 }] = -math.huge
case("max_pool2d -inf windows", function(x) return F.max_pool2d(x, 3, { stride = 2, padding = 1 }) end,
  "F.max_pool2d(a, 3, stride=2, padding=1)", { NEG })
case("max_pool2d -inf windows indices", function(x) return select(2, F.max_pool2d(x, 3, { stride = 1, padding = 1, dilation = 2, return_indices = true })) end,
  "F.max_pool2d(a, 3, stride=1, padding=1, dilation=2, return_indices=True)[1] + 1", { NEG })
case("max_pool2d ties", function(x) return F.max_pool2d(x:relu(), 2) end, "F.max_pool2d(a.relu(), 2)", { D(1, 2, 4, 4) - 1 })
case("avg_pool2d", function(x) return F.avg_pool2d(x, { 2, 3 }) end, "F.avg_pool2d(a, (2, 3))", { D(2, 3, 6, 7) })
case("avg_pool2d pad ceil", function(x) return F.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true }) end,
  "F.avg_pool2d(a, 3, stride=2, padding=1, ceil_mode=True)", { D(2, 2, 8, 7) })
case("avg_pool2d exclude pad", function(x) return F.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false }) end,
  "F.avg_pool2d(a, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)", { D(2, 2, 8, 7) })
case("avg_pool2d divisor", function(x) return F.avg_pool2d(x, 2, { divisor_override = 3 }) end, "F.avg_pool2d(a, 2, divisor_override=3)", { D(1, 2, 4, 4) })
case("adaptive_avg_pool2d", function(x) return F.adaptive_avg_pool2d(x, { 3, 4 }) end, "F.adaptive_avg_pool2d(a, (3, 4))", { D(2, 3, 7, 9) })
case("adaptive_avg_pool2d 1", function(x) return F.adaptive_avg_pool2d(x, 1) end, "F.adaptive_avg_pool2d(a, 1)", { D(2, 3, 5, 5) })
case("max_pool1d", function(x) return F.max_pool1d(x, 3, 2, 1) end, "F.max_pool1d(a, 3, 2, 1)", { D(2, 3, 9) })
case("max_pool1d indices", function(x) return select(2, F.max_pool1d(x, 2, { dilation = 2, ceil_mode = true, return_indices = true })) end,
  "F.max_pool1d(a, 2, dilation=2, ceil_mode=True, return_indices=True)[1] + 1", { D(2, 3, 8) })
case("avg_pool1d", function(x) return F.avg_pool1d(x, 3, { stride = 2, padding = 1, count_include_pad = false }) end,
  "F.avg_pool1d(a, 3, stride=2, padding=1, count_include_pad=False)", { D(2, 3, 8) })
case("adaptive_avg_pool1d", function(x) return F.adaptive_avg_pool1d(x, 3) end, "F.adaptive_avg_pool1d(a, 3)", { D(2, 7) })
case("adaptive_max_pool2d", function(x) return F.adaptive_max_pool2d(x, { 3, 4 }) end, "F.adaptive_max_pool2d(a, (3, 4))", { D(2, 3, 7, 9) })
case("adaptive_max_pool2d ties", function(x) return F.adaptive_max_pool2d(x:round(), { 2, 3 }) end,
  "F.adaptive_max_pool2d(a.round(), (2, 3))", { D(1, 2, 5, 7) })
case("adaptive_max_pool2d indices", function(x) return select(2, F.adaptive_max_pool2d(x:round(), 3, true)) end,
  "F.adaptive_max_pool2d(a.round(), 3, True)[1] + 1", { D(2, 5, 8) })
case("adaptive_max_pool1d", function(x) return F.adaptive_max_pool1d(x, 4) end, "F.adaptive_max_pool1d(a, 4)", { D(2, 3, 9) })
case("adaptive_max_pool1d indices", function(x) return select(2, F.adaptive_max_pool1d(x:round(), 4, { return_indices = true })) end,
  "F.adaptive_max_pool1d(a.round(), 4, return_indices=True)[1] + 1", { D(3, 9) })
-- positional arguments then a trailing options table (PyTorch's keywords after its positionals)
case("avg_pool2d positional then options", function(x) return F.avg_pool2d(x, 2, 2, 1, { count_include_pad = false }) end,
  "F.avg_pool2d(a, 2, 2, 1, count_include_pad=False)", { D(1, 2, 5, 5) })
case("max_pool2d positional then options", function(x) return select(2, F.max_pool2d(x, 2, 2, 0, 1, { return_indices = true })) end,
  "F.max_pool2d(a, 2, 2, 0, 1, return_indices=True)[1] + 1", { D(1, 2, 5, 5) })
case("max_pool1d positional then options", function(x) return F.max_pool1d(x, 2, 1, { ceil_mode = true }) end,
  "F.max_pool1d(a, 2, 1, ceil_mode=True)", { D(2, 3, 8) })
case("avg_pool1d positional then options", function(x) return F.avg_pool1d(x, 3, 2, 1, { count_include_pad = false }) end,
  "F.avg_pool1d(a, 3, 2, 1, count_include_pad=False)", { D(2, 3, 8) })
case("pools with every argument named", function(x) return F.avg_pool2d(x, { kernel_size = 2, stride = 1 }) + F.adaptive_avg_pool2d(x, { output_size = 4 }) end,
  "F.avg_pool2d(a, kernel_size=2, stride=1) + F.adaptive_avg_pool2d(a, output_size=4)", { D(1, 2, 5, 5) })
-- interpolate
case("interpolate nearest size", function(x) return F.interpolate(x, { size = { 7, 5 } }) end, "F.interpolate(a, size=(7, 5))", { D(2, 3, 4, 3) })
case("interpolate nearest scale", function(x) return F.interpolate(x, { scale_factor = 2.5 }) end, "F.interpolate(a, scale_factor=2.5)", { D(1, 2, 3, 4) })
case("interpolate bilinear", function(x) return F.interpolate(x, { size = { 7, 5 }, mode = "bilinear" }) end,
  "F.interpolate(a, size=(7, 5), mode='bilinear')", { D(2, 3, 4, 3) })
case("interpolate bilinear align", function(x) return F.interpolate(x, { size = { 3, 8 }, mode = "bilinear", align_corners = true }) end,
  "F.interpolate(a, size=(3, 8), mode='bilinear', align_corners=True)", { D(2, 3, 4, 3) })
case("interpolate bilinear scale", function(x) return F.interpolate(x, { scale_factor = 1.5, mode = "bilinear" }) end,
  "F.interpolate(a, scale_factor=1.5, mode='bilinear')", { D(1, 2, 4, 5) })
-- a dim whose size the scale leaves unchanged is copied, whatever the scale (torch 1.13)
case("interpolate bilinear scale same size", function(x) return F.interpolate(x, { scale_factor = 1.3, mode = "bilinear" }) end,
  "F.interpolate(a, scale_factor=1.3, mode='bilinear')", { D(1, 2, 3, 5) })
case("interpolate bilinear scales", function(x) return F.interpolate(x, { scale_factor = { 1.3, 1.5 }, mode = "bilinear" }) end,
  "F.interpolate(a, scale_factor=(1.3, 1.5), mode='bilinear')", { D(1, 2, 3, 5) })
case("interpolate bilinear scales recompute", function(x)
  return F.interpolate(x, { scale_factor = { 1.3, 1.5 }, mode = "bilinear", recompute_scale_factor = true }) end,
  "F.interpolate(a, scale_factor=(1.3, 1.5), mode='bilinear', recompute_scale_factor=True)", { D(1, 2, 3, 5) })
case("interpolate bilinear scales align", function(x)
  return F.interpolate(x, { scale_factor = { 1.3, 1.5 }, mode = "bilinear", align_corners = true }) end,
  "F.interpolate(a, scale_factor=(1.3, 1.5), mode='bilinear', align_corners=True)", { D(1, 2, 3, 5) })
case("interpolate bilinear scales 1.1, 1.3", function(x) return F.interpolate(x, { scale_factor = { 1.1, 1.3 }, mode = "bilinear" }) end,
  "F.interpolate(a, scale_factor=(1.1, 1.3), mode='bilinear')", { D(1, 2, 5, 3) })
case("interpolate linear scale same size", function(x) return F.interpolate(x, { scale_factor = 1.3, mode = "linear" }) end,
  "F.interpolate(a, scale_factor=1.3, mode='linear')", { D(2, 3, 3) })
case("interpolate linear", function(x) return F.interpolate(x, { size = 9, mode = "linear" }) end, "F.interpolate(a, size=9, mode='linear')", { D(2, 3, 4) })
case("interpolate nearest-exact", function(x) return F.interpolate(x, { size = { 4, 7 }, mode = "nearest-exact" }) end,
  "F.interpolate(a, size=(4, 7), mode='nearest-exact')", { D(1, 2, 10, 3) })
case("interpolate nearest-exact scale", function(x) return F.interpolate(x, { scale_factor = 1.7, mode = "nearest-exact" }) end,
  "F.interpolate(a, scale_factor=1.7, mode='nearest-exact')", { D(2, 3, 10) })
case("interpolate bicubic scale of an unchanged size", function(x) return F.interpolate(x, { scale_factor = { 1.2, 2 }, mode = "bicubic" }) end,
  "F.interpolate(a, scale_factor=(1.2, 2), mode='bicubic')", { D(1, 2, 3, 4) })
case("interpolate bicubic", function(x) return F.interpolate(x, { size = { 9, 4 }, mode = "bicubic" }) end,
  "F.interpolate(a, size=(9, 4), mode='bicubic')", { D(2, 3, 5, 7) })
case("interpolate bicubic align scales", function(x) return F.interpolate(x, { scale_factor = { 1.7, 0.6 }, mode = "bicubic", align_corners = true }) end,
  "F.interpolate(a, scale_factor=(1.7, 0.6), mode='bicubic', align_corners=True)", { D(1, 2, 5, 7) })
case("interpolate trilinear", function(x) return F.interpolate(x, { size = { 4, 6, 9 }, mode = "trilinear" }) end,
  "F.interpolate(a, size=(4, 6, 9), mode='trilinear')", { D(2, 1, 3, 5, 7) })
case("interpolate trilinear align", function(x) return F.interpolate(x, { scale_factor = 1.5, mode = "trilinear", align_corners = true }) end,
  "F.interpolate(a, scale_factor=1.5, mode='trilinear', align_corners=True)", { D(1, 2, 3, 4, 2) })
case("interpolate area", function(x) return F.interpolate(x, { size = { 3, 4 }, mode = "area" }) end,
  "F.interpolate(a, size=(3, 4), mode='area')", { D(2, 3, 5, 7) })
case("interpolate area 3-d", function(x) return F.interpolate(x, { size = { 1, 2, 3 }, mode = "area" }) end,
  "F.interpolate(a, size=(1, 2, 3), mode='area')", { D(1, 2, 2, 3, 4) })
case("interpolate area 1-d", function(x) return F.interpolate(x, { scale_factor = 0.5, mode = "area" }) end,
  "F.interpolate(a, scale_factor=0.5, mode='area')", { D(2, 3, 7) })
-- normalisation
case("batch_norm train", function(x, w, b) return F.batch_norm(x, nil, nil, w, b, true) end,
  "F.batch_norm(a, None, None, b, c, True)", { D(4, 3, 2, 5), D(3), D(3) })
case("batch_norm eval", function(x, w, b) return F.batch_norm(x, w:detach() * 0.5, w:detach():abs() + 0.5, w, b, false, 0.1, 1e-3) end,
  "F.batch_norm(a, b.detach() * 0.5, b.detach().abs() + 0.5, b, c, False, 0.1, 1e-3)", { D(4, 3, 5), D(3), D(3) })
case("group_norm", function(x, w, b) return F.group_norm(x, 2, w, b) end, "F.group_norm(a, 2, b, c)", { D(3, 4, 3, 2), D(4), D(4) })
case("normalize", function(x) return F.normalize(x) end, "F.normalize(a)", { D(3, 4, 2) })
case("normalize p dim", function(x) return F.normalize(x, { p = 1, dim = -1 }) end, "F.normalize(a, p=1, dim=-1)", { D(3, 4) })
case("cosine_similarity", function(x, y) return F.cosine_similarity(x, y) end, "F.cosine_similarity(a, b)", { D(3, 5), D(3, 5) })
case("cosine_similarity dim", function(x, y) return F.cosine_similarity(x, y, 1) end, "F.cosine_similarity(a, b, 0)", { D(4, 2), D(4, 1) })
-- (a size-1 dim along dim: broadcast before the norms; norms under eps: each clamped alone)
case("cosine_similarity broadcast along dim", function(x, y) return F.cosine_similarity(x, y, 2) end,
  "F.cosine_similarity(a, b, 1)", { D(3, 1), D(3, 5) })

-- ---- modules with copied weights ------------------------------------------------------------------

-- The module's state_dict as a Python dict literal over inputs named s1, s2, ... (added to env).
local function state_literal(m, env)
  local parts, sd, names = {}, m:state_dict(), {}
  for name in pairs(sd) do names[#names + 1] = name end
  table.sort(names)
  for i, name in ipairs(names) do
    env["s" .. i] = sd[name]:clone()  -- (the bridge reads its inputs after the forwards ran)
    parts[#parts + 1] = ("'%s': s%d"):format(name, i)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

local mcases = {}
-- mcase(key, module, python module constructor, x, train): y and every gradient after
-- (y * gy):sum():backward(), then the floating buffers (running statistics)
local function mcase(key, m, py, x, train)
  local env = { x = x }
  local sd = state_literal(m, env)  -- (before the forward: train mode updates the statistics)
  m:train(train)
  local xg = x:detach():clone():requires_grad_()
  local y = m(xg)
  local gy = T.randn(y.shape, { dtype = y.dtype })
  env.gy = gy;
  (y * gy):sum():backward()
  local got = { y:detach(), xg.grad }
  for _, p in ipairs(m:parameters()) do got[#got + 1] = p.grad end
  for _, b in m:named_buffers() do
    if b.dtype ~= "int64" then got[#got + 1] = b end
  end
  mcases[#mcases + 1] = { key = key, got = got, m = m }
  B:add(key, ("run_module(%s, %s, x, gy, %s)"):format(py, sd, train and "True" or "False"), env)
end

local function lenet()
  return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64, 10))
end
local LENET_PY = "nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 10))"
mcase("LeNet float32", lenet(), LENET_PY, T.randn(4, 1, 16, 16), true)

local Block = nn.Module:extend("Block")
function Block:init(c)
  self.conv1 = nn.Conv2d(c, c, 3, { padding = 1, bias = false })
  self.bn1 = nn.BatchNorm2d(c)
  self.conv2 = nn.Conv2d(c, c, 3, { padding = 1, bias = false })
  self.bn2 = nn.BatchNorm2d(c)
end
function Block:forward(x) return T.relu(self.bn2(self.conv2(T.relu(self.bn1(self.conv1(x))))) + x) end
mcase("ResNet block train", Block(4), "Block(4)", T.randn(3, 4, 6, 6), true)
local eval_block = Block(4)
T.no_grad(function()
  for _, bn in ipairs({ eval_block.bn1, eval_block.bn2 }) do
    bn.running_mean:copy_(T.randn(4))
    bn.running_var:copy_(T.rand(4) + 0.5)
    bn.weight:copy_(T.randn(4))
    bn.bias:copy_(T.randn(4))
  end
end)
mcase("ResNet block eval", eval_block, "Block(4)", T.randn(3, 4, 6, 6), false)
mcase("Conv2d reflect float64", nn.Conv2d(2, 3, 3, { padding = { 1, 2 }, padding_mode = "reflect", dtype = "float64" }),
  "nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode='reflect')", D(2, 2, 5, 6), true)
mcase("Conv2d circular stride", nn.Conv2d(2, 4, { 2, 3 }, { stride = 2, padding = 1, padding_mode = "circular", groups = 2 }),
  "nn.Conv2d(2, 4, (2, 3), stride=2, padding=1, padding_mode='circular', groups=2)", S(2, 2, 5, 6), true)
mcase("Conv1d replicate", nn.Conv1d(3, 2, 3, { padding = "same", padding_mode = "replicate", dilation = 2 }),
  "nn.Conv1d(3, 2, 3, padding='same', padding_mode='replicate', dilation=2)", S(2, 3, 8), true)
mcase("ConvTranspose2d", nn.ConvTranspose2d(4, 2, 3, { stride = 2, padding = 1, output_padding = 1, groups = 2 }),
  "nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1, groups=2)", S(2, 4, 3, 3), true)
mcase("BatchNorm1d train", nn.BatchNorm1d(3, { momentum = 0.3 }), "nn.BatchNorm1d(3, momentum=0.3)", S(5, 3, 4), true)
mcase("BatchNorm1d 2-D eval", nn.BatchNorm1d(3), "nn.BatchNorm1d(3)", S(5, 3), false)
mcase("BatchNorm2d no affine", nn.BatchNorm2d(3, { affine = false }), "nn.BatchNorm2d(3, affine=False)", S(2, 3, 4, 4), true)
mcase("BatchNorm2d untracked eval", nn.BatchNorm2d(3, { track_running_stats = false }), "nn.BatchNorm2d(3, track_running_stats=False)",
  S(2, 3, 4, 4), false)
mcase("GroupNorm", nn.GroupNorm(2, 6), "nn.GroupNorm(2, 6)", S(2, 6, 3, 3), true)
mcase("AvgPool2d AdaptiveAvgPool2d", nn.Sequential(nn.AvgPool2d(2, { stride = 1 }), nn.AdaptiveAvgPool2d({ 2, 3 })),
  "nn.Sequential(nn.AvgPool2d(2, stride=1), nn.AdaptiveAvgPool2d((2, 3)))", S(2, 3, 6, 7), true)
mcase("AdaptiveMaxPool2d AdaptiveMaxPool1d", nn.Sequential(nn.AdaptiveMaxPool2d({ 3, 5 }), nn.Flatten(3), nn.AdaptiveMaxPool1d(4)),
  "nn.Sequential(nn.AdaptiveMaxPool2d((3, 5)), nn.Flatten(2), nn.AdaptiveMaxPool1d(4))", S(2, 3, 6, 7), true)
mcase("Upsample MaxPool1d AvgPool1d AdaptiveAvgPool1d", nn.Sequential(nn.Upsample({ scale_factor = 2, mode = "linear", align_corners = true }),
  nn.MaxPool1d(3, { stride = 1 }), nn.AvgPool1d(2), nn.AdaptiveAvgPool1d(4)),
  "nn.Sequential(nn.Upsample(scale_factor=2, mode='linear', align_corners=True), nn.MaxPool1d(3, stride=1), nn.AvgPool1d(2), nn.AdaptiveAvgPool1d(4))",
  S(2, 3, 7), true)
mcase("Tanh Sigmoid Softmax LogSoftmax", nn.Sequential(nn.Tanh(), nn.Sigmoid(), nn.Softmax(2), nn.LogSoftmax(-1)),
  "nn.Sequential(nn.Tanh(), nn.Sigmoid(), nn.Softmax(1), nn.LogSoftmax(-1))", S(3, 4), true)

-- MultiheadAttention: output, averaged weights, the gradients of q, k, v and the parameters
local function mha_case(key, m, py, q, k, v, opts, pykw)
  local env = { q = q, k = k, v = v }
  local sd = state_literal(m, env)
  for name, t in pairs(opts) do if T.is_tensor(t) then env[name] = t end end
  local qg, kg, vg = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
  local out, w = m(qg, kg, vg, opts)
  env.gy = T.randn(out.shape);
  (out * env.gy):sum():backward()
  local got = { out:detach(), w:detach(), qg.grad, kg.grad, vg.grad }
  for _, p in ipairs(m:parameters()) do got[#got + 1] = p.grad end
  mcases[#mcases + 1] = { key = key, got = got }
  B:add(key, ("run_mha(%s, %s, q, k, v, gy, dict(%s))"):format(py, sd, pykw), env)
end
local kpm = T.tensor({ { false, false, true, false, true }, { false, false, false, false, true } })
mha_case("MultiheadAttention batch_first masks", nn.MultiheadAttention(8, 2, { batch_first = true }),
  "nn.MultiheadAttention(8, 2, batch_first=True)", S(2, 3, 8), S(2, 5, 8), S(2, 5, 8),
  { key_padding_mask = kpm, attn_mask = S(3, 5) }, "key_padding_mask=key_padding_mask, attn_mask=attn_mask")
mha_case("MultiheadAttention kdim vdim bool mask", nn.MultiheadAttention(8, 4, { kdim = 6, vdim = 4 }),
  "nn.MultiheadAttention(8, 4, kdim=6, vdim=4)", S(3, 2, 8), S(5, 2, 6), S(5, 2, 4),
  { attn_mask = T.rand(3, 5):lt(0.3), average_attn_weights = false }, "attn_mask=attn_mask, average_attn_weights=False")
mha_case("MultiheadAttention unbatched no bias", nn.MultiheadAttention(6, 3, { bias = false }),
  "nn.MultiheadAttention(6, 3, bias=False)", S(4, 6), S(3, 6), S(3, 6), {}, "")

local res, why = B:run()

describe("T.nn layers with weights copied into torch 1.13", function()
  for _, c in ipairs(mcases) do
    it(c.key .. ": output, gradients, running statistics", function()
      if not res then skip(why) end
      local want = res[c.key]
      if want.error then error("torch raised: " .. want.error, 0) end
      expect.eq(#c.got, #want.list, "results")
      -- gradients through batch statistics cancel: their absolute tolerance scales with the
      -- tensor's largest element (float32 rounding of the terms, not of the small result)
      for i = 1, #c.got do
        local g = c.got[i]
        local scale = (i > 1 and g:numel() > 0) and math.max(1, g:abs():max():item()) or 1
        R.check(res, c.key .. "#" .. i, g, 1e-4, 1e-5 * scale)
      end
    end)
  end
end)

describe("T.F layers against torch 1.13 (value and input gradients)", function()
  for _, c in ipairs(cases) do
    it(c.key, function()
      if c.err then error(c.err, 0) end
      if not res then skip(why) end
      local got = value_and_grads(c.fn, c.gy, c.inputs)
      local want = res[c.key]
      if want.error then error("torch raised: " .. want.error, 0) end
      expect.eq(#got, #want.list, "value and gradients")
      for i = 1, #got do R.check(res, c.key .. "#" .. i, got[i], c.rtol, c.atol) end
    end)
  end
end)

expect.covers("conv2d", "im2col", "col2im")

describe("T.F layers on the CUDA tensors' path (gathered windows), run on the CPU", function()
  local FC = require "crescent.functional_conv"
  for _, c in ipairs(cases) do
    it(c.key, function()
      if c.err then error(c.err, 0) end
      if not res then skip(why) end
      FC.gather_on_cpu = true
      local ok, got = pcall(value_and_grads, c.fn, c.gy, c.inputs)
      FC.gather_on_cpu = false
      if not ok then error(got, 0) end
      for i = 1, #got do R.check(res, c.key .. "#" .. i, got[i], c.rtol, c.atol) end
    end)
  end
end)

-- ---- module machinery -----------------------------------------------------------------------------

describe("layer modules", function()
  it("name their parameters and buffers as PyTorch", function()
    local names = {}
    for name in nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)):named_parameters() do names[#names + 1] = name end
    expect.eq(names, { "0.weight", "0.bias", "1.weight", "1.bias" })
    local sd = nn.BatchNorm1d(3):state_dict()
    expect.eq(sd.num_batches_tracked.dtype, "int64")
    expect.eq(sd.running_var:totable(), { 1, 1, 1 })
    expect.eq(nn.Conv2d(4, 6, { 3, 1 }, { groups = 2, bias = false }).weight.shape, { 6, 2, 3, 1 })
    expect.eq(nn.ConvTranspose2d(4, 6, 3, { groups = 2 }).weight.shape, { 4, 3, 3, 3 })
  end)
  it("BatchNorm with momentum false keeps the cumulative average", function()
    local bn = nn.BatchNorm1d(2, { momentum = false, affine = false })
    local a, b = T.randn(6, 2), T.randn(6, 2) + 3
    bn(a); bn(b)
    expect.close(bn.running_mean, ((a:mean(1) + b:mean(1)) / 2):totable())
    expect.eq(bn.num_batches_tracked:item(), 2)
    bn:eval()
    expect.close(bn(a), ((a - bn.running_mean) / (bn.running_var + 1e-5):sqrt()):totable())
  end)
  it("Identity, Flatten, Unflatten reshape as PyTorch", function()
    local x = T.randn(2, 3, 4, 5)
    expect.eq(nn.Identity()(x), x)
    expect.eq(nn.Flatten()(x).shape, { 2, 60 })
    expect.eq(nn.Flatten(1, 3)(x).shape, { 24, 5 })
    expect.eq(nn.Unflatten(2, { 3, 1 })(x).shape, { 2, 3, 1, 4, 5 })
    expect.eq(nn.Unflatten(-1, { 5, 1 })(x).shape, { 2, 3, 4, 5, 1 })
  end)
  it("ModuleDict keeps its modules by name, in order", function()
    local d = nn.ModuleDict({ { "conv", nn.Conv2d(1, 1, 1) }, { "act", nn.ReLU() } })
    expect.eq(d:keys(), { "conv", "act" })
    expect.eq(d:len(), 2)
    expect.truthy(d.conv ~= nil and d["act"] ~= nil)
    d:update({ z = nn.Tanh(), a = nn.Sigmoid() })
    expect.eq(d:keys(), { "conv", "act", "a", "z" })
    local names = {}
    for name in d:named_parameters() do names[#names + 1] = name end
    expect.eq(names, { "conv.weight", "conv.bias" })
    errs(function() nn.ModuleDict({ forward = nn.ReLU() }) end, "ModuleDict", "'forward' is the name of a method")
    errs(function() nn.ModuleDict({ x = 1 }) end, "ModuleDict", "item 'x' expected a module")
  end)
  it("ParameterList holds parameters named 0, 1, ...", function()
    local pl = nn.ParameterList({ T.randn(2), T.randn(3) })
    pl:append(T.zeros(1))
    expect.eq(#pl, 3)
    expect.truthy(pl[1].requires_grad and pl[3].requires_grad)
    local names = {}
    for name in pl:named_parameters() do names[#names + 1] = name end
    expect.eq(names, { "0", "1", "2" })
    errs(function() pl:append(3) end, "ParameterList:append", "expected a tensor")
  end)
  it("print their settings", function()
    expect.eq(tostring(nn.Conv2d(2, 4, 3, { stride = 2, padding = 1, bias = false })),
      "Conv2d(2, 4, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False)")
    expect.eq(tostring(nn.Softmax(2)), "Softmax(dim=2)")
  end)
end)

describe("edges: results are new tensors, unused inputs keep a zero gradient", function()
  it("pad and interpolate that change nothing still copy (as torch)", function()
    local x = T.ones(1, 1, 2, 2)
    local outs = { F.interpolate(x, { size = { 2, 2 }, mode = "bilinear" }), F.interpolate(x, { size = { 2, 2 }, mode = "area" }),
                   F.pad(x, { 0, 0 }), F.pad(x, { 0, 0 }, "reflect"), F.pad(x, { -1, 0 }) }
    for _, y in ipairs(outs) do y:add_(1) end
    expect.eq(x:sum():item(), 4)
  end)
  it("addmm / addmv / baddbmm with beta = 0 keep input in the graph, its gradient zeros", function()
    local m, v = T.ones(2, 3, { dtype = "float64" }), T.ones(3, { dtype = "float64" })
    for _, f in ipairs { function(c) return T.addmm(c, m, m:t(), { beta = 0 }) end,
                         function(c) return T.addmv(c:select(2, 1), m, v, { beta = 0 }) end,
                         function(c) return T.baddbmm(c:view(1, 2, 2), m:view(1, 2, 3), m:t():reshape(1, 3, 2), { beta = 0 }) end } do
      local c = T.full({ 2, 2 }, 0 / 0, { dtype = "float64" }):requires_grad_()
      local y = f(c)
      expect.truthy(y.requires_grad and not y:isnan():any():item(), "the product alone, in the graph")
      y:sum():backward()
      expect.eq(c.grad:totable(), { { 0, 0 }, { 0, 0 } })
    end
  end)
  it("embedding's scale_grad_by_freq divides a row's gradient by its count (torch 1.13's values)", function()
    local w = T.arange(12, { dtype = "float64" }):view(4, 3):requires_grad_()
    local idx = T.tensor({ { 1, 2, 1 }, { 4, 1, 2 } })
    local y = F.embedding(idx, w, { scale_grad_by_freq = true, padding_idx = 4 })
    local loss = (y * T.arange(18, { dtype = "float64" }):view(2, 3, 3)):sum()
    loss:backward()
    expect.eq(w.grad:totable(), { { 6, 7, 8 }, { 9, 10, 11 }, { 0, 0, 0 }, { 0, 0, 0 } })
    local m = nn.Embedding(4, 3, { scale_grad_by_freq = true })
    m(idx):sum():backward()
    expect.eq(m.weight.grad:totable(), { { 1, 1, 1 }, { 1, 1, 1 }, { 0, 0, 0 }, { 1, 1, 1 } })
    expect.eq(tostring(m), "Embedding(4, 3, scale_grad_by_freq=True)")
    errs(function() F.embedding(idx, w, { sparse = true }) end, "embedding", "sparse = true is not implemented")
  end)
  it("binary_cross_entropy_with_logits keeps the loss dtype of input and target (weights do not promote)", function()
    local w64 = T.ones(3, { dtype = "float64" })
    expect.eq(F.binary_cross_entropy_with_logits(T.zeros(2, 3), T.ones(2, 3), { pos_weight = w64, weight = w64 }).dtype, "float32")
    expect.eq(F.binary_cross_entropy_with_logits(T.zeros(2, 3), T.ones(2, 3, { dtype = "float64" })).dtype, "float64")
  end)
end)

describe("layer refusals", function()
  it("adaptive pools check output_size's length and empty dims; MultiheadAttention its masks and value", function()
    errs(function() F.adaptive_max_pool2d(T.randn(1, 2, 5, 5), { 3, 2, 1 }) end, "adaptive_max_pool2d", "output_size expected 2 sizes, got 3")
    errs(function() F.adaptive_max_pool2d(T.randn(1, 2, 5, 5), { 3 }) end, "adaptive_max_pool2d", "expected 2 sizes, got 1")
    errs(function() F.adaptive_avg_pool2d(T.randn(1, 2, 5, 5), { 3, 2, 1 }) end, "adaptive_avg_pool2d", "expected 2 sizes, got 3")
    errs(function() F.adaptive_max_pool2d(T.zeros(1, 0, 7), 2) end, "adaptive_max_pool2d", "non-zero size for non-batch dimensions")
    expect.eq(F.adaptive_max_pool2d(T.randn(1, 2, 5, 5), { nil, 3 }).shape, { 1, 2, 5, 3 })
    local m, q = nn.MultiheadAttention(4, 2), T.randn(2, 1, 4)
    errs(function() m(q, q, q, { attn_mask = T.tensor({ { 0, 1 }, { 0, 0 } }) }) end, "MultiheadAttention", "attn_mask expected a bool or floating tensor, got int64")
    errs(function() m(q, q, T.randn(3, 1, 4)) end, "MultiheadAttention", "key shape {2,1,4} does not match value shape {3,1,4}")
  end)
  it("per-channel tensors of the wrong size and integer linear interpolation are named", function()
    expect.errors(function() local _ = T.nn.BatchNorm1d(3)(T.randn(4, 5)) end, "batch_norm: ",
      "running_mean of size equal to the number of channels of the input %(5%), got 3")
    expect.errors(function() local _ = T.nn.BatchNorm1d(3):eval()(T.randn(4, 5)) end, "batch_norm: ", "running_mean", "%(5%), got 3")
    expect.errors(function() local _ = T.F.batch_norm(T.randn(4, 5), nil, nil, T.ones(3), nil, true) end, "batch_norm: ", "weight", "%(5%), got 3")
    expect.errors(function() local _ = T.nn.GroupNorm(2, 4)(T.randn(2, 6, 3)) end, "group_norm: ",
      "expected weight of size equal to the number of channels of the input %(6%), got 4")
    for _, mode in ipairs({ "linear", "bilinear" }) do
      local x = mode == "linear" and T.arange(12):view(1, 3, 4) or T.arange(16):view(1, 1, 4, 4)
      expect.errors(function() local _ = T.F.interpolate(x, { size = 6, mode = mode }) end, "interpolate: ",
        "mode " .. mode .. " expected a floating input", "int64 tensor of shape")
    end
    expect.eq(T.F.interpolate(T.arange(4):view(1, 1, 4), { size = 6 }):totable(), { { { 0, 0, 1, 2, 2, 3 } } })  -- (as torch)
  end)
  it("conv2d names the mismatch", function()
    local x, w = T.randn(1, 3, 5, 5), T.randn(4, 2, 3, 3)
    errs(function() T.conv2d(x, w) end, "conv2d", "expected input float32 tensor of shape {1,3,5,5} to have 2 channels")
    errs(function() F.conv2d(T.randn(1, 4, 5, 5), w, nil, { groups = 3 }) end, "conv2d", "out_channels (4) expected to be divisible by groups (3)")
    errs(function() F.conv2d(T.randn(1, 2, 2, 2), w) end, "conv2d", "the padded input height (2 + 2 * 0) is smaller than the dilated kernel (3)")
    errs(function() F.conv2d(T.randn(1, 2, 5, 5, { dtype = "float64" }), w) end, "conv2d", "weight expected the input's dtype and device")
    errs(function() F.conv2d(T.randn(1, 2, 5, 5), w, T.randn(3)) end, "conv2d", "bias expected a 1-D tensor of 4 elements")
    errs(function() F.conv2d(T.randn(1, 2, 5, 5), w, nil, { stride = 2, padding = "same" }) end, "conv2d", "padding='same' is not supported for strided convolutions")
    errs(function() F.conv2d(T.randn(2, 5, 5):long(), w:long()) end, "conv2d", "expected a floating tensor, got an int64 tensor")
    errs(function() F.conv1d(T.randn(1, 2, 5), w) end, "conv1d", "weight expected a 3-D tensor")
    errs(function() F.conv2d(x, w, nil, { strides = 2 }) end, "conv2d", "unknown option 'strides'")
  end)
  it("MultiheadAttention names a mask of the wrong shape and the shapes it expects", function()
    local m = nn.MultiheadAttention(8, 2, { batch_first = true })
    local q, kv = T.randn(2, 3, 8), T.randn(2, 5, 8)
    errs(function() m(q, kv, kv, { key_padding_mask = T.zeros(2, 6):bool() }) end, "MultiheadAttention",
      "key_padding_mask expected shape (N, S) = {2,5}, got {2,6}")
    errs(function() m(q, kv, kv, { key_padding_mask = T.zeros(5):bool() }) end, "MultiheadAttention",
      "key_padding_mask expected shape (N, S) = {2,5}, got {5}")
    errs(function() m(q, kv, kv, { attn_mask = T.zeros(3, 4) }) end, "MultiheadAttention",
      "attn_mask expected shape (L, S) = {3,5} or (N*num_heads, L, S) = {4,3,5}, got {3,4}")
    errs(function() m(q, kv, kv, { attn_mask = T.zeros(2, 3, 5) }) end, "MultiheadAttention",
      "attn_mask expected shape (L, S) = {3,5} or (N*num_heads, L, S) = {4,3,5}, got {2,3,5}")
    errs(function() m(q, kv, kv, { attn_mask = 1 }) end, "MultiheadAttention", "attn_mask expected a tensor, got number")
    local u = nn.MultiheadAttention(6, 3)
    local uq, ukv = T.randn(4, 6), T.randn(3, 6)
    errs(function() u(uq, ukv, ukv, { key_padding_mask = T.zeros(1, 3):bool() }) end, "MultiheadAttention",
      "key_padding_mask expected shape (S) = {3}, got {1,3}")
    errs(function() u(uq, ukv, ukv, { attn_mask = T.zeros(4, 3, 3) }) end, "MultiheadAttention",
      "attn_mask expected shape (L, S) = {4,3} or (num_heads, L, S) = {3,4,3}, got {4,3,3}")
    -- the shapes it accepts
    expect.eq(m(q, kv, kv, { attn_mask = T.zeros(4, 3, 5), key_padding_mask = T.zeros(2, 5):bool() }).shape, { 2, 3, 8 })
    expect.eq(u(uq, ukv, ukv, { attn_mask = T.zeros(3, 4, 3), key_padding_mask = T.zeros(3):bool() }).shape, { 4, 6 })
  end)
  it("fold, pad, pools and interpolate check their arguments", function()
    errs(function() F.fold(T.randn(1, 5, 4), { 3, 3 }, 2) end, "col2im", "divisible by the product of kernel_size (4)")
    errs(function() F.pad(T.randn(2, 3), { 1, 2, 3 }) end, "pad", "Padding length must be divisible by 2")
    errs(function() F.pad(T.randn(2, 3), { 3, 0 }, "reflect") end, "pad", "Padding size should be less than the corresponding input dimension")
    errs(function() F.pad(T.randn(2, 3), { 1, 1 }, "wrap") end, "pad", 'mode expected "constant"')
    errs(function() F.max_pool2d(T.randn(1, 1, 4, 4), 2, { padding = 2 }) end, "max_pool2d", "pad should be at most half of effective kernel size")
    errs(function() F.avg_pool2d(T.randn(1, 1, 2, 2), 3) end, "avg_pool2d", "Output size is too small")
    local x = T.randn(1, 1, 4, 4)
    errs(function() F.avg_pool2d(x, 2, 2, 0, { bogus = 1 }) end, "avg_pool2d", "unknown option 'bogus'")
    errs(function() F.max_pool1d(x[1], 2, { count_include_pad = false }) end, "max_pool1d", "unknown option 'count_include_pad'")
    errs(function() F.adaptive_avg_pool2d(x, 2, { bogus = 1 }) end, "adaptive_avg_pool2d", "unknown option 'bogus'")
    errs(function() F.max_pool2d(x, 2, 2, { stride = 2 }) end, "max_pool2d", "got multiple values for argument 'stride'")
    errs(function() F.avg_pool1d(x[1], 2, 2, 0, false, true, 3) end, "avg_pool1d", "expected at most 7 arguments, got one more: number")
    errs(function() F.interpolate(T.randn(1, 1, 4), { size = 3, mode = "bilinear" }) end, "interpolate", "mode bilinear expected a 4-D input")
    errs(function() F.conv1d(T.randn(2, 3, 5), T.randn(4, 2, 3)) end, "conv1d", "shape {2,3,5} to have 2 channels (weight {4,2,3}, groups 1), got 3")
    errs(function() F.conv1d(T.randn(2, 3, 2), T.randn(4, 3, 3)) end, "conv1d", "padded input length (2 + 2 * 0) is smaller than the dilated kernel (3)")
    errs(function() F.interpolate(T.randn(1, 1, 4, 4), { size = 3, mode = "trilinear" }) end, "interpolate", "mode trilinear expected a 5-D input")
    errs(function() F.interpolate(T.randn(1, 1, 1, 2, 4, 4), { size = 3, mode = "area" }) end, "interpolate", "mode area expected a 3-D, 4-D or 5-D input")
    errs(function() F.interpolate(T.randn(1, 1, 4), { size = 3, mode = "area", align_corners = true }) end, "interpolate", "align_corners option can only be set")
    errs(function() F.interpolate(T.randn(1, 1, 4), { size = 3, mode = "cubic" }) end, "interpolate", '"bicubic", "trilinear" or "area", got cubic')
    errs(function() F.interpolate(T.randn(1, 1, 4)) end, "interpolate", "either size or scale_factor should be defined")
    errs(function() F.interpolate(T.randn(1, 1, 4, 4), { scale_factor = 0.2 }) end, "interpolate",
      "sizes should be greater than 0", "input size 4 and output size 0")
    errs(function() F.interpolate(T.randn(1, 1, 4, 4), { scale_factor = { 2, 2, 3 } }) end, "interpolate",
      "same number of spatial dimensions", "scale_factor of length 3")
    errs(function() F.group_norm(T.randn(2, 3, 4), 2) end, "group_norm", "divisible by num_groups")
    errs(function() nn.BatchNorm2d(3)(T.randn(2, 3)) end, "BatchNorm2d", "expected 4D input (got 2D input)")
    errs(function() F.batch_norm(T.randn(1, 3), nil, nil, nil, nil, true) end, "batch_norm", "Expected more than 1 value per channel when training")
  end)
end)

describe("compiled layers", function()
  it("a compiled LeNet forward equals the eager one (conv2d runs inside the graph)", function()
    local m = lenet()
    m:eval()
    local x = T.randn(2, 1, 16, 16)
    local want = T.no_grad(m, x)
    local f = T.compile(function(v) return m(v) end, { hot = 0 })
    for _ = 1, 2 do expect.close(T.no_grad(f, x), want:totable(), 1e-5, 1e-6) end
  end)
  it("compiled resampling, pools and norms equal eager", function()
    local blk = Block(3)
    blk:eval()
    local gn, mha = nn.GroupNorm(3, 3), nn.MultiheadAttention(48, 4, { batch_first = true })
    local function g(v)
      local y = blk(F.pad(v, { 1, 1, 2, 0 }, "reflect"))
      y = F.interpolate(gn(y), { size = { 5, 7 }, mode = "bilinear" })
      y = F.avg_pool2d(y, 2, { stride = 1, padding = 1 }) + F.adaptive_avg_pool2d(y, { 6, 8 })
      local out = mha(y:flatten(3), y:flatten(3), y:flatten(3), { need_weights = false })
      return out
    end
    local x = T.randn(2, 3, 4, 6)
    local want = T.no_grad(g, x)
    local f = T.compile(g, { hot = 0 })
    for _ = 1, 2 do expect.close(T.no_grad(f, x), want:totable(), 1e-5, 1e-6) end
  end)
end)

describe("cosine_similarity's eps", function()
  it("clamps each norm alone, as torch: |x1| = 5, |x2| = 3e-3 under eps 1e-2 gives 9e-3 / (5 * 1e-2)", function()
    local r = F.cosine_similarity(T.tensor({ 3, 4 }, { dtype = "float64" }), T.tensor({ 3e-3, 0 }, { dtype = "float64" }), 1, 1e-2)
    expect.close(r, T.tensor(0.18, { dtype = "float64" }), 1e-12, 1e-15)  -- (sqrt(max(|x1|^2 |x2|^2, eps^2)): 0.6)
  end)
end)
