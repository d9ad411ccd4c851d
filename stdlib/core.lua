-- crescent.core: the FFI boundary. Declares vm/ffi_api.h to LuaJIT, casts the api table and
-- this VM's context, and defines the tensor handle type. Every other module reaches C++ only
-- through what this one returns.
local cdef, api_ptr, ctx_ptr = ...
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
}

-- Raises msg at the user's code: the first Lua frame that is not part of the standard library,
-- so errors carry the user's file:line however deep inside crescent they were found.
local getinfo = debug.getinfo
function core.fail(msg)
  -- A user function that tail-calls an op leaves no frame of its own: the next Lua frame up
  -- (the line that called it) is the best position left; with none, the message has none.
  local level = 2
  while true do
    local info = getinfo(level, "S")
    if info == nil then level = 0; break end
    if info.what ~= "C" and info.what ~= "tail" and info.source:sub(1, 11) ~= "=[crescent]" then break end
    level = level + 1
  end
  error(msg, level)
end

-- Raises the last C++ error (see core.fail).
function core.raise()
  core.fail(ffi.string(core.api.last_error(core.ctx)))
end

-- Wraps a cr_tensor* we own one reference of into a Lua handle (released by __gc).
local handle_t = core.handle_t
function core.wrap(p)
  return handle_t(p)
end

function core.is_tensor(v)
  return ffi.istype(handle_t, v)
end

return core
