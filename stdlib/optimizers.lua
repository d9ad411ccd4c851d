-- crescent.optimizers: SGD, Adam and AdamW (T.optim, API.md section 9) on the base class of
-- crescent.optim. Each group's parameters take one fused op per device; {fused = false} the
-- per-tensor path, which writes torch 1.13's _single_tensor_* functions (torch/optim/sgd.py, adam.py, adamw.py)
-- as registry ops.
local core = require "crescent.core"
local fail = core.fail

local M = {}

local function number(name, g, key, ok, what)
  local v = g[key]
  if type(v) ~= "number" or not ok(v) then fail(string.format("%s: Invalid %s: %s", name, what, tostring(v))) end
end
local function nonneg(v) return v >= 0 end
local function boolean(name, g, key)
  if type(g[key]) ~= "boolean" then fail(string.format("%s: option %s expected a boolean, got %s", name, key, type(g[key]))) end
end
local function fused_option(name, g)
  if g.fused ~= nil and type(g.fused) ~= "boolean" then fail(name .. ": option fused expected a boolean or nil, got " .. type(g.fused)) end
end

-- SGD -----------------------------------------------------------------------------------------
local function check_sgd(name, g)
  number(name, g, "lr", nonneg, "learning rate")
  number(name, g, "momentum", nonneg, "momentum value")
  number(name, g, "dampening", function() return true end, "dampening value")
  number(name, g, "weight_decay", nonneg, "weight_decay value")
  boolean(name, g, "nesterov")
  boolean(name, g, "maximize")
  fused_option(name, g)
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then fail(name .. ": Nesterov momentum requires a momentum and zero dampening") end
end

local function sgd_state_keys(st) return st.momentum_buffer ~= nil and { "momentum_buffer" } or {} end

local function sgd_each(g, items)
  for _, it in ipairs(items) do
    local p, d, st = it.p, it.grad, it.st
    if g.maximize then d = -d end
    if g.weight_decay ~= 0 then d = d:add(p, { alpha = g.weight_decay }) end
    if g.momentum ~= 0 then
      local buf = st.momentum_buffer
      if buf == nil then
        buf = d:clone()
        st.momentum_buffer = buf
      else
        buf:mul_(g.momentum):add_(d, { alpha = 1 - g.dampening })
      end
      d = g.nesterov and d:add(buf, { alpha = g.momentum }) or buf
    end
    p:add_(d, { alpha = -g.lr })
  end
end

local function sgd_fused(T, g, items)
  local ps, gs, bufs, fresh = {}, {}, {}, {}
  for i, it in ipairs(items) do
    ps[i], gs[i], fresh[i] = it.p, it.grad, 0
    if g.momentum ~= 0 then
      if it.st.momentum_buffer == nil then
        it.st.momentum_buffer = T.empty_like(it.p)
        fresh[i] = 1
      end
      bufs[i] = it.st.momentum_buffer
    end
  end
  T._fused_sgd(ps, gs, bufs, fresh, { lr = g.lr, momentum = g.momentum, dampening = g.dampening,
    weight_decay = g.weight_decay, nesterov = g.nesterov, maximize = g.maximize })
end

-- Adam / AdamW ----------------------------------------------------------------------------------
local function check_adam(name, g)
  number(name, g, "lr", nonneg, "learning rate")
  number(name, g, "eps", nonneg, "epsilon value")
  number(name, g, "weight_decay", nonneg, "weight_decay value")
  local b = g.betas
  if type(b) ~= "table" or #b ~= 2 then fail(name .. ": option betas expected a list of two numbers, got " .. type(b)) end
  for i = 1, 2 do
    if type(b[i]) ~= "number" or b[i] < 0 or b[i] >= 1 then
      fail(string.format("%s: Invalid beta parameter at index %d: %s", name, i - 1, tostring(b[i])))
    end
  end
  boolean(name, g, "amsgrad")
  boolean(name, g, "maximize")
  fused_option(name, g)
