-- crescent.nn_init: T.nn.init, torch.nn.init's initialisers (torch/nn/init.py's formulas), each
-- filling its tensor in place under no_grad; options positional or a trailing table ({a =, mode =,
-- ...}); the draws are crescent's generator's (T.manual_seed), not torch's values.
local core = require "crescent.core"
local fail, is_tensor = core.fail, core.is_tensor

local init = {}
local T

local function check(op, t)
  if not is_tensor(t) then fail(string.format("%s: argument 1 (tensor) expected a tensor, got %s", op, type(t))) end
end
local function number(op, what, v)
  if type(v) ~= "number" then fail(string.format("%s: %s expected a number, got %s", op, what, type(v))) end
  return v
end
local function no_grad(fn) return T.no_grad(fn) end

-- calculate_gain(nonlinearity[, param]): the recommended gain of each activation (torch's table)
local LINEAR = { linear = true, conv1d = true, conv2d = true, conv3d = true, conv_transpose1d = true,
  conv_transpose2d = true, conv_transpose3d = true, sigmoid = true }
function init.calculate_gain(nonlinearity, param)
  if LINEAR[nonlinearity] then return 1 end
  if nonlinearity == "tanh" then return 5 / 3 end
  if nonlinearity == "relu" then return math.sqrt(2) end
  if nonlinearity == "leaky_relu" then
    local slope = param == nil and 0.01 or param
    if type(slope) ~= "number" then fail("calculate_gain: negative_slope " .. tostring(param) .. " not a valid number") end
    return math.sqrt(2 / (1 + slope * slope))
  end
  if nonlinearity == "selu" then return 3 / 4 end
  fail("calculate_gain: unsupported nonlinearity " .. tostring(nonlinearity))
end

-- fan_in, fan_out of a weight {out, in, kernel...} (torch's _calculate_fan_in_and_fan_out)
function init._calculate_fan_in_and_fan_out(t)
  if t:dim() < 2 then fail("init: fan in and fan out can not be computed for tensor with fewer than 2 dimensions") end
  local field = 1
  for d = 3, t:dim() do field = field * t:size(d) end
  return t:size(2) * field, t:size(1) * field
end
local function fan(op, t, mode)
  if mode ~= "fan_in" and mode ~= "fan_out" then fail(string.format("%s: mode %s not supported, please use one of fan_in, fan_out", op, tostring(mode))) end
  local fi, fo = init._calculate_fan_in_and_fan_out(t)
  return mode == "fan_in" and fi or fo
end

function init.uniform_(t, a, b)
  check("uniform_", t)
  return no_grad(function() return t:uniform_(a or 0, b or 1) end)
end
function init.normal_(t, mean, std)
  check("normal_", t)
  return no_grad(function() return t:normal_(mean or 0, std or 1) end)
end
-- trunc_normal_(t[, mean = 0[, std = 1[, a = -2[, b = 2]]]]): the normal restricted to [a, b] by
-- its inverse CDF, as torch's
function init.trunc_normal_(t, mean, std, a, b)
  check("trunc_normal_", t)
  mean, std, a, b = mean or 0, std or 1, a or -2, b or 2
  local function cdf(x) return (1 + T.erf(T.tensor(x / math.sqrt(2), { dtype = "float64" })):item()) / 2 end
  local l, u = cdf((a - mean) / std), cdf((b - mean) / std)
  return no_grad(function()
    t:uniform_(2 * l - 1, 2 * u - 1)
    t:copy_(t:erfinv() * (std * math.sqrt(2)) + mean)
    return t:clamp_(a, b)
  end)
end
function init.constant_(t, val)
  check("constant_", t)
  return no_grad(function() return t:fill_(val) end)
end
function init.ones_(t) check("ones_", t); return init.constant_(t, 1) end
function init.zeros_(t) check("zeros_", t); return init.constant_(t, 0) end
-- eye_(t): the identity of a 2-D tensor (ones on the diagonal of a rectangle too)
function init.eye_(t)
  check("eye_", t)
  if t:dim() ~= 2 then fail("eye_: only tensors with 2 dimensions are supported, got " .. t:dim()) end
  return no_grad(function() return t:copy_(T.eye(t:size(1), t:size(2), { dtype = t.dtype, device = t.device })) end)
end
-- dirac_(t[, groups = 1]): a convolution weight {out, in, k...} that keeps its input's channels
function init.dirac_(t, groups)
  check("dirac_", t)
  groups = groups or 1
  if t:dim() < 3 or t:dim() > 5 then fail("dirac_: only tensors with 3, 4, or 5 dimensions are supported, got " .. t:dim()) end
  if t:size(1) % groups ~= 0 then fail("dirac_: dim 1 is not divisible by groups") end
  local per = t:size(1) / groups
  local n = math.min(per, t:size(2))
  return no_grad(function()
    t:zero_()
    for g = 0, groups - 1 do
      for d = 1, n do
        local idx = { g * per + d, d }
        for k = 3, t:dim() do idx[k] = math.floor(t:size(k) / 2) + 1 end
        local v = t
        for k = 1, #idx - 1 do v = v:select(1, idx[k]) end
        v[idx[#idx]] = 1
      end
    end
    return t
  end)
end

function init.xavier_uniform_(t, gain)
  check("xavier_uniform_", t)
  local fi, fo = init._calculate_fan_in_and_fan_out(t)
  local a = math.sqrt(3) * (gain or 1) * math.sqrt(2 / (fi + fo))
  return no_grad(function() return t:uniform_(-a, a) end)
end
function init.xavier_normal_(t, gain)
  check("xavier_normal_", t)
  local fi, fo = init._calculate_fan_in_and_fan_out(t)
  return no_grad(function() return t:normal_(0, (gain or 1) * math.sqrt(2 / (fi + fo))) end)
end
local function kaiming(op, t, a, mode, nonlinearity)
  check(op, t)
  if t:numel() == 0 then return nil end  -- (torch warns and leaves it)
  local std = init.calculate_gain(nonlinearity or "leaky_relu", number(op, "a", a or 0)) / math.sqrt(fan(op, t, mode or "fan_in"))
  return std
end
function init.kaiming_uniform_(t, a, mode, nonlinearity)
  local std = kaiming("kaiming_uniform_", t, a, mode, nonlinearity)
  if not std then return t end
  return no_grad(function() return t:uniform_(-math.sqrt(3) * std, math.sqrt(3) * std) end)
end
function init.kaiming_normal_(t, a, mode, nonlinearity)
  local std = kaiming("kaiming_normal_", t, a, mode, nonlinearity)
  if not std then return t end
  return no_grad(function() return t:normal_(0, std) end)
end

-- orthogonal_(t[, gain = 1]): a (semi-)orthogonal matrix of t flattened to {rows, cols}, from the
-- Gram-Schmidt factor (twice per column, in float64) of a normal matrix, as torch's QR with
-- R's diagonal made positive
function init.orthogonal_(t, gain)
  check("orthogonal_", t)
  if t:dim() < 2 then fail("orthogonal_: only tensors with 2 or more dimensions are supported") end
  if t:numel() == 0 then return t end
  local rows = t:size(1)
  local cols = t:numel() / rows
  local m = T.randn(rows, cols, { dtype = "float64" })
  if rows < cols then m = m:t():contiguous() end
  local n = m:size(2)
  local q = T.zeros(m:size(1), n, { dtype = "float64" })
  for j = 1, n do
    local v = m:select(2, j)
    if j > 1 then
      local prev = q:narrow(2, 1, j - 1)
      for _ = 1, 2 do v = v - T.mv(prev, T.mv(prev:t(), v)) end
    end
    q:select(2, j):copy_(v / v:norm())
  end
  if rows < cols then q = q:t() end
  return no_grad(function() return t:copy_((q * (gain or 1)):reshape(t.shape)) end)
end

-- torch's keyword arguments as a trailing table, as T.F's functions take them
local keywords = require("crescent.functional")._keywords
for name, names in pairs({ uniform_ = { "tensor", "a", "b" }, normal_ = { "tensor", "mean", "std" },
  trunc_normal_ = { "tensor", "mean", "std", "a", "b" }, xavier_uniform_ = { "tensor", "gain" },
  xavier_normal_ = { "tensor", "gain" }, kaiming_uniform_ = { "tensor", "a", "mode", "nonlinearity" },
  kaiming_normal_ = { "tensor", "a", "mode", "nonlinearity" }, orthogonal_ = { "tensor", "gain" } }) do
  init[name] = keywords(name, names, init[name])
end

function init.bind(t) T = t end

return init
