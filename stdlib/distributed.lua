-- T.distributed: one process per GPU, collectives through NCCL (vm/cuda/nccl.hpp), as
-- torch.distributed with the "nccl" backend (API.md says nothing of it). `crescent --nproc N
-- script.lua` starts the processes with RANK, LOCAL_RANK, WORLD_SIZE and CRESCENT_DIST_FILE set;
-- rank 0 writes NCCL's unique id to that file (write, then rename) and the others poll it.
-- Rank r works on cuda:LOCAL_RANK (T.distributed.device()). Collectives run on the current CUDA
-- stream; with async_op = true on a communication stream ordered by events, returning a work
-- handle (wait / is_completed). CPU tensors raise: crescent has no CPU backend (no gloo), only
-- the "simulated" test backend (vm/sim_group.hpp: ranks exchange CPU tensors through files).
-- Inside a compiled function the collectives are graph nodes (the registry ops _dist_*, torch's
-- functional collectives): they return new tensors, and the in-place forms copy the result back.
local core = require "crescent.core"
local ffi, api, ctx = core.ffi, core.api, core.ctx
local dist, fail, is_tensor, ptr = api.dist, core.fail, core.is_tensor, core.ptr

local M = {}
local T  -- crescent, bound by M.bind

pcall(ffi.cdef, "int usleep(unsigned int usec);")

local ALL_REDUCE, BROADCAST, ALL_GATHER, REDUCE_SCATTER = 0, 1, 2, 3
local OPS = { sum = 0, prod = 1, max = 2, min = 3, avg = 4 }  -- ncclRedOp_t
local OP_NAMES = { [0] = "sum", "prod", "max", "min", "avg" }
M.ReduceOp = { SUM = "sum", PRODUCT = "prod", MAX = "max", MIN = "min", AVG = "avg" }

local group  -- {rank =, world_size =, device = "cuda:N" or "cpu", backend =, timeout =, comm_stream =}

local function check(rc) if rc ~= 0 then core.raise(rc) end end

local function env_int(name)
  local v = os.getenv(name)
  if v == nil or v == "" then return nil end
  local n = tonumber(v)
  if not n or n % 1 ~= 0 then fail("init_process_group: " .. name .. "=" .. v .. " is not an integer") end
  return n
end

-- The rendezvous file: init_method "file://PATH", else CRESCENT_DIST_FILE (the launcher's), else
-- one under TMPDIR named after MASTER_ADDR / MASTER_PORT (torchrun's variables), if any.
local function rendezvous_path(init_method)
  if init_method ~= nil and init_method ~= "env://" then
    local p = type(init_method) == "string" and init_method:match("^file://(.+)$")
    if not p then fail("init_process_group: init_method expected \"env://\" or \"file:///path\", got " .. tostring(init_method)) end
    return p
  end
  local f = os.getenv("CRESCENT_DIST_FILE")
  if f and f ~= "" then return f end
  return (os.getenv("TMPDIR") or "/tmp") .. "/crescent-dist-" .. (os.getenv("MASTER_ADDR") or "local") .. "-" ..
    (os.getenv("MASTER_PORT") or "0") .. ".id"
end

local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end
local function unhex(h) return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)) end

-- rank 0: the id, written whole (a rename is atomic); a run token (the launcher's
-- CRESCENT_DIST_RUN) keeps a stale file of an earlier run from being read
local function publish(path, id, token)
  local tmp = path .. ".tmp" .. tostring(os.time()) .. math.random(1e9)
  local f, err = io.open(tmp, "wb")
  if not f then fail("init_process_group: cannot write the rendezvous file: " .. tostring(err)) end
  f:write(token, "\n", hex(id), "\n")
  f:close()
  local ok, rerr = os.rename(tmp, path)
  if not ok then fail("init_process_group: cannot rename " .. tmp .. " to " .. path .. ": " .. tostring(rerr)) end
end

local function read_id(path, token)
  local f = io.open(path, "rb")
  if not f then return nil end
  local tok, h = f:read("*l"), f:read("*l")
  f:close()
  if tok ~= token or not h or #h ~= 256 then return nil end
  return unhex(h)
end

local function await_id(path, token, rank, timeout)
  local t0 = os.time()
  while true do
    local id = read_id(path, token)
    if id then return id end
    if os.difftime(os.time(), t0) > timeout then
      fail(string.format("init_process_group: rank %d waited %g s for rank 0's NCCL id in %s (CRESCENT_DIST_TIMEOUT); "
        .. "did rank 0 start, with the same rendezvous file?", rank, timeout, path))
    end
    ffi.C.usleep(20000)
  end
