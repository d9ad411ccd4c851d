-- T.nn.parallel.DistributedDataParallel(module[, {bucket_cap_mb = 25, broadcast_buffers = true,
-- process_group = (M.default_group)}]):
-- data-parallel training over T.distributed, as torch's DDP. At construction rank 0's parameters
-- and buffers are broadcast to every rank. The parameters that require grad are grouped, in
-- reverse order (the order backward reaches them), into buckets of at most bucket_cap_mb of one
-- dtype; a post-accumulate-grad hook copies each gradient into its bucket's flat buffer, and a
-- full bucket is all-reduced (average) asynchronously while backward goes on - buckets launch in
-- index order on every rank, as NCCL needs. A callback at the end of backward waits for them and
-- copies the averages back into .grad (gradient_as_bucket_view = true: .grad becomes a view of
-- the bucket instead, no copy back). On the default group the buckets are also registered for
-- compiled backward graphs (vm/graph/buckets.hpp): a bucket whose gradients one compiled
-- segment makes is reduced inside that graph, started right after its last gradient, and its
-- hook only counts it. Inside ddp:no_sync(fn) gradients only accumulate locally; the next
-- backward outside it reduces the sum. state_dict / load_state_dict are the wrapped module's
-- (no "module." prefix: checkpoints load into the bare model and back).
local core = require "crescent.core"
local autograd = require "crescent.autograd"
local fail, ffi, dist = core.fail, core.ffi, core.api.dist

local M = {}
local T, D  -- crescent and T.distributed, bound by M.bind

local OPTS = { bucket_cap_mb = true, broadcast_buffers = true, device_ids = true, output_device = true, process_group = true,
  find_unused_parameters = true, gradient_as_bucket_view = true }

local function check_opts(opts)
  if type(opts) ~= "table" then fail("DistributedDataParallel: options expected a table, got " .. type(opts)) end
  for k in pairs(opts) do
    if not OPTS[k] then fail("DistributedDataParallel: unknown option '" .. tostring(k) .. "'") end
  end
  if opts.find_unused_parameters then
    fail("DistributedDataParallel: find_unused_parameters = true is not implemented (every parameter that requires grad must get a gradient)")
  end
  local mb = opts.bucket_cap_mb or 25
  if type(mb) ~= "number" or mb <= 0 then fail("DistributedDataParallel: bucket_cap_mb expected a positive number, got " .. tostring(mb)) end
  return mb
end

local SIZES = { float32 = 4, float64 = 8, float16 = 2, bfloat16 = 2 }
M.SIZES = SIZES  -- (bytes per element)

