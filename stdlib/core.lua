-- crescent.core: the FFI boundary. Declares vm/abi.h and vm/lua/ffi_api.h to LuaJIT, casts the api
-- table and this VM's context, and defines the tensor handle type. Every other module reaches C++ only
-- through what this one returns.
local cdef, api_ptr, ctx_ptr, release_handle, new_handles = ...
local ffi = require "ffi"
ffi.cdef(cdef)

local core = {
  ffi = ffi,
  api = ffi.cast("cr_api*", api_ptr),
  ctx = ffi.cast("cr_ctx*", ctx_ptr),
  -- dtype names by code (vm/abi.h enum cr_dtype)
  dtypes = { [ffi.C.CR_FLOAT32] = "float32", [ffi.C.CR_FLOAT64] = "float64", [ffi.C.CR_FLOAT16] = "float16",
             [ffi.C.CR_BFLOAT16] = "bfloat16", [ffi.C.CR_INT32] = "int32", [ffi.C.CR_INT64] = "int64",
             [ffi.C.CR_BOOL] = "bool" },
  -- the tensor handles' metatable, filled by crescent.tensor before the first handle is made
  tensor_mt = {},
  release_handle = release_handle,  -- the handles' finaliser (a lua_CFunction, vm/lua/lua_vm.cpp)
}

-- The user's position (crescent.position): errors carry the user's file:line however deep
-- inside crescent they were found, also when the user's function left by a tail call.
local getinfo, find = debug.getinfo, require("crescent.position").find
core.entry = require("crescent.position").entry
function core.pass(...) return ... end  -- calls through it are no tail calls
function core.pack(...) return { n = select("#", ...), ... } end  -- (unpack(t, 1, t.n) gives them back, nils too)

function core.fail(msg)
  local level, pos = find(3)
  if pos then error(pos .. ": " .. msg, 0) end
  error(msg, level and level - 1 or 0)
end

-- "file:line" of the user's code (graph nodes and breaks keep it), or "?".
function core.where()
  local level, pos = find(3)
  if not level then return pos or "?" end
  local info = getinfo(level - 1, "Sl")
  return info.short_src .. ":" .. info.currentline
end

-- The user's name of the tensor at p (crescent.position.name_of), or nil.
local name_of = require("crescent.position").name_of
function core.name_of(p)
  return name_of(3, function(v) return core.is_tensor(v) and core.ptr(v) == p end)
end

-- Raises the last C++ error (see core.fail). rc -2: the message already starts with its
-- position (an op of a captured graph that failed when the graph ran).
function core.raise(rc)
  local msg = ffi.string(core.api.last_error(core.ctx))
  if rc == -2 then error(msg, 0) end
  core.fail(msg)
end

-- The environment setting `variable` (CRESCENT_*, declared in vm/config.hpp) or nil when unset:
-- read through the C++ table, which raises for a variable it does not declare.
local SETTING = ffi.new("const char*[1]")
function core.setting(variable)
  if core.api.env_setting(core.ctx, variable, SETTING) ~= 0 then core.raise(-1) end
  return SETTING[0] ~= nil and ffi.string(SETTING[0]) or nil
end

-- A full collection, told to the collector's budgets (api.cpp api_gc_done), so that its bytes and
-- time count as any other collection's and the one due is not run again.
function core.collect()
  collectgarbage()
  core.api.gc_done(core.ctx, collectgarbage("count"))
end

