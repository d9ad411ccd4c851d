-- crescent.nn: T.nn (API.md section 4). A Module is a Lua table whose tensor fields are its
-- parameters and whose module fields are its children, remembered in the order they were first
-- assigned (so parameters, state_dict and printing come out in definition order, as in PyTorch).
-- Names in state_dict are PyTorch's: "h.0.attn.c_attn.weight" - list items are numbered from 0
-- there, so weight files written by PyTorch load as they are, while Lua code indexes them from 1
-- (`self.h[1]`).
local core = require "crescent.core"
local F = require "crescent.functional"
local fail, is_tensor = core.fail, core.is_tensor

local nn = {}
local T  -- crescent, bound by nn.bind

function nn.bind(t)
  T = t
  require("crescent.nn_layers").bind(t)
  require("crescent.nn_quant").bind(t)
  require("crescent.nn_init").bind(t)
end

-- classes ---------------------------------------------------------------------------------------

local function is_module(v)
  local mt = type(v) == "table" and getmetatable(v)
  return mt and rawget(mt, "__module") == true or false
end
nn.is_module = is_module

-- Assigning a new field records its name, so traversals keep definition order. Names starting
-- with "_" are private state, never parameters.
-- A floating leaf tensor assigned as a parameter (not a buffer) requires grad, as PyTorch's
-- nn.Parameter.
local FLOATING = { float32 = true, float64 = true, float16 = true, bfloat16 = true }
local function as_parameter(self, k, v)
  if is_tensor(v) and FLOATING[v.dtype] and not rawget(self, "_buffers")[k] and v.is_leaf and not v.requires_grad then
    v:requires_grad_(true)
  end
end

