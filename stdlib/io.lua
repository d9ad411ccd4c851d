-- crescent.io: T.save / T.load (safetensors) and T.save_npy / T.load_npy. Parsing and
-- validation live in C++ (vm/io/), where the fuzz targets can reach them.
local core = require "crescent.core"
local ffi, api, ctx = core.ffi, core.api, core.ctx
local fail, is_tensor, wrap, ptr = core.fail, core.is_tensor, core.wrap, core.ptr

local M = {}

local function check_path(op, path)
  if type(path) ~= "string" then fail(op .. ": argument 1 (path) expected a string, got " .. type(path)) end
  if path:find("\0", 1, true) then fail(op .. ": argument 1 (path) contains a NUL byte") end
end

-- T.save(path, tensor | {name = tensor, ...})
function M.save(path, what)
  check_path("save", path)
  local names, items = {}, {}
  if is_tensor(what) then
    names[1], items[1] = "tensor", what
  elseif type(what) == "table" then
    for k, v in pairs(what) do
      if type(k) ~= "string" then
        fail("save: argument 2 expected a tensor or a table of name = tensor, got a " .. type(k) .. " key (" .. tostring(k)
             .. "; a list of tensors needs names: {w = t1, b = t2})")
      elseif not is_tensor(v) then
        fail("save: argument 2 expected a tensor or a table of name = tensor, got " .. k .. " = " .. type(v))
      end
      names[#names + 1] = k
    end
    table.sort(names)
    for i, k in ipairs(names) do items[i] = what[k] end
  else
    fail("save: argument 2 expected a tensor or a table of name = tensor, got " .. type(what))
  end
  local n = #names
  local cnames = ffi.new("const char*[?]", math.max(n, 1))
  local lens = ffi.new("size_t[?]", math.max(n, 1))  -- (a name may hold NUL bytes)
  local cts = ffi.new("cr_tensor*[?]", math.max(n, 1))
  for i = 1, n do
    if ctx.capturing ~= 0 or ptr(items[i])._storage == nil or ptr(items[i])._lazy ~= nil then core.need(items[i], "save()") end
    cnames[i - 1], lens[i - 1], cts[i - 1] = names[i], #names[i], ptr(items[i])
  end
  local rc = api.save_safetensors(ctx, path, cnames, lens, cts, n)
  if rc ~= 0 then core.raise(rc) end
end

-- T.load(path) -> {name = tensor, ...}
function M.load(path)
  check_path("load", path)
  local cap = 256
  local buf = ffi.new("cr_tensor*[?]", cap)
  local n = api.load_safetensors(ctx, path, buf, cap)
  if n < 0 then core.raise() end
  if n > cap then
    buf = ffi.new("cr_tensor*[?]", n)
    api.take_outputs(ctx, buf, n)
  end
  local r, len = {}, ffi.new("size_t[1]")
  for i = 0, n - 1 do
    local name = api.loaded_name(ctx, i, len)
    r[ffi.string(name, len[0])] = wrap(buf[i])
  end
  if ctx.service ~= 0 then core.service() end  -- (a collection the loaded bytes call for, as ops ask)
  return r
end

function M.save_npy(path, t)
  check_path("save_npy", path)
  if not is_tensor(t) then fail("save_npy: argument 2 (tensor) expected a tensor, got " .. type(t)) end
  if ctx.capturing ~= 0 or ptr(t)._storage == nil or ptr(t)._lazy ~= nil then core.need(t, "save_npy()") end
  local rc = api.save_npy(ctx, path, ptr(t))
  if rc ~= 0 then core.raise(rc) end
end

function M.load_npy(path)
  check_path("load_npy", path)
  local p = api.load_npy(ctx, path)
  if p == nil then core.raise() end
  local t = wrap(p)
  if ctx.service ~= 0 then core.service() end
  return t
end

return M
