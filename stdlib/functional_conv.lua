-- crescent.functional_conv: the sliding-window and resampling functions of T.F - conv1d, conv2d,
-- conv_transpose2d, unfold, fold, the 2-D pools, pad and interpolate - with torch.nn.functional's
-- arguments. conv2d is one registry op (im2col + BLAS); the others are compositions of registry
-- ops (im2col / col2im, matmul, index_select, cat), so their gradients come from the ops' rules.
-- Sizes, strides and paddings are an integer or a list of one per spatial dim; dims are 1-based.
local core = require "crescent.core"
local fail, is_tensor = core.fail, core.is_tensor
local is_opts, extra_arg = require("crescent.binding").is_opts, require("crescent.binding").extra_arg

local C = {}
-- true: CPU tensors take the CUDA tensors' path too (gathered windows; tests/lua/test_nn_layers.lua)
C.gather_on_cpu = false
local function on_device(x) return x.device ~= "cpu" or C.gather_on_cpu end
-- CUDA tensors whose convolutions take cuDNN (T.backends.cudnn, vm/cuda/cudnn.hpp)
local function cudnn_takes(x) return x.device ~= "cpu" and core.api.cudnn_state(core.ctx, 3, -1) ~= 0 end
local T
local check_opts
function C.bind(t, opts_checker) T, check_opts = t, opts_checker end

local function check_tensor(op, i, name, v)
  if not is_tensor(v) then fail(string.format("%s: argument %d (%s) expected a tensor, got %s", op, i, name, type(v))) end
end
local function shape_str(x) return "{" .. table.concat(x.shape, ",") .. "}" end