local function record(self, k, v)
  if type(k) ~= "string" or k:sub(1, 1) ~= "_" then as_parameter(self, k, v) end
  rawset(self, k, v)
  local known = rawget(self, "_known")
  if not known[k] and (type(k) == "number" or (type(k) == "string" and k:sub(1, 1) ~= "_")) then
    known[k] = true
    local order = rawget(self, "_order")
    order[#order + 1] = k
  end
end

local Module = {}

-- An instance's call: forward stays a local of this frame (not a tail call), so an error in a
-- forward that tail-calls still finds its line (crescent.position).
local pass = core.pass
local function call_forward(self, ...)
  local forward = self.forward
  return pass(forward(self, ...))
end
core.entry(call_forward, 2, 1)

local function make_class(parent, name)
  local cls = { __name = name, super = parent }
  cls.__instance_mt = {
    __module = true,
    __index = cls,
    __newindex = record,
    __call = call_forward,
    __tostring = function(self) return self:__repr() end,
  }
  return setmetatable(cls, {
    __index = parent,
    __call = function(c, ...) return c:new(...) end,
    __tostring = function(c) return "nn class " .. c.__name end,
  })
end

-- Module:extend(name) -> a subclass; define `function Sub:init(...)` (calling the parent's init
-- is optional: the base state is set up before init runs) and `function Sub:forward(...)`.
function Module:extend(name)
  if type(name) ~= "string" then fail("Module:extend: argument 1 (name) expected a string, got " .. type(name)) end
  return make_class(self, name)
end

function Module:new(...)
  local self = setmetatable({ _order = {}, _known = {}, _buffers = {}, training = true }, self.__instance_mt)
  self:init(...)
  return self
end

function Module:init() end
function Module:forward()
  fail(self.__name .. ": forward is not defined (define function " .. self.__name .. ":forward(...))")
end

-- traversal -------------------------------------------------------------------------------------

local function field_name(k) return type(k) == "number" and tostring(k - 1) or k end

-- Calls visit(owner, key, value, full_name, is_buffer) for every tensor field, depth first.
-- A module held in several fields is walked once; with every_name, once under each of its names
-- (state_dict, as PyTorch's), still once per path so that a cycle ends.
local function walk_tensors(m, prefix, visit, seen, every_name)
  seen = seen or {}
  if seen[m] then return end
  seen[m] = true
  for _, k in ipairs(rawget(m, "_order")) do
    local v = rawget(m, k)
    local name = prefix .. field_name(k)
    if is_tensor(v) then visit(m, k, v, name, m._buffers[k] ~= nil)
    elseif is_module(v) then walk_tensors(v, name .. ".", visit, seen, every_name) end
  end
  if every_name then seen[m] = nil end
end

-- parameters() -> list of tensors (each once, even when shared)
function Module:parameters()
  local out, seen = {}, {}
  walk_tensors(self, "", function(_, _, v, _, buf)
    if not buf and not seen[v] then seen[v] = true; out[#out + 1] = v end
  end)
  return out
end

-- An iterator over a list of {name, value} pairs.
local function pairs_of(list)
  local i = 0
  return function()
    i = i + 1
    if list[i] then return list[i][1], list[i][2] end
  end
end

local function named_tensors(self, buffers)
  local list = {}
  walk_tensors(self, "", function(_, _, v, name, buf) if buf == buffers then list[#list + 1] = { name, v } end end)
  return pairs_of(list)
end

-- named_parameters() -> an iterator: `for name, p in m:named_parameters() do`
function Module:named_parameters() return named_tensors(self, false) end
function Module:named_buffers() return named_tensors(self, true) end

-- children in definition order: `for name, m in self:named_children() do`
function Module:named_children()
  local list = {}
  for _, k in ipairs(self._order) do
    local v = rawget(self, k)
    if is_module(v) then list[#list + 1] = { field_name(k), v } end
  end
  return pairs_of(list)
end

-- modules() -> this module and all below it, depth first
function Module:modules(out)
  out = out or {}
  out[#out + 1] = self
  for _, m in self:named_children() do m:modules(out) end
  return out
end

function Module:apply(fn)
  for _, m in ipairs(self:modules()) do fn(m) end
  return self
end

function Module:num_parameters()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p:numel() end
  return n
end

-- register_buffer(name, t[, persistent = true]): a tensor that is state but not a parameter
-- (a non-persistent one is left out of state_dict).
function Module:register_buffer(name, t, persistent)
  if type(name) ~= "string" then fail("register_buffer: argument 1 (name) expected a string, got " .. type(name)) end
  if t ~= nil and not is_tensor(t) then fail("register_buffer: argument 2 (tensor) expected a tensor or nil, got " .. type(t)) end
  self._buffers[name] = persistent ~= false and "persistent" or "transient"
  self[name] = t
  return t
end

-- state ------------------------------------------------------------------------------------------

-- The persistent state under PyTorch's names: the module's own tensors, and their names in
-- definition order. A module held in two fields is there under both names, as in PyTorch.
local function state_tensors(self)
  local sd, names = {}, {}
  walk_tensors(self, "", function(m, k, v, name, buf)
    if not buf or m._buffers[k] == "persistent" then sd[name] = v; names[#names + 1] = name end
  end, nil, true)
  return sd, names
end

-- state_dict() -> table name -> tensor (parameters and persistent buffers), detached as PyTorch's:
-- they share the module's memory but record no gradient, so they may be changed in place.
function Module:state_dict()
  local sd = state_tensors(self)
  for name, t in pairs(sd) do sd[name] = t:detach() end
  return sd
end

local sorted_keys = core.sorted_keys

-- load_state_dict(sd[, {strict = true}]) copies sd's tensors into the module's (converting the
-- dtype; sizes must match). strict: a missing or unexpected key is an error naming every such
-- key. Returns {missing_keys =, unexpected_keys =}.
function Module:load_state_dict(sd, opts)
  if type(sd) ~= "table" or is_tensor(sd) then fail("load_state_dict: argument 1 (state_dict) expected a table of tensors, got " .. type(sd)) end
  opts = opts or {}
  local strict = opts.strict ~= false
  local own, order = state_tensors(self)
  local missing, unexpected, wrong = {}, {}, {}
  local zeroed = {}  -- (a BatchNorm's count, absent from checkpoints before torch 0.4.1: 0, as torch)
  for _, name in ipairs(sorted_keys(own)) do
    local src = sd[name]
    if src == nil and (name == "num_batches_tracked" or name:match("%.num_batches_tracked$")) then zeroed[#zeroed + 1] = name
    elseif src == nil then missing[#missing + 1] = name
    elseif not is_tensor(src) then wrong[#wrong + 1] = name .. ": expected a tensor, got " .. type(src)
    elseif src:_shape_str() ~= own[name]:_shape_str() then
      wrong[#wrong + 1] = string.format("%s: the module has shape %s, the state_dict %s", name, own[name]:_shape_str(), src:_shape_str())
    end
  end
  for _, name in ipairs(sorted_keys(sd)) do
    if own[name] == nil then unexpected[#unexpected + 1] = tostring(name) end
  end
  local errs = {}
  if #wrong > 0 then errs[#errs + 1] = "size mismatch for " .. table.concat(wrong, "; ") end
  if strict and #missing > 0 then errs[#errs + 1] = "missing keys: " .. table.concat(missing, ", ") end
  if strict and #unexpected > 0 then errs[#errs + 1] = "unexpected keys: " .. table.concat(unexpected, ", ") end
  if #errs > 0 then fail("load_state_dict: " .. self.__name .. ": " .. table.concat(errs, "; ")) end
  T.no_grad(function()  -- in definition order: of two names of one tensor, the later one's value stays
    for _, name in ipairs(order) do
      if sd[name] ~= nil then own[name]:copy_(sd[name]) end
    end
    for _, name in ipairs(zeroed) do own[name]:zero_() end
  end)
  return { missing_keys = missing, unexpected_keys = unexpected }
end

-- to(device_or_dtype_or_opts): a dtype converts only floating tensors (index buffers keep
-- theirs), as PyTorch's Module.to. A tensor that needs no conversion stays itself, and a tensor
-- held in several fields (tied weights) becomes one converted tensor.
-- A parameter is converted in place (PyTorch's `p.data = converted`): the same Lua tensor, so an
-- optimizer made before keeps training it; it stays a leaf that requires grad, and its grad is
-- converted too. Hooks registered on it stay with the old tensor. Buffers are new tensors.
local function convert(v, arg, dtype)
  if dtype and not FLOATING[v.dtype] then
    return type(arg) == "table" and arg.device and v:to(arg.device) or v
  end
  return v:to(arg)
end

local function convert_in_place(p, converted, arg, dtype)
  local g, requires_grad = p.grad, p.requires_grad
  core.swap_tensors(p, converted)
  if requires_grad then p:requires_grad_(true) end
  if g ~= nil then p.grad = convert(g, arg, dtype) end
  return p
end

function Module:to(arg)
  local dtype = type(arg) == "string" and FLOATING[arg] and arg or (type(arg) == "table" and arg.dtype)
  local done = {}  -- original tensor -> its conversion
  T.no_grad(walk_tensors, self, "", function(m, k, v, _, buf)
    local converted = done[v]
    if converted == nil then
      converted = convert(v, arg, dtype)
      if converted == v then converted = v  -- the same tensor in another handle: keep the field's
      elseif not buf then converted = convert_in_place(v, converted, arg, dtype)
      elseif v.requires_grad then converted:requires_grad_(true) end
      done[v] = converted
    end
    rawset(m, k, converted)
  end)
  return self
end

-- zero_grad([set_to_none = true]): the gradients of the parameters dropped (or zeroed in place)
function Module:zero_grad(set_to_none)
  for _, p in ipairs(self:parameters()) do
    local g = p.grad
    if g ~= nil then
      if set_to_none == false then T.no_grad(function() g:detach():zero_() end) else p.grad = nil end
    end
  end
end

-- requires_grad_([b = true]): every parameter's flag
function Module:requires_grad_(b)
  for _, p in ipairs(self:parameters()) do p:requires_grad_(b ~= false) end
  return self
end
function Module:float() return self:to("float32") end
function Module:double() return self:to("float64") end
function Module:half() return self:to("float16") end
function Module:cpu() return self:to("cpu") end
function Module:cuda() return self:to("cuda") end

function Module:train(mode)
  local on = mode ~= false
  for _, m in ipairs(self:modules()) do rawset(m, "training", on) end
  return self
end
function Module:eval() return self:train(false) end

-- printing: PyTorch's layout; a class adds its settings with extra_repr()
function Module:extra_repr() return "" end
function Module:__repr()
  local lines = {}
  for name, m in self:named_children() do
    local sub = tostring(m):gsub("\n", "\n  ")
    lines[#lines + 1] = "  (" .. name .. "): " .. sub
  end
  local head = self.__name .. "(" .. self:extra_repr()
  if #lines == 0 then return head .. ")" end
  return head .. "\n" .. table.concat(lines, "\n") .. "\n)"
end

nn.Module = make_class(nil, "Module")
for k, v in pairs(Module) do nn.Module[k] = v end

-- layers ------------------------------------------------------------------------------------------

local function positive_int(op, i, name, v)
  if type(v) ~= "number" or v ~= math.floor(v) or v < 1 then
    fail(string.format("%s: argument %d (%s) expected a positive integer, got %s", op, i, name, tostring(v)))
  end
  return v
end
local options = F._check_opts
local function uniform(sizes, bound, dtype)  -- U(-bound, bound)
  return (T.rand(sizes, { dtype = dtype }) * (2 * bound) - bound)
end

-- Linear(in, out[, {bias = true, dtype =}]): y = x W^T + b with W {out, in}, initialised as
-- PyTorch's (uniform in +-1/sqrt(in)).
local Linear = nn.Module:extend("Linear")
function Linear:init(din, dout, opts)
  positive_int("Linear", 1, "in_features", din)
  positive_int("Linear", 2, "out_features", dout)
  opts = options("Linear", 3, opts, { bias = true, dtype = true })
  self.in_features, self.out_features = din, dout
  local bound = 1 / math.sqrt(din)
  self.weight = uniform({ dout, din }, bound, opts.dtype)
  if opts.bias ~= false then self.bias = uniform({ dout }, bound, opts.dtype) end
end
function Linear:forward(x) return T.linear(x, self.weight, self.bias) end
function Linear:extra_repr()
  return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features, self.out_features, tostring(self.bias ~= nil))
end
nn.Linear = Linear

-- Embedding(n, d[, {padding_idx =, max_norm =, norm_type =, dtype =}]): a table of n rows, N(0, 1);
-- looked up with 1-based indices. The padding row (negative: from the end) starts as zeros and gets
-- no gradient; max_norm renormalises the rows looked up (F.embedding).
local Embedding = nn.Module:extend("Embedding")
function Embedding:init(n, d, opts)
  positive_int("Embedding", 1, "num_embeddings", n)
  positive_int("Embedding", 2, "embedding_dim", d)
  opts = options("Embedding", 3, opts, { padding_idx = true, max_norm = true, norm_type = true, dtype = true })
  self.max_norm, self.norm_type = opts.max_norm, opts.norm_type
  self.num_embeddings, self.embedding_dim = n, d
  self.weight = T.randn({ n, d }, { dtype = opts.dtype })
  local p = opts.padding_idx
  if p ~= nil then
    if type(p) ~= "number" or p ~= math.floor(p) or p == 0 or p > n or p < -n then
      fail(string.format("Embedding: padding_idx expected a row of the weight (1..%d or -%d..-1), got %s", n, n, tostring(p)))
    end
    self.padding_idx = p > 0 and p or p + n + 1
    T.no_grad(function() self.weight[self.padding_idx]:zero_() end)
  end
end
function Embedding:forward(idx)
  if self.max_norm == nil then return T.embedding(idx, self.weight, { padding_idx = self.padding_idx }) end
  return F.embedding(idx, self.weight, { padding_idx = self.padding_idx, max_norm = self.max_norm, norm_type = self.norm_type })
end
function Embedding:extra_repr()
  return self.num_embeddings .. ", " .. self.embedding_dim .. (self.padding_idx and ", padding_idx=" .. self.padding_idx or "")
end
nn.Embedding = Embedding

local function norm_shape(op, d)
  if type(d) == "number" then return { positive_int(op, 1, "normalized_shape", d) } end
  if type(d) ~= "table" or #d == 0 then fail(op .. ": argument 1 (normalized_shape) expected a size or a list of sizes, got " .. tostring(d)) end
  for _, s in ipairs(d) do positive_int(op, 1, "normalized_shape", s) end
  return d
end

-- LayerNorm(d[, {eps = 1e-5, elementwise_affine = true, bias = true, dtype =}])
local LayerNorm = nn.Module:extend("LayerNorm")
function LayerNorm:init(d, opts)
  self._shape = norm_shape("LayerNorm", d)
  opts = options("LayerNorm", 2, opts, { eps = true, elementwise_affine = true, bias = true, dtype = true })
  self.eps = opts.eps or 1e-5
  if opts.elementwise_affine ~= false then
    self.weight = T.ones(self._shape, { dtype = opts.dtype })
    if opts.bias ~= false then self.bias = T.zeros(self._shape, { dtype = opts.dtype }) end
  end
end
function LayerNorm:forward(x) return F.layer_norm(x, self._shape, self.weight, self.bias, self.eps) end
function LayerNorm:extra_repr() return "{" .. table.concat(self._shape, ",") .. "}, eps=" .. self.eps end
nn.LayerNorm = LayerNorm

-- RMSNorm(d[, {eps =, elementwise_affine = true, dtype =}]): eps defaults to the dtype's epsilon.
local RMSNorm = nn.Module:extend("RMSNorm")
function RMSNorm:init(d, opts)
  self._shape = norm_shape("RMSNorm", d)
  opts = options("RMSNorm", 2, opts, { eps = true, elementwise_affine = true, dtype = true })
  self.eps = opts.eps
  if opts.elementwise_affine ~= false then self.weight = T.ones(self._shape, { dtype = opts.dtype }) end
end
function RMSNorm:forward(x) return F.rms_norm(x, self._shape, self.weight, self.eps) end
function RMSNorm:extra_repr() return "{" .. table.concat(self._shape, ",") .. "}, eps=" .. tostring(self.eps) end
nn.RMSNorm = RMSNorm

-- activations and dropout
local GELU = nn.Module:extend("GELU")
function GELU:init(opts)
  opts = options("GELU", 1, opts, { approximate = true })
  self._approximate = opts.approximate or "none"
end
function GELU:forward(x) return T.gelu(x, { approximate = self._approximate }) end
function GELU:extra_repr() return "approximate='" .. self._approximate .. "'" end
nn.GELU = GELU

nn.SiLU = nn.Module:extend("SiLU")
function nn.SiLU:forward(x) return T.silu(x) end
nn.ReLU = nn.Module:extend("ReLU")
function nn.ReLU:forward(x) return T.relu(x) end
-- LeakyReLU([negative_slope = 0.01]), ELU([alpha = 1]), SELU(), CELU([alpha = 1]): F's forms
for name, spec in pairs({ LeakyReLU = { F.leaky_relu, "negative_slope", 0.01 }, ELU = { F.elu, "alpha", 1.0 },
  CELU = { F.celu, "alpha", 1.0 } }) do
  local M = nn.Module:extend(name)
  local fn, key, dflt = spec[1], spec[2], spec[3]
  function M:init(v)
    if v ~= nil and type(v) ~= "number" then
      fail(string.format("%s: argument 1 (%s) expected a number, got %s", name, key, type(v)))
    end
    self[key] = v == nil and dflt or v
  end
  function M:forward(x) return fn(x, self[key]) end
  function M:extra_repr() return key .. "=" .. tostring(self[key]) end
  nn[name] = M
end
for name, fn in pairs({ SELU = F.selu, Mish = F.mish, LogSigmoid = F.logsigmoid, Hardsigmoid = F.hardsigmoid,
  Hardswish = F.hardswish }) do
  nn[name] = nn.Module:extend(name)
  nn[name].forward = function(_, x) return fn(x) end
end
-- Hardtanh([min_val = -1[, max_val = 1]]), ReLU6()
nn.Hardtanh = nn.Module:extend("Hardtanh")
function nn.Hardtanh:init(min_val, max_val)
  self.min_val, self.max_val = min_val or -1.0, max_val or 1.0
  for i, key in ipairs({ "min_val", "max_val" }) do
    if type(self[key]) ~= "number" then
      fail(string.format("Hardtanh: argument %d (%s) expected a number, got %s", i, key, type(self[key])))
    end
  end
  if self.max_val <= self.min_val then
    fail(string.format("Hardtanh: max_val expected greater than min_val, got %s <= %s", self.max_val, self.min_val))
  end
end
function nn.Hardtanh:forward(x) return F.hardtanh(x, self.min_val, self.max_val) end
function nn.Hardtanh:extra_repr()
  return "min_val=" .. tostring(self.min_val) .. ", max_val=" .. tostring(self.max_val)
end
nn.ReLU6 = nn.Module:extend("ReLU6")
function nn.ReLU6:forward(x) return F.relu6(x) end
-- Softplus([beta = 1[, threshold = 20]])
nn.Softplus = nn.Module:extend("Softplus")
function nn.Softplus:init(beta, threshold)
  for i, v in ipairs({ [1] = beta or 1, [2] = threshold or 20 }) do
    if type(v) ~= "number" then
      local name = i == 1 and "beta" or "threshold"
      fail(string.format("Softplus: argument %d (%s) expected a number, got %s", i, name, type(v)))
    end
  end
  self.beta, self.threshold = beta or 1, threshold or 20
end
function nn.Softplus:forward(x) return F.softplus(x, self.beta, self.threshold) end
function nn.Softplus:extra_repr()
  return "beta=" .. tostring(self.beta) .. ", threshold=" .. tostring(self.threshold)
end

local Dropout = nn.Module:extend("Dropout")
function Dropout:init(p)
  p = p == nil and 0.5 or p
  if type(p) ~= "number" or p < 0 or p > 1 then fail("Dropout: argument 1 (p) expected a probability in [0, 1], got " .. tostring(p)) end
  self.p = p
end
function Dropout:forward(x) return F.dropout(x, self.p, self.training) end
function Dropout:extra_repr() return "p=" .. self.p end
nn.Dropout = Dropout

-- nn.utils ------------------------------------------------------------------------------------------

nn.utils = {}

local function param_list(op, params)
  if is_tensor(params) then return { params } end
  if is_module(params) then return params:parameters() end
  if type(params) ~= "table" then fail(op .. ": argument 1 (parameters) expected a tensor or a list of tensors, got " .. type(params)) end
  for i, p in ipairs(params) do
    if not is_tensor(p) then fail(string.format("%s: parameter %d expected a tensor, got %s", op, i, type(p))) end
  end
  return params
end

-- clip_grad_norm_(parameters, max_norm[, norm_type = 2[, {error_if_nonfinite = false}]]): scales
-- the gradients in place so that their joint norm is at most max_norm; returns that norm (a 0-d
-- tensor, before clipping), as torch.nn.utils.clip_grad_norm_.
function nn.utils.clip_grad_norm_(params, max_norm, norm_type, opts)
  local op = "clip_grad_norm_"
  if type(norm_type) == "table" then norm_type, opts = nil, norm_type end
  opts = options(op, 4, opts, { error_if_nonfinite = true })
  if type(max_norm) ~= "number" then fail(op .. ": argument 2 (max_norm) expected a number, got " .. type(max_norm)) end
  norm_type = norm_type or 2
  if type(norm_type) ~= "number" then fail(op .. ": argument 3 (norm_type) expected a number, got " .. type(norm_type)) end
  local grads = {}
  for _, p in ipairs(param_list(op, params)) do
    if p.grad ~= nil then grads[#grads + 1] = p.grad end
  end
  if #grads == 0 then return T.zeros({}) end
  return T.no_grad(function()
    local norms = {}
    for i, g in ipairs(grads) do
      norms[i] = norm_type == math.huge and g:abs():amax() or g:norm(nil, false, { p = norm_type })
    end
    local all = #norms == 1 and norms[1] or T.stack(norms)
    local total = norm_type == math.huge and all:amax() or all:norm(nil, false, { p = norm_type })
    local v = opts.error_if_nonfinite and total:item()  -- (reads the device only when asked to)
    if v and (v ~= v or v == math.huge or v == -math.huge) then
      fail(string.format("%s: The total norm of order %s for gradients from `parameters` is non-finite, so it cannot be " ..
        "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set `error_if_nonfinite=False`", op, tostring(norm_type)))
    end
    local coef = (max_norm / (total + 1e-6)):clamp(nil, 1.0)
    for _, g in ipairs(grads) do g:mul_(coef) end
    return total
  end)
end

-- clip_grad_value_(parameters, clip_value): clamps the gradients in place to [-clip_value,
-- clip_value], as torch.nn.utils.clip_grad_value_
function nn.utils.clip_grad_value_(params, clip_value)
  local op = "clip_grad_value_"
  if type(clip_value) ~= "number" then fail(op .. ": argument 2 (clip_value) expected a number, got " .. type(clip_value)) end
  T.no_grad(function()
    for _, p in ipairs(param_list(op, params)) do
      if p.grad ~= nil then p.grad:clamp_(-clip_value, clip_value) end
    end
  end)
end

-- containers ------------------------------------------------------------------------------------

local function add_items(op, self, list)
  for i, m in ipairs(list) do
    if not is_module(m) then fail(string.format("%s: item %d expected a module, got %s", op, i, type(m))) end
    self[#self + 1] = m
  end
end

-- Sequential(m1, m2, ...): forward feeds each module's result to the next.
local Sequential = nn.Module:extend("Sequential")
function Sequential:init(...) add_items("Sequential", self, { ... }) end
function Sequential:forward(x)
  for i = 1, #self do x = self[i](x) end
  return x
end
nn.Sequential = Sequential

-- ModuleList(list): holds modules (self[1], #self, ipairs); it has no forward of its own.
local ModuleList = nn.Module:extend("ModuleList")
function ModuleList:init(list)
  if list ~= nil and (type(list) ~= "table" or is_module(list)) then
    fail("ModuleList: argument 1 expected a list of modules, got " .. (is_module(list) and "a module" or type(list)))
  end
  add_items("ModuleList", self, list or {})
end
function ModuleList:append(m)
  add_items("ModuleList:append", self, { m })
  return self
end
function ModuleList:forward() fail("ModuleList: it has no forward; call its modules (self.list[i](x))") end
nn.ModuleList = ModuleList

-- ModuleDict(items): modules by name (self.name or self[name]), in the order given: items is a list
-- of {name, module} pairs, or a table name -> module (taken in sorted name order).
local ModuleDict = nn.Module:extend("ModuleDict")
local function dict_pairs(op, items)
  if items == nil then return {} end
  if type(items) ~= "table" or is_module(items) then fail(op .. ": argument 1 expected a table of modules, got " .. (is_module(items) and "a module" or type(items))) end
  if #items > 0 then return items end
  local list = {}
  for k, v in pairs(items) do list[#list + 1] = { k, v } end
  table.sort(list, function(a, b) return tostring(a[1]) < tostring(b[1]) end)
  return list
end
function ModuleDict:init(items) self:update(items) end
function ModuleDict:update(items)
  for _, kv in ipairs(dict_pairs("ModuleDict", items)) do
    local k, m = kv[1], kv[2]
    if type(k) ~= "string" or k:sub(1, 1) == "_" then fail("ModuleDict: keys expected names (strings not starting with _), got " .. tostring(k)) end
    if ModuleDict[k] ~= nil or nn.Module[k] ~= nil then fail("ModuleDict: key '" .. k .. "' is the name of a method") end
    if not is_module(m) then fail(string.format("ModuleDict: item '%s' expected a module, got %s", k, type(m))) end
    self[k] = m
  end
  return self
end
function ModuleDict:keys()
  local ks = {}
  for k in self:named_children() do ks[#ks + 1] = k end
  return ks
end
function ModuleDict:items() return self:named_children() end
function ModuleDict:values()
  local vs = {}
  for _, m in self:named_children() do vs[#vs + 1] = m end
  return vs
end
function ModuleDict:len() return #self:keys() end
function ModuleDict:forward() fail("ModuleDict: it has no forward; call its modules (self.dict.name(x))") end
nn.ModuleDict = ModuleDict

-- ParameterList(list): tensors held as parameters (self[1], #self, ipairs), named "0", "1", ...
local ParameterList = nn.Module:extend("ParameterList")
function ParameterList:init(list)
  if list ~= nil and (type(list) ~= "table" or is_tensor(list) or is_module(list)) then
    fail("ParameterList: argument 1 expected a list of tensors, got " .. type(list))
  end
  for _, p in ipairs(list or {}) do self:append(p) end
end
function ParameterList:append(p)
  if not is_tensor(p) then fail("ParameterList:append: expected a tensor, got " .. type(p)) end
  self[#self + 1] = p
  return self
end
function ParameterList:forward() fail("ParameterList: it has no forward") end
nn.ParameterList = ParameterList

require("crescent.nn_layers").install(nn, { positive_int = positive_int, options = options, uniform = uniform })
require("crescent.nn_quant").install(nn)
nn.init = require "crescent.nn_init"
require("crescent.nn_losses").install(nn, F)

return nn