end

local function timeout_of(opts)
  local t = opts.timeout or tonumber(os.getenv("CRESCENT_DIST_TIMEOUT") or "") or 300
  if type(t) ~= "number" or t <= 0 then fail("init_process_group: timeout expected a positive number of seconds, got " .. tostring(t)) end
  return t
end

local function rank_and_world(opts)
  local rank, world = opts.rank or env_int("RANK"), opts.world_size or env_int("WORLD_SIZE")
  if not rank or not world then
    fail("init_process_group: RANK and WORLD_SIZE are not set (run under `crescent --nproc N`, or pass rank = and world_size =)")
  end
  if world < 1 or rank < 0 or rank >= world then
    fail(string.format("init_process_group: rank %d is not in 0 .. world_size - 1 (world_size %d)", rank, world))
  end
  return rank, world
end

-- The "simulated" test backend: CPU tensors, exchanged through files in the rendezvous file's folder
local function init_simulated(opts)
  local rank, world = rank_and_world(opts)
  local timeout = timeout_of(opts)
  local dir = rendezvous_path(opts.init_method):match("^(.*)/[^/]*$") or "."
  local token = os.getenv("CRESCENT_DIST_RUN") or ""
  check(dist.init_simulated(ctx, dir, token ~= "" and token or "local", rank, world, timeout))
  group = { rank = rank, world_size = world, device = "cpu", timeout = timeout, backend = "simulated" }
end

local INIT_OPTS = { rank = true, world_size = true, init_method = true, timeout = true, device_id = true }

-- T.distributed.init_process_group("nccl"[, {rank =, world_size =, init_method =, timeout =}])
function M.init_process_group(backend, opts)
  if type(backend) == "table" then backend, opts = backend.backend, backend end
  opts = opts or {}
  for k in pairs(opts) do
    if not INIT_OPTS[k] and k ~= "backend" then fail("init_process_group: unknown option '" .. tostring(k) .. "'") end
  end
  backend = backend or "nccl"
  if backend ~= "nccl" and backend ~= "simulated" then
    fail("init_process_group: backend \"" .. tostring(backend) .. "\" is not available; crescent has the \"nccl\" backend "
      .. "only (CUDA tensors; no gloo for CPU tensors; \"simulated\" is a test backend)")
  end
  if group then fail("init_process_group: the default process group is already initialized") end
  if backend == "simulated" then return init_simulated(opts) end
  local why = dist.unavailable()
  if why ~= nil then fail("init_process_group: the nccl backend is not available: " .. ffi.string(why)) end
  local rank, world = rank_and_world(opts)
  local ndev = T.cuda.device_count()
  local local_rank = opts.device_id or env_int("LOCAL_RANK") or rank % math.max(ndev, 1)
  local timeout = timeout_of(opts)
  local path, token = rendezvous_path(opts.init_method), os.getenv("CRESCENT_DIST_RUN") or ""
  local id
  if rank == 0 then
    local buf = ffi.new("char[128]")
    check(dist.unique_id(ctx, buf))
    id = ffi.string(buf, 128)
    publish(path, id, token)
  else
    id = await_id(path, token, rank, timeout)
  end
  check(dist.init(ctx, id, rank, world, local_rank, timeout))
  if rank == 0 then os.remove(path) end  -- (every rank read it: the communicator needed them all)
  group = { rank = rank, world_size = world, device = "cuda:" .. local_rank, timeout = timeout, backend = "nccl" }
end

local function need_group(op)
  if not group then fail(op .. ": the default process group is not initialized (call T.distributed.init_process_group first)") end
  return group
end

function M.is_available() return dist.unavailable() == nil end
function M.is_nccl_available() return dist.unavailable() == nil end
-- why NCCL cannot be used here ("" when it can)
function M.unavailable_reason()
  local why = dist.unavailable()
  return why == nil and "" or ffi.string(why)
end
function M.is_initialized() return group ~= nil end
function M.get_rank() return group and group.rank or -1 end
function M.get_world_size() return group and group.world_size or -1 end
function M.get_backend() return need_group("get_backend").backend end
-- this rank's device, "cuda:LOCAL_RANK" ("cpu" with the simulated backend)
function M.device() return need_group("T.distributed.device").device end

function M.destroy_process_group()
  if not group then return end
  local g = group
  group = nil
  if g.backend == "nccl" then check(dist.wait(ctx, "destroy_process_group", -1)) end
  check(dist.destroy(ctx, 0, g.timeout))
end

