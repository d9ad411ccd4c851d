-- T.cuda: devices, memory, streams and events (API.md section 6; streams and events as PyTorch
-- has them, since API.md says nothing of them). The C++ side is vm/cuda/streams.hpp.
local core = require "crescent.core"
local ffi, api, ctx = core.ffi, core.api, core.ctx

local M = {}

local function device_index(d)
  if d == nil then return 0 end
  if type(d) == "number" then return d end
  local n = tostring(d):match("^cuda:(%d+)$")
  if d == "cuda" then return 0 end
  if not n then core.fail("cuda: expected a device index or \"cuda:N\", got " .. tostring(d)) end
  return tonumber(n)
end
M.device_index = device_index

local OUT = ffi.new("double[1]")
local S = api.stream  -- one entry per call (vm/lua/ffi_api.h cr_stream_api)
local C = ffi.C  -- (vm/lua/ffi_api.h: CR_STREAM_SLOTS, enum cr_cuda_stat)
local SLOTS = C.CR_STREAM_SLOTS  -- a stream id is device * SLOTS + slot

local function call(entry, ...)
  if entry(ctx, OUT, ...) ~= 0 then core.raise(-1) end
  return OUT[0]
end

-- Streams -------------------------------------------------------------------------------------
-- A stream is a table {id =, device = "cuda:N"}, one per id, so that == compares streams.
local Stream = {}
Stream.__index = Stream
local streams = {}

local function stream_of(id)
  local s = streams[id]
  if not s then
    s = setmetatable({ id = id, device = "cuda:" .. math.floor(id / SLOTS) }, Stream)
    streams[id] = s
  end
  return s
end

-- checker(mt, expected) -> check(v, what): v when its metatable is mt, else an error naming the
-- call, what it expected and what it got
local function checker(mt, expected)
  return function(v, what)
    if getmetatable(v) ~= mt then
      core.fail(what .. ": expected " .. expected .. ", got " .. (core.is_tensor(v) and "a tensor" or type(v)))
    end
    return v
  end
end
local check_stream = checker(Stream, "a stream (T.cuda.Stream())")

function Stream:__tostring()
  local slot = self.id % SLOTS
  return slot == 0 and "<cuda stream: the default stream of " .. self.device .. ">"
    or string.format("<cuda stream %d of %s>", slot, self.device)
end
function Stream:synchronize() call(S.stream_sync, self.id) end
function Stream:query() return call(S.stream_query, self.id) ~= 0 end
-- work queued on self from now on waits for the work queued on `other` so far
function Stream:wait_stream(other) call(S.stream_wait_stream, self.id, check_stream(other, "Stream:wait_stream").id) end

-- The stream's work is ordered by Lua's statements, but a compiled function records ops and runs
-- them later: switching streams inside one is a graph break, so the ops recorded before it run
-- on the stream they were recorded under.
local function set_stream(s)
  check_stream(s, "T.cuda.set_stream")
  if ctx.capturing ~= 0 then
    local rc = api.cap_need(ctx, nil, "T.cuda.set_stream()", core.where())
    if rc < 0 then core.raise(rc) end
  end
  call(S.stream_set, s.id)
end

local function current_stream(d) return stream_of(call(S.stream_current, device_index(d))) end

-- Events ----------------------------------------------------------------------------------------
-- T.cuda.Event{enable_timing = false}: made on its first record, on the stream's device (as
-- torch.cuda.Event); destroyed when collected.
local Event = {}
Event.__index = Event

local check_event = checker(Event, "an event (T.cuda.Event())")

function Event:record(stream)
  stream = stream and check_stream(stream, "Event:record") or current_stream(self.device)
  if not self.id then
    local id = call(S.event_new, math.floor(stream.id / SLOTS), self.enable_timing and 1 or 0)
    self.id, self.device = id, stream.device
    self.anchor = ffi.gc(ffi.new("int64_t[1]", id), function(p) S.event_free(ctx, OUT, p[0]) end)
  end
  call(S.event_record, self.id, stream.id)
end
-- work queued on `stream` (default: the current one) from now on waits for the recorded work
function Event:wait(stream)
  stream = stream and check_stream(stream, "Event:wait") or current_stream(self.device)
  if self.id then call(S.stream_wait_event, stream.id, self.id) end
