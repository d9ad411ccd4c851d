-- crescent.core: the FFI boundary. Declares vm/ffi_api.h to LuaJIT, casts the api table and
-- this VM's context, and defines the tensor handle type. Every other module reaches C++ only
-- through what this one returns.
local cdef, api_ptr, ctx_ptr, release_handle = ...
local ffi = require "ffi"
ffi.cdef(cdef)

local core = {
  ffi = ffi,
  api = ffi.cast("cr_api*", api_ptr),
  ctx = ffi.cast("cr_ctx*", ctx_ptr),
  handle_t = ffi.typeof("cr_handle"),
  dtypes = { [0] = "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" },
  -- filled by crescent.tensor before the handle type gets its metatable
  tensor_mt = {},
  release_handle = release_handle,  -- the handles' finaliser (a lua_CFunction, vm/lua_vm.cpp)
}

-- The user's frame: the first Lua frame above `level` that is not part of the standard library.
-- A user function that tail-calls an op leaves no frame of its own: the next Lua frame up (the
-- line that called it) is the best position left; with none, the result is nil.
local getinfo = debug.getinfo
local function user_level(level)
  while true do
    local info = getinfo(level, "S")
    if info == nil then return nil end
    if info.what ~= "C" and info.what ~= "tail" and info.source:sub(1, 11) ~= "=[crescent]" then return level end
    level = level + 1
  end
end

-- Raises msg at the user's code, so errors carry the user's file:line however deep inside
-- crescent they were found.
function core.fail(msg)
  local level = user_level(3)
  error(msg, level and level - 1 or 0)
end

-- "file:line" of the user's code (graph nodes and breaks keep it), or "?".
function core.where()
  local level = user_level(3)
  if not level then return "?" end
  local info = getinfo(level - 1, "Sl")
  return info.short_src .. ":" .. info.currentline
end

-- Raises the last C++ error (see core.fail). rc -2: the message already starts with its
-- position (an op of a captured graph that failed when the graph ran).
function core.raise(rc)
  local msg = ffi.string(core.api.last_error(core.ctx))
  if rc == -2 then error(msg, 0) end
  core.fail(msg)
end

-- Requests the C++ side leaves in ctx.service after an op (see vm/ffi_api.h).
function core.service()
  local ctx, api = core.ctx, core.api
  if bit.band(ctx.service, 2) ~= 0 then api.cap_where(ctx, core.where()) end
  if bit.band(ctx.service, 1) ~= 0 then collectgarbage(); api.gc_done(ctx, collectgarbage("count")) end
end

-- Lua needs the value of tensor t (item, totable, tostring...): inside a compiled function
-- this is a graph break; a tensor whose graph already ran gets its value.
function core.need(t, reason)
  local rc = core.api.cap_need(core.ctx, t.p, reason, core.where())
  if rc < 0 then core.raise(rc) end
end

-- Wraps a cr_tensor* we own one reference of into a Lua handle (released by __gc).
local handle_t = core.handle_t
-- (Not a tail call: LuaJIT cannot record a return below a trace's first frame right after a
-- tail call to a constructor, and such returns are common: an op traced on its own returning into
-- the user's code; the whole path would run interpreted.)
function core.wrap(p)
  local h = handle_t(p)
  return h
end

function core.is_tensor(v)
  return ffi.istype(handle_t, v)
end

return core
