-- crescent.autograd: the Lua surface of autograd (API.md section 9) over the C++ engine
-- (vm/autograd/): tensor properties and methods, backward, T.autograd.grad / gradcheck, grad
-- mode, {requires_grad =} on creation ops and PyTorch-like printing.
local core = require "crescent.core"
local tensor = require "crescent.tensor"
local binding = require "crescent.binding"
local ffi, api, ctx = core.ffi, core.api, core.ctx
local ag = api.autograd
local C = ffi.C  -- (vm/lua/ffi_api.h: enum cr_ag_mode, cr_ag_query, cr_ag_backward_flag)
local GRAD, INFERENCE = C.CR_AG_GRAD_MODE, C.CR_AG_INFERENCE_MODE
local fail, is_tensor, wrap, ptr = core.fail, core.is_tensor, core.wrap, core.ptr
local methods, props = tensor.methods, tensor.props
local unpack = unpack or table.unpack

local M = {}

local function check(rc)
  if rc ~= 0 then core.raise(rc) end
end

-- properties -----------------------------------------------------------------------------------
local function query(t, what)
  local r = ag.query(ctx, ptr(t), what)
  if r < 0 then core.raise(r) end
  return r ~= 0
end
function props.requires_grad(t) return query(t, C.CR_AG_REQUIRES_GRAD) end
function props.is_leaf(t) return query(t, C.CR_AG_IS_LEAF) end
function props.retains_grad(t) return query(t, C.CR_AG_RETAINS_GRAD) end
function props.grad(t)
  if ptr(t)._autograd == nil then return nil end
  local p = ag.get_grad(ctx, ptr(t))
  if p == nil then return nil end
  return wrap(p)
end

-- x.data: x's values without its history (torch's .data: detach's alias of the same memory)
function props.data(t) return t:detach() end

-- x.grad_fn: one object per node (`<MulBackward>`), with :name()
local node_mt = { __index = { name = function(n) return n._name end } }
node_mt.__tostring = function(n) return "<" .. n._name .. ">" end
local nodes = setmetatable({}, { __mode = "v" })
local ID = ffi.new("double[1]")
function props.grad_fn(t)
  if ptr(t)._autograd == nil then return nil end
  local s = ag.grad_fn(ctx, ptr(t), ID)
  if s == nil then
    if ID[0] == -1 then core.raise(-1) end
    return nil
  end
  local id = ID[0]
  local n = nodes[id]
  if not n then
    n = setmetatable({ _name = ffi.string(s) }, node_mt)
    nodes[id] = n
  end
  return n
end

-- methods --------------------------------------------------------------------------------------
function methods:requires_grad_(b)
  if b == nil then b = true end
  if type(b) ~= "boolean" then fail("requires_grad_: argument 1 (requires_grad) expected a boolean, got " .. type(b)) end
  check(ag.set_requires_grad(ctx, ptr(self), b and 1 or 0))
  return self
end

function methods:detach_()
  check(ag.detach_(ctx, ptr(self)))
  return self
end

function methods:is_inference() return query(self, C.CR_AG_IS_INFERENCE) end

function methods:retain_grad()
  check(ag.retain_grad(ctx, ptr(self)))
end

-- Hooks: Lua functions by id; the engine calls them through one FFI callback. Ids of tensors
-- that died are collected at the next registration.
local hooks, next_hook, hook_err = {}, 0, nil
local DEAD = ffi.new("int32_t[64]")
local function forget_dead()
  while true do
    local n = ag.dead_hooks(ctx, DEAD, 64)
    for i = 0, n - 1 do hooks[DEAD[i]] = nil end
    if n < 64 then return end
  end
end

local caller = ffi.cast("int32_t (*)(int32_t, cr_tensor*, cr_tensor**)", function(id, g, out)
  local fn = hooks[id]
  if not fn then return 0 end
  api.retain(g)
  local h = wrap(g)
  ctx.claimed = ctx.claimed - 1  -- (not one of the tensors an op handed out)
  local ok, r = pcall(fn, h)
  if not ok then hook_err = r; return -1 end
  if r ~= nil then
    if not is_tensor(r) then hook_err = { "register_hook: a hook returned a " .. type(r) .. ", expected a tensor or nil" }; return -1 end
    api.retain(ptr(r))
    out[0] = ptr(r)
  end
  return 0
end)
ag.set_hook_caller(ctx, caller)