-- Requests the C++ side leaves in ctx.service after an op (vm/abi.h enum cr_service).
local GC_FULL, WHERE, GC_STEP = ffi.C.CR_SERVICE_GC_FULL, ffi.C.CR_SERVICE_WHERE, ffi.C.CR_SERVICE_GC_STEP
local GRAD_WHERE, NAME = ffi.C.CR_SERVICE_GRAD_WHERE, ffi.C.CR_SERVICE_NAME
function core.service()
  local ctx, api = core.ctx, core.api
  if bit.band(ctx.service, WHERE) ~= 0 then api.cap_where(ctx, core.where()) end
  if bit.band(ctx.service, GRAD_WHERE) ~= 0 then api.autograd.where(ctx, core.where()) end
  if bit.band(ctx.service, NAME) ~= 0 then api.cap_name(ctx, core.name_of(api.cap_unnamed(ctx)) or "") end
  if bit.band(ctx.service, GC_FULL + GC_STEP) == 0 then return end
  if bit.band(ctx.service, GC_FULL) ~= 0 then return core.collect() end
  collectgarbage("step", 1073741823)  -- (a step of 2^30 KiB: until the cycle in progress, or a new one, ends)
  api.gc_done(ctx, collectgarbage("count"))
end

-- t's keys in order (as strings: mixed key types compare)
function core.sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end

-- Whether F.layer_norm / F.cross_entropy on `device` call their fused library op (one extern
-- node of a graph, its derivative the fused backward kernel) rather than the composition that
-- the code generators fuse with its neighbours: always eagerly; in a training capture
-- (ctx.capturing == 2) per device type, whichever made the small GPT step faster
-- (bench/RESULTS.md H39); an inference capture takes the composition.
core.fused_in_training = { cpu = false, cuda = true }
function core.fused_op(device)
  local c = core.ctx.capturing
  return c == 0 or (c == 2 and core.fused_in_training[device == "cpu" and "cpu" or "cuda"])
end

-- Lua needs the value of tensor t (item, totable, tostring...): inside a compiled function
-- this is a graph break; a tensor whose graph already ran gets its value.
function core.need(t, reason)
  local rc = core.api.cap_need(core.ctx, core.ptr(t), reason, core.where())
  if rc < 0 then core.raise(rc) end
end

-- Tensor handles: full userdata holding a cr_handle { cr_tensor* p }, with core.tensor_mt as
-- their metatable and the C function release_handle as its __gc (vm/lua/lua_vm.cpp says why not
-- cdata). They come from a pool that the C function new_handles refills, kPool at a time; a
-- handle taken from it leaves the pool's table, so nothing but the user's values keeps it alive.
local mt, hptr, cast, getmetatable = core.tensor_mt, ffi.typeof("cr_handle*"), ffi.cast, getmetatable
local kPool, pool, free = 256, {}, 0

-- The cr_tensor* of handle t (no check: callers know t is a tensor).
function core.ptr(t)
  return cast(hptr, t).p
end

-- Wraps a cr_tensor* we own one reference of into a Lua handle (released by __gc).
-- (Not a tail call: LuaJIT cannot record a return below a trace's first frame right after a
-- tail call to a constructor, and such returns are common: an op traced on its own returning into
-- the user's code; the whole path would run interpreted.)
-- The runtime releases what it handed out that was never wrapped (a Lua error such as a stack
-- overflow came first; vm/context.hpp, handed). ctx.claimed counts p before the handle owns it
-- (an error between the two leaks p, never frees it twice) and before anything allocates: a
-- collection may run finalizers that hand out tensors, which drops what is unclaimed.
local ctx = core.ctx
local function refill()
  new_handles(pool, kPool, mt)
  free = kPool
end
function core.wrap(p)
  if free == 0 then refill() end  -- the first wrap, or one after a refill that failed
  local h = pool[free]
  pool[free] = nil
  free = free - 1
  ctx.claimed = ctx.claimed + 1
  cast(hptr, h).p = p
  if free == 0 then refill() end
  return h
end

-- Makes handle a hold b's tensor and b a's former one (released with b): everything that holds a
-- (an optimizer, another module) then sees the new tensor, as after PyTorch's `p.data = q`.
function core.swap_tensors(a, b)
  local ha, hb = cast(hptr, a), cast(hptr, b)
  ha.p, hb.p = hb.p, ha.p
end

function core.is_tensor(v)
  return getmetatable(v) == mt
end

return core