-- Work handles ---------------------------------------------------------------------------------
-- wait(): the current stream's later work waits for the collective (then list outputs are
-- filled); is_completed(): whether the device finished it.
local Work = {}
Work.__index = Work
function Work:wait()
  if self.event then self.event:wait(T.cuda.current_stream(self.device)) end
  if self.finish then
    local f = self.finish
    self.finish = nil
    f()
  end
  return true
end
function Work:is_completed() return self.event == nil or self.event:query() end
function Work:__tostring() return "<T.distributed work on " .. self.device .. ">" end

local function check_tensor(v, op, what)
  if not is_tensor(v) then fail(op .. ": " .. what .. " expected a tensor, got " .. type(v)) end
  return v
end

local function comm_stream(g)
  g.comm_stream = g.comm_stream or T.cuda.Stream(g.device)
  return g.comm_stream
end

local FUNCTIONAL = { [ALL_REDUCE] = "_dist_all_reduce", [BROADCAST] = "_dist_broadcast", [ALL_GATHER] = "_dist_all_gather",
  [REDUCE_SCATTER] = "_dist_reduce_scatter" }

-- run() through the collective's registry op (a node of the graph when compiled): send's
-- collective (flattened for gather / scatter) copied into recv
local function run_functional(coll, send, recv, redop, root, finish)
  T.no_grad(function()
    local x = (coll == ALL_GATHER or coll == REDUCE_SCATTER) and send:reshape({ -1 }) or send
    local f = T[FUNCTIONAL[coll]]
    local r = coll == ALL_GATHER and f(x) or f(x, coll == BROADCAST and root or OP_NAMES[redop])
    recv:copy_(r:view(recv.shape))
  end)
  if finish then finish() end
end