-- An integer or a list of n integers as a list of n, each >= min.
local function tuple(op, name, v, n, min)
  local t = type(v) == "number" and {} or v
  if type(v) == "number" then for i = 1, n do t[i] = v end end
  if type(t) ~= "table" or #t ~= n then
    fail(string.format("%s: %s expected an integer or a list of %d integers, got %s", op, name, n, type(v) == "table" and "a list of " .. #v or tostring(v)))
  end
  for i = 1, n do
    local x = t[i]
    if type(x) ~= "number" or x ~= math.floor(x) or x < min then
      fail(string.format("%s: %s expected integers >= %d, got %s", op, name, min, tostring(x)))
    end
  end
  return t
end

-- Trailing arguments: positional ones in PyTorch's order, then optionally one table of named
-- ones (the Lua form of its keywords): named(op, i, {a, b, ..., opts?}, names) -> table, refusing
-- unknown names, one given twice and extra arguments. data1: a lone {} is args[1]'s (a size list).
local function named(op, i, args, names, data1)
  local n = table.maxn(args)
  local opts = args[n]
  if n > 0 and is_opts(opts) and not (data1 and n == 1 and next(opts) == nil) then n = n - 1 else opts = nil end
  if n > #names then extra_arg(op, i + #names, args[#names + 1]) end
  local o = {}
  for k = 1, n do o[names[k]] = args[k] end
  if opts then
    local allowed = {}
    for _, name in ipairs(names) do allowed[name] = true end
    for k, v in pairs(check_opts(op, i + n, opts, allowed)) do
      if o[k] ~= nil then fail(string.format("%s: got multiple values for argument '%s'", op, k)) end
      o[k] = v
    end
  end
  return o
end

-- pad -------------------------------------------------------------------------------------------

local PAD_MODES = { constant = true, reflect = true, replicate = true, circular = true }

-- The source positions (1-based) of a dim of size n padded by lo before and hi after.
local function pad_index(mode, n, lo, hi)
  local idx = {}
  for j = -lo, n - 1 + hi do
    local s
    if mode == "reflect" then
      s = j < 0 and -j or (j >= n and 2 * (n - 1) - j or j)
    elseif mode == "replicate" then
      s = math.min(math.max(j, 0), n - 1)
    else
      s = j % n
    end
    idx[#idx + 1] = s + 1
  end
  return idx
end

-- pad(x, pad[, mode = "constant"[, value = 0]]) or pad(x, pad, {mode =, value =}): pad lists
-- (before, after) pairs from the last dim backwards, as PyTorch; negative amounts crop.
function C.pad(x, pad, mode, value)
  local op = "pad"
  check_tensor(op, 1, "input", x)
  if type(mode) == "table" then
    local o = check_opts(op, 3, mode, { mode = true, value = true })
    mode, value = o.mode, o.value
  end
  mode = mode or "constant"
  if not PAD_MODES[mode] then fail(op .. ': mode expected "constant", "reflect", "replicate" or "circular", got ' .. tostring(mode)) end
  if type(pad) ~= "table" or #pad % 2 ~= 0 then fail(op .. ": Padding length must be divisible by 2, got " .. (type(pad) == "table" and #pad or tostring(pad))) end
  if #pad / 2 > x:dim() then fail(op .. ": Padding length too large: " .. #pad .. " values for a " .. x:dim() .. "-D input") end
  tuple(op, "pad", pad, #pad, -math.huge)
  if mode ~= "constant" and value ~= nil and value ~= 0 then fail(op .. ': value expected only with mode "constant"') end
  local copied = false  -- (no padding, or only crops: a copy still, as torch's, never the input or a view)
  for i = 1, #pad / 2 do
    local d, lo, hi = x:dim() - i + 1, pad[2 * i - 1], pad[2 * i]
    local n = x:size(d)
    if mode == "constant" then
      if lo < 0 or hi < 0 then
        local start, len = 1 + math.max(-lo, 0), n - math.max(-lo, 0) - math.max(-hi, 0)
        if len < 0 then fail(string.format("%s: cropping dim %d (size %d) by %d and %d leaves nothing", op, d, n, -lo, -hi)) end
        x = x:narrow(d, start, len)
      end
      local parts = {}
      local function fill(k)
        local s = x.shape
        s[d] = k
        parts[#parts + 1] = T.full(s, value or 0, { dtype = x.dtype, device = x.device })
      end
      if lo > 0 then fill(lo) end
      parts[#parts + 1] = x
      if hi > 0 then fill(hi) end
      if #parts > 1 then x, copied = T.cat(parts, d), true end
    elseif lo ~= 0 or hi ~= 0 then
      if mode == "reflect" and (lo >= n or hi >= n) then
        fail(string.format("%s: Padding size should be less than the corresponding input dimension, but got: padding (%d, %d) at dimension %d of input %s", op, lo, hi, d, shape_str(x)))
      end
      if mode == "circular" and (lo > n or hi > n) then
        fail(string.format("%s: Padding value causes wrapping around more than once (padding (%d, %d), size %d)", op, lo, hi, n))
      end
      if mode == "circular" and (lo < 0 or hi < 0) then  -- (PyTorch crops first, then wraps what is left)
        local m = n - math.max(-lo, 0) - math.max(-hi, 0)
        if m < 0 then fail(string.format("%s: cropping dim %d (size %d) by %d and %d leaves nothing", op, d, n, -math.min(lo, 0), -math.min(hi, 0))) end
        if lo > m or hi > m then
          fail(string.format("%s: Padding value causes wrapping around more than once (padding (%d, %d), size %d cropped to %d)", op, lo, hi, n, m))
        end
        x, n, lo, hi = x:narrow(d, 1 + math.max(-lo, 0), m), m, math.max(lo, 0), math.max(hi, 0)
      end
      if n == 0 then fail(string.format("%s: mode %s expected a non-empty dim %d, got %s", op, mode, d, shape_str(x))) end
      x, copied = x:index_select(d, T.tensor(pad_index(mode, n, lo, hi), { dtype = "int64", device = x.device })), true
    end
  end
  return copied and x or x:clone()
end

-- unfold / fold ---------------------------------------------------------------------------------

-- unfold(x, kernel_size[, dilation = 1[, padding = 0[, stride = 1]]]) or unfold(x, k, {...}):
-- x {N, C, H, W} -> {N, C*kh*kw, L}
function C.unfold(x, k, ...)
  local o = named("unfold", 3, { ... }, { "dilation", "padding", "stride" })
  return T.im2col(x, k, o.dilation, o.padding, o.stride)
end

-- fold(cols, output_size, kernel_size[, dilation[, padding[, stride]]]): the adjoint of unfold
-- (overlapping entries are summed).
function C.fold(cols, output_size, k, ...)
  local o = named("fold", 4, { ... }, { "dilation", "padding", "stride" })
  return T.col2im(cols, output_size, k, o.dilation, o.padding, o.stride)
end

-- convolutions ------------------------------------------------------------------------------------

local CONV_ARGS = { "stride", "padding", "dilation", "groups" }

-- padding = "same" (stride 1): the total d * (k - 1) split with the extra element after, as
-- PyTorch; returns the symmetric padding and the input padded for the asymmetric rest.
local function same_padding(op, x, ks, stride, dilation, n)
  for i = 1, n do
    if stride[i] ~= 1 then fail(op .. ": padding='same' is not supported for strided convolutions") end
  end
  local sym, extra, any = {}, {}, false
  for i = 1, n do
    local total = dilation[i] * (ks[i] - 1)
    sym[i] = math.floor(total / 2)
    local rest = total - 2 * sym[i]
    extra[2 * (n - i) + 1], extra[2 * (n - i) + 2] = 0, rest
    any = any or rest > 0
  end
  return sym, any and C.pad(x, extra) or x
end

-- The padding argument of a convolution: an integer, a list, "valid" or "same".
local function conv_padding(op, x, padding, ks, stride, dilation, n)
  if padding == "valid" or padding == nil then return tuple(op, "padding", 0, n, 0), x end
  if padding == "same" then return same_padding(op, x, ks, stride, dilation, n) end
  if type(padding) == "string" then fail(op .. ': padding expected an integer, a list, "valid" or "same", got "' .. padding .. '"') end
  return tuple(op, "padding", padding, n, 0), x
end

-- The arguments of an n-D convolution checked: stride, padding, dilation, groups and the input
-- (padded here for the asymmetric rest of padding = "same").
local function conv_args(op, n, x, w, args)
  check_tensor(op, 1, "input", x)
  check_tensor(op, 2, "weight", w)
  local o = named(op, 4, args, CONV_ARGS)
  if w:dim() ~= n + 2 then fail(string.format("%s: weight expected a %d-D tensor {out_channels, in_channels / groups, kernel...}, got %s", op, n + 2, shape_str(w))) end
  if x:dim() ~= n + 1 and x:dim() ~= n + 2 then fail(string.format("%s: input expected a %d-D or %d-D (batched) tensor, got %s", op, n + 1, n + 2, shape_str(x))) end
  local ks = {}
  for i = 1, n do ks[i] = w:size(2 + i) end
  local stride, dilation = tuple(op, "stride", o.stride or 1, n, 1), tuple(op, "dilation", o.dilation or 1, n, 1)
  local padding
  padding, x = conv_padding(op, x, o.padding, ks, stride, dilation, n)
  return x, stride, padding, dilation, o.groups
end

-- The position in the padded plane (1-based, flattened) that each window element (i, j) reads
-- for each output (oh, ow): {kh*kw*Ho*Wo} int64, made on x's device.
local function window_index(dev, kh, kw, Ho, Wo, Wp, s, d)
  local function ar(n, step, shape) return (T.arange(n, { device = dev }) * step):view(shape) end
  local rows = ar(kh, d[1], { kh, 1, 1, 1 }) + ar(Ho, s[1], { 1, 1, Ho, 1 })
  local cols = ar(kw, d[2], { 1, kw, 1, 1 }) + ar(Wo, s[2], { 1, 1, 1, Wo })
  return (rows * Wp + cols + 1):flatten()
end

-- im2col of an unpadded xp {N, C, Hp, Wp} as a gather: {N, C*kh*kw, Ho*Wo}. CUDA tensors take
-- it, so that the windows are read by a gather kernel on the device (T.im2col would run on host
-- copies there).
local function gather_windows(xp, kh, kw, s, d)
  local N, C, Hp, Wp = xp:size(1), xp:size(2), xp:size(3), xp:size(4)
  local Ho = math.floor((Hp - d[1] * (kh - 1) - 1) / s[1]) + 1
  local Wo = math.floor((Wp - d[2] * (kw - 1) - 1) / s[2]) + 1
  local idx = window_index(xp.device, kh, kw, Ho, Wo, Wp, s, d)
  return xp:reshape(N, C, Hp * Wp):index_select(3, idx):view(N, C * kh * kw, Ho * Wo), Ho, Wo
end

-- conv2d as a gather and a product (index_select of the windows, matmul per group): the path of
-- CUDA tensors, whose ops run on the device (a gather kernel and cuBLAS) where the conv2d op would
-- run on host copies. Its gradient comes from the ops' rules.
function C._conv2d_gather(x, w, bias, stride, padding, dilation, groups)
  local unbatched = x:dim() == 3
  if unbatched then x = x:unsqueeze(1) end
  groups = groups or 1
  local N, cin, cout, kh, kw = x:size(1), x:size(2), w:size(1), w:size(3), w:size(4)
  if w:size(2) * groups ~= cin or cout % groups ~= 0 then return T.conv2d(x, w, bias, stride, padding, dilation, groups) end  -- (its error)
  local xp = C.pad(x, { padding[2], padding[2], padding[1], padding[1] })
  if xp:size(3) < dilation[1] * (kh - 1) + 1 or xp:size(4) < dilation[2] * (kw - 1) + 1 then
    return T.conv2d(x, w, bias, stride, padding, dilation, groups)  -- (its error)
  end
  local cols, Ho, Wo = gather_windows(xp, kh, kw, stride, dilation)
  local kg = cin / groups * kh * kw
  cols = cols:view(N, groups, kg, Ho * Wo)
  local y = T.matmul(w:reshape(groups, cout / groups, kg), cols):view(N, cout, Ho, Wo)
  if bias ~= nil then y = y + bias:view(1, cout, 1, 1) end
  return unbatched and y:squeeze(1) or y
end

-- conv2d(x, w[, bias[, stride[, padding[, dilation[, groups]]]]]) or conv2d(x, w, bias, {stride =,
-- padding =, dilation =, groups =}): x {N, Cin, H, W} (or {Cin, H, W}), w {Cout, Cin/groups, kh, kw}.
-- CUDA tensors: the conv2d op (cuDNN) where cuDNN is taken, else the gather and cuBLAS.
function C.conv2d(x, w, bias, ...)
  local stride, padding, dilation, groups
  x, stride, padding, dilation, groups = conv_args("conv2d", 2, x, w, { ... })
  if on_device(x) and x.device == w.device and x.dtype == w.dtype and not cudnn_takes(x) then
    return C._conv2d_gather(x, w, bias, stride, padding, dilation, groups)
  end
  return T.conv2d(x, w, bias, stride, padding, dilation, groups)
end

-- conv1d(x, w[, bias[, stride[, padding[, dilation[, groups]]]]]): x {N, Cin, L} (or {Cin, L}),
-- w {Cout, Cin/groups, k}; a conv2d over a height of 1.
function C.conv1d(x, w, bias, ...)
  local s, p, d, groups
  x, s, p, d, groups = conv_args("conv1d", 1, x, w, { ... })
  -- (checked here, so that the errors name conv1d and its own shapes, not conv2d's view of them)
  local cin = x:size(-2)
  if cin ~= w:size(2) * (groups or 1) then
    fail(string.format("conv1d: expected input %s tensor of shape %s to have %d channels (weight %s, groups %d), got %d channels",
      x.dtype, shape_str(x), w:size(2) * (groups or 1), shape_str(w), groups or 1, cin))
  end
  if x:size(-1) + 2 * p[1] < d[1] * (w:size(3) - 1) + 1 then
    fail(string.format("conv1d: the padded input length (%d + 2 * %d) is smaller than the dilated kernel (%d)",
      x:size(-1), p[1], d[1] * (w:size(3) - 1) + 1))
  end
  return C.conv2d(x:unsqueeze(-2), w:unsqueeze(-2), bias, { 1, s[1] }, { 0, p[1] }, { 1, d[1] }, groups):squeeze(-2)
end

-- conv_transpose2d(x, w[, bias[, stride[, padding[, output_padding[, groups[, dilation]]]]]]) or
-- with {stride =, padding =, output_padding =, groups =, dilation =}: x {N, Cin, H, W},
-- w {Cin, Cout/groups, kh, kw}; the adjoint of conv2d: col2im of W_g^T @ x_g, or on CUDA with
-- cuDNN its backward data (when output_padding < stride: the output size conv2d maps back to x's).
function C.conv_transpose2d(x, w, bias, ...)
  local op = "conv_transpose2d"
  check_tensor(op, 1, "input", x)
  check_tensor(op, 2, "weight", w)
  local o = named(op, 4, { ... }, { "stride", "padding", "output_padding", "groups", "dilation" })
  if w:dim() ~= 4 then fail(op .. ": weight expected a 4-D tensor {in_channels, out_channels / groups, kh, kw}, got " .. shape_str(w)) end
  local unbatched = x:dim() == 3
  if unbatched then x = x:unsqueeze(1) end
  if x:dim() ~= 4 then fail(op .. ": input expected a 3-D {C, H, W} or 4-D {N, C, H, W} tensor, got " .. shape_str(x)) end
  local s, p = tuple(op, "stride", o.stride or 1, 2, 1), tuple(op, "padding", o.padding or 0, 2, 0)
  local d, op_ = tuple(op, "dilation", o.dilation or 1, 2, 1), tuple(op, "output_padding", o.output_padding or 0, 2, 0)
  local G = o.groups or 1
  local N, cin, H, W = x:size(1), x:size(2), x:size(3), x:size(4)
  local kh, kw = w:size(3), w:size(4)
  if type(G) ~= "number" or G < 1 or cin % G ~= 0 or w:size(1) ~= cin then
    fail(string.format("%s: expected input %s to have %d channels (weight %s) divisible by groups %s", op, shape_str(x), w:size(1), shape_str(w), tostring(G)))
  end
  for i = 1, 2 do
    if op_[i] >= s[i] and op_[i] >= d[i] then fail(op .. ": output padding must be smaller than either stride or dilation") end
  end
  local cout = w:size(2) * G
  local Ho = (H - 1) * s[1] - 2 * p[1] + d[1] * (kh - 1) + op_[1] + 1
  local Wo = (W - 1) * s[2] - 2 * p[2] + d[2] * (kw - 1) + op_[2] + 1
  local y
  if cudnn_takes(x) and op_[1] < s[1] and op_[2] < s[2] and x.device == w.device and x.dtype == w.dtype then
    y = T._conv2d_input_grad(x, w, { N, cout, Ho, Wo }, s, p, d, G)
  else
    local wg = w:reshape(G, cin / G, cout / G * kh * kw):transpose(-1, -2)
    local cols = T.matmul(wg, x:reshape(N, G, cin / G, H * W)):reshape(N, cout * kh * kw, H * W)
    y = T.col2im(cols, { Ho, Wo }, { kh, kw }, d, p, s)
  end
  if bias ~= nil then y = y + bias:view(1, cout, 1, 1) end
  return unbatched and y:squeeze(1) or y
end

-- pools -------------------------------------------------------------------------------------------

-- PyTorch's pooling output size (ceil_mode: a last window must start inside the input or its
-- left padding).
local function pooled(n, k, s, p, d, ceil)
  local span = n + 2 * p - d * (k - 1) - 1
  local out = (ceil and math.ceil(span / s) or math.floor(span / s)) + 1
  if ceil and (out - 1) * s >= n + p then out = out - 1 end
  return out
end

-- The windows of a pool over x {N, C, H, W} (or {C, H, W}): {N*C, kh*kw, Ho*Wo} of x padded with
-- `fill`, and the geometry.
local function windows(op, x, k, s, p, d, ceil, fill)
  if x:dim() ~= 3 and x:dim() ~= 4 then fail(op .. ": input expected a 3-D {C, H, W} or 4-D {N, C, H, W} tensor, got " .. shape_str(x)) end
  local g = { unbatched = x:dim() == 3 }
  if g.unbatched then x = x:unsqueeze(1) end
  g.k, g.s = tuple(op, "kernel_size", k, 2, 1), tuple(op, "stride", s or k, 2, 1)
  g.p, g.d = tuple(op, "padding", p or 0, 2, 0), tuple(op, "dilation", d or 1, 2, 1)
  g.N, g.C, g.H, g.W = x:size(1), x:size(2), x:size(3), x:size(4)
  for i = 1, 2 do
    if g.p[i] > math.floor(g.k[i] / 2) then fail(op .. ": pad should be at most half of effective kernel size, but got pad=" .. g.p[i] .. ", kernel_size=" .. g.k[i]) end
  end
  g.Ho = pooled(g.H, g.k[1], g.s[1], g.p[1], g.d[1], ceil)
  g.Wo = pooled(g.W, g.k[2], g.s[2], g.p[2], g.d[2], ceil)
  if g.Ho < 1 or g.Wo < 1 then
    fail(string.format("%s: Given input size: (%dx%dx%d). Calculated output size: (%dx%dx%d). Output size is too small", op, g.C, g.H, g.W, g.C, g.Ho, g.Wo))
  end
  -- the padded extent the windows reach: padding p before, up to the last window after
  local hi_h = (g.Ho - 1) * g.s[1] + g.d[1] * (g.k[1] - 1) + 1 - g.H - g.p[1]
  local hi_w = (g.Wo - 1) * g.s[2] + g.d[2] * (g.k[2] - 1) + 1 - g.W - g.p[2]
  g.hi = { hi_h, hi_w }
  local xp = C.pad(x, { g.p[2], hi_w, g.p[1], hi_h }, "constant", fill)
  xp = xp:reshape(g.N * g.C, 1, xp:size(3), xp:size(4))
  local cols = on_device(x) and gather_windows(xp, g.k[1], g.k[2], g.s, g.d) or T.im2col(xp, g.k, g.d, 0, g.s)
  return cols, g
end

local function unwindow(y, g)
  y = y:view(g.N, g.C, g.Ho, g.Wo)
  return g.unbatched and y:squeeze(1) or y
end

-- max_pool2d(x, kernel_size[, stride = kernel_size[, padding = 0[, dilation = 1[, ceil_mode =
-- false[, return_indices = false]]]]]) or with an options table; the indices (1-based, into
-- each H*W plane) are a second result.
function C.max_pool2d(x, ...)
  local op = "max_pool2d"
  check_tensor(op, 1, "input", x)
  local o = named(op, 2, { ... }, { "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices" })
  local cols, g = windows(op, x, o.kernel_size, o.stride, o.padding, o.dilation, o.ceil_mode, -math.huge)
  local v, i = cols:max(2)
  -- a window whose real elements are all -inf may have picked a padding one before them: torch
  -- takes its first real element (its index, and its gradient)
  local padded = g.p[1] > 0 or g.p[2] > 0
  if not o.return_indices and not (padded and x.requires_grad) then return unwindow(v, g) end
  -- the window element (ki, kj) of output (oh, ow) sits at (oh*s - p + ki*d, ow*s - p + kj*d)
  local dev = x.device
  local k0 = i - 1
  local kj = k0:remainder(g.k[2])
  local ki = ((k0 - kj) / g.k[2]):long()  -- (exact: k0 - kj is a multiple)
  local oh = T.arange(g.Ho, { device = dev }):view(g.Ho, 1):expand(g.Ho, g.Wo):reshape(1, g.Ho * g.Wo)
  local ow = T.arange(g.Wo, { device = dev }):view(1, g.Wo):expand(g.Ho, g.Wo):reshape(1, g.Ho * g.Wo)
  local ih = oh * g.s[1] - g.p[1] + ki * g.d[1]
  local iw = ow * g.s[2] - g.p[2] + kj * g.d[2]
  if padded then
    local function first(o, s, p, d)  -- the first real row (column) of each window
      return o * s - p + ((o * -s + p):double() / d):ceil():clamp(0):long() * d
    end
    local in_pad = ih:lt(0):logical_or(iw:lt(0))
    ih = T.where(in_pad, first(oh, g.s[1], g.p[1], g.d[1]), ih)
    iw = T.where(in_pad, first(ow, g.s[2], g.p[2], g.d[2]), iw)
  end
  local at = ih * g.W + iw + 1
  if padded and x.requires_grad then v = x:reshape(g.N * g.C, g.H * g.W):gather(2, at) end
  if not o.return_indices then return unwindow(v, g) end
  return unwindow(v, g), unwindow(at, g)
end

-- The number of window positions along one dim that count for avg_pool's divisor: inside the
-- padded input (count_include_pad) or inside the input.
local function counts(n, k, s, p, out, include_pad)
  local c = {}
  for o = 0, out - 1 do
    local lo, hi = o * s, o * s + k  -- in padded coordinates
    local a, b = include_pad and 0 or p, include_pad and n + 2 * p or n + p
    c[o + 1] = math.max(0, math.min(hi, b) - math.max(lo, a))
  end
  return c
end

-- avg_pool2d(x, kernel_size[, stride = kernel_size[, padding = 0[, ceil_mode = false[,
-- count_include_pad = true[, divisor_override]]]]]) or with an options table.
function C.avg_pool2d(x, ...)
  local op = "avg_pool2d"
  check_tensor(op, 1, "input", x)
  local o = named(op, 2, { ... }, { "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override" })
  local cols, g = windows(op, x, o.kernel_size, o.stride, o.padding, 1, o.ceil_mode, 0)
  local sums = cols:sum(2)
  local div = o.divisor_override
  if div ~= nil then
    if type(div) ~= "number" or div == 0 then fail(op .. ": divisor must be not zero") end
    return unwindow(sums / div, g)
  end
  local include = o.count_include_pad ~= false
  local ch = counts(g.H, g.k[1], g.s[1], g.p[1], g.Ho, include)
  local cw = counts(g.W, g.k[2], g.s[2], g.p[2], g.Wo, include)
  local d = {}
  for a = 1, g.Ho do for b = 1, g.Wo do d[#d + 1] = ch[a] * cw[b] end end
  return unwindow(sums / T.tensor(d, { dtype = x.dtype, device = x.device }), g)
end

-- The averaging matrix {out, n} of an adaptive pool: row i averages [floor(i n / out),
-- ceil((i + 1) n / out)).
local function adaptive_matrix(n, out, x)
  local m = {}
  for i = 0, out - 1 do
    local a, b = math.floor(i * n / out), math.ceil((i + 1) * n / out)
    local row = {}
    for j = 0, n - 1 do row[j + 1] = (j >= a and j < b) and 1 / (b - a) or 0 end
    m[i + 1] = row
  end
  return T.tensor(m, { dtype = x.dtype, device = x.device })
end

-- adaptive_avg_pool2d(x, output_size): output_size an integer or {h, w} (nil keeps the input's).
function C.adaptive_avg_pool2d(x, ...)
  local op = "adaptive_avg_pool2d"
  check_tensor(op, 1, "input", x)
  local size = named(op, 2, { ... }, { "output_size" }, true).output_size
  if x:dim() ~= 3 and x:dim() ~= 4 then fail(op .. ": input expected a 3-D {C, H, W} or 4-D {N, C, H, W} tensor, got " .. shape_str(x)) end
  local H, W = x:size(-2), x:size(-1)
  if type(size) == "table" and table.maxn(size) ~= 2 then fail(string.format("%s: output_size expected 2 sizes, got %d", op, table.maxn(size))) end
  local s = type(size) == "table" and { size[1] or H, size[2] or W } or size
  s = tuple(op, "output_size", s, 2, 1)
  return T.matmul(T.matmul(adaptive_matrix(H, s[1], x), x), adaptive_matrix(W, s[2], x):t())
end

-- The 1-D pools: the 2-D ones over a height of 1 (indices, 1-based along the length, agree).
local function one_d(op, x, o)
  if x:dim() ~= 2 and x:dim() ~= 3 then fail(op .. ": input expected a 2-D {C, L} or 3-D {N, C, L} tensor, got " .. shape_str(x)) end
  local function pair(name, v, lead)  -- nil stays nil (the 2-D pool's default)
    if v ~= nil then return { lead, tuple(op, name, v, 1, 0)[1] } end
  end
  return x:unsqueeze(-2), { 1, tuple(op, "kernel_size", o.kernel_size, 1, 1)[1] }, pair("stride", o.stride, 1), pair("padding", o.padding, 0),
    pair("dilation", o.dilation, 1)
end

-- max_pool1d(x, kernel_size[, stride[, padding[, dilation[, ceil_mode[, return_indices]]]]])
function C.max_pool1d(x, ...)
  local op = "max_pool1d"
  check_tensor(op, 1, "input", x)
  local o = named(op, 2, { ... }, { "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices" })
  local x2, k2, s2, p2, d2 = one_d(op, x, o)
  local v, i = C.max_pool2d(x2, k2, { stride = s2, padding = p2, dilation = d2, ceil_mode = o.ceil_mode, return_indices = o.return_indices })
  if i then return v:squeeze(-2), i:squeeze(-2) end
  return v:squeeze(-2)
end

-- avg_pool1d(x, kernel_size[, stride[, padding[, ceil_mode[, count_include_pad]]]])
function C.avg_pool1d(x, ...)
  local op = "avg_pool1d"
  check_tensor(op, 1, "input", x)
  local o = named(op, 2, { ... }, { "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad" })
  local x2, k2, s2, p2 = one_d(op, x, o)
  return C.avg_pool2d(x2, k2, { stride = s2, padding = p2, ceil_mode = o.ceil_mode, count_include_pad = o.count_include_pad }):squeeze(-2)
end

-- adaptive_avg_pool1d(x, output_size): x {N, C, L} or {C, L}
function C.adaptive_avg_pool1d(x, ...)
  local op = "adaptive_avg_pool1d"
  check_tensor(op, 1, "input", x)
  local size = named(op, 2, { ... }, { "output_size" }, true).output_size
  if x:dim() ~= 2 and x:dim() ~= 3 then fail(op .. ": input expected a 2-D {C, L} or 3-D {N, C, L} tensor, got " .. shape_str(x)) end
  return T.matmul(x, adaptive_matrix(x:size(-1), tuple(op, "output_size", size, 1, 1)[1], x):t())
end

-- The windows of an adaptive max pool along one dim, [floor(i n / out), ceil((i + 1) n / out)), as
-- an {out, k} matrix of 1-based positions (k the widest; a shorter window repeats its last one)
-- and each window's start (0-based, {out, 1})
local function adaptive_windows(n, out, x)
  local starts, k = {}, 1
  for i = 0, out - 1 do
    starts[i + 1] = math.floor(i * n / out)
    k = math.max(k, math.ceil((i + 1) * n / out) - starts[i + 1])
  end
  local idx = {}
  for i = 0, out - 1 do
    local last = math.ceil((i + 1) * n / out) - 1
    for j = 0, k - 1 do idx[i * k + j + 1] = math.min(starts[i + 1] + j, last) + 1 end
  end
  local long = { dtype = "int64", device = x.device }
  return T.tensor(idx, long), k, T.tensor(starts, long):view(out, 1)
end

-- The max of each window along dim d (of size n, out windows): the values and each one's position
-- in the dim (0-based); of equal values the first, as torch's scan
local function window_max(x, d, n, out)
  local idx, k, starts = adaptive_windows(n, out, x)
  local shape = x.shape
  shape[d], shape[d + 1] = out, k
  for j = d + 1, x:dim() do shape[j + 1] = x:size(j) end
  local v, at = x:index_select(d, idx):view(shape):max(d + 1)
  local lead = {}
  for j = 1, #shape - 1 do lead[j] = j == d and out or 1 end
  return v, at - 1 + starts:view(lead)
end

-- adaptive_max_pool2d / 1d(x, output_size[, return_indices = false]): each window's max (the
-- adaptive average pools' windows) along W then H, which keeps torch's choice among equal values
-- (the first in row-major order); indices 1-based into each plane
local ADAPTIVE_INPUT = { "a 2-D {C, L} or 3-D {N, C, L}", "a 3-D {C, H, W} or 4-D {N, C, H, W}" }
local function adaptive_max(op, n, x, ...)
  check_tensor(op, 1, "input", x)
  local o = named(op, 2, { ... }, { "output_size", "return_indices" }, true)
  if x:dim() ~= n + 1 and x:dim() ~= n + 2 then fail(op .. ": input expected " .. ADAPTIVE_INPUT[n] .. " tensor, got " .. shape_str(x)) end
  for d = x:dim() - n, x:dim() do
    if x:size(d) == 0 then fail(op .. ": expected input to have non-zero size for non-batch dimensions, got " .. shape_str(x)) end
  end
  local H, W, size = x:size(-2), x:size(-1), o.output_size
  if type(size) == "table" and table.maxn(size) ~= n then
    fail(string.format("%s: output_size expected %d sizes, got %d", op, n, table.maxn(size)))
  end
  local s = tuple(op, "output_size", n == 2 and type(size) == "table" and { size[1] or H, size[2] or W } or size, n, 1)
  local d = x:dim() - 1
  local v, cols = window_max(x, d + 1, W, s[n])  -- {..., H, ow}
  local rows = nil
  if n == 2 then v, rows = window_max(v, d, H, s[1]) end  -- {..., oh, ow}
  if not o.return_indices then return v end
  return v, (rows and rows * W + cols:gather(d, rows + 1) or cols) + 1
end
function C.adaptive_max_pool2d(x, ...) return adaptive_max("adaptive_max_pool2d", 2, x, ...) end
function C.adaptive_max_pool1d(x, ...) return adaptive_max("adaptive_max_pool1d", 1, x, ...) end

-- interpolate ---------------------------------------------------------------------------------------

local ffi = core.ffi
local function f32(v) return tonumber(ffi.new("float", v)) end

-- The source positions of one dim for mode "nearest": floor(dst * scale) in float32, as
-- PyTorch's kernel (scale = 1 / scale_factor when given, else in / out).
local function nearest_index(n, out, sf, exact)
  local scale = f32(sf and 1 / sf or n / out)
  local idx = {}
  local half = exact and 0.5 or 0  -- (nearest-exact: the pixel centres, as torch's)
  for j = 0, out - 1 do idx[j + 1] = math.min(math.floor(f32((j + half) * scale)), n - 1) + 1 end
  return idx
end

-- x resampled linearly along dim d: the two neighbours of each source position and their weights.
local function linear_along(x, d, n, out, sf, align)
  local i0, i1, w0, w1 = {}, {}, {}, {}
  local scale
  if align then scale = out > 1 and (n - 1) / (out - 1) or 0
  else scale = sf and 1 / sf or n / out end
  for j = 0, out - 1 do
    local src = align and j * scale or math.max((j + 0.5) * scale - 0.5, 0)
    local a = math.min(math.floor(src), n - 1)
    local l = src - a
    i0[j + 1], i1[j + 1], w0[j + 1], w1[j + 1] = a + 1, math.min(a + 1, n - 1) + 1, 1 - l, l
  end
  local shape = {}
  for k = 1, x:dim() do shape[k] = k == d and out or 1 end
  local opts = { device = x.device }
  local function vec(v) return T.tensor(v, { dtype = x.dtype, device = x.device }):view(shape) end
  local a = x:index_select(d, T.tensor(i0, { dtype = "int64", device = opts.device }))
  local b = x:index_select(d, T.tensor(i1, { dtype = "int64", device = opts.device }))
  return a * vec(w0) + b * vec(w1)
end

-- x resampled by cubic convolution (A = -0.75) along dim d, as torch's bicubic: four neighbours
-- of each source position (clamped at the edges), the source position not clamped at 0.
local function cubic_along(x, d, n, out, sf, align)
  local A = -0.75
  local function near(t) return ((A + 2) * t - (A + 3)) * t * t + 1 end  -- |t| <= 1
  local function far(t) return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A end  -- 1 < |t| < 2
  local idx, w = { {}, {}, {}, {} }, { {}, {}, {}, {} }
  local scale
  if align then scale = out > 1 and (n - 1) / (out - 1) or 0
  else scale = sf and 1 / sf or n / out end
  for j = 0, out - 1 do
    local src = align and j * scale or (j + 0.5) * scale - 0.5
    local a = math.floor(src)
    local t = src - a
    local ws = { far(t + 1), near(t), near(1 - t), far(2 - t) }
    for k = 1, 4 do
      idx[k][j + 1] = math.min(math.max(a + k - 2, 0), n - 1) + 1
      w[k][j + 1] = ws[k]
    end
  end
  local shape = {}
  for k = 1, x:dim() do shape[k] = k == d and out or 1 end
  local r
  for k = 1, 4 do
    local term = x:index_select(d, T.tensor(idx[k], { dtype = "int64", device = x.device }))
      * T.tensor(w[k], { dtype = x.dtype, device = x.device }):view(shape)
    r = r and r + term or term
  end
  return r
end

-- x averaged along dim d over the adaptive pools' windows (a box's mean is the means along each
-- dim in turn)
local function area_along(x, d, n, out)
  return T.matmul(x:movedim(d, -1), adaptive_matrix(n, out, x):t()):movedim(-1, d)
end

local INTERP_MODES = { nearest = 0, ["nearest-exact"] = 0, linear = 1, bilinear = 2, bicubic = 2, trilinear = 3, area = 0 }
local RESAMPLE = { linear = linear_along, bilinear = linear_along, trilinear = linear_along, bicubic = cubic_along }

-- interpolate(x, {size =, scale_factor =, mode = "nearest", align_corners =}): x {N, C, d...};
-- modes nearest (any number of spatial dims), linear (1), bilinear and bicubic (2), trilinear (3),
-- area (the adaptive average pools; 3 dims: the average along each in turn).
function C.interpolate(x, opts)
  local op = "interpolate"
  local input = x
  check_tensor(op, 1, "input", x)
  local o = check_opts(op, 2, opts, { size = true, scale_factor = true, mode = true, align_corners = true, recompute_scale_factor = true })
  local mode = o.mode or "nearest"
  if not INTERP_MODES[mode] then
    fail(op .. ': mode expected "nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear" or "area", got ' .. tostring(mode))
  end
  local n = x:dim() - 2
  if n < 1 or (INTERP_MODES[mode] > 0 and n ~= INTERP_MODES[mode]) or (mode == "area" and n > 3) then
    local want = INTERP_MODES[mode] > 0 and (INTERP_MODES[mode] + 2) .. "-D" or mode == "area" and "3-D, 4-D or 5-D" or "3-D or more"
    fail(string.format("%s: mode %s expected a %s input, got %s", op, mode, want, shape_str(x)))
  end
  -- (PyTorch has no integer kernel for them: "compute_indices_weights_linear" not implemented for 'Long')
  local nearest = mode == "nearest" or mode == "nearest-exact"
  if not nearest and not (x.dtype:find("float") or x.dtype == "bfloat16") then
    fail(string.format("%s: mode %s expected a floating input (nearest takes any dtype), got %s",
      op, mode, x.dtype .. " tensor of shape " .. shape_str(x)))
  end
  if INTERP_MODES[mode] == 0 and o.align_corners ~= nil then fail(op .. ": align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | trilinear") end
  if (o.size == nil) == (o.scale_factor == nil) then fail(op .. ": either size or scale_factor should be defined (exactly one)") end
  local sizes, sfs = {}, {}
  if type(o.scale_factor) == "table" and #o.scale_factor ~= n then
    fail(string.format("%s: Input and scale_factor must have the same number of spatial dimensions, but got input with "
      .. "spatial dimensions of %d and scale_factor of length %d", op, n, #o.scale_factor))
  end
  for i = 1, n do
    local in_n = x:size(2 + i)
    if o.size ~= nil then
      sizes[i] = tuple(op, "size", o.size, n, 1)[i]
    else
      local sf = type(o.scale_factor) == "table" and o.scale_factor[i] or o.scale_factor
      if type(sf) ~= "number" or sf <= 0 then fail(op .. ": scale_factor expected positive numbers, got " .. tostring(sf)) end
      sizes[i] = math.floor(in_n * sf)
      if sizes[i] == 0 and in_n > 0 then  -- (as torch: a scale that leaves no output raises)
        fail(string.format("%s: Input and output sizes should be greater than 0, but got input size %d and output size 0 "
          .. "(scale_factor %s, dim %d)", op, in_n, tostring(sf), 2 + i))
      end
      if not o.recompute_scale_factor then sfs[i] = sf end
    end
  end
  for i = 1, n do
    local d, in_n = 2 + i, x:size(2 + i)
    if nearest then
      x = x:index_select(d, T.tensor(nearest_index(in_n, sizes[i], sfs[i], mode == "nearest-exact"), { dtype = "int64", device = x.device }))
    end
  end
  if mode == "area" then
    if n == 1 then return C.adaptive_avg_pool1d(x, sizes[1]) end
    if n == 2 then return C.adaptive_avg_pool2d(x, sizes) end
    for i = n, 1, -1 do
      if sizes[i] ~= x:size(2 + i) then x = area_along(x, 2 + i, x:size(2 + i), sizes[i]) end
    end
    return rawequal(x, input) and x:clone() or x
  end
  if not nearest then
    for i = n, 1, -1 do  -- the last dim first, as PyTorch's weights nest
      -- (a dim of unchanged size is copied whatever the scale, as PyTorch's linear kernels do;
      -- its bicubic one resamples it with a given scale factor other than 1)
      local copied = sizes[i] == x:size(2 + i) and (mode ~= "bicubic" or not sfs[i] or sfs[i] == 1)
      if not copied then x = RESAMPLE[mode](x, 2 + i, x:size(2 + i), sizes[i], sfs[i], o.align_corners) end
    end
  end
  return rawequal(x, input) and x:clone() or x  -- (a new tensor, as torch's, never the input)
end

return C
