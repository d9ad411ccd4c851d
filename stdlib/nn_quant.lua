-- crescent.nn_quant: int8 weight-only quantisation for inference (gpt-fast's WeightOnlyInt8Linear).
-- nn.Int8Linear holds a Linear's weight as int8 values with one float32 scale per output channel
-- (symmetric: scale = max|row| / 127, values rounded to nearest, ties to even) and computes
-- x @ (q * scale)^T + bias with one registry op, `_int8_weight_mm`, which dequantises inside the
-- matmul kernel (vm/ops/quant.cpp). There is no int8 dtype: `weight` packs the values four to an
-- int32 ({out, ceil(in / 16) * 4}: row i's byte j in memory order is column j, rows padded with
-- zeros). Every tensor is a buffer: nothing to train, and a gradient through it raises.
local core = require "crescent.core"
local fail, is_tensor = core.fail, core.is_tensor
local describe = require("crescent.binding").describe

local Q = {}
local T
function Q.bind(t) T = t end

local FLOATING = { float32 = true, float64 = true, float16 = true, bfloat16 = true }

-- Whether module m is an instance of class cls or of a subclass of it.
local function is_a(m, cls)
  local c = getmetatable(m).__class
  while c do
    if c == cls then return true end
    c = c.super
  end
  return false
end

function Q.install(nn)
  -- Int8Linear(weight {out, in}[, bias {out}]): the quantised form of a Linear with that weight
  local Int8Linear = nn.Module:extend("Int8Linear")
  function Int8Linear:init(weight, bias)
    if not is_tensor(weight) or weight:dim() ~= 2 or not FLOATING[weight.dtype] then
      fail("Int8Linear: argument 1 (weight) expected a 2-D floating tensor {out_features, in_features}, got "
        .. describe(weight))
    end
    if bias ~= nil and not is_tensor(bias) then fail("Int8Linear: argument 2 (bias) expected a tensor or nil, got " .. describe(bias)) end
    self.out_features, self.in_features = weight:size(1), weight:size(2)
    T.no_grad(function()
      local q, s = T._int8_quantize(weight:detach())
      self:register_buffer("weight", q)
      self:register_buffer("scales", s)
      if bias ~= nil then self:register_buffer("bias", bias:detach():clone()) end
    end)
  end
  function Int8Linear:forward(x) return T._int8_weight_mm(x, self.weight, self.scales, self.bias) end
  function Int8Linear:extra_repr()
    return string.format("in_features=%d, out_features=%d, bias=%s, int8", self.in_features, self.out_features,
      tostring(self.bias ~= nil))
  end
  nn.Int8Linear = Int8Linear

  -- quantize_int8(module) -> module: every nn.Linear in it (the module itself included) replaced
  -- by an Int8Linear of its weights, in place; a module with a method quantize_int8() is replaced
  -- by what that returns (GPT-2's Conv1D, examples/models/gpt2.lua). Returns the module (the
  -- replacement when it was a Linear itself).
  local function convert(m)
    if is_a(m, nn.Linear) then return Int8Linear(m.weight, m.bias) end
    if type(m.quantize_int8) == "function" then return m:quantize_int8() end
    for _, k in ipairs(rawget(m, "_order")) do
      local v = rawget(m, k)
      if nn.is_module(v) then rawset(m, k, convert(v)) end
    end
    return m
  end
  function nn.quantize_int8(m)
    if not nn.is_module(m) then fail("quantize_int8: argument 1 (module) expected an nn.Module, got " .. describe(m)) end
    return convert(m)
  end
end

return Q
