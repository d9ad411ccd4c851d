-- crescent.lr_scheduler: T.optim.lr_scheduler (API.md section 9): StepLR, CosineAnnealingLR,
-- LambdaLR and LinearLR (linear warm-up), with torch 1.13's recurrences
-- (torch/optim/lr_scheduler.py): constructing a scheduler takes its first step (epoch 0), each
-- :step() advances one epoch and writes every group's lr.
local core = require "crescent.core"
local fail, is_tensor = core.fail, core.is_tensor

local M = {}

function M.bind() end

local Scheduler = {}
Scheduler.__index = Scheduler

local function class(name, fields)
  local cls = setmetatable({ __name = name, fields = fields }, { __index = Scheduler })
  cls.__index = cls
  getmetatable(cls).__call = function(c, ...) return c:new(...) end
  return cls
end

local function options(name, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" or is_tensor(opts) then fail(name .. ": options expected a table, got " .. type(opts)) end
  for k in pairs(opts) do
    if not allowed[k] then fail(string.format("%s: unknown option '%s'", name, tostring(k))) end
  end
  return opts
end

-- The base: remembers each group's initial_lr (PyTorch's key), then takes the first step.
function Scheduler:_start(opt, last_epoch)
  local name = self.__name
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" or type(opt.step) ~= "function" then
    fail(name .. ": argument 1 (optimizer) expected an optimizer, got " .. type(opt))
  end
  last_epoch = last_epoch or -1
  if type(last_epoch) ~= "number" or last_epoch ~= math.floor(last_epoch) then fail(name .. ": option last_epoch expected an integer") end
  for i, g in ipairs(opt.param_groups) do
    if last_epoch == -1 then
      if g.initial_lr == nil then g.initial_lr = g.lr end
    elseif g.initial_lr == nil then
      fail(string.format("%s: param 'initial_lr' is not specified in param_groups[%d] when resuming an optimizer", name, i - 1))
    end
  end
  self.optimizer = opt
  self.base_lrs = {}
  for i, g in ipairs(opt.param_groups) do self.base_lrs[i] = g.initial_lr end
  self.last_epoch = last_epoch
  self._step_count = 0
  self:step()
  return self
end

-- step([epoch]): the next epoch, or (deprecated in torch, still honoured) epoch itself, whose
-- rates come from the scheduler's closed form. Groups added to the optimizer after the scheduler
-- was made keep their lr (torch zips the groups with base_lrs).
function Scheduler:step(epoch)
  self._step_count = self._step_count + 1
  local values
  if epoch == nil then
    self.last_epoch = self.last_epoch + 1
    values = self:get_lr()
  else
    if type(epoch) ~= "number" or epoch ~= math.floor(epoch) then
      fail(string.format("%s:step: argument 1 (epoch) expected an integer or nil, got %s", self.__name, tostring(epoch)))
    end
    self.last_epoch = epoch
    values = (self.closed_form or self.get_lr)(self)
  end
  self._last_lr = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    if values[i] ~= nil then g.lr = values[i] end
    self._last_lr[i] = g.lr
  end
end

function Scheduler:get_last_lr() return { unpack(self._last_lr) } end

local function lrs(self, f)
  local r, groups = {}, self.optimizer.param_groups
  for i = 1, math.min(#groups, #self.base_lrs) do r[i] = f(groups[i].lr, self.base_lrs[i], i) end
  return r
end

-- state_dict(): the scheduler's numbers (not the optimizer, nor LambdaLR's functions)
local COMMON = { "last_epoch", "_step_count", "base_lrs", "_last_lr" }
function Scheduler:state_dict()
  local sd = {}
  for _, list in ipairs({ COMMON, self.fields }) do
    for _, k in ipairs(list) do
      local v = self[k]
      sd[k] = type(v) == "table" and { unpack(v) } or v
    end
  end
  return sd
end

function Scheduler:load_state_dict(sd)
  if type(sd) ~= "table" then fail(self.__name .. ":load_state_dict: expected a table, got " .. type(sd)) end
  for _, list in ipairs({ COMMON, self.fields }) do
    for _, k in ipairs(list) do
      if sd[k] == nil then fail(string.format("%s:load_state_dict: the state dict has no '%s' (not from a %s?)", self.__name, k, self.__name)) end
    end
  end
  for _, list in ipairs({ COMMON, self.fields }) do
    for _, k in ipairs(list) do
      local v = sd[k]
      self[k] = type(v) == "table" and { unpack(v) } or v
    end
  end
end

local function positive_int(name, what, v)
  if type(v) ~= "number" or v ~= math.floor(v) or v < 1 then
    fail(string.format("%s: %s expected a positive integer, got %s", name, what, tostring(v)))
  end
end

-- StepLR(opt, step_size[, {gamma = 0.1, last_epoch = -1}]): lr *= gamma every step_size epochs
local StepLR = class("StepLR", { "step_size", "gamma" })
function StepLR:new(opt, step_size, opts)
  if type(opts) == "number" then opts = { gamma = opts } end
  opts = options("StepLR", opts, { gamma = true, last_epoch = true })
  positive_int("StepLR", "argument 2 (step_size)", step_size)
  local s = setmetatable({ step_size = step_size, gamma = opts.gamma or 0.1 }, self)
  return s:_start(opt, opts.last_epoch)