end
function Event:query() return not self.id or call(S.event_query, self.id) ~= 0 end
function Event:synchronize() if self.id then call(S.event_sync, self.id) end end
-- milliseconds between this event and `finish`, both recorded and passed
function Event:elapsed_time(finish)
  check_event(finish, "Event:elapsed_time")
  if not self.id or not finish.id then core.fail("Event:elapsed_time: both events must be recorded first") end
  return call(S.event_elapsed, self.id, finish.id)
end
function Event:__tostring() return "<cuda event" .. (self.device and " of " .. self.device or "") .. ">" end

function Stream:wait_event(e)
  check_event(e, "Stream:wait_event"):wait(self)
end
function Stream:record_event(e)
  e = e and check_event(e, "Stream:record_event") or setmetatable({ enable_timing = false }, Event)
  e:record(self)
  return e
end

-- (after T.cuda.stream's call: the previous stream is current again, then fn's error or results)
local function restore(prev, ok, ...)
  set_stream(prev)
  if not ok then error((...), 0) end
  return ...
end

-- CUDA graphs (vm/cuda/graphs.hpp), as torch.cuda.CUDAGraph: what a capture queues on the device
-- is recorded, not run; replay() runs it again with one launch, reading and writing the same
-- memory - the tensors made during the capture (its static outputs) are overwritten by each
-- replay, and new inputs are copied into the tensors it read (static inputs) before a replay.
local CUDAGraph = {}
CUDAGraph.__index = CUDAGraph

local check_graph = checker(CUDAGraph, "a CUDA graph (T.cuda.CUDAGraph())")

local function new_graph(d)
  local id = call(S.graph_new, device_index(d))
  -- (the graph and its memory pool go when the Lua object is collected)
  local anchor = ffi.gc(ffi.new("char[1]"), function() S.graph_delete(ctx, OUT, id) end)
  return setmetatable({ id = id, device = "cuda:" .. device_index(d), anchor = anchor }, CUDAGraph)
end