end

local function adam_state_keys(st)
  local keys = { "step", "exp_avg", "exp_avg_sq" }
  if st.max_exp_avg_sq ~= nil then keys[4] = "max_exp_avg_sq" end
  return keys
end

-- (PyTorch's lazy state: created at a parameter's first step)
local function adam_state(T, g, st, p)
  if st.step == nil then
    st.step = 0
    st.exp_avg = T.zeros_like(p)
    st.exp_avg_sq = T.zeros_like(p)
  end
  if g.amsgrad and st.max_exp_avg_sq == nil then st.max_exp_avg_sq = T.zeros_like(p) end
  st.step = st.step + 1
end

local function adam_each(T, g, items, decoupled)
  local b1, b2, lr, wd = g.betas[1], g.betas[2], g.lr, g.weight_decay
  for _, it in ipairs(items) do
    local p, grad, st = it.p, it.grad, it.st
    adam_state(T, g, st, p)
    if g.maximize then grad = -grad end
    if decoupled then p:mul_(1 - lr * wd)
    elseif wd ~= 0 then grad = grad:add(p, { alpha = wd }) end
    local m, v = st.exp_avg, st.exp_avg_sq
    m:mul_(b1):add_(grad, { alpha = 1 - b1 })
    v:copy_(T.addcmul(v:mul_(b2), grad, grad, 1 - b2))
    local step_size = lr / (1 - b1 ^ st.step)
    local bc2_sqrt = math.sqrt(1 - b2 ^ st.step)
    if g.amsgrad then
      st.max_exp_avg_sq:copy_(T.maximum(st.max_exp_avg_sq, v))
      v = st.max_exp_avg_sq
    end
    local denom = (v:sqrt() / bc2_sqrt):add_(g.eps)
    p:add_((m * -step_size) / denom)
  end
end

local function adam_fused(T, g, items, decoupled)
  local ps, gs, ms, vs, maxs, steps, same = {}, {}, {}, {}, {}, {}, true
  for i, it in ipairs(items) do
    adam_state(T, g, it.st, it.p)
    ps[i], gs[i], ms[i], vs[i], steps[i] = it.p, it.grad, it.st.exp_avg, it.st.exp_avg_sq, it.st.step
    same = same and steps[i] == steps[1]
    if g.amsgrad then maxs[i] = it.st.max_exp_avg_sq end
  end
  -- one step count for all is a number: in a compiled step it becomes a run argument after one
  -- recompile, where a list of counts would be guarded (a recompile every step)
  local step = same and steps[1] or nil
  T._fused_adam(ps, gs, ms, vs, maxs, step and {} or steps, { lr = g.lr, beta1 = g.betas[1], beta2 = g.betas[2],
    eps = g.eps, weight_decay = g.weight_decay, amsgrad = g.amsgrad, maximize = g.maximize, decoupled = decoupled,
    step = step })
end

function M.define(optim, class, T)
  local SGD = class("SGD", { lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false },
    check_sgd, sgd_state_keys)
  function SGD:_update_group(g)
    local fused, each = self:_buckets(g)
    for _, list in ipairs(fused) do sgd_fused(T, g, list) end
    if #each > 0 then sgd_each(g, each) end
  end
  optim.SGD = SGD

  local function adam_class(name, weight_decay, decoupled)
    local cls = class(name, { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = weight_decay, amsgrad = false,
      maximize = false }, check_adam, adam_state_keys)
    function cls:_update_group(g)
      local fused, each = self:_buckets(g)
      for _, list in ipairs(fused) do adam_fused(T, g, list, decoupled) end
      if #each > 0 then adam_each(T, g, each, decoupled) end
    end
    return cls
  end
  optim.Adam = adam_class("Adam", 0, false)
  optim.AdamW = adam_class("AdamW", 1e-2, true)
end

return M
