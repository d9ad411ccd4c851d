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

-- A new field's name is recorded (traversals keep definition order); tensors and modules are state
-- whatever the name. A tensor that is no buffer is a parameter (a floating leaf starts requiring
-- grad), unless it has a grad_fn (an activation kept on self: an attribute) and no nn.Parameter.
local FLOATING = { float32 = true, float64 = true, float16 = true, bfloat16 = true }
local PARAMETER = setmetatable({}, { __mode = "k" })  -- tensors nn.Parameter made: their requires_grad
local function as_parameter(v)
  if FLOATING[v.dtype] and v.is_leaf and not v.requires_grad and PARAMETER[v] ~= false then v:requires_grad_(true) end
end

local function record(self, k, v)
  local tensor = is_tensor(v)
  local attrs = rawget(self, "_attrs")
  attrs[k] = nil
  if tensor and not rawget(self, "_buffers")[k] then
    if PARAMETER[v] == nil and v.requires_grad and not v.is_leaf then attrs[k] = true else as_parameter(v) end
  end
  rawset(self, k, v)
  local known = rawget(self, "_known")
  if not known[k] and (tensor or is_module(v) or type(k) == "number" or (type(k) == "string" and k:sub(1, 1) ~= "_")) then
    known[k] = true
    local order = rawget(self, "_order")
    order[#order + 1] = k
  end
end

-- nn.Parameter(t[, requires_grad = true]): t's data as a leaf parameter (a module field taking it
-- registers it whatever it is)
function nn.Parameter(t, requires_grad)
  if not is_tensor(t) then fail("Parameter: argument 1 (data) expected a tensor, got " .. type(t)) end
  local p = t:detach()
  if requires_grad ~= false then p:requires_grad_(true) end
  PARAMETER[p] = requires_grad ~= false
  return p
end

local Module = {}

