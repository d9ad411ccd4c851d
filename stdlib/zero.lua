-- T.distributed.ShardedOptimizer(params_or_groups, T.optim.AdamW, opts): sharded data parallel,
-- ZeRO stage 2 (gradients and optimizer state sharded; DeepSpeed's name for it). The parameters
-- are bucketed as DDP's (bucket_cap_mb, default 25; a bucket holds one param group) and each
-- bucket, padded to a multiple of the world size, is cut in one shard per rank. During backward a
-- post-accumulate-grad hook copies each gradient into its bucket's flat buffer and drops the
-- parameter's .grad; a full bucket is reduce-scattered (average) asynchronously, so each rank
-- receives only its shard's gradient. The inner optimizer (any T.optim class, built with opts)
-- steps on the rank's shards only - its state is ~1/world of the whole - and step() all-gathers
-- the shards back into every parameter. It takes DDP's place (no DDP wrapper: the parameters are
-- broadcast from rank 0 here). opts: the inner optimizer's, bucket_cap_mb and process_group
-- (ddp.lua's M.default_group). state_dict() is the whole, unsharded state. The name is not
-- PyTorch's ZeroRedundancyOptimizer: that one shards the optimizer state only (stage 1).
local core = require "crescent.core"
local autograd = require "crescent.autograd"
local ddp = require "crescent.ddp"
local fail, is_tensor = core.fail, core.is_tensor

local M = {}
local T  -- crescent, bound by M.bind

-- Pure arithmetic --------------------------------------------------------------------------------

-- a bucket of `numel` elements padded to a multiple of world: the elements of each rank's shard
function M.shard_size(numel, world) return math.ceil(numel / world) end

-- The parts of bucket b's parameters inside rank's shard: {{index =, from =, to =, numel =}}
-- (from: the offset in the flattened parameter, to: in the shard; 0-based).
function M.pieces(b, world, rank)
  local shard = M.shard_size(b.numel, world)
  local lo, hi, out = rank * shard, (rank + 1) * shard, {}
  for _, e in ipairs(b.entries) do
    local s, t = math.max(lo, e.offset), math.min(hi, e.offset + e.numel)
    if s < t then out[#out + 1] = { index = e.index, from = s - e.offset, to = s - lo, numel = t - s } end
  end
  return out
end

-- The class ---------------------------------------------------------------------------------------

local Sharded = {}
Sharded.__index = Sharded
Sharded.__name = "ShardedOptimizer"

-- the reductions of the backward passes so far, added into the shards' gradients (in order; not
-- from a hook: a later backward only queues more)
local function settle(self)
  for _, b in ipairs(self._buckets) do
    for _, f in ipairs(b.inflight) do
      f.work:wait()
      local g = b.master.grad
      if g == nil then b.master.grad = f.out else T.no_grad(function() g:add_(f.out) end) end
    end
    b.inflight = {}
  end
end

local function launch_ready(self)
  local r, comm = self._run, self._comm
  while r.next <= #self._buckets and self._buckets[r.next].pending == 0 do
    local b = self._buckets[r.next]
    local out = T.empty({ b.shard }, { dtype = b.dtype, device = b.device })
    b.inflight[#b.inflight + 1] = { out = out, work = comm.reduce_scatter(out, b.flat) }
    b.flat = nil  -- (the work holds it until the collective is done)
    r.next = r.next + 1
  end
end

-- p.grad is complete for this backward: into its bucket, then dropped
local function on_grad(self, p)
  local r = self._run
  if r.pass ~= autograd.pass() then  -- the first gradient of this backward
    for _, b in ipairs(self._buckets) do b.pending, b.flat = #b.entries, nil end
    r.pass, r.next, r.ready = autograd.pass(), 1, {}
    autograd.queue_callback(function() ddp.check_complete("ShardedOptimizer", self._buckets, r.next, r.ready) end)
  end
  if r.ready[p] then return end
  r.ready[p] = true
  local b, e = self._where[p][1], self._where[p][2]
  T.no_grad(function()
    b.flat = b.flat or T.zeros({ b.shard * self._comm.world }, { dtype = b.dtype, device = b.device })
    b.flat:narrow(1, e.offset + 1, e.numel):copy_(p.grad:reshape({ -1 }))
  end)
  p.grad = nil
  b.pending = b.pending - 1
  if b.pending == 0 then launch_ready(self) end
end

-- params: a list of tensors or of groups {params =, <options>}; returns the groups
local function groups_of(params)
  if type(params) ~= "table" or is_tensor(params) then
    fail("ShardedOptimizer: argument 1 (params) expected a list of tensors or of groups, got "
      .. (is_tensor(params) and "a tensor" or type(params)))
  end
  if #params == 0 then fail("ShardedOptimizer: got an empty parameter list") end
  local groups = is_tensor(params[1]) and { { params = params } } or params
  for gi, g in ipairs(groups) do
    if type(g) ~= "table" or is_tensor(g) or type(g.params) ~= "table" then
      fail("ShardedOptimizer: param group " .. gi .. " expected a table {params = a list of tensors, ...}, got "
        .. (is_tensor(g) and "a tensor" or type(g) == "table" and "a table without params" or type(g)))
    end
    for i, p in ipairs(is_tensor(g.params) and { g.params } or g.params) do
      if not is_tensor(p) then fail(string.format("ShardedOptimizer: param %d of group %d is a %s, expected a tensor", i, gi, type(p))) end
    end
  end
  return groups
end

local function check_args(params, optim_class, opts)
  local groups = groups_of(params)
  local callable = type(optim_class) == "function" or (type(optim_class) == "table" and getmetatable(optim_class)
    and getmetatable(optim_class).__call)
  if not callable then fail("ShardedOptimizer: argument 2 expected an optimizer class (e.g. T.optim.AdamW), got " .. type(optim_class)) end
  if opts ~= nil and (type(opts) ~= "table" or is_tensor(opts)) then
    fail("ShardedOptimizer: argument 3 (opts) expected a table, got " .. type(opts))
  end
  local inner, mb = {}, 25
  for k, v in pairs(opts or {}) do
    if k == "bucket_cap_mb" then mb = v elseif k ~= "process_group" then inner[k] = v end
  end
  if type(mb) ~= "number" or mb <= 0 then fail("ShardedOptimizer: bucket_cap_mb expected a positive number, got " .. tostring(mb)) end
  return groups, inner, mb
end

-- the inner optimizer's groups: each group's options with the masters of its buckets; and the
-- position among them of each param group that has some
local function inner_groups(groups, buckets, group_of)
  local out, pos = {}, {}
  for _, b in ipairs(buckets) do
    local gi = group_of[b.entries[1].param]
    if not pos[gi] then
      local g = {}
      for k, v in pairs(groups[gi]) do g[k] = v end
      g.params = {}
      out[#out + 1] = g
      pos[gi] = #out
    end
    local list = out[pos[gi]].params
    list[#list + 1] = b.master
  end
  return out, pos
end

-- the rank's shard of bucket b (padding zero), a leaf the inner optimizer updates
local function master_of(b, comm)
  local m = T.zeros({ b.shard }, { dtype = b.dtype, device = b.device })
  T.no_grad(function()
    for _, pc in ipairs(M.pieces(b, comm.world, comm.rank)) do
      local p = b.entries_by_index[pc.index].param
      m:narrow(1, pc.to + 1, pc.numel):copy_(p:detach():reshape({ -1 }):narrow(1, pc.from + 1, pc.numel))
    end
  end)
  return m:requires_grad_(true)
end

local function new(params, optim_class, opts)
  local groups, inner_opts, mb = check_args(params, optim_class, opts)
  local comm = ddp.group_of("ShardedOptimizer", opts or {})
  local own, group_of = {}, {}
  for gi, g in ipairs(groups) do
    for _, p in ipairs(is_tensor(g.params) and { g.params } or g.params) do
      comm.broadcast(p)
      if p.requires_grad then own[#own + 1], group_of[p] = p, gi end
    end
  end
  if #own == 0 then fail("ShardedOptimizer: none of the parameters requires grad") end
  local self = setmetatable({ _comm = comm, _params = own, _where = {}, _run = {}, _hooks = {} }, Sharded)
  self._buckets = ddp.buckets_of(own, mb * 1024 * 1024, group_of)
  for _, b in ipairs(self._buckets) do
    b.shard, b.entries_by_index, b.inflight = M.shard_size(b.numel, comm.world), {}, {}
    for _, e in ipairs(b.entries) do
      b.entries_by_index[e.index] = e
      self._where[e.param] = { b, e }
    end
    b.master = master_of(b, comm)
  end
  local inner, pos = inner_groups(groups, self._buckets, group_of)
  self._inner, self._groups, self._group_pos = optim_class(inner, inner_opts), groups, pos
  self.param_groups, self.state, self.defaults = self._inner.param_groups, self._inner.state, self._inner.defaults
  for _, p in ipairs(own) do
    self._hooks[#self._hooks + 1] = p:register_post_accumulate_grad_hook(function() on_grad(self, p) end)
  end
  return self
end

-- step([closure]): the inner optimizer on this rank's shards, then every rank's shards back into
-- the parameters (an all_gather per bucket)
function Sharded:step(closure)
  local loss
  if closure ~= nil then loss = T.enable_grad(closure) end
  settle(self)
  self._inner:step()
  local works, fulls = {}, {}
  for i, b in ipairs(self._buckets) do
    fulls[i] = T.empty({ b.shard * self._comm.world }, { dtype = b.dtype, device = b.device })
    works[i] = self._comm.all_gather(fulls[i], b.master)
  end
  for i, b in ipairs(self._buckets) do
    works[i]:wait()
    T.no_grad(function()
      for _, e in ipairs(b.entries) do e.param:copy_(fulls[i]:narrow(1, e.offset + 1, e.numel):view(e.param.shape)) end
    end)
  end
  return loss
end

-- zero_grad([set_to_none = true]): the shards' gradients (the parameters keep none)
function Sharded:zero_grad(set_to_none)
  settle(self)
  self._inner:zero_grad(set_to_none)
  for _, p in ipairs(self._params) do p.grad = nil end
end

-- clip_grad_norm_(max_norm): T.nn.utils.clip_grad_norm_ (2-norm) of every rank's shards - the
-- parameters keep no .grad to clip; returns the total norm before clipping (a 0-d tensor)
function Sharded:clip_grad_norm_(max_norm)
  if type(max_norm) ~= "number" then fail("ShardedOptimizer:clip_grad_norm_: max_norm expected a number, got " .. type(max_norm)) end
  settle(self)
  local grads, b1 = {}, self._buckets[1]
  for _, b in ipairs(self._buckets) do grads[#grads + 1] = b.master.grad end
  local sq = T.no_grad(function()
    local acc = T.zeros({ 1 }, { dtype = "float64", device = b1.device })
    for _, g in ipairs(grads) do acc:add_((g:double() * g:double()):sum()) end
    return acc
  end)
  self._comm.all_reduce(sq):wait()  -- (the average of the ranks' sums of squares)
  return T.no_grad(function()
    local total = (sq * self._comm.world):sqrt()
    local coef = (max_norm / (total + 1e-6)):clamp(nil, 1.0)
    for _, g in ipairs(grads) do g:mul_(coef:to(g.dtype)) end
    return total:squeeze()
  end)
end

-- the tensors this rank keeps for the optimizer: {shards =, state =} in bytes
function Sharded:memory()
  local SIZES, shards, state = ddp.SIZES, 0, 0
  for _, b in ipairs(self._buckets) do
    shards = shards + b.shard * SIZES[b.dtype]
    for _, v in pairs(self.state[b.master] or {}) do
      if is_tensor(v) then state = state + v:numel() * (SIZES[v.dtype] or 8) end
    end
  end
  return { shards = shards, state = state }
end

-- state_dict / load_state_dict: the whole optimizer's, as the inner optimizer class keeps it
-- unsharded (Optimizer:state_dict's structure): checkpoints load into either.

local function params_of(g) return is_tensor(g.params) and { g.params } or g.params end

-- the param groups as Optimizer:state_dict packs them, and each parameter's number
local function packed_groups(self)
  local index, n, out = {}, 0, {}
  for gi, g in ipairs(self._groups) do
    local src, packed = self.param_groups[self._group_pos[gi]] or g, { params = {} }
    for k, v in pairs(self.defaults) do packed[k] = v end
    for k, v in pairs(src) do
      if k ~= "params" and k ~= "per_tensor" and k ~= "fused" then packed[k] = type(v) == "table" and { unpack(v) } or v end
    end
    for i, p in ipairs(params_of(g)) do
      index[p], packed.params[i] = n, n
      n = n + 1
    end
    out[gi] = packed
  end
  return out, index
end

-- state_dict(): collective (an all_gather per bucket and state tensor); every rank gets the whole
function Sharded:state_dict()
  local groups, index = packed_groups(self)
  local state, comm = {}, self._comm
  for _, b in ipairs(self._buckets) do
    local st = self.state[b.master]
    if st then
      local per = {}
      for _, e in ipairs(b.entries) do per[e.param] = {} end
      for _, k in ipairs(core.sorted_keys(st)) do
        local v = st[k]
        if is_tensor(v) and v:numel() == b.shard then
          local full = T.empty({ b.shard * comm.world }, { dtype = v.dtype, device = v.device })
          comm.all_gather(full, v):wait()
          T.no_grad(function()
            for _, e in ipairs(b.entries) do per[e.param][k] = full:narrow(1, e.offset + 1, e.numel):view(e.param.shape):clone() end
          end)
        else
          for _, e in ipairs(b.entries) do per[e.param][k] = k == "step" and T.tensor(v, { dtype = "float32" }) or v end
        end
      end
      for _, e in ipairs(b.entries) do state[index[e.param]] = per[e.param] end
    end
  end
  return { state = state, param_groups = groups }
end

-- this rank's shard of state `k` of bucket b, from the parameters' whole states
local function shard_of(self, b, by_param, k)
  local m = T.zeros({ b.shard }, { dtype = b.dtype, device = b.device })
  for _, pc in ipairs(M.pieces(b, self._comm.world, self._comm.rank)) do
    local p = b.entries_by_index[pc.index].param
    local v = (by_param[p] or {})[k]
    if not is_tensor(v) or v:numel() ~= p:numel() then
      fail(string.format("ShardedOptimizer:load_state_dict: the state '%s' of a parameter of shape %s is missing or of another size",
        k, table.concat(p.shape, "x")))
    end
    local part = v:to({ dtype = b.dtype, device = b.device }):reshape({ -1 }):narrow(1, pc.from + 1, pc.numel)
    T.no_grad(function() m:narrow(1, pc.to + 1, pc.numel):copy_(part) end)
  end
  return m
end

-- load_state_dict(sd): sd as state_dict() or the inner optimizer class's state_dict() gives it
-- (or its flat form from T.load); each rank keeps its shards of it
function Sharded:load_state_dict(sd)
  if type(sd) == "table" and sd.state == nil then sd = T.optim.unflatten_state_dict(sd) end
  if type(sd) ~= "table" or type(sd.state) ~= "table" or type(sd.param_groups) ~= "table" or #sd.param_groups ~= #self._groups then
    fail("ShardedOptimizer:load_state_dict: expected a state_dict {state =, param_groups =} of " .. #self._groups .. " param group(s)")
  end
  local by_param = {}
  for gi, g in ipairs(self._groups) do
    local saved, list = sd.param_groups[gi], params_of(g)
    if type(saved.params) ~= "table" or #saved.params ~= #list then
      fail(string.format("ShardedOptimizer:load_state_dict: param group %d has %d parameters, the saved one %s", gi, #list,
        type(saved.params) == "table" and #saved.params or "none"))
    end
    for i, p in ipairs(list) do by_param[p] = sd.state[saved.params[i]] end
  end
  local state = {}
  for _, b in ipairs(self._buckets) do
    local first = by_param[b.entries[1].param]
    if first then
      local s = {}
      for k, v in pairs(first) do
        if k == "step" then s[k] = is_tensor(v) and v:item() or v
        elseif is_tensor(v) and v:numel() == b.entries[1].numel then s[k] = shard_of(self, b, by_param, k)
        else s[k] = v end
      end
      state[b.master] = s
    end
  end
  self._inner.state, self.state = state, state
  for gi in ipairs(self._groups) do
    local g = self.param_groups[self._group_pos[gi]]
    for k, v in pairs(g and sd.param_groups[gi] or {}) do
      if k ~= "params" and k ~= "fused" then g[k] = type(v) == "table" and { unpack(v) } or v end
    end
  end
end

function Sharded:__tostring()
  return string.format("ShardedOptimizer(%s, rank %d of %d, %d buckets)", self._inner.__name or "?", self._comm.rank,
    self._comm.world, #self._buckets)
end

function M.bind(t)
  T = t
  t.distributed.ShardedOptimizer = new
end

return M