-- Runs collective `coll` from send into recv: on the current stream, or (async) on the
-- communication stream after the current stream's work so far; returns a work handle for async
-- (finish: what wait() does after the collective, e.g. copies into a list). Inside a compiled
-- function it is a graph node (the graph orders it); on the simulated group it is done on return.
local function run(op, coll, send, recv, redop, root, async, finish)
  local g = need_group(op)
  if ctx.capturing ~= 0 then
    run_functional(coll, send, recv, redop, root, finish)
    return async and setmetatable({ device = g.device }, Work) or nil
  end
  if not async or g.backend == "simulated" then  -- (the simulated group's collectives are done when they return)
    check(dist.collective(ctx, coll, ptr(send), ptr(recv), redop, root, -1))
    if finish then finish() end
    return async and setmetatable({ device = g.device }, Work) or nil
  end
  local s = comm_stream(g)
  s:wait_stream(T.cuda.current_stream(g.device))
  check(dist.collective(ctx, coll, ptr(send), ptr(recv), redop, root, s.id))
  send:record_stream(s)
  if recv ~= send then recv:record_stream(s) end
  local e = T.cuda.Event()
  e:record(s)
  return setmetatable({ event = e, device = g.device, finish = finish, keep = { send, recv } }, Work)
end

local function opts_of(op, opts, allowed)
  opts = opts or {}
  if type(opts) ~= "table" then fail(op .. ": options expected a table, got " .. type(opts)) end
  for k in pairs(opts) do
    if not allowed[k] then fail(op .. ": unknown option '" .. tostring(k) .. "'") end
  end
  return opts
end

local function redop_of(op, o)
  local name = o.op or "sum"
  local v = OPS[type(name) == "string" and name:lower() or name]
  if not v then fail(op .. ": op expected \"sum\", \"avg\", \"max\", \"min\" or \"prod\", got " .. tostring(name)) end
  return v
end

local REDUCE_OPTS, PLAIN_OPTS = { op = true, async_op = true, group = true }, { async_op = true, group = true }

local function no_group(op, o)
  if o.group ~= nil then fail(op .. ": only the default process group exists (group = nil)") end
end

-- all_reduce(t[, {op = "sum", async_op = false}]): t becomes the reduction of every rank's t
function M.all_reduce(t, opts)
  local o = opts_of("all_reduce", opts, REDUCE_OPTS)
  no_group("all_reduce", o)
  check_tensor(t, "all_reduce", "tensor")
  return run("all_reduce", ALL_REDUCE, t, t, redop_of("all_reduce", o), 0, o.async_op)
end

-- broadcast(t, src[, {async_op =}]): every rank's t becomes rank src's
function M.broadcast(t, src, opts)
  local o = opts_of("broadcast", opts, PLAIN_OPTS)
  no_group("broadcast", o)
  check_tensor(t, "broadcast", "tensor")
  local g = need_group("broadcast")
  if type(src) ~= "number" or src % 1 ~= 0 or src < 0 or src >= g.world_size then
    fail("broadcast: src expected a rank in 0 .. " .. g.world_size - 1 .. ", got " .. tostring(src))
  end
  return run("broadcast", BROADCAST, t, t, 0, src, o.async_op)
end

-- A collective from tensor t into tensor out (reduce: it takes {op =})
local function into_tensor(name, coll, out, t, opts, reduce)
  local o = opts_of(name, opts, reduce and REDUCE_OPTS or PLAIN_OPTS)
  no_group(name, o)
  check_tensor(out, name, "output")
  check_tensor(t, name, "input")
  return run(name, coll, t, out, reduce and redop_of(name, o) or 0, 0, o.async_op)
end

-- all_gather_into_tensor(out, t): out (world_size x t's elements) holds every rank's t in rank order
function M.all_gather_into_tensor(out, t, opts)
  return into_tensor("all_gather_into_tensor", ALL_GATHER, out, t, opts, false)
end

-- reduce_scatter_tensor(out, t[, {op =}]): out is the reduction of every rank's block `rank` of t
function M.reduce_scatter_tensor(out, t, opts)
  return into_tensor("reduce_scatter_tensor", REDUCE_SCATTER, out, t, opts, true)
end

-- the options and group of a collective on a list of tensors, one per rank (checked)
local function list_op(op, opts, allowed, list)
  local o = opts_of(op, opts, allowed)
  no_group(op, o)
  local n = need_group(op).world_size
  if type(list) ~= "table" then fail(op .. ": expected a list of " .. n .. " tensors, got " .. type(list)) end
  if #list ~= n then fail(op .. ": expected a list of " .. n .. " tensors (one per rank), got " .. #list) end
  for i = 1, n do check_tensor(list[i], op, "list element " .. i) end
  return o, n
end

-- all_gather(list_or_tensor, t): list[r + 1] (a tensor per rank) becomes rank r's t; a tensor
-- output is all_gather_into_tensor
function M.all_gather(out, t, opts)
  if is_tensor(out) then return M.all_gather_into_tensor(out, t, opts) end
  local o, n = list_op("all_gather", opts, PLAIN_OPTS, out)
  check_tensor(t, "all_gather", "input")
  local flat = T.empty({ n, t:numel() }, { dtype = t.dtype, device = t.device })
  local function finish()
    for i = 1, n do out[i]:copy_(flat[i]:view(out[i].shape)) end
  end
  return run("all_gather", ALL_GATHER, t:contiguous(), flat, 0, 0, o.async_op, finish)
end

-- reduce_scatter(out, list_or_tensor[, {op =}]): out is the reduction of every rank's list[rank + 1]
function M.reduce_scatter(out, input, opts)
  if is_tensor(input) then return M.reduce_scatter_tensor(out, input, opts) end
  local o, n = list_op("reduce_scatter", opts, REDUCE_OPTS, input)
  check_tensor(out, "reduce_scatter", "output")
  local parts = {}
  for i = 1, n do parts[i] = input[i]:reshape({ -1 }) end
  return run("reduce_scatter", REDUCE_SCATTER, T.cat(parts), out, redop_of("reduce_scatter", o), 0, o.async_op)
end

-- barrier(): returns once every rank called it (an all_reduce of one number, then a wait on the
-- host: past the timeout, a rank that never came raises here, catchably)
function M.barrier()
  local g = need_group("barrier")
  M.all_reduce(T.ones({ 1 }, { device = g.device }))
  if g.backend == "nccl" then check(dist.wait(ctx, "barrier", -1)) end
end

-- The functional collectives (torch's funcol): new tensors, the input left as it is; inside a
-- compiled function, nodes of its graph. all_gather_tensor / reduce_scatter_tensor work along dim 1.
local function reduce_name(op, name)
  name = name or "sum"
  if type(name) ~= "string" or not OPS[name:lower()] then
    fail(op .. ": op expected \"sum\", \"avg\", \"max\", \"min\" or \"prod\", got \"" .. tostring(name) .. "\"")
  end
  return name:lower()
end
M.functional = {
  all_reduce = function(t, op) need_group("all_reduce"); return T._dist_all_reduce(t, reduce_name("all_reduce", op)) end,
  all_gather_tensor = function(t) need_group("all_gather_tensor"); return T._dist_all_gather(t) end,
  reduce_scatter_tensor = function(t, op)
    need_group("reduce_scatter_tensor")
    return T._dist_reduce_scatter(t, reduce_name("reduce_scatter_tensor", op))
  end,
  broadcast = function(t, src) need_group("broadcast"); return T._dist_broadcast(t, src) end,
}

function M.bind(t) T = t end

return M
