-- T.optim (API.md section 9): SGD, Adam and AdamW against torch 1.13's torch.optim over 20+ steps
-- (each option, both update paths: the fused registry op and the per-tensor one), param groups,
-- lr schedulers, state_dict round trips (also through safetensors) and the refusals; the module
-- training surface (parameters, zero_grad, clip_grad_norm_, train / eval) and a training loop.
local T = require "crescent"
local R = require "torch_ref"
local nn, optim = T.nn, T.optim

expect.covers("_fused_sgd", "_fused_adam")
local errs = expect.error_checker("test_optim.lua")

T.manual_seed(11)
local STEPS = 24

-- a problem: parameters, and per step the gradient g_t + c * p (so the state matters)
local function problem(dtype, shapes)
  local ps, gs = {}, {}
  for i, s in ipairs(shapes) do ps[i] = T.randn(s, { dtype = dtype }) end
  for t = 1, STEPS do
    gs[t] = {}
    for i, s in ipairs(shapes) do gs[t][i] = T.randn(s, { dtype = dtype }) end
  end
  return { params = ps, grads = gs, c = 0.3 }
end

local function py_value(v)
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = py_value(x) end
    return "(" .. table.concat(parts, ", ") .. ")"
  end
  return R.num_lit(v)
end
local function py_kwargs(o)
  local parts = {}
  for k, v in pairs(o) do
    if k ~= "fused" then parts[#parts + 1] = k .. "=" .. py_value(v) end
  end
  table.sort(parts)
  return table.concat(parts, ", ")
end
local function py_list(ts)
  local parts = {}
  for i, t in ipairs(ts) do parts[i] = t == false and "None" or R.lit(t) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

-- python: the same loop in torch; `skip` (param index) gets no gradient on odd steps
local PY = [[
def opt_run(cls, groups, params, grads, c, skip=None, sched=None):
    ps = [p.clone().requires_grad_(True) for p in params]
    opt = cls([dict(g, params=[ps[i] for i in idx]) for idx, g in groups])
    s = sched(opt) if sched else None
    lrs = []
    for t, gt in enumerate(grads):
        for i, p in enumerate(ps):
            p.grad = None if (skip == i and t % 2 == 1) else gt[i] + c * p.detach()
        opt.step()
        if s:
            s.step()
            lrs.append(torch.tensor(s.get_last_lr(), dtype=torch.float64))
    return ps + lrs
]]

-- crescent: the same loop; returns the params (and the lr of every group after each step)
local function run(cls, groups, pb, skip, sched)
  local ps = {}
  for i, p in ipairs(pb.params) do ps[i] = p:clone():requires_grad_() end
  local gl = {}
  for gi, g in ipairs(groups) do
    local o = { params = {} }
    for k, v in pairs(g[2]) do o[k] = v end
    for j, i in ipairs(g[1]) do o.params[j] = ps[i] end
    gl[gi] = o
  end
  local opt = optim[cls](gl)
  local s = sched and sched(opt)
  local lrs = {}
  for t = 1, STEPS do
    for i, p in ipairs(ps) do
      if skip == i and t % 2 == 0 then p.grad = nil else p.grad = pb.grads[t][i] + p:detach() * pb.c end
    end
    opt:step()
    if s then
      s:step()
      lrs[#lrs + 1] = T.tensor(s:get_last_lr(), { dtype = "float64" })
    end
  end
  return ps, lrs, opt
end

local function py_groups(groups)
  local parts = {}
  for gi, g in ipairs(groups) do
    local idx = {}
    for j, i in ipairs(g[1]) do idx[j] = tostring(i - 1) end
    parts[gi] = string.format("([%s], dict(%s))", table.concat(idx, ", "), py_kwargs(g[2]))
  end
  return "[" .. table.concat(parts, ", ") .. "]"
end

local B = R.batch(PY)
local cases = {}
local function case(key, cls, dtype, groups, o)
  o = o or {}
  local pb = problem(dtype, o.shapes or { { 3, 4 }, { 5 }, { 2, 1, 3 } })
  local grads = {}
  for t = 1, STEPS do grads[t] = py_list(pb.grads[t]) end
  local skip = o.skip and tostring(o.skip - 1) or "None"
  B:add(key, string.format("opt_run(torch.optim.%s, %s, %s, [%s], %s, skip=%s, sched=%s)", cls, py_groups(groups),
    py_list(pb.params), table.concat(grads, ", "), R.num_lit(pb.c), skip, o.py_sched or "None"), {})
  cases[#cases + 1] = { key = key, cls = cls, groups = groups, pb = pb, skip = o.skip, sched = o.sched, dtype = dtype }
end

local ALL = { 1, 2, 3 }
local OPTIONS = {
  SGD = { { lr = 0.1 }, { lr = 0.05, momentum = 0.9 }, { lr = 0.05, momentum = 0.9, dampening = 0.5 },
          { lr = 0.05, momentum = 0.9, nesterov = true }, { lr = 0.05, momentum = 0.5, weight_decay = 0.1 },
          { lr = 0.05, momentum = 0.9, weight_decay = 0.01, maximize = true } },
  Adam = { { lr = 0.01 }, { lr = 0.02, betas = { 0.8, 0.99 }, eps = 1e-6 }, { lr = 0.01, weight_decay = 0.1 },
           { lr = 0.01, amsgrad = true }, { lr = 0.01, amsgrad = true, weight_decay = 0.05, maximize = true } },
  AdamW = { { lr = 0.01 }, { lr = 0.01, weight_decay = 0.1, amsgrad = true }, { lr = 0.02, maximize = true, eps = 1e-4 } },
}
for _, cls in ipairs({ "SGD", "Adam", "AdamW" }) do
  for i, o in ipairs(OPTIONS[cls]) do
    for _, dt in ipairs({ "float32", "float64" }) do
      case(string.format("%s %d %s", cls, i, dt), cls, dt, { { ALL, o } })
      local pt = { fused = false }
      for k, v in pairs(o) do pt[k] = v end
      case(string.format("%s %d %s per-tensor", cls, i, dt), cls, dt, { { ALL, pt } })
    end
  end
end
-- groups with their own options; a parameter without a gradient on every other step
case("SGD groups", "SGD", "float32", { { { 1, 3 }, { lr = 0.1, momentum = 0.9 } }, { { 2 }, { lr = 0.01, nesterov = true, momentum = 0.5 } } })
case("Adam groups", "Adam", "float32", { { { 2 }, { lr = 0.05 } }, { { 1, 3 }, { lr = 0.01, amsgrad = true } } })
case("AdamW skip", "AdamW", "float32", { { ALL, { lr = 0.01 } } }, { skip = 2 })
case("SGD skip", "SGD", "float32", { { ALL, { lr = 0.1, momentum = 0.9 } } }, { skip = 3 })
-- a parameter large enough to be split across threads
case("Adam large", "Adam", "float32", { { { 1, 2 }, { lr = 0.01, weight_decay = 0.01 } } }, { shapes = { { 300, 257 }, { 7 } } })

-- schedulers (two groups: lr 0.1 and 0.02)
local SG = { { { 1 }, { lr = 0.1 } }, { { 2, 3 }, { lr = 0.02 } } }
local S = optim.lr_scheduler
case("StepLR", "SGD", "float64", SG, { sched = function(o) return S.StepLR(o, 5, { gamma = 0.5 }) end,
  py_sched = "lambda o: torch.optim.lr_scheduler.StepLR(o, 5, gamma=0.5)" })
case("CosineAnnealingLR", "SGD", "float64", SG, { sched = function(o) return S.CosineAnnealingLR(o, 10, { eta_min = 0.001 }) end,
  py_sched = "lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10, eta_min=0.001)" })
case("LambdaLR", "Adam", "float64", SG, { sched = function(o) return S.LambdaLR(o, function(e) return 0.9 ^ e end) end,
  py_sched = "lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e)" })
case("LinearLR", "AdamW", "float64", SG, { sched = function(o) return S.LinearLR(o, { start_factor = 0.1, total_iters = 8 }) end,
  py_sched = "lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=8)" })

local res, why = B:run()
local TOL = { float32 = { 1e-6, 1e-7 }, float64 = { 1e-12, 1e-14 } }

describe("optimizers against torch 1.13", function()
  for _, c in ipairs(cases) do
    it(c.key, function()
      if not res then expect.skip(why) end
      if res[c.key] and res[c.key].error then error("torch raised: " .. res[c.key].error) end
      local ps, lrs = run(c.cls, c.groups, c.pb, c.skip, c.sched)
      local tol = TOL[c.dtype]
      for i, p in ipairs(ps) do R.check(res, c.key .. "#" .. i, p:detach(), tol[1], tol[2]) end
      for k, lr in ipairs(lrs) do R.check(res, c.key .. "#" .. (#ps + k), lr, 1e-13, 0) end
    end)
  end
end)

describe("fused updates", function()
  it("compute float16 / bfloat16 parameters in float32", function()
    for _, dt in ipairs({ "float16", "bfloat16" }) do
      local p, g = T.randn(4, 5), T.randn(4, 5)
      local lo, glo = p:to(dt), g:to(dt)
      local ref = lo:float()
      T._fused_adam({ ref }, { glo:float() }, { T.zeros(4, 5) }, { T.zeros(4, 5) }, {}, { 1 }, { lr = 0.1, weight_decay = 0.1 })
      T._fused_adam({ lo }, { glo }, { T.zeros(4, 5, { dtype = dt }) }, { T.zeros(4, 5, { dtype = dt }) }, {}, { 1 },
        { lr = 0.1, weight_decay = 0.1 })
      expect.eq(lo:totable(), ref:to(dt):totable())
      local q, b = lo:clone(), T.zeros(4, 5, { dtype = dt })
      local qf = q:float()
      T._fused_sgd({ q }, { glo }, { b }, { 1 }, { lr = 0.1, momentum = 0.9 })
      T._fused_sgd({ qf }, { glo:float() }, { T.zeros(4, 5) }, { 1 }, { lr = 0.1, momentum = 0.9 })
      expect.eq(q:totable(), qf:to(dt):totable())
    end
  end)
  it("update non-contiguous parameters in place", function()
    local base = T.randn(4, 6)
    local p, want = base:t(), base:t():contiguous()
    local g = T.randn(6, 4)
    T._fused_sgd({ p }, { g }, {}, { 0 }, { lr = 0.5 })
    T._fused_sgd({ want }, { g }, {}, { 0 }, { lr = 0.5 })
    expect.eq(base:t():totable(), want:totable())
  end)
  it("bump the versions of what they write: a saved parameter changed by a step fails backward", function()
    local w = T.randn(3, { requires_grad = true })
    local loss = (w * w):sum()
    w.grad = T.ones(3)
    local opt = optim.SGD({ w }, { lr = 0.1 })
    opt:step()
    expect.errors(function() loss:backward() end, "modified by an inplace operation")
  end)
  it("refuse bad lists with the op's name", function()
    local p = T.randn(3)
    errs(function() T._fused_sgd({ p }, {}, {}, { 0 }, { lr = 1 }) end, "_fused_sgd", "one gradient per parameter")
    errs(function() T._fused_sgd({ p }, { T.randn(4) }, {}, { 0 }, { lr = 1 }) end, "_fused_sgd", "grad 1 expected the parameter's float32 tensor of shape {3}")
    errs(function() T._fused_sgd({ p:long() }, { p:long() }, {}, { 0 }, { lr = 1 }) end, "_fused_sgd", "param 1 expected a floating tensor")
    errs(function() T._fused_sgd({ p }, { p }, {}, {}, { lr = 1 }) end, "_fused_sgd", "expected 1 integers")
    errs(function() T._fused_sgd({ p }, { p }, {}, { 0 }, { lr = 1, momentum = 0.5 }) end, "_fused_sgd", "momentum buffer")
    errs(function() T._fused_adam({ p }, { p }, { p:clone() }, {}, {}, { 1 }, { lr = 1 }) end, "_fused_adam", "exp_avg_sqs")
    errs(function() T._fused_adam({ p }, { p }, { p:clone() }, { p:clone() }, {}, { 0 }, { lr = 1 }) end, "_fused_adam", "counts >= 1")
    errs(function() T._fused_sgd({ T.ones(1):expand(3) }, { p }, {}, { 0 }, { lr = 1 }) end, "_fused_sgd", "cannot update an expanded tensor in place")
  end)
end)

-- state_dict ------------------------------------------------------------------------------------------
local function trained(cls, o, steps, ps)
  ps = ps or { T.randn(3, 2):requires_grad_(), T.randn(4):requires_grad_() }
  local opt = optim[cls](ps, o)
  for _ = 1, steps do
    for _, p in ipairs(ps) do p.grad = p:detach() * 0.5 + 0.1 end
    opt:step()
  end
  return opt, ps
end
local function clones(ps)
  local r = {}
  for i, p in ipairs(ps) do r[i] = p:detach():clone():requires_grad_() end
  return r
end
local function continue(opt, ps, steps)
  for _ = 1, steps do
    for _, p in ipairs(ps) do p.grad = p:detach() * 0.5 + 0.1 end
    opt:step()
  end
end

describe("state_dict", function()
  it("has PyTorch's structure", function()
    local opt = trained("Adam", { lr = 0.01, amsgrad = true }, 3)
    local sd = opt:state_dict()
    expect.eq(sd.param_groups[1].params, { 0, 1 })
    expect.eq(sd.param_groups[1].lr, 0.01)
    expect.eq(sd.param_groups[1].betas, { 0.9, 0.999 })
    expect.eq(sd.state[0].step:item(), 3)
    expect.eq(sd.state[1].exp_avg.shape, { 4 })
    expect.truthy(T.is_tensor(sd.state[1].max_exp_avg_sq))
    local s = trained("SGD", { lr = 0.1, momentum = 0.9 }, 2):state_dict()
    expect.eq(s.state[0].momentum_buffer.shape, { 3, 2 })
  end)
  for _, c in ipairs({ { "SGD", { lr = 0.1, momentum = 0.9, nesterov = true } }, { "Adam", { lr = 0.01, amsgrad = true } },
                       { "AdamW", { lr = 0.01 } } }) do
    it(c[1] .. " resumes exactly, in memory and through safetensors", function()
      local a, pa = trained(c[1], c[2], 5)
      local pb, pc = clones(pa), clones(pa)
      local b = optim[c[1]](pb, { lr = 0.5 })
      b:load_state_dict(a:state_dict())
      local path = os.tmpname()
      T.save(path, optim.flatten_state_dict(a:state_dict()))
      local cc = optim[c[1]](pc)
      cc:load_state_dict(T.load(path))
      os.remove(path)
      expect.eq(cc.param_groups[1].lr, c[2].lr)
      continue(a, pa, 5)
      continue(b, pb, 5)
      continue(cc, pc, 5)
      for i = 1, #pa do
        expect.eq(pb[i]:totable(), pa[i]:totable())
        expect.eq(pc[i]:totable(), pa[i]:totable())
      end
    end)
  end
  it("converts the state to the parameters' dtype and owns it", function()
    local a = trained("Adam", { lr = 0.01 }, 2)
    local ps = { T.randn(3, 2, { dtype = "float64" }):requires_grad_(), T.randn(4, { dtype = "float64" }):requires_grad_() }
    local b = optim.Adam(ps)
    local sd = a:state_dict()
    b:load_state_dict(sd)
    expect.eq(b:state_dict().state[0].exp_avg.dtype, "float64")
    T.no_grad(function() sd.state[1].exp_avg:fill_(7) end)
    expect.truthy(b:state_dict().state[1].exp_avg:max():item() < 7)
  end)
  it("refuses the state of another optimizer, group count or size", function()
    local sgd = trained("SGD", { lr = 0.1, momentum = 0.9 }, 2)
    local adam = trained("Adam", {}, 2)
    errs(function() optim.Adam({ T.randn(3, 2):requires_grad_(), T.randn(4):requires_grad_() }):load_state_dict(sgd:state_dict()) end,
      "Adam:load_state_dict", "not from a Adam optimizer: param group 1 has no option")
    errs(function() optim.SGD({ T.randn(3, 2):requires_grad_(), T.randn(4):requires_grad_() }):load_state_dict(adam:state_dict()) end,
      "SGD:load_state_dict", "not from a SGD optimizer")
    errs(function() optim.SGD({ T.randn(3, 2):requires_grad_() }):load_state_dict(sgd:state_dict()) end,
      "SGD:load_state_dict", "doesn't match the size of optimizer's group (group 1: 2 params, the optimizer's 1)")
    local two = optim.SGD({ { params = { T.randn(3, 2):requires_grad_() } }, { params = { T.randn(4):requires_grad_() } } })
    errs(function() two:load_state_dict(sgd:state_dict()) end, "SGD:load_state_dict", "different number of parameter groups (1, the optimizer has 2)")
    errs(function() optim.SGD({ T.randn(2, 3):requires_grad_(), T.randn(4):requires_grad_() }, { momentum = 0.9 }):load_state_dict(sgd:state_dict()) end,
      "SGD:load_state_dict", "the state 'momentum_buffer' of parameter 0 has shape {3,2}, the parameter {2,3}")
    errs(function() sgd:load_state_dict({}) end, "SGD:load_state_dict", "expected a state_dict {state =, param_groups =}")
  end)
end)

describe("optimizer refusals", function()
  it("name the optimizer and the problem, as PyTorch", function()
    local p = T.randn(3, { requires_grad = true })
    errs(function() optim.SGD({ p * 2 }) end, "SGD", "can't optimize a non-leaf Tensor (param 1)")
    errs(function() optim.Adam({ p, p }) end, "Adam", "duplicate parameters (param 2)")
    errs(function() optim.Adam({ { params = { p } }, { params = { p } } }) end, "Adam", "some parameters appear in more than one parameter group")
    errs(function() optim.SGD({ T.ones(3, { dtype = "int64" }) }) end, "SGD", "can only optimize floating tensors, but param 1 is int64")
    errs(function() optim.SGD({}) end, "SGD", "optimizer got an empty parameter list")
    errs(function() optim.SGD(p) end, "SGD", "got a tensor")
    errs(function() optim.SGD({ 3 }) end, "SGD", "optimizer can only optimize tensors, but param 1 is a number")
    errs(function() optim.SGD({ p }, { lr = -1 }) end, "SGD", "Invalid learning rate: -1")
    errs(function() optim.SGD({ p }, { momentum = 0.9, dampening = 0.1, nesterov = true }) end, "SGD", "Nesterov momentum requires a momentum and zero dampening")
    errs(function() optim.Adam({ p }, { betas = { 1, 0.9 } }) end, "Adam", "Invalid beta parameter at index 0: 1")
    errs(function() optim.Adam({ p }, { eps = -1 }) end, "Adam", "Invalid epsilon value: -1")
    errs(function() optim.AdamW({ p }, { weight_decay = -0.1 }) end, "AdamW", "Invalid weight_decay value: -0.1")
    errs(function() optim.AdamW({ p }, { momentum = 0.9 }) end, "AdamW", "unknown option 'momentum'")
    errs(function() optim.SGD({ { params = { p }, lr = -2 } }) end, "SGD", "Invalid learning rate: -2")
  end)
  it("take a step inside a compiled function (recorded: the per-tensor path)", function()
    local w = T.randn(3, { requires_grad = true })
    local w0 = w:detach():clone()
    local opt = optim.SGD({ w }, { lr = 0.5 })
    w.grad = T.ones(3)
    local f = T.compile(function(x) opt:step(); return x * 2 end)
    for _ = 1, 4 do f(T.randn(2)) end
    expect.close(w:detach(), w0 - 2, 1e-6, 1e-6)
  end)
end)

describe("lr schedulers", function()
  it("keep state_dict and refuse bad arguments", function()
    local opt = optim.SGD({ T.randn(2, { requires_grad = true }) }, { lr = 1 })
    local s = optim.lr_scheduler.StepLR(opt, 2, { gamma = 0.5 })
    for _ = 1, 3 do opt:step(); s:step() end
    expect.eq(s:get_last_lr(), { 0.5 })
    local opt2 = optim.SGD({ T.randn(2, { requires_grad = true }) }, { lr = 1 })
    local s2 = optim.lr_scheduler.StepLR(opt2, 7)
    opt2:load_state_dict(opt:state_dict())  -- (the groups' lr: the optimizer's state, as in PyTorch)
    s2:load_state_dict(s:state_dict())
    s2:step()
    s:step()
    expect.eq(s2:get_last_lr(), s:get_last_lr())
    expect.eq(s2.step_size, 2)
    errs(function() optim.lr_scheduler.StepLR(opt, 0) end, "StepLR", "step_size) expected a positive integer")
    errs(function() optim.lr_scheduler.LinearLR(opt, { start_factor = 2 }) end, "LinearLR", "Starting multiplicative factor expected to be greater than 0")
    errs(function() optim.lr_scheduler.LinearLR(opt, { start_factor = 0 }) end, "LinearLR", "greater than 0 and less or equal to 1, got 0")
    errs(function() optim.lr_scheduler.LambdaLR(opt, { function() return 1 end, function() return 1 end }) end, "LambdaLR", "Expected 1 lr_lambdas, but got 2")
    errs(function() optim.lr_scheduler.CosineAnnealingLR({}, 3) end, "CosineAnnealingLR", "expected an optimizer")
    errs(function() optim.lr_scheduler.StepLR(optim.SGD({ T.randn(2, { requires_grad = true }) }), 2, { last_epoch = 3 }) end,
      "StepLR", "param 'initial_lr' is not specified in param_groups[0] when resuming an optimizer")
    errs(function() s:load_state_dict({ last_epoch = 1 }) end, "StepLR:load_state_dict", "has no '_step_count'")
    errs(function() s:step(1.5) end, "StepLR:step", "epoch) expected an integer or nil, got 1.5")
  end)
  it("step(epoch) jumps to the epoch's closed form, as torch's deprecated form", function()
    local function fresh() return optim.SGD({ T.randn(2, { requires_grad = true }) }, { lr = 0.1 }) end
    local function near(a, b) expect.truthy(math.abs(a - b) <= 1e-15, ("%.17g against %.17g"):format(a, b)) end
    local s = optim.lr_scheduler.StepLR(fresh(), 2, { gamma = 0.5 })
    s:step(5)
    expect.eq(s.last_epoch, 5)
    near(s:get_last_lr()[1], 0.025)
    local c = optim.lr_scheduler.CosineAnnealingLR(fresh(), 10, { eta_min = 0.01 })
    c:step(4)
    near(c:get_last_lr()[1], 0.01 + 0.09 * (1 + math.cos(math.pi * 4 / 10)) / 2)
    local l = optim.lr_scheduler.LinearLR(fresh(), { start_factor = 0.25, total_iters = 4 })
    l:step(2)
    near(l:get_last_lr()[1], 0.1 * (0.25 + 0.75 * 2 / 4))
    l:step()
    near(l:get_last_lr()[1], 0.1 * (0.25 + 0.75 * 3 / 4))
  end)
  it("leave a group added after them at its lr, as torch", function()
    for _, make in ipairs({
      function(o) return optim.lr_scheduler.LambdaLR(o, function(e) return 0.5 ^ e end) end,
      function(o) return optim.lr_scheduler.CosineAnnealingLR(o, 1) end,
      function(o) return optim.lr_scheduler.StepLR(o, 1) end,
    }) do
      local o = optim.SGD({ T.randn(2, { requires_grad = true }) }, { lr = 0.1 })
      local s = make(o)
      o:add_param_group({ params = { T.randn(2, { requires_grad = true }) }, lr = 1.0 })
      for _ = 1, 2 do o:step(); s:step() end
      expect.eq(#s:get_last_lr(), 2)
      expect.eq(o.param_groups[2].lr, 1.0)
    end
  end)
end)

describe("optimizer options and groups", function()
  it("keep a group's own keys, as torch; take foreach / capturable", function()
    local a, b = T.randn(2, { requires_grad = true }), T.randn(2, { requires_grad = true })
    local o = optim.SGD({ { params = { a }, name = "encoder", initial_lr = 0.1 } }, { lr = 0.1, foreach = false })
    o:add_param_group({ params = { b }, tag = "head" })
    expect.eq(o.param_groups[1].name, "encoder")
    expect.eq(o.param_groups[2].tag, "head")
    optim.Adam({ a }, { foreach = true, capturable = false, differentiable = false })
    errs(function() optim.Adam({ a }, { differentiable = true }) end, "Adam", "differentiable = true (autograd through the update) is not implemented")
    errs(function() optim.Adam({ a }, { foreach = 1 }) end, "Adam", "option foreach expected a boolean or nil, got number")
    errs(function() optim.SGD(nn.Linear(2, 2), { lr = 0.1 }) end, "SGD", "got a Linear module: pass its :parameters()")
    errs(function() o:step(5) end, "SGD:step", "argument 1 (closure) expected a function, got number")
  end)
  it("step a parameter whose state kept its old dtype (model:double()) as torch's per-tensor formulas", function()
    local m = nn.Linear(2, 1)
    local o = optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 })
    local x = T.tensor({ { 1.5, 2.0 } }, { dtype = "float32" })
    m(x):sum():backward(); o:step(); o:zero_grad()
    local w1 = m.weight:detach():double()
    m:double()
    m(x:double()):sum():backward(); o:step()
    -- buf (float32) = 0.9 * buf + g; w -= 0.1 * buf, with buf = g = x at both steps
    local buf = T.tensor({ { 1.5, 2.0 } }, { dtype = "float32" }) * 1.9
    expect.close(m.weight:detach(), w1 - buf:double() * 0.1, 1e-15, 1e-15)
    expect.eq(o.state[m.weight].momentum_buffer.dtype, "float32")
  end)
end)

-- the module training surface ------------------------------------------------------------------------
local Net = nn.Module:extend("OptNet")
function Net:init()
  self.fc = nn.Linear(4, 8)
  self.drop = nn.Dropout(0.5)
  self.out = nn.Linear(8, 1)
  self:register_buffer("count", T.zeros(1))
end
function Net:forward(x) return self.out(self.drop(self.fc(x):relu())) end

describe("modules train", function()
  it("parameters are leaves that require grad; buffers do not", function()
    local m = Net()
    for _, p in ipairs(m:parameters()) do expect.truthy(p.requires_grad and p.is_leaf) end
    expect.eq(m.count.requires_grad, false)
    m:to("float64")
    expect.truthy(m.fc.weight.requires_grad and m.fc.weight.is_leaf and m.fc.weight.dtype == "float64")
    m:load_state_dict(Net():to("float64"):state_dict())  -- (copies under no_grad)
    m:requires_grad_(false)
    expect.eq(m.fc.weight.requires_grad, false)
  end)
  it("zero_grad sets grads to nil, or zeroes them", function()
    local m = Net():eval()
    m(T.randn(2, 4)):sum():backward()
    expect.truthy(m.fc.weight.grad ~= nil)
    m:zero_grad(false)
    expect.eq(m.fc.weight.grad:abs():sum():item(), 0)
    m:zero_grad()
    expect.eq(m.fc.weight.grad, nil)
    local opt = optim.SGD(m:parameters())
    m(T.randn(2, 4)):sum():backward()
    opt:zero_grad(false)
    expect.eq(m.out.bias.grad:item(), 0)
    opt:zero_grad()
    expect.eq(m.out.bias.grad, nil)
  end)
  it("Dropout drops in train() and is the identity in eval()", function()
    local d = nn.Dropout(0.5)
    local x = T.ones(1000)
    local y = d(x)
    local kept = y:ne(0):sum():item()
    expect.truthy(kept > 350 and kept < 650, "kept " .. kept)
    expect.eq(y:max():item(), 2)
    expect.eq(d:eval()(x):totable(), x:totable())
  end)
  it("clip_grad_value_ clamps the gradients; clip_grad_norm_ of none is a float 0", function()
    local p = T.zeros(3, { requires_grad = true })
    expect.eq(nn.utils.clip_grad_norm_({ p }, 1.0).dtype, "float32")
    p.grad = T.tensor({ -3, 0.5, 2 }, { dtype = "float32" })
    nn.utils.clip_grad_value_({ p }, 1)
    expect.eq(p.grad:totable(), { -1, 0.5, 1 })
    errs(function() nn.utils.clip_grad_value_({ p }, "1") end, "clip_grad_value_", "clip_value) expected a number, got string")
  end)
  it("BatchNorm loads a state dict without num_batches_tracked (older checkpoints), as torch", function()
    local bn = nn.BatchNorm1d(3)
    bn(T.randn(4, 3))
    local sd = bn:state_dict()
    sd.num_batches_tracked = nil
    bn:load_state_dict(sd)
    expect.eq(bn.num_batches_tracked:item(), 0)
  end)
  it("clip_grad_norm_ returns torch's total norm and scales the gradients", function()
    local g1, g2 = T.randn(3, 4), T.randn(5)
    local CLIP = [[
def clip(g1, g2, m, t):
    a, b = torch.zeros_like(g1, requires_grad=True), torch.zeros_like(g2, requires_grad=True)
    a.grad, b.grad = g1.clone(), g2.clone()
    n = torch.nn.utils.clip_grad_norm_([a, b], m, t)
    return [n, a.grad, b.grad]
]]
    local B2 = R.batch(CLIP)
    local variants = { { 1.0, 2 }, { 100, 2 }, { 0.5, 1 }, { 0.5, math.huge } }
    for i, v in ipairs(variants) do
      B2:add("clip" .. i, string.format("clip(g1, g2, %s, %s)", R.num_lit(v[1]), v[2] == math.huge and "inf" or R.num_lit(v[2])), { g1 = g1, g2 = g2 })
    end
    local r, w = B2:run()
    if not r then expect.skip(w) end
    for i, v in ipairs(variants) do
      local a, b = T.zeros(3, 4, { requires_grad = true }), T.zeros(5, { requires_grad = true })
      a.grad, b.grad = g1:clone(), g2:clone()
      local n = nn.utils.clip_grad_norm_({ a, b }, v[1], v[2])
      R.check(r, "clip" .. i .. "#1", n, 1e-6, 1e-7)
      R.check(r, "clip" .. i .. "#2", a.grad, 1e-6, 1e-7)
      R.check(r, "clip" .. i .. "#3", b.grad, 1e-6, 1e-7)
    end
    local c = T.zeros(2, { requires_grad = true })
    c.grad = T.tensor({ math.huge, 1 })
    errs(function() nn.utils.clip_grad_norm_(c, 1, { error_if_nonfinite = true }) end, "clip_grad_norm_", "is non-finite")
    expect.eq(nn.utils.clip_grad_norm_({ T.zeros(2) }, 1):item(), 0)
  end)
  it("a training loop reaches torch's parameters (forward, backward, AdamW, clipping, schedule)", function()
    local X, W0, b0 = T.randn(16, 5), T.randn(3, 5) * 0.3, T.randn(3) * 0.1
    local Y = T.randint(1, 4, { 16 })
    local B3 = R.batch([[
def train(X, Y, W0, b0):
    m = torch.nn.Linear(5, 3)
    with torch.no_grad():
        m.weight.copy_(W0); m.bias.copy_(b0)
    opt = torch.optim.AdamW(m.parameters(), lr=0.05)
    s = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.2, total_iters=5)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = F.cross_entropy(m(X), Y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step(); s.step()
        losses.append(loss.detach())
    return [torch.stack(losses), m.weight.detach(), m.bias.detach()]
]])
    B3:add("train", "train(X, Y, W0, b0)", { X = X, Y = Y - 1, W0 = W0, b0 = b0 })
    local r, w = B3:run()
    if not r then expect.skip(w) end
    local m = nn.Linear(5, 3)
    T.no_grad(function()
      m.weight:copy_(W0)
      m.bias:copy_(b0)
    end)
    local opt = optim.AdamW(m:parameters(), { lr = 0.05 })
    local s = optim.lr_scheduler.LinearLR(opt, { start_factor = 0.2, total_iters = 5 })
    local losses = {}
    for i = 1, 20 do
      opt:zero_grad()
      local loss = T.F.cross_entropy(m(X), Y)
      loss:backward()
      nn.utils.clip_grad_norm_(m:parameters(), 1.0)
      opt:step()
      s:step()
      losses[i] = loss:item()
    end
    R.check(r, "train#1", T.tensor(losses, { dtype = "float32" }), 1e-5, 1e-6)
    R.check(r, "train#2", m.weight:detach(), 1e-5, 1e-6)
    R.check(r, "train#3", m.bias:detach(), 1e-5, 1e-6)
    expect.truthy(losses[20] < losses[1] * 0.7, "the loss falls")
  end)
end)

describe("examples/train_gpt.lua", function()
  it("resumes from its checkpoint exactly where an uninterrupted run goes", function()
    local bin = require("shell").crescent_bin()
    if not bin then expect.skip("the crescent executable is unknown (set CRESCENT_BIN)") end
    local f = io.open("/usr/share/common-licenses/GPL-3")
    if not f then expect.skip("no /usr/share/common-licenses (the example's default corpus)") end
    f:close()
    local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/") .. "/../../examples/train_gpt.lua"
    local a, b = os.tmpname(), os.tmpname()
    local function train(out, extra)
      local cmd = string.format("%q %q --d 32 --layers 1 --steps 16 --eval-every 8 --sample 0 --out %q %s > /dev/null", bin, dir, out, extra)
      expect.truthy(os.execute(cmd) == 0, "ran: " .. cmd)
    end
    train(a, "")
    train(b, "--stop-after 8")
    train(b, "--resume 1")
    local sa, sb = T.load(a), T.load(b)
    os.remove(a)
    os.remove(b)
    local n = 0
    for k, t in pairs(sa) do
      n = n + 1
      expect.eq(sb[k]:totable(), t:totable(), k)
    end
    expect.truthy(n > 40 and sa["meta.step"]:item() == 16)
  end)
end)