-- a handle's tensor, held weakly: remove() also takes the id off the tensor's list, so that
-- later backward passes do not call removed hooks
local hook_tensor = setmetatable({}, { __mode = "v" })
local handle_mt = { __index = { remove = function(h)
  local t = hook_tensor[h.id]
  if t then ag.remove_hook(ctx, ptr(t), h.id) end
  hooks[h.id], hook_tensor[h.id] = nil, nil
end } }
local function add_hook(self, fn, op, adder)
  if type(fn) ~= "function" then fail(op .. ": argument 1 (hook) expected a function, got " .. type(fn)) end
  forget_dead()
  next_hook = next_hook + 1
  check(adder(ctx, ptr(self), next_hook))
  hooks[next_hook], hook_tensor[next_hook] = fn, self
  return setmetatable({ id = next_hook }, handle_mt)
end
function methods:register_hook(fn) return add_hook(self, fn, "register_hook", ag.add_hook) end
-- fn(leaf) after backward accumulated into leaf.grad (torch's register_post_accumulate_grad_hook)
function methods:register_post_accumulate_grad_hook(fn)
  return add_hook(self, fn, "register_post_accumulate_grad_hook", ag.add_post_hook)
end

-- T.autograd.queue_callback(fn): fn() runs once the backward pass in progress is done (torch's
-- Variable._execution_engine.queue_callback)
local callbacks, in_backward, pass = {}, false, 0
-- the number of backward passes started so far (a pass's hooks tell theirs from an earlier one's)
function M.pass() return pass end
function M.queue_callback(fn)
  if type(fn) ~= "function" then fail("queue_callback: argument 1 expected a function, got " .. type(fn)) end
  if not in_backward then fail("queue_callback: callbacks can only be queued during a backward pass (from a hook)") end
  callbacks[#callbacks + 1] = fn
end

local function run_callbacks(ok)
  local list = callbacks
  callbacks, in_backward = {}, false
  if not ok then return end
  local i = 1
  while list[i] do  -- (a callback may queue more)
    in_backward = true
    local ok2, err = pcall(list[i])
    in_backward = false
    for _, f in ipairs(callbacks) do list[#list + 1] = f end
    callbacks = {}
    if not ok2 then error(err, 0) end
    i = i + 1
  end
end

-- backward ---------------------------------------------------------------------------------------
local function tensor_list(v, what, op, allow_nil)
  if is_tensor(v) then return { v }, 1 end
  if type(v) ~= "table" then fail(string.format("%s: %s expected a tensor or a list of tensors, got %s", op, what, type(v))) end
  local n = v.n or #v
  for i = 1, n do
    if not is_tensor(v[i]) and not (allow_nil and v[i] == nil) then
      fail(string.format("%s: %s expected a list of tensors, element %d is a %s", op, what, i, type(v[i])))
    end
  end
  return v, n
end

-- one gradient entry per output (PyTorch: "got 2 tensors and 1 gradients"); a list ending in nil
-- entries gives its length as n
local function gradient_list(v, what, op, nout)
  local t, n = tensor_list(v, what, op, true)
  if n ~= nout then
    fail(string.format("%s: %s expected one entry per output, got %d for %d outputs (a list ending in nil entries: "
      .. "give its length as n = %d)", op, what, n, nout, nout))
  end
  return t
end

-- backward's inputs = (PyTorch: "'inputs' argument to backward() cannot be empty.")
local function input_list(v, op)
  local t, n = tensor_list(v, "inputs", op)
  if n == 0 then fail(op .. ": inputs expected a non-empty list of tensors, got an empty list") end
  return t, n
end

-- Inside a compiled function, backward() on a one-element loss of the graph being captured is
-- traced into that graph (vm/graph/step.cpp): true. Otherwise it ends the segment before it (a
-- graph break, its reason in T.explain: the segment's values get their CompiledFunctionBackward
-- node) and the engine runs eagerly over those nodes (vm/lua/autograd_api.cpp).
local why_box = ffi.new("const char*[1]")
local function captured_backward(op, roots, n, grads, inputs, ninputs, flags)
  local reason = op .. "()"
  if op ~= "autograd.grad" then
    local why
    if n ~= 1 or (grads and grads[1] ~= nil) then why = "an explicit gradient or several roots"
    elseif ninputs > 0 then why = "inputs ="
    elseif flags ~= 0 then why = "retain_graph / create_graph"
    else
      local rc = ag.capture_backward(ctx, ptr(roots[1]), core.where(), why_box)
      if rc < 0 then core.raise(rc) end
      if rc == 1 then return true end
      why = ffi.string(why_box[0])
    end
    reason = reason .. ": " .. why
  end
  for i = 1, n do
    core.need(roots[i], reason)
    if grads and grads[i] ~= nil then core.need(grads[i], reason) end
  end
  for j = 1, ninputs do core.need(inputs[j], reason) end
end

-- (not compiled: the engine calls hooks back into Lua, which LuaJIT allows only from interpreted
-- FFI calls)
local function run(op, roots, n, grads, inputs, ninputs, flags)
  if ctx.capturing ~= 0 and captured_backward(op, roots, n, grads, inputs, ninputs, flags) then
    pass = pass + 1
    if ctx.service ~= 0 then core.service() end
    return
  end
  local R, G = ffi.new("cr_tensor*[?]", n), ffi.new("cr_tensor*[?]", n)
  local I, O = ffi.new("cr_tensor*[?]", ninputs + 1), ffi.new("cr_tensor*[?]", ninputs + 1)
  for i = 1, n do
    R[i - 1] = ptr(roots[i])
    local g = grads and grads[i]
    if g ~= nil and not is_tensor(g) then fail(string.format("%s: gradient %d expected a tensor or nil, got %s", op, i, type(g))) end
    G[i - 1] = g and ptr(g) or nil
  end
  for j = 1, ninputs do I[j - 1] = ptr(inputs[j]) end
  in_backward, pass = true, pass + 1
  local rc = ag.backward(ctx, R, G, n, I, ninputs, flags, O)
  local _ = { roots, grads, inputs }  -- (alive until here)
  run_callbacks(rc == 0)
  if rc ~= 0 then
    if hook_err ~= nil then
      local e = hook_err
      hook_err = nil
      if type(e) == "table" then fail(e[1]) end  -- ours: at the user's line
      error(e, 0)  -- the hook's own error, located where it was raised
    end
    core.raise(rc)
  end
  if ctx.service ~= 0 then core.service() end
  if bit.band(flags, ffi.C.CR_OP_MULTI_OUT) == 0 then return end
  local r = { n = ninputs }
  for j = 1, ninputs do
    if O[j - 1] ~= nil then r[j] = wrap(O[j - 1]) end
  end
  return r
end
jit.off(run)

local function flags_of(op, o, allowed)
  for k in pairs(o) do
    if not allowed[k] then fail(string.format("%s: unknown option '%s'", op, tostring(k))) end
  end
  local create = o.create_graph and true or false
  local retain = o.retain_graph
  if retain == nil then retain = create end
  return (retain and C.CR_AG_RETAIN_GRAPH or 0) + (create and C.CR_AG_CREATE_GRAPH or 0)
         + (o.allow_unused and C.CR_AG_ALLOW_UNUSED or 0)
end

-- x:backward([gradient][, {retain_graph =, create_graph =, inputs =}])
local BACKWARD_OPTS = { retain_graph = true, create_graph = true, inputs = true }
function methods:backward(gradient, opts)
  if opts == nil and binding.is_opts(gradient) then gradient, opts = nil, gradient end
  opts = opts or {}
  local flags = flags_of("backward", opts, BACKWARD_OPTS)
  local inputs, ni = {}, 0
  if opts.inputs ~= nil then inputs, ni = input_list(opts.inputs, "backward") end
  run("backward", { self }, 1, { gradient }, inputs, ni, flags)
end

-- T.autograd.grad(outputs, inputs[, grad_outputs][, {retain_graph =, create_graph =, allow_unused =}])
local GRAD_OPTS = { retain_graph = true, create_graph = true, allow_unused = true }
function M.grad(outputs, inputs, grad_outputs, opts)
  if opts == nil and binding.is_opts(grad_outputs) then grad_outputs, opts = nil, grad_outputs end
  local outs, n = tensor_list(outputs, "outputs", "autograd.grad")
  local ins, ni = input_list(inputs, "autograd.grad")
  local grads = grad_outputs
  if grads ~= nil then grads = gradient_list(grads, "grad_outputs", "autograd.grad", n) end
  local flags = flags_of("autograd.grad", opts or {}, GRAD_OPTS) + C.CR_AG_RETURN_GRADS
  return run("autograd.grad", outs, n, grads, ins, ni, flags)
end

function M.backward(tensors, grad_tensors, opts)
  if opts == nil and binding.is_opts(grad_tensors) then grad_tensors, opts = nil, grad_tensors end
  local roots, n = tensor_list(tensors, "tensors", "autograd.backward")
  opts = opts or {}
  local flags = flags_of("autograd.backward", opts, BACKWARD_OPTS)
  local inputs, ni = {}, 0
  if opts.inputs ~= nil then inputs, ni = input_list(opts.inputs, "autograd.backward") end
  if grad_tensors ~= nil then grad_tensors = gradient_list(grad_tensors, "grad_tensors", "autograd.backward", n) end
  run("autograd.backward", roots, n, grad_tensors, inputs, ni, flags)
end

-- grad mode ------------------------------------------------------------------------------------
local pack = core.pack

-- Grad mode turning on inside a compiled function's inference capture ends its graph there: the
-- ops after it are captured for training (Recorder::grad_turned_on).
local function grad_on_in_capture(grad)
  if grad and ctx.capturing == 1 and ag.mode(GRAD, -1) == 0 and ag.mode(INFERENCE, -1) == 0 then
    local rc = api.cap_grad_on(ctx, core.where())
    if rc < 0 then core.raise(rc) end
  end
end

-- runs fn(...) in a grad mode and restores the previous one, also when fn raises
local function with_mode(op, grad, inference, fn, ...)
  if type(fn) ~= "function" and not (type(fn) == "table" and getmetatable(fn) and getmetatable(fn).__call) then
    fail(op .. ": argument 1 (fn) expected a function, got " .. type(fn))
  end
  grad_on_in_capture(grad)
  local pg = ag.mode(GRAD, grad and 1 or 0)
  local pi = ag.mode(INFERENCE, inference == nil and -1 or (inference and 1 or 0))
  local r = pack(pcall(fn, ...))
  ag.mode(GRAD, pg)
  ag.mode(INFERENCE, pi)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

function M.bind(T)
  T.autograd = { grad = M.grad, backward = M.backward, gradcheck = M.gradcheck, queue_callback = M.queue_callback }
  T.no_grad = function(fn, ...) return with_mode("no_grad", false, nil, fn, ...) end
  T.enable_grad = function(fn, ...) return with_mode("enable_grad", true, nil, fn, ...) end
  T.inference_mode = function(fn, ...) return with_mode("inference_mode", false, true, fn, ...) end
  T.set_grad_enabled = function(b)
    if type(b) ~= "boolean" then fail("set_grad_enabled: argument 1 (mode) expected a boolean, got " .. type(b)) end
    grad_on_in_capture(b)
    ag.mode(GRAD, b and 1 or 0)
  end
  T.is_grad_enabled = function() return ag.mode(GRAD, -1) ~= 0 end
  T.is_inference_mode_enabled = function() return ag.mode(INFERENCE, -1) ~= 0 end
end

-- {requires_grad = b} on creation ops --------------------------------------------------------------
local CREATION = ffi.C.CR_KIND_CREATION  -- (vm/abi.h enum cr_op_kind)
local function with_requires_grad(fn)
  return function(...)
    local n = select("#", ...)
    local last = n > 0 and (select(n, ...)) or nil
    if type(last) ~= "table" or is_tensor(last) or last.requires_grad == nil then return fn(...) end
    local args, o = { ... }, {}
    for k, v in pairs(last) do
      if k ~= "requires_grad" then o[k] = v end
    end
    args[n] = o
    return methods.requires_grad_(fn(unpack(args, 1, n)), last.requires_grad)
  end
end
for name, o in pairs(tensor.ops) do
  if o.kind == CREATION then
    o.fn = with_requires_grad(o.fn)
    if o.method then methods[name] = o.fn end
  end
end

-- printing and assignment ------------------------------------------------------------------------
local mt = core.tensor_mt
local base_tostring, base_newindex = mt.__tostring, mt.__newindex
-- s's closing ")" after one more suffix, on a line of its own (indented past "tensor(") where the
-- last line would pass the line width, as torch's _add_suffixes
local function add_suffix(s, suffix)
  local body = s:sub(1, -2)
  local nl = body:match(".*()\n")
  local last = (nl and #body - nl or #body) + 2
  if last + #suffix + 2 > (core.print_linewidth or 80) then return body .. ",\n       " .. suffix .. ")" end
  return body .. ", " .. suffix .. ")"
end
mt.__tostring = function(t)
  local s = base_tostring(t)
  if ptr(t)._autograd == nil then return s end
  local fn = props.grad_fn(t)
  if fn then return add_suffix(s, "grad_fn=" .. tostring(fn)) end
  if query(t, C.CR_AG_REQUIRES_GRAD) then return add_suffix(s, "requires_grad=True") end
  return s
end
mt.__newindex = function(t, k, v)
  if k == "grad" then
    if v ~= nil and not is_tensor(v) then fail("grad: expected a tensor or nil, got " .. type(v)) end
    check(ag.set_grad(ctx, ptr(t), v and ptr(v) or nil))
  elseif k == "requires_grad" then
    methods.requires_grad_(t, v)
  elseif k == "data" then  -- (torch's p.data = v: t holds v's memory from now on, keeping its flags)
    if not is_tensor(v) then fail("data: expected a tensor, got " .. type(v)) end
    local g, rg = props.grad(t), query(t, C.CR_AG_REQUIRES_GRAD)
    core.swap_tensors(t, v:detach())
    if rg then methods.requires_grad_(t, true) end
    if g ~= nil and g:_shape_str() == methods._shape_str(t) and g.dtype == props.dtype(t) then t.grad = g end
  elseif type(k) == "string" then
    fail(string.format("tensor: cannot set field '%s' (the writable fields are grad and requires_grad)", k))
  else
    return base_newindex(t, k, v)
  end
end

-- Whether grad mode is on and a tensor among the values (also inside tables, and a module's
-- parameters) requires grad: T.compile then runs the call eagerly (compiled autograd is issue 35).
local function any_requires_grad(v, seen)
  if is_tensor(v) then return ptr(v)._autograd ~= nil and query(v, C.CR_AG_REQUIRES_GRAD) end
  if type(v) ~= "table" or seen[v] then return false end
  seen[v] = true
  if type(v.parameters) == "function" and getmetatable(v) then
    for _, p in ipairs(v:parameters()) do
      if any_requires_grad(p, seen) then return true end
    end
  end
  for _, x in pairs(v) do
    if any_requires_grad(x, seen) then return true end
  end
  return false
end
-- Whether grad mode is on (compiled functions capture training graphs then).
function M.grad_mode() return ag.mode(GRAD, -1) ~= 0 end

function M.needs_grad(...)
  if ag.mode(GRAD, -1) == 0 then return false end
  for i = 1, select("#", ...) do
    if any_requires_grad((select(i, ...)), {}) then return true end
  end
  return false
end

M.gradcheck = require("crescent.gradcheck").gradcheck
return M
