-- crescent.compile: T.compile, T.explain, T.compiler, T.config (API.md section 5).
--
-- A compiled function is a plain Lua function around the user's: it starts a capture (the C++
-- recorder, vm/graph/recorder.hpp), calls the user's function - whose ops are then recorded or
-- replayed lazily instead of run - and at the return hands the returned tensors to the recorder,
-- which runs the last segment. A compiled function called inside another one is simply inlined
-- into the caller's trace. Errors raised inside propagate unchanged, after the ops recorded
-- before them have run (their side effects are due, as in eager mode).
local core = require "crescent.core"
local ffi, api, ctx = core.ffi, core.api, core.ctx
local is_tensor, fail, ptr = core.is_tensor, core.fail, core.ptr

local M = {}

-- CRESCENT_CACHE_MAX_MB, the disk cache's bound (jit/disk_cache.hpp reads it too)
local function env_cache_max_mb()
  local v = core.setting("CRESCENT_CACHE_MAX_MB")
  if v == nil or v == "" then return 1024 end
  local n = tonumber(v)
  if not n or n <= 0 then fail(("CRESCENT_CACHE_MAX_MB: expected a positive number of MB, got %q"):format(v)) end
  return n
end

local settings = {
  cache_size_limit = 8,   -- variants per site before it runs eagerly
  cache_max_mb = env_cache_max_mb(),  -- the disk cache's bound: least recently used entries go first
  cache_dir = ffi.string(api.default_cache_dir()),  -- (jit/disk_cache.cpp default_cache_dir)
  debug_dir = core.setting("CRESCENT_DEBUG_DIR"),  -- per compiled graph: guards, graphs, compile time
  -- false: native code is compiled on a background thread while the graph keeps running on the
  -- eager kernels, and the graph switches between two calls; true: in line (the spec runner sets
  -- it, so that a test's second call runs native code).
  sync_compile = false,
  -- mode = "reduce-overhead" on CUDA replays a proven call as one CUDA graph (false: from the host)
  cudagraphs = true,
  -- true: every compile tunes its kernels as mode = "max-autotune" does (jit/autotune.hpp)
  autotune = false,
  autotune_budget_ms = 2000,  -- tuning time per graph (candidate compiles and timing)
  repl_timing = false,  -- the REPL prints each command's wall time after its results
}

-- Each setting's check: whether v may be assigned, and what is expected.
local SETTINGS = {
  cache_size_limit = function(v)
    return type(v) == "number" and v >= 0 and v == math.floor(v) and v < 2 ^ 31, "a non-negative integer"
  end,
  cache_dir = function(v) return type(v) == "string", 'a directory (a string; "0" disables the disk cache)' end,
  cache_max_mb = function(v) return type(v) == "number" and v > 0 and v < math.huge, "a positive number of MB" end,
  debug_dir = function(v) return v == nil or type(v) == "string", "a directory (a string) or nil" end,
  sync_compile = function(v) return type(v) == "boolean", "a boolean" end,
  cudagraphs = function(v) return type(v) == "boolean", "a boolean" end,
  autotune = function(v) return type(v) == "boolean", "a boolean" end,
  autotune_budget_ms = function(v) return type(v) == "number" and v >= 0 and v < math.huge, "a non-negative number of ms" end,
  repl_timing = function(v) return type(v) == "boolean", "a boolean" end,
}
local function shown(v)
  if type(v) == "string" then return ("%q"):format(v) end
  if v == nil or type(v) == "number" or type(v) == "boolean" then return tostring(v) end
  return "a " .. type(v)
end

-- T.config: an empty table reading `settings`, so that every assignment is checked here; a
-- wrong value raises at the assignment, naming the setting, what it expects and what was given.
M.config = setmetatable({}, {
  __index = settings,
  __newindex = function(_, k, v)
    local check = SETTINGS[k]
    if not check then
      local names = {}
      for name in pairs(SETTINGS) do names[#names + 1] = name end
      table.sort(names)
      fail(("config: unknown setting %s (expected one of: %s)"):format(shown(k), table.concat(names, ", ")))
    end
    local ok, expected = check(v)
    if not ok then fail(("config: %s expected %s, got %s"):format(k, expected, shown(v))) end
    settings[k] = v
    if k == "cache_max_mb" then  -- (process-wide: jit/disk_cache.hpp)
      local rc = api.cap_set_option(ctx, k, ("%.17g"):format(v))
      if rc < 0 then core.raise(rc) end
    end
  end,
})

-- "auto", "cpu" and "cuda" all compile native code for the device the graph's tensors are on;
-- "aot_eager" is "eager" named as PyTorch's: the joint graphs of training are built, and run on
-- the eager kernels (for telling capture bugs from code-generation bugs)
local MODES = { default = ffi.C.CR_MODE_DEFAULT, ["reduce-overhead"] = ffi.C.CR_MODE_REDUCE_OVERHEAD,
                ["max-autotune"] = ffi.C.CR_MODE_MAX_AUTOTUNE }
local BACKENDS = { auto = true, eager = true, aot_eager = true, cpu = true, cuda = true }
local OPTIONS = { backend = true, fullgraph = true, dynamic = true, mode = true, hot = true }

local function check_opts(opts)
  opts = opts or {}
  if type(opts) ~= "table" then fail("compile: argument 2 (opts) expected a table, got " .. type(opts)) end
  for k in pairs(opts) do
    if not OPTIONS[k] then
      fail("compile: unknown option '" .. tostring(k) .. "' (expected one of: backend, dynamic, fullgraph, hot, mode)")
    end
  end
  local b = opts.backend or "auto"
  if not BACKENDS[b] then
    fail("compile: option backend expected \"auto\", \"eager\", \"aot_eager\", \"cpu\" or \"cuda\", got " .. tostring(b))
  end
  if opts.dynamic ~= nil and type(opts.dynamic) ~= "boolean" then
    fail("compile: option dynamic expected nil, true or false, got " .. tostring(opts.dynamic))
  end
  local mode = opts.mode or "default"
  if mode ~= "default" and mode ~= "reduce-overhead" and mode ~= "max-autotune" then
    fail("compile: option mode expected \"default\", \"reduce-overhead\" or \"max-autotune\", got " .. tostring(mode))
  end
  local hot = opts.hot or 2
  if type(hot) ~= "number" or hot < 0 or hot ~= math.floor(hot) then
    fail("compile: option hot expected a non-negative integer, got " .. tostring(hot))
  end
  if opts.fullgraph ~= nil and type(opts.fullgraph) ~= "boolean" then
    fail("compile: option fullgraph expected a boolean, got " .. type(opts.fullgraph))
  end
  local dynamic = opts.dynamic == nil and -1 or opts.dynamic and 1 or 0
  return { backend = b, fullgraph = opts.fullgraph == true, mode = mode, hot = hot, dynamic = dynamic }
end

-- The tensors among a call's return values (inside tables too), for the recorder.
local function collect(v, out, seen)
  if is_tensor(v) then
    out[#out + 1] = v
  elseif type(v) == "table" and not seen[v] then
    seen[v] = true
    for _, x in pairs(v) do collect(x, out, seen) end
  end
end

-- The hot path of a compiled call has no loops and reads its varargs only in the frame that owns
-- them: a loop in a function called from the user's loop becomes a trace of its own, whose exits
-- start side traces inside these frames, and LuaJIT cannot record varargs or returns below a
-- trace's first frame ("NYI: bytecode 71", "return to lower frame"): the whole call would then run
-- in the interpreter, at several times the cost.
local RETS = ffi.new("cr_tensor*[?]", 64)
local function slow_returns(n, ...)  -- tensors inside tables, or more than 3 values
  local list, seen = {}, {}
  for i = 1, n do collect((select(i, ...)), list, seen) end
  local buf = #list <= 64 and RETS or ffi.new("cr_tensor*[?]", #list)
  for i = 1, #list do buf[i - 1] = ptr(list[i]) end
  return buf, #list
end
-- -1: v is a table (the slow path); else the count after v is stored at buf[count] if a tensor
local function put_return(v, count)
  if is_tensor(v) then RETS[count] = ptr(v); return count + 1 end
  if type(v) == "table" then return -1 end
  return count
end
local function hand_back_to(suspending, where, ...)
  local n, count, buf = select("#", ...), 0, RETS
  if n <= 3 then
    local a, b, c = ...
    if n >= 1 then count = put_return(a, count) end
    if n >= 2 and count >= 0 then count = put_return(b, count) end
    if n >= 3 and count >= 0 then count = put_return(c, count) end
  end
  if n > 3 or count < 0 then buf, count = slow_returns(n, ...) end
  -- a call that recorded ops: the tensors Lua still holds after a full collection are those it
  -- reaches, which the compiled graph must keep (vm/graph/recorder.cpp, compile); a replayed call
  -- whose lazy values not returned passed the collector's byte budget: its graph frees what only
  -- garbage held
  if ctx.collect ~= 0 and (ctx.collect == 1 or api.cap_collect_pays(ctx, buf, count) ~= 0) then core.collect() end
  local rc
  if suspending then rc = api.cap_suspend(ctx, buf, count, where) else rc = api.cap_finish(ctx, buf, count, where) end
  if rc < 0 then core.raise(rc) end
  if ctx.service ~= 0 then core.service() end
  return ...
end
local function hand_back(where, ...) return hand_back_to(false, where, ...) end

-- The capture's owning call: capture_call's `mine` (a serial) while its capture is active, 0
-- after it ended - also when the call yielded (suspend below) and so ended its capture early.
local serial, active, active_id = 0, 0, 0

local function finish(where, mine, ok, ...)
  if mine ~= active then  -- (suspended by a yield: its capture already ended there)
    if not ok then error((...), 0) end
    return ...
  end
  active = 0
  if not ok then
    -- an op recorded before the error that fails on its values raised first in eager
    local rc = api.cap_abort(ctx)
    if rc < 0 then core.raise(rc) end
    error((...), 0)  -- the error as raised, with its own position
  end
  return hand_back(where, ...)
end

local function define_site(fn)
  local info = debug.getinfo(fn, "S")
  return info.short_src .. ":" .. (info.linedefined or 0)
end

-- T.config entries the recorder reads, sent when they change (compared unrolled: see above).
local SENT_OPTIONS, sent = { "debug_dir", "cache_dir", "sync_compile", "cudagraphs", "autotune", "autotune_budget_ms" }, {}
local function send_config(config)
  if sent.debug_dir == config.debug_dir and sent.cache_dir == config.cache_dir and sent.sync_compile == config.sync_compile
     and sent.cudagraphs == config.cudagraphs and sent.autotune == config.autotune
     and sent.autotune_budget_ms == config.autotune_budget_ms and sent.valid then
    return
  end
  sent = { valid = true }
  for _, k in ipairs(SENT_OPTIONS) do
    local v = config[k]
    sent[k] = v
    local rc = api.cap_set_option(ctx, k, v == nil and "" or type(v) == "number" and ("%.17g"):format(v) or tostring(v))
    if rc < 0 then core.raise(rc) end
  end
end

-- Whether a call captures training graphs (compiled autograd, vm/graph/joint.hpp): 0 no (grad
-- mode off), 1 yes (an argument or the module's parameters require grad), 2 if an earlier call
-- met a tensor requiring grad (an upvalue: Recorder::begin).
local needs_grad, grad_mode = require("crescent.autograd").needs_grad, require("crescent.autograd").grad_mode
local function train_mode(module, ...)
  if not grad_mode() then return 0 end
  return needs_grad(module, ...) and 1 or 2
end

-- An error inside a captured call: its frames where it was raised, for the error handler of the
-- executable and the REPL (vm/lua/traceback.cpp), as the rethrow in finish() shows none below it
local registry, traceback = debug.getregistry(), debug.traceback
local function note_frames(err)
  if type(err) == "string" then registry["crescent.error_frames"] = { err, traceback("", 2):sub(2) } end
  return err
end

-- One capture of fn(...) as function `id`; the call runs plainly when a capture is active.
local function capture_call(id, ret_where, train, fn, ...)
  local config = settings  -- (T.config's values, read without its metatable)
  send_config(config)
  local rc = api.cap_begin(ctx, id, config.cache_size_limit, train)
  if rc == 0 then return fn(...) end
  if rc < 0 then core.raise(rc) end
  serial = serial + 1
  local mine = serial
  active, active_id = mine, id
  return finish(ret_where, mine, xpcall(fn, note_frames, ...))
end
core.entry(capture_call, 4)  -- (fn: an error in its tail call is at that line)

-- coroutine.yield out of the compiled call that owns the capture (a frame of capture_call with
-- the active serial on the yielding coroutine's stack) ends its capture there, as a return of the
-- values yielded: while it is suspended other code runs uncaptured, and once resumed the rest of
-- the call runs eagerly. With fullgraph = true the yield is a graph break, an error.
local fullgraph_ids = {}
local function owns_capture()
  for level = 3, math.huge do
    local info = debug.getinfo(level, "f")
    if not info then return false end
    if info.func == capture_call then
      for i = 1, math.huge do
        local name, v = debug.getlocal(level, i)
        if name == nil then break end
        if name == "mine" and v == active then return true end
      end
    end
  end
end
local raw_yield = coroutine.yield
local function suspend(...)
  local where = core.where()
  if fullgraph_ids[active_id] then
    error(where .. ": compile (fullgraph = true): graph break at " .. where
          .. ": coroutine.yield suspends the compiled function", 0)
  end
  active = 0
  hand_back_to(true, "coroutine.yield at " .. where, ...)
end
function coroutine.yield(...)
  if active ~= 0 and api.cap_active(ctx) ~= 0 and owns_capture() then suspend(...) end
  return raw_yield(...)
end

local compiled = setmetatable({}, { __mode = "k" })  -- compiled function -> { fn =, opts = }

function M.compile(fn, opts)
  local site, module
  if type(fn) == "table" and type(fn.forward) == "function" then  -- a module: its forward
    module = fn
    site = define_site(module.forward)
    fn = function(...)
      if rawget(module, "_fwd_hooks") then return core.pass(module(...)) end  -- (its forward hooks too)
      local forward = module.forward  -- (a local, not a tail call: crescent.position finds its line)
      return core.pass(forward(module, ...))
    end
    core.entry(fn, 1, 1)
  end
  if type(fn) ~= "function" then fail("compile: argument 1 (fn) expected a function or a module, got " .. type(fn)) end
  local o = check_opts(opts)
  site = site or define_site(fn)
  local id = api.cap_function(ctx, site, o.hot, o.fullgraph and 1 or 0, MODES[o.mode], o.backend, o.dynamic)
  if id < 0 then core.raise(id) end
  if o.fullgraph then fullgraph_ids[id] = true end
  local ret_where = "return of " .. site
  -- the traces live in C++ as long as the compiled function does
  local owner = ffi.gc(ffi.new("int32_t[1]", id), function() api.cap_drop(ctx, id); fullgraph_ids[id] = nil end)
  local call = function(...)
    local _ = owner
    return capture_call(id, ret_where, train_mode(module, ...), fn, ...)
  end
  if o.mode == "reduce-overhead" then  -- (its replays are for calls that give no tensor requiring grad)
    local replayed = require("crescent.replay").wrap(fn, id, call)
    local captured = call
    call = function(...)
      if train_mode(module, ...) == 1 then return captured(...) end
      return replayed(...)
    end
  end
  compiled[call] = { fn = fn, opts = o, module = module }
  return call
end

-- Whether a tensor requiring grad is reachable from fn's upvalues (a model, an optimizer, also
-- through the functions among them): its one call under T.explain captures training graphs, as
-- a compiled function's calls after its first do.
local function upvalues_need_grad(fn, seen)
  if seen[fn] then return false end
  seen[fn] = true
  -- (a compiled function: its own function, or its module; crescent's own functions are not
  -- walked: their upvalues hold its internals, such as the pool of unset tensor handles)
  local c = compiled[fn]
  if c and not c.module then return upvalues_need_grad(c.fn, seen) end
  if c then
    local ok, yes = pcall(needs_grad, c.module)
    return ok and yes
  end
  if debug.getinfo(fn, "S").source:sub(1, 11) == "=[crescent]" then return false end
  for i = 1, math.huge do
    local name, v = debug.getupvalue(fn, i)
    if name == nil then return false end
    if type(v) == "function" then
      if upvalues_need_grad(v, seen) then return true end
    else
      local ok, yes = pcall(needs_grad, v)  -- (a class table's parameters method raises: not a model)
      if ok and yes then return true end
    end
  end
end

-- T.explain(fn, ...): runs fn once under a fresh capture and reports its graphs and breaks.
function M.explain(fn, ...)
  local dynamic = -1
  if compiled[fn] then fn, dynamic = compiled[fn].fn, compiled[fn].opts.dynamic end
  local site
  if type(fn) == "table" and type(fn.forward) == "function" then  -- a module: its forward
    local module = fn
    site = define_site(module.forward)
    fn = function(...) return module.forward(module, ...) end
  end
  if type(fn) ~= "function" then fail("explain: argument 1 (fn) expected a function or a module, got " .. type(fn)) end
  if api.cap_active(ctx) ~= 0 then fail("explain: cannot run inside a compiled function") end
  site = site or define_site(fn)
  local id = api.cap_function(ctx, site, 2 ^ 30, 0, 0, "eager", dynamic)
  local train = train_mode(nil, ...)
  if train == 2 and upvalues_need_grad(fn, {}) then train = 1 end
  local ok, err = pcall(capture_call, id, "return of " .. site, train, fn, ...)
  if not ok then api.cap_drop(ctx, id); error(err, 0) end
  -- (training: backward_graph_count forward graphs get a backward graph of their own; those in
  -- grad_fallbacks are differentiated by eager autograd)
  local r = { graph_count = 0, graph_break_count = 0, break_reasons = {}, ops_per_graph = {}, graph_ops = {},
              symbolic_dims = {}, backward_graph_count = 0, grad_fallbacks = {}, sync_points = {} }
  local report = ffi.string(api.cap_report(ctx))
  for ops, ends, reason, where, sym, names, bwd, why in
      report:gmatch("(%d+)\t(%a)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(%d)\t([^\n]*)\n") do
    ops = tonumber(ops)
    -- "1:1=7": input 1, 0-based dim 1, size 7 in this call (dims are 1-based in Lua); the
    -- segment's symbols s0, s1... in this order, as the logs name them; "2:0=5u1": an unbacked
    -- size, the count of the call's second data-dependent op
    local k = 0
    for i, d, size, u in sym:gmatch("(%d+):(%d+)=(%d+)(u?%d*)") do
      local symbol = u ~= "" and u or "s" .. k
      if u == "" then k = k + 1 end
      r.symbolic_dims[#r.symbolic_dims + 1] = { segment = r.graph_count + (ops > 0 and 1 or 0), input = tonumber(i),
                                                dim = tonumber(d) + 1, size = tonumber(size), symbol = symbol }
    end
    if ops > 0 then
      r.graph_count = r.graph_count + 1
      r.ops_per_graph[#r.ops_per_graph + 1] = ops
      local list = {}
      for name in names:gmatch("%S+") do list[#list + 1] = name end
      r.graph_ops[#r.graph_ops + 1] = list  -- the graph's ops in call order
    end
    if bwd == "1" then r.backward_graph_count = r.backward_graph_count + 1 end
    if why ~= "" then r.grad_fallbacks[#r.grad_fallbacks + 1] = { graph = r.graph_count, reason = why } end
    if ends == "B" then
      r.graph_break_count = r.graph_break_count + 1
      r.break_reasons[#r.break_reasons + 1] = { reason = reason, where = where }
    elseif ends == "S" then
      r.sync_points[#r.sync_points + 1] = { reason = reason, where = where }
    end
  end
  local lines = { string.format("%s: %d graph(s), %d graph break(s)", site, r.graph_count, r.graph_break_count)
                  .. (r.backward_graph_count > 0 and string.format(", %d backward graph(s)", r.backward_graph_count) or "") }
  for i, n in ipairs(r.ops_per_graph) do
    lines[#lines + 1] = string.format("  graph %d: %d ops: %s", i, n, table.concat(r.graph_ops[i], " "))
  end
  for i, b in ipairs(r.break_reasons) do lines[#lines + 1] = string.format("  break %d: %s at %s", i, b.reason, b.where) end
  for i, b in ipairs(r.sync_points) do lines[#lines + 1] = string.format("  sync %d: %s at %s", i, b.reason, b.where) end
  for _, f in ipairs(r.grad_fallbacks) do
    lines[#lines + 1] = string.format("  graph %d: eager autograd differentiates it: %s", f.graph, f.reason)
  end
  for _, s in ipairs(r.symbolic_dims) do
    lines[#lines + 1] = string.format("  symbolic: graph %d %s = input %d dim %d (size %d now)", s.segment, s.symbol, s.input,
                                      s.dim, s.size)
  end
  r.summary = table.concat(lines, "\n")
  api.cap_drop(ctx, id)
  return setmetatable(r, { __tostring = function(t) return t.summary end })
end

local C = ffi.C
local STATS = ffi.new("double[?]", C.CR_CAP_STATS)  -- (api.cap_stats: vm/lua/ffi_api.h cr_cap_stat)
M.compiler = {
  reset = function() api.cap_reset(ctx) end,
  -- wait([fn]): returns once the background compiles are done (of every function: fn's among them)
  wait = function(fn)
    if fn ~= nil and not compiled[fn] then fail("compiler.wait: argument 1 (fn) expected a compiled function or nil, got " .. type(fn)) end
    api.wait_compiles()
  end,
  stats = function()
    api.cap_stats(ctx, STATS)
    return { graphs_compiled = STATS[C.CR_STAT_GRAPHS_COMPILED], recompiles = STATS[C.CR_STAT_RECOMPILES],
             graph_breaks = STATS[C.CR_STAT_GRAPH_BREAKS], kernels_compiled = STATS[C.CR_STAT_KERNELS_COMPILED],
             disk_cache_hits = STATS[C.CR_STAT_DISK_CACHE_HITS], eager_fallbacks = STATS[C.CR_STAT_EAGER_FALLBACKS],
             graph_run_us = STATS[C.CR_STAT_GRAPH_RUN_US], replays = STATS[C.CR_STAT_REPLAYS],
             -- compiles queued or running on the background thread (of the process), and the time
             -- of those whose outcome a graph has taken up
             compiles_pending = STATS[C.CR_STAT_COMPILES_PENDING], compile_ms = STATS[C.CR_STAT_COMPILE_MS],
             kernels_loaded = STATS[C.CR_STAT_KERNELS_LOADED],  -- (kernels taken from the memory or disk cache)
             backward_graphs_compiled = STATS[C.CR_STAT_BACKWARD_GRAPHS_COMPILED],
             grad_fallbacks = STATS[C.CR_STAT_GRAD_FALLBACKS],
             -- the partitioner's: forward values saved for backward graphs, their bytes, and
             -- forward ops the backward graphs recompute instead
             saved_values = STATS[C.CR_STAT_SAVED_VALUES], saved_bytes = STATS[C.CR_STAT_SAVED_BYTES],
             recomputed_ops = STATS[C.CR_STAT_RECOMPUTED_OPS],
             -- reduce-overhead on CUDA: plans recorded into CUDA graphs, replays that launched one
             cudagraphs_recorded = STATS[C.CR_STAT_CUDAGRAPHS_RECORDED],
             cudagraph_replays = STATS[C.CR_STAT_CUDAGRAPH_REPLAYS],
             -- mode = "max-autotune" (of the process): tuning jobs finished, kernels tuned by
             -- timing, candidates timed, kernels whose choice came from the cache directory,
             -- candidates rejected (outputs not the default's), and the jobs' time
             autotune_graphs = STATS[C.CR_STAT_AUTOTUNE_GRAPHS], autotune_kernels = STATS[C.CR_STAT_AUTOTUNE_KERNELS],
             autotune_candidates = STATS[C.CR_STAT_AUTOTUNE_CANDIDATES], autotune_cached = STATS[C.CR_STAT_AUTOTUNE_CACHED],
             autotune_rejected = STATS[C.CR_STAT_AUTOTUNE_REJECTED], autotune_ms = STATS[C.CR_STAT_AUTOTUNE_MS] }
  end,
  -- the same list as CRESCENT_LOGS ("graph,guards,recompiles,graph_breaks"); "" turns them off
  set_logs = function(list)
    if list ~= nil and type(list) ~= "string" then fail("compiler.set_logs: argument 1 expected a string, got " .. type(list)) end
    local rc = api.cap_set_logs(ctx, list or "")
    if rc < 0 then core.raise(rc) end
  end,
  -- native_available("cpu" | "cuda") -> true, or false and why (libgccjit / driver / NVRTC missing)
  native_available = function(kind)
    local why = api.native_unavailable(kind == "cuda" and 1 or 0)
    if why == nil then return true end
    return false, ffi.string(why)
  end,
}

-- T.mark_dynamic(x, dim[, {min =, max =}]): compiled functions treat the size of x's dim (1-based)
-- as symbolic from their first call with x, instead of specialising on it. min / max check the
-- size x has now, as PyTorch's constraints do when the mark is made.
function M.mark_dynamic(x, dim, range)
  if not is_tensor(x) then fail("mark_dynamic: argument 1 (x) expected a tensor, got " .. type(x)) end
  local n = x:dim()
  if type(dim) ~= "number" or dim ~= math.floor(dim) or dim == 0 or dim > n or dim < -n then
    fail(string.format("mark_dynamic: argument 2 (dim) expected a dim in 1..%d or -%d..-1, got %s", n, n, tostring(dim)))
  end
  if dim < 0 then dim = dim + n + 1 end
  if range ~= nil then
    if type(range) ~= "table" then fail("mark_dynamic: argument 3 expected a table {min =, max =}, got " .. type(range)) end
    for k in pairs(range) do
      if k ~= "min" and k ~= "max" then fail("mark_dynamic: unknown option '" .. tostring(k) .. "' (expected min, max)") end
    end
    local size = x:size(dim)
    if (range.min and size < range.min) or (range.max and size > range.max) then
      fail(string.format("mark_dynamic: dim %d has size %d, outside {min = %s, max = %s}", dim, size,
                         tostring(range.min), tostring(range.max)))
    end
  end
  local p = ptr(x)
  p._dynamic = bit.bor(p._dynamic, bit.lshift(1, dim - 1))
  return x
end

return M
