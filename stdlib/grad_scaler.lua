-- crescent.grad_scaler: T.amp.GradScaler, PyTorch's torch.amp.GradScaler (API.md section 9).
-- The scale is a float32 value as PyTorch's (each update rounds once to float32); scale(loss)
-- multiplies by it as a 1-element float32 tensor on the loss's device. unscale_ checks and
-- unscales each gradient with three ops (sub, sum, mul_): g - g is NaN exactly where g is not
-- finite, so its sum is NaN iff the gradient has an inf or a NaN, with no overflow from finite
-- values; the per-device sums add into one value read once by step().
local core = require "crescent.core"
local ffi = core.ffi
local fail, is_tensor = core.fail, core.is_tensor

local M = {}
local T  -- crescent, bound by M.bind

function M.bind(t) T = t end

local f32 = ffi.new("float[1]")
local function to_f32(x)
  f32[0] = x
  return tonumber(f32[0])
end

local READY, UNSCALED, STEPPED = 0, 1, 2
local OPTS = { init_scale = true, growth_factor = true, backoff_factor = true, growth_interval = true, enabled = true }

local Scaler = {}
Scaler.__index = Scaler

local function check_number(name, v, ok, expect)
  if type(v) ~= "number" or not ok(v) then
    fail("GradScaler: " .. name .. " expected " .. expect .. ", got " .. tostring(v))
  end
end

-- T.amp.GradScaler([device = "cuda"][, {init_scale = 2^16, growth_factor = 2, backoff_factor = 0.5,
-- growth_interval = 2000, enabled = true}])
function M.GradScaler(device, opts)
  if type(device) == "table" then device, opts = nil, device end
  opts = opts or {}
  for k in pairs(opts) do
    if not OPTS[k] then
      fail("GradScaler: unknown option '" .. tostring(k) ..
        "' (expected one of: backoff_factor, enabled, growth_factor, growth_interval, init_scale)")
    end
  end
  local s = setmetatable({
    device = device or "cuda",
    _enabled = opts.enabled ~= false,
    _init_scale = opts.init_scale or 2.0 ^ 16,
    _growth_factor = opts.growth_factor or 2.0,
    _backoff_factor = opts.backoff_factor or 0.5,
    _growth_interval = opts.growth_interval or 2000,
    _init_growth_tracker = 0,
    _scale = nil,           -- the float32 scale, set by the first scale()
    _scale_tensors = {},    -- device -> the scale as a 1-element float32 tensor
    _growth_tracker = nil,
    _per_optimizer = setmetatable({}, { __mode = "k" }),
  }, Scaler)
  check_number("init_scale", s._init_scale, function(v) return v > 0 end, "a positive number")
  check_number("growth_factor", s._growth_factor, function(v) return v > 1 end, "a number > 1.0")
  check_number("backoff_factor", s._backoff_factor, function(v) return v < 1 end, "a number < 1.0")
  check_number("growth_interval", s._growth_interval, function(v) return v >= 1 and v % 1 == 0 end, "a positive integer")
  return s
end

local function lazy_init(self)
  if self._scale == nil then
    self._scale = to_f32(self._init_scale)
    self._growth_tracker = self._init_growth_tracker
  end
end

local function scale_tensor(self, device)
  local t = self._scale_tensors[device]
  if t == nil then
    t = T.full({ 1 }, self._scale, { dtype = "float32", device = device })
    self._scale_tensors[device] = t
  end
  return t
end

local function set_scale(self, v)
  self._scale = v
  self._scale_tensors = {}
end

local function check_started(self, op)
  if self._scale == nil then
    fail("GradScaler:" .. op .. ": attempted " .. op .. " but the scale is not set. This may indicate your script " ..
      "did not use scaler:scale(loss or outputs) earlier in the iteration.")
  end
end

-- scaler:scale(outputs): a tensor, or a (nested) list of tensors, multiplied by the scale.
function Scaler:scale(outputs)
  if not self._enabled then return outputs end
  lazy_init(self)
  if is_tensor(outputs) then return outputs * scale_tensor(self, outputs.device) end
  if type(outputs) ~= "table" then fail("GradScaler:scale: outputs must be a tensor or a list of tensors, got " .. type(outputs)) end
  local r = {}
  for i, v in ipairs(outputs) do r[i] = self:scale(v) end
  return r
end

local function opt_state(self, opt)
  local st = self._per_optimizer[opt]
  if st == nil then
    st = { stage = READY, found = nil }
    self._per_optimizer[opt] = st
  end
  return st
end

local function each_grad(opt, f)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    fail("GradScaler: expected an optimizer (a table with param_groups), got " .. type(opt))
  end
  for _, group in ipairs(opt.param_groups) do
    for _, p in ipairs(group.params) do
      local g = p.grad
      if g ~= nil then f(g) end
    end
  end
end