end
function StepLR:get_lr()
  local e = self.last_epoch
  if e == 0 or e % self.step_size ~= 0 then return lrs(self, function(lr) return lr end) end
  return lrs(self, function(lr) return lr * self.gamma end)
end
function StepLR:closed_form()
  return lrs(self, function(_, base) return base * self.gamma ^ math.floor(self.last_epoch / self.step_size) end)
end
M.StepLR = StepLR

-- CosineAnnealingLR(opt, T_max[, {eta_min = 0, last_epoch = -1}])
local Cosine = class("CosineAnnealingLR", { "T_max", "eta_min" })
function Cosine:new(opt, T_max, opts)
  if type(opts) == "number" then opts = { eta_min = opts } end
  opts = options("CosineAnnealingLR", opts, { eta_min = true, last_epoch = true })
  positive_int("CosineAnnealingLR", "argument 2 (T_max)", T_max)
  local s = setmetatable({ T_max = T_max, eta_min = opts.eta_min or 0 }, self)
  return s:_start(opt, opts.last_epoch)
end
function Cosine:get_lr()
  local e, tm, lo, pi, cos = self.last_epoch, self.T_max, self.eta_min, math.pi, math.cos
  if e == 0 then return lrs(self, function(lr) return lr end) end
  if self._step_count == 1 and e > 0 then
    return lrs(self, function(_, base) return lo + (base - lo) * (1 + cos(e * pi / tm)) / 2 end)
  end
  if (e - 1 - tm) % (2 * tm) == 0 then
    return lrs(self, function(lr, base) return lr + (base - lo) * (1 - cos(pi / tm)) / 2 end)
  end
  return lrs(self, function(lr) return (1 + cos(pi * e / tm)) / (1 + cos(pi * (e - 1) / tm)) * (lr - lo) + lo end)
end
function Cosine:closed_form()
  local lo = self.eta_min
  return lrs(self, function(_, base) return lo + (base - lo) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2 end)
end
M.CosineAnnealingLR = Cosine

-- LambdaLR(opt, fn | {fn per group}[, {last_epoch = -1}]): lr = initial_lr * fn(epoch)
local LambdaLR = class("LambdaLR", {})
function LambdaLR:new(opt, fns, opts)
  opts = options("LambdaLR", opts, { last_epoch = true })
  local n = type(opt) == "table" and type(opt.param_groups) == "table" and #opt.param_groups or 0
  local list = {}
  if type(fns) == "function" then
    for i = 1, n do list[i] = fns end
  elseif type(fns) == "table" then
    if #fns ~= n then fail(string.format("LambdaLR: Expected %d lr_lambdas, but got %d", n, #fns)) end
    for i, f in ipairs(fns) do
      if type(f) ~= "function" then fail(string.format("LambdaLR: lr_lambda %d expected a function, got %s", i, type(f))) end
      list[i] = f
    end
  else
    fail("LambdaLR: argument 2 (lr_lambda) expected a function or a list of functions, got " .. type(fns))
  end
  local s = setmetatable({ lr_lambdas = list }, self)
  return s:_start(opt, opts.last_epoch)
end
function LambdaLR:get_lr()
  return lrs(self, function(_, base, i) return base * self.lr_lambdas[i](self.last_epoch) end)
end
M.LambdaLR = LambdaLR

-- LinearLR(opt[, {start_factor = 1/3, end_factor = 1, total_iters = 5, last_epoch = -1}]): the
-- factor of lr goes linearly from start_factor to end_factor over total_iters epochs (warm-up).
local LinearLR = class("LinearLR", { "start_factor", "end_factor", "total_iters" })
function LinearLR:new(opt, opts)
  opts = options("LinearLR", opts, { start_factor = true, end_factor = true, total_iters = true, last_epoch = true })
  local sf, ef = opts.start_factor or 1 / 3, opts.end_factor or 1
  if type(sf) ~= "number" or sf > 1 or sf <= 0 then
    fail("LinearLR: Starting multiplicative factor expected to be greater than 0 and less or equal to 1, got " .. tostring(sf))
  end
  if type(ef) ~= "number" or ef > 1 or ef < 0 then fail("LinearLR: Ending multiplicative factor expected to be between 0 and 1.") end
  local total = opts.total_iters or 5
  positive_int("LinearLR", "option total_iters", total)
  local s = setmetatable({ start_factor = sf, end_factor = ef, total_iters = total }, self)
  return s:_start(opt, opts.last_epoch)
end
function LinearLR:get_lr()
  local e, sf, ef, n = self.last_epoch, self.start_factor, self.end_factor, self.total_iters
  if e == 0 then return lrs(self, function(lr) return lr * sf end) end
  if e > n then return lrs(self, function(lr) return lr end) end
  return lrs(self, function(lr) return lr * (1 + (ef - sf) / (n * sf + (e - 1) * (ef - sf))) end)
end
function LinearLR:closed_form()
  local sf, ef, n = self.start_factor, self.end_factor, self.total_iters
  return lrs(self, function(_, base) return base * (sf + (ef - sf) * math.min(n, self.last_epoch) / n) end)
end
M.LinearLR = LinearLR

return M