-- The buckets of a reduction: the parameters in reverse order (the order backward reaches them),
-- at most cap_bytes of one key (dtype and device) each, a larger parameter alone. params: a list
-- of {numel =, bytes =, key =}; returns {{key =, numel =, entries = {{index =, offset =, numel =}}}}.
function M.plan(params, cap_bytes)
  local buckets, cur = {}, nil
  for i = #params, 1, -1 do
    local p = params[i]
    if not cur or cur.key ~= p.key or (cur.bytes + p.bytes > cap_bytes and #cur.entries > 0) then
      cur = { key = p.key, numel = 0, bytes = 0, entries = {} }
      buckets[#buckets + 1] = cur
    end
    cur.entries[#cur.entries + 1] = { index = i, offset = cur.numel, numel = p.numel }
    cur.numel, cur.bytes = cur.numel + p.numel, cur.bytes + p.bytes
  end
  return buckets
end

-- M.plan of parameter tensors: each bucket gets its dtype and device, each entry its param;
-- group (optional): a parameter's group number, kept apart as the dtype is
function M.buckets_of(params, cap_bytes, group)
  local info = {}
  for i, p in ipairs(params) do
    local key = p.dtype .. "@" .. p.device .. (group and "#" .. group[p] or "")
    info[i] = { numel = p:numel(), bytes = p:numel() * (SIZES[p.dtype] or 8), key = key }
  end
  local buckets = M.plan(info, cap_bytes)
  for _, b in ipairs(buckets) do
    b.dtype, b.device = params[b.entries[1].index].dtype, params[b.entries[1].index].device
    for _, e in ipairs(b.entries) do e.param = params[e.index] end
  end
  return buckets
end

-- each bucket's flat buffer, and each entry's slot in it (a view shaped as its parameter, made
-- once: the hooks then copy without making views)
local function make_buckets(params, cap_bytes)
  local buckets = M.buckets_of(params, cap_bytes)
  for _, b in ipairs(buckets) do
    b.flat = T.zeros({ b.numel }, { dtype = b.dtype, device = b.device })
    for _, e in ipairs(b.entries) do e.slot = b.flat:narrow(1, e.offset + 1, e.numel):view(e.param.shape) end
  end
  return buckets
end

-- The default process group as DDP and the sharded optimizer use it: {rank, world, all_reduce(t),
-- reduce_scatter(out, t), all_gather(out, t)} (average; asynchronous: a work handle), broadcast(t)
-- from rank 0. A table of these is what the process_group option takes.
function M.default_group(who)
  if not D.is_initialized() then fail(who .. ": the default process group is not initialized (T.distributed.init_process_group)") end
  return {
    rank = D.get_rank(), world = D.get_world_size(),
    all_reduce = function(t) return D.all_reduce(t, { op = "avg", async_op = true }) end,
    reduce_scatter = function(out, t) return D.reduce_scatter_tensor(out, t, { op = "avg", async_op = true }) end,
    all_gather = function(out, t) return D.all_gather_into_tensor(out, t, { async_op = true }) end,
    broadcast = function(t) T.no_grad(function() D.broadcast(t, 0) end) end,
  }
end

-- opts.process_group (checked), else the default group
function M.group_of(who, opts)
  local g = opts.process_group
  if g == nil then return M.default_group(who), true end
  if type(g) ~= "table" or type(g.world) ~= "number" or type(g.rank) ~= "number" then
    fail(who .. ": process_group expected a table {rank =, world =, all_reduce =, ...}, got " .. type(g))
  end
  return g, false
end

local function broadcast_all(group, tensors)
  for _, t in ipairs(tensors) do group.broadcast(t) end
end

local function module_buffers(m)
  local out = {}
  for _, b in m:named_buffers() do out[#out + 1] = b end
  return out
end

local DDP  -- the class, made by M.bind (it needs T.nn)

-- backward ------------------------------------------------------------------------------------

-- (a bucket a compiled backward graph reduced has no work to launch or wait for)
local function launch_ready(self)
  local r = self._reducer
  while r.next <= #r.buckets and r.buckets[r.next].pending == 0 do
    local b = r.buckets[r.next]
    if not b.in_graph then b.work = self._group.all_reduce(b.flat) end
    r.next = r.next + 1
  end
end

-- raises unless buckets `next` on were all launched in this backward (a parameter got no gradient)
function M.check_complete(who, buckets, next, ready)
  if next > #buckets then return end
  local missing = {}
  for i = next, #buckets do
    for _, e in ipairs(buckets[i].entries) do
      if not ready[e.param] then missing[#missing + 1] = table.concat(e.param.shape, "x") end
    end
  end
  fail(who .. ": " .. #missing .. " parameter(s) that require grad got no gradient in this backward (shapes "
    .. table.concat(missing, ", ") .. "); every parameter must take part in the loss")
end

-- the end of backward: every bucket reduced, the averages back in .grad
local function finish(self)
  local r = self._reducer
  M.check_complete("DistributedDataParallel", r.buckets, r.next, r.ready)
  for _, b in ipairs(r.buckets) do
    if b.work then b.work:wait() end
    b.work = nil
  end
  T.no_grad(function()
    for _, b in ipairs(r.buckets) do
      for _, e in ipairs(b.entries) do
        if not b.in_graph and not r.viewed[e.param] then e.param.grad:copy_(e.slot) end
      end
    end
  end)
end

-- a parameter's .grad is complete for this backward
local function on_grad(self, p)
  if not self._sync then return end
  local r = self._reducer
  if r.pass ~= autograd.pass() then  -- the first gradient of this backward
    for _, b in ipairs(r.buckets) do
      if b.work then b.work:wait() end  -- (a backward that failed left it in flight)
      b.work, b.pending, b.in_graph = nil, #b.entries, nil
    end
    r.pass, r.next, r.ready, r.viewed = autograd.pass(), 1, {}, {}
    autograd.queue_callback(function() finish(self) end)
  end
  if r.ready[p] then return end
  r.ready[p] = true
  local b, e = r.where[p][1], r.where[p][2]
  if r.graph_id and dist.buckets_take_reduced(r.graph_id, core.ptr(p)) ~= 0 then
    b.in_graph = true  -- (the whole bucket: a graph reduces buckets, not single gradients)
  else
    T.no_grad(function() e.slot:copy_(p.grad) end)
    -- (not while capturing a whole step: .grad then is a value of the graph being recorded)
    if self._grad_views and core.ctx.capturing == 0 then p.grad, r.viewed[p] = e.slot, true end
  end
  b.pending = b.pending - 1
  if b.pending == 0 then launch_ready(self) end
end

-- the class -------------------------------------------------------------------------------------

-- The buckets for compiled backward graphs (buckets.hpp); released with the reducer.
local function register_graph_buckets(buckets)
  local leaves, sizes = {}, ffi.new("int32_t[?]", #buckets)
  for i, b in ipairs(buckets) do
    sizes[i - 1] = #b.entries
    for _, e in ipairs(b.entries) do leaves[#leaves + 1] = e.param end
  end
  local arr = ffi.new("cr_tensor*[?]", #leaves)
  for i, p in ipairs(leaves) do arr[i - 1] = core.ptr(p) end
  local id = dist.buckets_register(core.ctx, arr, sizes, #buckets)
  if id < 0 then core.raise(id) end
  return id, ffi.gc(ffi.new("int32_t[1]", id), function(h) dist.buckets_release(h[0]) end)
end

local function init(self, module, opts)
  if not T.nn.is_module(module) then fail("DistributedDataParallel: argument 1 expected a module, got " .. type(module)) end
  opts = opts or {}
  local mb = check_opts(opts)
  local group, nccl = M.group_of("DistributedDataParallel", opts)
  self.module, self._group = module, group
  self._sync, self._broadcast_buffers = true, opts.broadcast_buffers ~= false
  local params = {}
  for _, p in ipairs(module:parameters()) do
    if p.requires_grad then params[#params + 1] = p end
    if nccl and p.device ~= D.device() then
      fail("DistributedDataParallel: the module's parameters must be on " .. D.device() .. ", one is on " .. p.device)
    end
  end
  broadcast_all(group, module:parameters())
  broadcast_all(group, module_buffers(module))
  local buckets = make_buckets(params, mb * 1024 * 1024)
  local where = {}
  for _, b in ipairs(buckets) do
    for _, e in ipairs(b.entries) do where[e.param] = { b, e } end
  end
  self._reducer = { buckets = buckets, where = where }
  self._grad_views = opts.gradient_as_bucket_view == true
  if nccl then self._reducer.graph_id, self._reducer.graph_handle = register_graph_buckets(buckets) end
  self._hooks = {}
  for _, p in ipairs(params) do
    self._hooks[#self._hooks + 1] = p:register_post_accumulate_grad_hook(function() on_grad(self, p) end)
  end
end

local function forward(self, ...)
  if self._broadcast_buffers and self.training then
    local bufs = module_buffers(self.module)
    if #bufs > 0 then broadcast_all(self._group, bufs) end
  end
  return self.module(...)
end

-- reduction on or off, for the hooks and the compiled backward graphs
local function set_sync(self, on)
  self._sync = on
  if self._reducer.graph_id then dist.buckets_set_sync(self._reducer.graph_id, on and 1 or 0) end
end

local function restore(self, prev, ok, ...)
  set_sync(self, prev)
  if not ok then error((...), 0) end
  return ...
end

-- ddp:no_sync(fn, ...): runs fn(...) with gradient reduction off (local accumulation); returns its results
local function no_sync(self, fn, ...)
  if type(fn) ~= "function" then fail("DistributedDataParallel:no_sync: argument 1 expected a function, got " .. type(fn)) end
  local prev = self._sync
  set_sync(self, false)
  return restore(self, prev, pcall(fn, ...))
end

function M.bind(t)
  T, D = t, t.distributed
  DDP = T.nn.Module:extend("DistributedDataParallel")
  DDP.init, DDP.forward, DDP.no_sync = init, forward, no_sync
  function DDP:state_dict() return self.module:state_dict() end
  function DDP:load_state_dict(sd, opts) return self.module:load_state_dict(sd, opts) end
  T.nn.parallel = T.nn.parallel or {}
  T.nn.parallel.DistributedDataParallel = DDP
end

return M