-- pool: another graph's g:pool(), to share its memory (replay them in the order captured)
function CUDAGraph:capture_begin(pool)
  if pool ~= nil and type(pool) ~= "table" then core.fail("CUDAGraph:capture_begin: pool expected a graph's :pool(), got " .. type(pool)) end
  call(S.graph_begin, self.id, pool and check_graph(pool.graph, "CUDAGraph:capture_begin").id or 0)
  self.keep = pool and pool.graph or nil  -- (its pool must outlive this graph's replays)
end
function CUDAGraph:capture_end() self.nodes = call(S.graph_end, self.id) end
function CUDAGraph:replay() call(S.graph_replay, self.id) end
function CUDAGraph:reset() call(S.graph_reset, self.id); self.nodes = nil end
function CUDAGraph:pool() return { graph = self } end
function CUDAGraph:__tostring()
  return string.format("<cuda graph of %s: %s>", self.device, self.nodes and self.nodes .. " nodes" or "nothing captured")
end

-- T.cuda.graph(g, fn, opts): captures what fn(...) queues into g (opts.pool: another graph's
-- pool); returns fn's results - the static outputs. An error in fn ends the capture first.
local function capture_done(g, ok, ...)
  if not ok then
    S.graph_abort(ctx, OUT, g.id)
    error((...), 0)
  end
  g:capture_end()
  return ...
end
local function graph(g, fn, opts, ...)
  check_graph(g, "T.cuda.graph")
  if type(fn) ~= "function" then core.fail("T.cuda.graph: argument 2 expected a function, got " .. type(fn)) end
  if opts ~= nil and type(opts) ~= "table" then core.fail("T.cuda.graph: argument 3 (opts) expected a table, got " .. type(opts)) end
  for k in pairs(opts or {}) do
    if k ~= "pool" then core.fail("T.cuda.graph: unknown option '" .. tostring(k) .. "' (expected pool)") end
  end
  g:capture_begin(opts and opts.pool)
  return capture_done(g, pcall(fn, ...))
end

-- T.cuda -------------------------------------------------------------------------------------
local STATS = ffi.new("double[?]", C.CR_CUDA_STATS)  -- (api.cuda_stats: vm/lua/ffi_api.h cr_cuda_stat)
local function cuda_stat(d, i)
  api.cuda_stats(device_index(d), STATS)
  return STATS[i]
end
M.cuda = {
  is_available = function() return api.cuda_device_count() > 0 end,
  device_count = function() return api.cuda_device_count() end,
  -- why CUDA cannot be used here ("" when it can)
  unavailable_reason = function() return ffi.string(api.cuda_unavailable()) end,
  synchronize = function(d)
    if api.cuda_device_count() == 0 then return end
    if api.cuda_synchronize(ctx, device_index(d)) ~= 0 then core.raise(-1) end
  end,
  -- gives the device memory cached for reuse back to the driver
  empty_cache = function() api.cuda_empty_cache() end,
  -- {driver_allocs, driver_frees, cache_hits, in_use, reserved, peak_in_use, peak_reserved
  -- (bytes), host_ops, modules_compiled
  -- (CUDA modules this process compiled with NVRTC; cache hits and prebuilt ones not),
  -- kernel_launches, blas_calls (cuBLAS, cuBLASLt and cuDNN graph-API calls), graph_launches, graph_nodes
  -- (the work queued on the devices)}
  stats = function(d)
    api.cuda_stats(device_index(d), STATS)
    return { driver_allocs = STATS[C.CR_CUDA_DRIVER_ALLOCS], driver_frees = STATS[C.CR_CUDA_DRIVER_FREES],
             cache_hits = STATS[C.CR_CUDA_CACHE_HITS], in_use = STATS[C.CR_CUDA_IN_USE],
             reserved = STATS[C.CR_CUDA_RESERVED], host_ops = STATS[C.CR_CUDA_HOST_OPS],
             modules_compiled = STATS[C.CR_CUDA_MODULES_COMPILED], kernel_launches = STATS[C.CR_CUDA_KERNEL_LAUNCHES],
             blas_calls = STATS[C.CR_CUDA_BLAS_CALLS], graph_launches = STATS[C.CR_CUDA_GRAPH_LAUNCHES],
             graph_nodes = STATS[C.CR_CUDA_GRAPH_NODES], peak_in_use = STATS[C.CR_CUDA_PEAK_IN_USE],
             peak_reserved = STATS[C.CR_CUDA_PEAK_RESERVED] }
  end,
  -- As torch.cuda's: bytes of tensors (rounded to 512 B) and held from the driver, their peaks
  -- since the start or reset_peak_memory_stats.
  memory_allocated = function(d) return cuda_stat(d, C.CR_CUDA_IN_USE) end,
  memory_reserved = function(d) return cuda_stat(d, C.CR_CUDA_RESERVED) end,
  max_memory_allocated = function(d) return cuda_stat(d, C.CR_CUDA_PEAK_IN_USE) end,
  max_memory_reserved = function(d) return cuda_stat(d, C.CR_CUDA_PEAK_RESERVED) end,
  reset_peak_memory_stats = function(d) api.cuda_reset_peak(device_index(d)) end,

  -- T.cuda.Stream([device]) or T.cuda.Stream{device =}: a stream of the device's pool
  Stream = function(opts)
    local d = opts
    if type(opts) == "table" then
      for k in pairs(opts) do
        if k ~= "device" then core.fail("T.cuda.Stream: unknown option '" .. tostring(k) .. "' (expected device)") end
      end
      d = opts.device
    end
    return stream_of(call(S.stream_new, device_index(d)))
  end,
  current_stream = current_stream,
  default_stream = function(d)
    call(S.stream_current, device_index(d))  -- (checks the device)
    return stream_of(device_index(d) * SLOTS)
  end,
  set_stream = set_stream,
  -- T.cuda.stream(s, fn, ...): calls fn(...) with s the current stream of its device, then
  -- makes the previous one current again (also when fn raises); returns fn's results.
  -- s == nil calls fn as it is (as torch.cuda.stream(None)).
  stream = function(s, fn, ...)
    if s == nil then return fn(...) end
    check_stream(s, "T.cuda.stream")
    if type(fn) ~= "function" then core.fail("T.cuda.stream: argument 2 expected a function, got " .. type(fn)) end
    local prev = current_stream(s.device)
    set_stream(s)
    return restore(prev, pcall(fn, ...))
  end,
  CUDAGraph = function(d) return new_graph(d) end,
  graph = graph,
  -- T.cuda.Event{enable_timing = false}
  Event = function(opts)
    opts = opts or {}
    for k in pairs(opts) do
      if k ~= "enable_timing" then
        core.fail("T.cuda.Event: unknown option '" .. tostring(k) .. "' (expected enable_timing)")
      end
    end
    return setmetatable({ enable_timing = opts.enable_timing == true }, Event)
  end,
}

M.check_stream = check_stream

-- T.backends.cudnn (torch.backends.cudnn): enabled (CRESCENT_CUDNN=0 starts it off), allow_tf32
-- (on: float32 convolutions may use TF32, as PyTorch's default) and benchmark (off: a new shape
-- takes cuDNN's heuristics, not its timed algorithms) read and set the runtime's switches;
-- is_available(), unavailable_reason() and version() (cudnnGetVersion's code, nil without cuDNN).
-- api (crescent's; CRESCENT_CUDNN_API at start): "graph" (cuDNN's backend API, the legacy one
-- where it gives no plan) or "legacy".
local CUDNN_APIS = { [0] = "graph", "legacy" }
local CUDNN_FLAGS = { enabled = 0, allow_tf32 = 1, benchmark = 4 }
local cudnn = {
  is_available = function() return api.cudnn_unavailable() == nil end,
  -- why cuDNN cannot be used here ("" when it can)
  unavailable_reason = function()
    local why = api.cudnn_unavailable()
    return why == nil and "" or ffi.string(why)
  end,
  version = function()
    local v = api.cudnn_state(ctx, 2, -1)
    return v ~= 0 and v or nil
  end,
}
M.backends = {
  cudnn = setmetatable({}, {
    __index = function(_, k)
      if CUDNN_FLAGS[k] then return api.cudnn_state(ctx, CUDNN_FLAGS[k], -1) ~= 0 end
      if k == "api" then return CUDNN_APIS[api.cudnn_state(ctx, 6, -1)] end
      return cudnn[k]
    end,
    __newindex = function(_, k, v)
      if k == "api" then
        if v ~= "graph" and v ~= "legacy" then core.fail("T.backends.cudnn.api: expected \"graph\" or \"legacy\", got " .. tostring(v)) end
        return api.cudnn_state(ctx, 6, v == "legacy" and 1 or 0)
      end
      if not CUDNN_FLAGS[k] then core.fail("T.backends.cudnn: unknown setting '" .. tostring(k) .. "' (expected enabled, allow_tf32, benchmark or api)") end
      if type(v) ~= "boolean" then core.fail("T.backends.cudnn." .. k .. ": expected a boolean, got " .. type(v)) end
      api.cudnn_state(ctx, CUDNN_FLAGS[k], v and 1 or 0)
    end,
  }),
}
-- T.backends.cuda.matmul.allow_tf32 (PyTorch's flag, false by default): float32 products on CUDA
-- (cuBLAS, cuBLASLt) may round their inputs to TF32 on tensor cores.
-- T.backends.cuda.enable_cudnn_sdp(on) / cudnn_sdp_enabled() (PyTorch's, on by default): 16-bit
-- attention may run cuDNN's fused kernels (while T.backends.cudnn.enabled too), else crescent's.
local tf32 = false
M.backends.cuda = {
  enable_cudnn_sdp = function(on)
    if type(on) ~= "boolean" then
      core.fail("T.backends.cuda.enable_cudnn_sdp: expected a boolean, got " .. type(on))
    end
    api.cudnn_state(ctx, 7, on and 1 or 0)
  end,
  cudnn_sdp_enabled = function() return api.cudnn_state(ctx, 7, -1) ~= 0 end,
  -- whether device d (an index, default 0) and the cuDNN loaded can run cuDNN's attention (sm_90
  -- or later, cuDNN 9.15 or later), the switches aside
  can_use_cudnn_attention = function(d) return api.cudnn_state(ctx, 8, d or 0) ~= 0 end,
  matmul = setmetatable({}, {
    __index = function(_, k) if k == "allow_tf32" then return tf32 end end,
    __newindex = function(_, k, v)
      if k ~= "allow_tf32" then
        core.fail("T.backends.cuda.matmul: unknown setting '" .. tostring(k) .. "' (expected allow_tf32)")
      end
      if type(v) ~= "boolean" then
        core.fail("T.backends.cuda.matmul.allow_tf32: expected a boolean, got " .. type(v))
      end
      call(S.matmul_tf32, v and 1 or 0)
      tf32 = v
    end,
  }),
}

return M