-- Multiplies every gradient by inv_scale; returns device -> a float32 value that is NaN iff some
-- gradient on that device had an inf or a NaN (checked before unscaling, as PyTorch's kernel).
local function unscale_grads(opt, inv_scale)
  local found = {}
  T.no_grad(function()
    each_grad(opt, function(g)
      if g.dtype == "float16" then fail("GradScaler:unscale_: attempting to unscale FP16 gradients.") end
      local bad = (g - g):sum():float()
      local d = g.device
      found[d] = found[d] and found[d] + bad or bad
      g:mul_(inv_scale)
    end)
  end)
  return found
end

-- scaler:unscale_(opt): divides opt's gradients by the scale (at most once per step).
function Scaler:unscale_(opt)
  if not self._enabled then return end
  check_started(self, "unscale_")
  local st = opt_state(self, opt)
  if st.stage == UNSCALED then
    fail("GradScaler:unscale_: unscale_() has already been called on this optimizer since the last update().")
  elseif st.stage == STEPPED then
    fail("GradScaler:unscale_: unscale_() is being called after step().")
  end
  st.found = unscale_grads(opt, to_f32(1.0 / self._scale))
  st.stage = UNSCALED
end

local function found_inf(found)
  for _, v in pairs(found) do
    local x = v:item()
    if x ~= x then return true end
  end
  return false
end

-- scaler:step(opt, ...): unscales (unless unscale_ ran), then opt:step(...) unless a gradient
-- has an inf or a NaN; returns what opt:step returned.
function Scaler:step(opt, ...)
  if not self._enabled then return opt:step(...) end
  if type((...)) == "function" then fail("GradScaler:step: closure use is not currently supported if GradScaler is enabled.") end
  check_started(self, "step")
  local st = opt_state(self, opt)
  if st.stage == STEPPED then fail("GradScaler:step: step() has already been called since the last update().") end
  if st.stage == READY then self:unscale_(opt) end
  if next(st.found) == nil then fail("GradScaler:step: no inf checks were recorded for this optimizer.") end
  st.skipped = found_inf(st.found)
  st.stage = STEPPED
  if not st.skipped then return opt:step(...) end
end

-- PyTorch's _amp_update_scale_: back off on an inf / NaN, grow after growth_interval clean steps.
local function next_scale(self, inf)
  if inf then
    self._growth_tracker = 0
    return to_f32(self._scale * self._backoff_factor)
  end
  local successful = self._growth_tracker + 1
  if successful < self._growth_interval then
    self._growth_tracker = successful
    return self._scale
  end
  self._growth_tracker = 0
  local grown = to_f32(self._scale * self._growth_factor)
  if grown ~= grown or grown == math.huge then return self._scale end
  return grown
end

-- scaler:update([new_scale]): the scale for the next iteration.
function Scaler:update(new_scale)
  if not self._enabled then return end
  check_started(self, "update")
  if new_scale ~= nil then
    if is_tensor(new_scale) then
      if new_scale:numel() ~= 1 or new_scale.dtype ~= "float32" or new_scale.requires_grad then
        fail("GradScaler:update: new_scale should be a number or a 1-element float32 tensor with requires_grad = false")
      end
      new_scale = new_scale:item()
    elseif type(new_scale) ~= "number" then
      fail("GradScaler:update: new_scale expected a number or a tensor, got " .. type(new_scale))
    end
    set_scale(self, to_f32(new_scale))
  else
    local any, inf = false, false
    for _, st in pairs(self._per_optimizer) do
      if st.found and next(st.found) ~= nil then
        any = true
        if st.skipped == nil then st.skipped = found_inf(st.found) end
        inf = inf or st.skipped
      end
    end
    if not any then fail("GradScaler:update: no inf checks were recorded prior to update.") end
    set_scale(self, next_scale(self, inf))
  end
  self._per_optimizer = setmetatable({}, { __mode = "k" })
end

function Scaler:get_scale()
  if not self._enabled then return 1.0 end
  return self._scale or self._init_scale
end
function Scaler:get_growth_factor() return self._growth_factor end
function Scaler:set_growth_factor(v) self._growth_factor = v end
function Scaler:get_backoff_factor() return self._backoff_factor end
function Scaler:set_backoff_factor(v) self._backoff_factor = v end
function Scaler:get_growth_interval() return self._growth_interval end
function Scaler:set_growth_interval(v) self._growth_interval = v end
function Scaler:is_enabled() return self._enabled end
function Scaler:_get_growth_tracker()
  if not self._enabled then return 0 end
  return self._growth_tracker or self._init_growth_tracker
end

function Scaler:state_dict()
  if not self._enabled then return {} end
  return { scale = self:get_scale(), growth_factor = self._growth_factor, backoff_factor = self._backoff_factor,
           growth_interval = self._growth_interval, _growth_tracker = self:_get_growth_tracker() }
end

function Scaler:load_state_dict(sd)
  if not self._enabled then return end
  if type(sd) ~= "table" or next(sd) == nil then
    fail("GradScaler:load_state_dict: the source state dict is empty, possibly because it was saved from a disabled " ..
      "instance of GradScaler.")
  end
  for _, k in ipairs({ "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker" }) do
    if type(sd[k]) ~= "number" then fail("GradScaler:load_state_dict: entry " .. k .. " expected a number, got " .. type(sd[k])) end
  end
  self._init_scale, self._growth_factor, self._backoff_factor = sd.scale, sd.growth_factor, sd.backoff_factor
  self._growth_interval, self._init_growth_tracker = sd.growth_interval, sd._growth_tracker
  if self._scale ~= nil then
    set_scale(self, to_f32(sd.scale))
    self._growth_tracker = sd._growth_tracker
  end
end

return M
