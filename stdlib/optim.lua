-- crescent.optim: T.optim (API.md section 9). Optimizers hold param groups and per-parameter state
-- as torch.optim does; a step updates each group's parameters of one device with ONE fused
-- registry op (_fused_sgd / _fused_adam, vm/ops/optim.cpp: one threaded loop over all their
-- elements on the CPU, a launch per 48 parameters on CUDA); {fused = false} takes the per-tensor
-- path (PyTorch's single-tensor formulas as registry ops).
local core = require "crescent.core"
local fail, is_tensor = core.fail, core.is_tensor

local M = {}
local T  -- crescent, bound by M.bind

local FLOATING = { float32 = true, float64 = true, float16 = true, bfloat16 = true }

local sorted_keys = core.sorted_keys

local function shape_str(t) return "{" .. table.concat(t.shape, ",") .. "}" end

-- Optimizer (the base class) ----------------------------------------------------------------------
local Optimizer = {}
Optimizer.__index = Optimizer
M.Optimizer = Optimizer

-- A class with defaults (option -> default value) and a check of its options.
local function class(name, defaults, check, state_keys)
  local cls = setmetatable({ __name = name, defaults = defaults, check = check, state_keys = state_keys }, { __index = Optimizer })
  cls.__index = cls
  cls.__tostring = function(o) return o:__repr() end
  setmetatable(cls, {
    __index = Optimizer,
    __call = function(c, params, opts) return c:new(params, opts) end,
  })
  return cls
end

-- torch's implementation choices, taken for its code's sake: every path here is one fused op
-- or the per-tensor formulas, both capturable; a differentiable step is not implemented
local CHOICES = { fused = true, foreach = true, capturable = true, differentiable = true }
local function check_options(name, opts, defaults)
  if opts == nil then return {} end
  if type(opts) ~= "table" or is_tensor(opts) then fail(name .. ": argument 2 (opts) expected a table, got " .. type(opts)) end
  for k in pairs(opts) do
    if defaults[k] == nil and k ~= "params" and not CHOICES[k] then
      fail(string.format("%s: unknown option '%s' (expected one of: %s)", name, tostring(k), table.concat(sorted_keys(defaults), ", ")))
    end
  end
  for _, k in ipairs({ "foreach", "capturable", "differentiable" }) do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then fail(string.format("%s: option %s expected a boolean or nil, got %s", name, k, type(opts[k]))) end
  end
  if opts.differentiable then fail(name .. ": differentiable = true (autograd through the update) is not implemented") end
  return opts
end

function Optimizer:new(params, opts)
  local name = self.__name
  opts = check_options(name, opts, self.defaults)
  if is_tensor(params) then
    fail(name .. ": params argument given to the optimizer should be a list of tensors or of groups, got a tensor")
  end
  if type(params) ~= "table" then fail(name .. ": argument 1 (params) expected a list of tensors or of groups, got " .. type(params)) end
  if T.nn.is_module(params) then
    fail(string.format("%s: argument 1 (params) expected a list of tensors or of groups, got a %s module: pass its :parameters()",
      name, params.__name or "nn"))
  end
  if #params == 0 then fail(name .. ": optimizer got an empty parameter list") end
  local d = {}
  for k, v in pairs(self.defaults) do d[k] = v end
  for k, v in pairs(opts) do d[k] = v end
  self.check(name, d)
  local o = setmetatable({ defaults = d, state = {}, param_groups = {} }, self)
  local first = params[1]
  local groups = (type(first) == "table" and not is_tensor(first)) and params or { { params = params } }
  for _, g in ipairs(groups) do o:add_param_group(g) end
  return o
end

function Optimizer:add_param_group(group)
  local name = self.__name
  if type(group) ~= "table" or is_tensor(group) then fail(name .. ": a param group expected a table {params = ...}, got " .. type(group)) end
  -- (other keys are the user's, kept in the group as torch keeps them: names, initial_lr)
  check_options(name, group, setmetatable({}, { __index = function() return true end }))
  local list = group.params
  if is_tensor(list) then list = { list } end
  if type(list) ~= "table" then fail(name .. ": a param group expected params = a list of tensors, got " .. type(list)) end
  local g, seen = {}, {}
  for k, v in pairs(group) do g[k] = v end
  g.params = {}
  for i, p in ipairs(list) do
    if not is_tensor(p) then fail(string.format("%s: optimizer can only optimize tensors, but param %d is a %s", name, i, type(p))) end
    if not FLOATING[p.dtype] then fail(string.format("%s: optimizer can only optimize floating tensors, but param %d is %s", name, i, p.dtype)) end
    if not (p.is_leaf or p.retains_grad) then fail(string.format("%s: can't optimize a non-leaf Tensor (param %d)", name, i)) end
    if seen[p] then fail(string.format("%s: optimizer contains a parameter group with duplicate parameters (param %d)", name, i)) end
    seen[p] = true
    g.params[i] = p
  end
  for _, other in ipairs(self.param_groups) do
    for _, p in ipairs(other.params) do
      if seen[p] then fail(name .. ": some parameters appear in more than one parameter group") end
    end
  end
  for k, v in pairs(self.defaults) do
    if g[k] == nil then g[k] = type(v) == "table" and { unpack(v) } or v end
  end
  self.check(name, g)
  if g.fused == false then g.per_tensor = true end
  self.param_groups[#self.param_groups + 1] = g
end

-- zero_grad([set_to_none = true])
function Optimizer:zero_grad(set_to_none)
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      local grad = p.grad
      if grad ~= nil then
        if set_to_none == false then T.no_grad(function() grad:detach():zero_() end) else p.grad = nil end
      end
    end
  end
end

-- step([closure]): closure re-evaluates the loss (with grad) and returns it; step returns it.
function Optimizer:step(closure)
  local loss
  if closure ~= nil then
    if type(closure) ~= "function" then fail(self.__name .. ":step: argument 1 (closure) expected a function, got " .. type(closure)) end
    loss = T.enable_grad(closure)
  end
  T.no_grad(function()
    for _, g in ipairs(self.param_groups) do self:_update_group(g) end
  end)
  return loss
end

-- Whether p's state tensors still have its dtype and device, as the fused op wants: after
-- model:double() they are the old ones, which torch's per-tensor formulas take (writing in place)
function Optimizer:_state_fits(st, p)
  for _, k in ipairs(self.state_keys(st)) do
    local v = st[k]
    if is_tensor(v) and (v.dtype ~= p.dtype or v.device ~= p.device) then return false end
  end
  return true
end

-- A group's parameters that have a gradient, split by how they are updated: a list per device for
-- the fused op (vm/ops/optim.cpp; a kernel launch per 48 parameters on CUDA), or the per-tensor path
-- ({fused = false}). Inside a compiled function the fused op is one node of the graph.
function Optimizer:_buckets(g)
  local fused, each, by_device = {}, {}, {}
  for _, p in ipairs(g.params) do
    local grad = p.grad
    if grad ~= nil then
      local st = self.state[p]
      if st == nil then st = {}; self.state[p] = st end
      local item = { p = p, grad = grad, st = st }
      if g.per_tensor or not self:_state_fits(st, p) then
        each[#each + 1] = item
      else
        local list = by_device[p.device]
        if list == nil then list = {}; by_device[p.device] = list; fused[#fused + 1] = list end
        list[#list + 1] = item
      end
    end
  end
  return fused, each
end

function Optimizer:__repr()
  local lines = { self.__name .. " (" }
  for i, g in ipairs(self.param_groups) do
    lines[#lines + 1] = "Parameter Group " .. (i - 1)
    for _, k in ipairs(sorted_keys(g)) do
      if k ~= "params" and k ~= "per_tensor" then
        local v = g[k]
        if type(v) == "table" then v = "(" .. table.concat(v, ", ") .. ")" end
        lines[#lines + 1] = "    " .. k .. ": " .. tostring(v)
      end
    end
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

-- state_dict / load_state_dict -----------------------------------------------------------------

-- PyTorch's structure: {state = {[index] = {name = tensor | number}}, param_groups = {{params =
-- {index, ...}, lr = ..., ...}}} with parameters numbered from 0 in group order. Tensors are the
-- optimizer's own (as torch's); a step count is a float32 0-d tensor, as torch 1.13 keeps it.
function Optimizer:state_dict()
  local index, n, groups, state = {}, 0, {}, {}
  for gi, g in ipairs(self.param_groups) do
    local packed = { params = {} }
    for k, v in pairs(g) do
      if k ~= "params" and k ~= "per_tensor" and k ~= "fused" then packed[k] = type(v) == "table" and { unpack(v) } or v end
    end
    for i, p in ipairs(g.params) do
      if index[p] == nil then index[p] = n; n = n + 1 end
      packed.params[i] = index[p]
    end
    groups[gi] = packed
  end
  for p, st in pairs(self.state) do
    if index[p] ~= nil then
      local s = {}
      for k, v in pairs(st) do s[k] = (k == "step") and T.tensor(v, { dtype = "float32" }) or v end
      state[index[p]] = s
    end
  end
  return { state = state, param_groups = groups }
end

local function is_flat(sd)
  for k in pairs(sd) do
    if type(k) == "string" and (k:find("^state%.") or k:find("^param_groups%.")) then return true end
  end
  return false
end

-- Checks everything before changing anything: the group count and sizes (PyTorch's errors), that
-- the groups carry this optimizer's options and the state this optimizer keeps, of the
-- parameters' shapes.
function Optimizer:_check_state_dict(sd)
  local name = self.__name
  if type(sd) ~= "table" or type(sd.state) ~= "table" or type(sd.param_groups) ~= "table" then
    fail(name .. ":load_state_dict: expected a state_dict {state =, param_groups =} (or its flat form from T.load), got " ..
         (type(sd) == "table" and "a table without them" or type(sd)))
  end
  local groups, saved = self.param_groups, sd.param_groups
  if #groups ~= #saved then
    fail(string.format("%s:load_state_dict: loaded state dict has a different number of parameter groups (%d, the optimizer has %d)",
      name, #saved, #groups))
  end
  local params = {}
  for gi, g in ipairs(groups) do
    local sg = saved[gi]
    if type(sg) ~= "table" or type(sg.params) ~= "table" or #sg.params ~= #g.params then
      fail(string.format("%s:load_state_dict: loaded state dict contains a parameter group that doesn't match the size of " ..
        "optimizer's group (group %d: %d params, the optimizer's %d)", name, gi, type(sg) == "table" and type(sg.params) == "table" and #sg.params or 0, #g.params))
    end
    for k in pairs(getmetatable(self).defaults) do
      if sg[k] == nil then
        fail(string.format("%s:load_state_dict: the state dict is not from a %s optimizer: param group %d has no option '%s'", name, name, gi, k))
      end
    end
    for i, id in ipairs(sg.params) do params[id] = g.params[i] end
  end
  for id, st in pairs(sd.state) do
    local p = params[id]
    if p == nil then fail(string.format("%s:load_state_dict: state for parameter %s, which no param group holds", name, tostring(id))) end
    for _, k in ipairs(self.state_keys(st, p)) do
      local v = st[k]
      if not is_tensor(v) then
        fail(string.format("%s:load_state_dict: the state dict is not from a %s optimizer: the state of parameter %s has no tensor '%s'",
          name, name, tostring(id), k))
      end
      if k ~= "step" and shape_str(v) ~= shape_str(p) then
        fail(string.format("%s:load_state_dict: the state '%s' of parameter %s has shape %s, the parameter %s", name, k, tostring(id), shape_str(v), shape_str(p)))
      end
    end
  end
  return params
end

-- load_state_dict(sd): sd as state_dict() gives it, or its flat form (T.load of a file written
-- with T.save(path, T.optim.flatten_state_dict(sd))). Copies the state, converted to each
-- parameter's dtype and device, and takes the groups' options.
function Optimizer:load_state_dict(sd)
  if type(sd) == "table" and sd.state == nil and is_flat(sd) then sd = M.unflatten_state_dict(sd) end
  local params = self:_check_state_dict(sd)
  local state = {}
  for id, st in pairs(sd.state) do
    local p, s = params[id], {}
    for k, v in pairs(st) do
      if k == "step" then s[k] = is_tensor(v) and v:item() or v
      elseif is_tensor(v) then s[k] = v:to({ dtype = p.dtype, device = p.device }):clone()
      else s[k] = v end
    end
    state[p] = s
  end
  for gi, g in ipairs(self.param_groups) do
    for k, v in pairs(sd.param_groups[gi]) do
      if k ~= "params" and k ~= "fused" then g[k] = type(v) == "table" and { unpack(v) } or v end
    end
  end
  self.state = state
end

-- flat form: name -> tensor, for T.save (safetensors) -----------------------------------------

-- "state.<i>.<name>" for the state, "param_groups.<g>.<option>" for the groups (g from 0):
-- numbers as float64 0-d tensors, booleans as bool 0-d tensors, lists of numbers as float64 1-d
-- tensors, params as an int64 1-d tensor. prefix (optional) goes before every name.
function M.flatten_state_dict(sd, prefix)
  prefix = prefix or ""
  local flat = {}
  for id, st in pairs(sd.state) do
    for k, v in pairs(st) do
      flat[prefix .. "state." .. id .. "." .. k] = is_tensor(v) and v or T.tensor(v, { dtype = "float64" })
    end
  end
  for gi, g in ipairs(sd.param_groups) do
    local base = prefix .. "param_groups." .. (gi - 1) .. "."
    for k, v in pairs(g) do
      local t
      if k == "params" then t = #v > 0 and T.tensor(v, { dtype = "int64" }) or T.zeros(0, { dtype = "int64" })
      elseif type(v) == "number" or type(v) == "boolean" then t = T.tensor(v, { dtype = type(v) == "boolean" and "bool" or "float64" })
      elseif type(v) == "table" then t = T.tensor(v, { dtype = "float64" })
      else fail(string.format("flatten_state_dict: option '%s' of param group %d is a %s (numbers, booleans and lists of numbers only)", k, gi - 1, type(v))) end
      flat[base .. k] = t
    end
  end
  return flat
end

local function value_of(k, t)
  if k == "params" then
    local r = {}
    for i, v in ipairs(t:totable()) do r[i] = v end
    return r
  end
  if t:dim() == 0 then return t:item() end
  return t:totable()
end

function M.unflatten_state_dict(flat, prefix)
  prefix = prefix or ""
  local sd = { state = {}, param_groups = {} }
  for name, t in pairs(flat) do
    if type(name) == "string" and name:sub(1, #prefix) == prefix then
      local rest = name:sub(#prefix + 1)
      local id, k = rest:match("^state%.(%d+)%.(.+)$")
      if id then
        id = tonumber(id)
        sd.state[id] = sd.state[id] or {}
        sd.state[id][k] = t
      else
        local gi, key = rest:match("^param_groups%.(%d+)%.(.+)$")
        if gi then
          gi = tonumber(gi) + 1
          sd.param_groups[gi] = sd.param_groups[gi] or {}
          sd.param_groups[gi][key] = value_of(key, t)
        end
      end
    end
  end
  for i = 1, #sd.param_groups do
    if sd.param_groups[i] == nil then fail("unflatten_state_dict: param group " .. (i - 1) .. " is missing") end
  end
  return sd
end

function M.bind(t)
  T = t
  require("crescent.optimizers").define(M, class, T)
  M.lr_scheduler = require("crescent.lr_scheduler")
  M.lr_scheduler.bind(T)
end

return M