-- An instance's call: forward stays a local of this frame (not a tail call), so an error in a
-- forward that tail-calls still finds its line (crescent.position).
local pass = core.pass
-- forward with the module's hooks (register_forward_pre_hook / register_forward_hook): a pre-hook
-- may return new arguments (a list, or one value), a hook a new (first) result
local function with_hooks(self, forward, ...)
  local h = rawget(self, "_fwd_hooks")
  local args = { n = select("#", ...), ... }
  for _, e in ipairs(h.pre) do
    local r = e.fn(self, unpack(args, 1, args.n))
    if r ~= nil then
      if type(r) == "table" and not is_tensor(r) and not is_module(r) then args = { n = #r, unpack(r) } else args = { n = 1, r } end
    end
  end
  local outs = { forward(self, unpack(args, 1, args.n)) }
  for _, e in ipairs(h.post) do
    local r = e.fn(self, args, outs[1])
    if r ~= nil then outs[1] = r end
  end
  return unpack(outs, 1, math.max(#outs, 1))
end
local function call_forward(self, ...)
  local forward = self.forward
  if rawget(self, "_fwd_hooks") then return pass(with_hooks(self, forward, ...)) end
  return pass(forward(self, ...))
end
core.entry(call_forward, 2, 1)

local function make_class(parent, name)
  local cls = { __name = name, super = parent }
  cls.__instance_mt = {
    __module = true,
    __class = cls,
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
  local self = setmetatable({ _order = {}, _known = {}, _buffers = {}, _attrs = {}, training = true }, self.__instance_mt)
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
-- In torch's order: a module's parameters, then its buffers, then its children's (recurse false:
-- the module's own only).
local function walk_tensors(m, prefix, visit, seen, every_name, recurse)
  seen = seen or {}
  if seen[m] then return end
  seen[m] = true
  local order, buffers, attrs = rawget(m, "_order"), rawget(m, "_buffers"), rawget(m, "_attrs")
  for pass = 1, 2 do  -- (parameters, then buffers)
    for _, k in ipairs(order) do
      local v = rawget(m, k)
      if is_tensor(v) and not attrs[k] and (buffers[k] ~= nil) == (pass == 2) then
        visit(m, k, v, prefix .. field_name(k), pass == 2)
      end
    end
  end
  if recurse ~= false then
    for _, k in ipairs(order) do
      local v = rawget(m, k)
      if is_module(v) then walk_tensors(v, prefix .. field_name(k) .. ".", visit, seen, every_name) end
    end
  end
  if every_name then seen[m] = nil end
end

-- parameters([recurse = true]) -> list of tensors (each once, even when shared)
function Module:parameters(recurse)
  local out, seen = {}, {}
  walk_tensors(self, "", function(_, _, v, _, buf)
    if not buf and not seen[v] then seen[v] = true; out[#out + 1] = v end
  end, nil, nil, recurse)
  return out
end

-- The values of a (name, value) iterator, as a list.
local function values(iter)
  local out = {}
  for _, v in iter do out[#out + 1] = v end
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

-- each tensor once, under its first name (a tied weight too), as torch's
local function named_tensors(self, buffers, prefix, recurse)
  local list, seen = {}, {}
  walk_tensors(self, prefix or "", function(_, _, v, name, buf)
    if buf == buffers and not seen[v] then seen[v] = true; list[#list + 1] = { name, v } end
  end, nil, nil, recurse)
  return pairs_of(list)
end

-- named_parameters([prefix[, recurse = true]]) -> an iterator: `for name, p in m:named_parameters() do`
function Module:named_parameters(prefix, recurse) return named_tensors(self, false, prefix, recurse) end
function Module:named_buffers(prefix, recurse) return named_tensors(self, true, prefix, recurse) end
function Module:buffers(recurse) return values(self:named_buffers(nil, recurse)) end

-- children in definition order, each once: `for name, m in self:named_children() do`
function Module:named_children()
  local list, seen = {}, {}
  for _, k in ipairs(self._order) do
    local v = rawget(self, k)
    if is_module(v) and not seen[v] then seen[v] = true; list[#list + 1] = { field_name(k), v } end
  end
  return pairs_of(list)
end
function Module:children() return values(self:named_children()) end

-- named_modules([prefix]) -> an iterator over this module ("") and every one below it, each once,
-- depth first; modules() -> the list of them
function Module:named_modules(prefix)
  local list, seen = {}, {}
  local function walk(m, name)
    if seen[m] then return end
    seen[m] = true
    list[#list + 1] = { name, m }
    for k, c in m:named_children() do walk(c, name == "" and k or name .. "." .. k) end
  end
  walk(self, prefix or "")
  return pairs_of(list)
end
function Module:modules() return values(self:named_modules()) end

-- apply(fn): fn on every child's modules first, then on this one, as torch's
function Module:apply(fn)
  for _, m in self:named_children() do m:apply(fn) end
  fn(self)
  return self
end

function Module:num_parameters()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p:numel() end
  return n
end

-- A new state's name: torch's KeyErrors for "", a dotted name and one a parameter, a buffer of
-- another kind or a child already holds.
local function new_name(op, self, name, kind)
  if type(name) ~= "string" then fail(op .. ": argument 1 (name) expected a string, got " .. type(name)) end
  if name == "" or name:find(".", 1, true) then fail(string.format('%s: name can\'t be empty or contain ".", got "%s"', op, name)) end
  local old = rawget(self, name)
  local old_kind = is_module(old) and "module" or is_tensor(old) and (self._buffers[name] and "buffer" or "parameter") or nil
  if old_kind and old_kind ~= kind then fail(string.format("%s: attribute '%s' already exists (a %s)", op, name, old_kind)) end
end
nn._new_name = new_name

-- register_buffer(name, t[, persistent = true | {persistent =}]): a tensor that is state but not
-- a parameter (a non-persistent one is left out of state_dict).
function Module:register_buffer(name, t, persistent)
  new_name("register_buffer", self, name, "buffer")
  if t ~= nil and not is_tensor(t) then fail("register_buffer: argument 2 (tensor) expected a tensor or nil, got " .. type(t)) end
  if type(persistent) == "table" then persistent = F._check_opts("register_buffer", 3, persistent, { persistent = true }).persistent end
  self._buffers[name] = persistent ~= false and "persistent" or "transient"
  self[name] = t
  return t
end

-- add_module(name, m) / register_module: a child under a name; get_submodule / get_parameter /
-- get_buffer("a.b.c"): the module, parameter or buffer a dotted path names
function Module:add_module(name, m)
  new_name("add_module", self, name, "module")
  if m ~= nil and not is_module(m) then fail("add_module: argument 2 (module) expected a module or nil, got " .. type(m)) end
  self[name] = m
end
Module.register_module = Module.add_module
function Module:get_submodule(target)
  local m = self
  if target == "" then return m end
  for part in tostring(target):gmatch("[^.]+") do
    local c = rawget(m, tonumber(part) and tonumber(part) + 1 or part)
    if not is_module(c) then fail(string.format("get_submodule: %s has no attribute `%s`", m.__name, part)) end
    m = c
  end
  return m
end
local function get_tensor(op, buffer)
  return function(self, target)
    local path, name = tostring(target):match("^(.*)%.([^.]+)$")
    local m = self:get_submodule(path or "")
    local t = rawget(m, tonumber(name or target) and tonumber(name or target) + 1 or (name or target))
    if not is_tensor(t) or (m._buffers[name or target] ~= nil) ~= buffer or rawget(m, "_attrs")[name or target] then
      fail(string.format("%s: %s has no %s `%s`", op, m.__name, buffer and "buffer" or "parameter", name or target))
    end
    return t
  end
end
Module.get_parameter, Module.get_buffer = get_tensor("get_parameter", false), get_tensor("get_buffer", true)
-- a field's removal (ModuleDict:pop): out of the traversal order too
function Module:_remove(k)
  rawset(self, k, nil)
  rawget(self, "_known")[k] = nil
  local order = rawget(self, "_order")
  for i, o in ipairs(order) do if o == k then table.remove(order, i) break end end
end

-- register_forward_pre_hook(fn) / register_forward_hook(fn): fn(module, args...) before forward,
-- fn(module, args, result) after it (see with_hooks); a handle with :remove()
local function add_forward_hook(kind)
  return function(self, fn)
    if type(fn) ~= "function" then fail("register_forward_" .. (kind == "pre" and "pre_" or "") .. "hook: expected a function, got " .. type(fn)) end
    local h = rawget(self, "_fwd_hooks")
    if not h then h = { pre = {}, post = {} }; rawset(self, "_fwd_hooks", h) end
    local e = { fn = fn }
    table.insert(h[kind], e)
    return { remove = function()
      for i, x in ipairs(h[kind]) do if x == e then table.remove(h[kind], i) break end end
      if #h.pre == 0 and #h.post == 0 and rawget(self, "_fwd_hooks") == h then rawset(self, "_fwd_hooks", nil) end
    end }
  end
end
Module.register_forward_pre_hook, Module.register_forward_hook = add_forward_hook("pre"), add_forward_hook("post")

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

-- state_dict([{prefix = "", keep_vars = false}]) -> table name -> tensor (parameters and
-- persistent buffers), detached as PyTorch's: they share the module's memory but record no
-- gradient, so they may be changed in place (keep_vars: the tensors themselves).
function Module:state_dict(opts)
  opts = F._check_opts("state_dict", 1, opts, { prefix = true, keep_vars = true })
  local sd, out = state_tensors(self), {}
  for name, t in pairs(sd) do out[(opts.prefix or "") .. name] = opts.keep_vars and t or t:detach() end
  return out
end

local sorted_keys = core.sorted_keys

-- load_state_dict(sd[, {strict = true}]) copies sd's tensors into the module's (converting the
-- dtype; sizes must match). strict: a missing or unexpected key is an error naming every such
-- key. Returns {missing_keys =, unexpected_keys =}.
function Module:load_state_dict(sd, opts)
  if type(sd) ~= "table" or is_tensor(sd) then fail("load_state_dict: argument 1 (state_dict) expected a table of tensors, got " .. type(sd)) end
  opts = F._check_opts("load_state_dict", 2, opts, { strict = true })
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
-- converted too, and its hooks move with it. Buffers are new tensors.
local DTYPE_NAMES = {}
for _, name in pairs(core.dtypes) do DTYPE_NAMES[name] = true end
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
  local rc = core.api.autograd.move_hooks(core.ctx, core.ptr(converted), core.ptr(p))
  if rc ~= 0 then core.raise(rc) end
  if g ~= nil then p.grad = convert(g, arg, dtype) end
  return p
end

function Module:to(arg)
  local dtype = type(arg) == "string" and FLOATING[arg] and arg or (type(arg) == "table" and arg.dtype)
  local named = type(arg) == "string" and DTYPE_NAMES[arg]
  if (dtype and not FLOATING[dtype]) or named and not FLOATING[arg] then  -- (checked before anything changes)
    fail("to: nn.Module.to only accepts floating point dtypes, got " .. tostring(dtype or arg))
  end
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
function Module:bfloat16() return self:to("bfloat16") end
function Module:type(dtype) return self:to(dtype) end
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
  -- (Lua's true / false / nil as torch prints Python's)
  local extra = self:extra_repr():gsub("=true%f[%W]", "=True"):gsub("=false%f[%W]", "=False"):gsub("=nil%f[%W]", "=None")
  local head = self.__name .. "(" .. extra
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

-- Embedding(n, d[, {padding_idx =, max_norm =, norm_type =, scale_grad_by_freq =, sparse =, dtype =}]):
-- a table of n rows, N(0, 1); looked up with 1-based indices. The padding row (negative: from the
-- end) starts as zeros and gets no gradient; max_norm renormalises the rows looked up (F.embedding).
local Embedding = nn.Module:extend("Embedding")
function Embedding:init(n, d, opts)
  positive_int("Embedding", 1, "num_embeddings", n)
  positive_int("Embedding", 2, "embedding_dim", d)
  opts = options("Embedding", 3, opts, { padding_idx = true, max_norm = true, norm_type = true, scale_grad_by_freq = true,
                                         sparse = true, dtype = true })
  if opts.sparse then fail("Embedding: sparse = true is not implemented (crescent has no sparse tensors): the gradient is dense") end
  self.max_norm, self.norm_type, self.scale_grad_by_freq = opts.max_norm, opts.norm_type, opts.scale_grad_by_freq or nil
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
  if self.max_norm == nil then
    return T.embedding(idx, self.weight, { padding_idx = self.padding_idx, scale_grad_by_freq = self.scale_grad_by_freq })
  end
  return F.embedding(idx, self.weight, { padding_idx = self.padding_idx, max_norm = self.max_norm, norm_type = self.norm_type,
                                         scale_grad_by_freq = self.scale_grad_by_freq })
end
function Embedding:extra_repr()
  return self.num_embeddings .. ", " .. self.embedding_dim .. (self.padding_idx and ", padding_idx=" .. self.padding_idx or "")
    .. (self.max_norm and ", max_norm=" .. self.max_norm or "")
    .. (self.norm_type and self.norm_type ~= 2 and ", norm_type=" .. self.norm_type or "")
    .. (self.scale_grad_by_freq and ", scale_grad_by_freq=True" or "")
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
-- (a shape as torch's tuple: "(16,)", "(4, 8)")
local function tuple_str(s) return "(" .. table.concat(s, ", ") .. (#s == 1 and ",)" or ")") end
function LayerNorm:extra_repr()
  return tuple_str(self._shape) .. ", eps=" .. self.eps .. ", elementwise_affine=" .. tostring(self.weight ~= nil)
end
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
function RMSNorm:extra_repr()
  return tuple_str(self._shape) .. ", eps=" .. tostring(self.eps) .. ", elementwise_affine=" .. tostring(self.weight ~= nil)
end
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
function Dropout:extra_repr() return "p=" .. self.p .. ", inplace=False" end
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

require("crescent.nn_containers").install(nn)
require("crescent.nn_layers").install(nn, { positive_int = positive_int, options = options, uniform = uniform })
require("crescent.nn_quant").install(nn)
nn.init = require "crescent.nn_init"
require("crescent.nn_losses").install(nn, F)

return nn
