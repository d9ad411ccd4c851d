-- crescent.tensor: the tensor handle's metatable. Methods come from the op registry (through
-- crescent.binding); this file adds what is read straight from the handle (shape, dtype,
-- device, sizes, strides), conversion to Lua values, indexing and the Lua operators.
local core = require "crescent.core"
local binding = require "crescent.binding"
local ffi, api, ctx = core.ffi, core.api, core.ctx
local fail, is_tensor, wrap, ptr = core.fail, core.is_tensor, core.wrap, core.ptr
local dtypes = core.dtypes
local BOOL = core.ffi.C.CR_BOOL  -- (vm/abi.h enum cr_dtype)

local ops = binding.build()
local methods, props = {}, {}
for name, o in pairs(ops) do
  if o.method then methods[name] = o.fn end
end

-- properties -----------------------------------------------------------------------------------
-- x.shape / x:size(): a list of the sizes that prints as {2, 3} (torch.Size); two sizes compare
-- with ==, a size and a plain table with size:equals(t).
local Size = { __name = "Size" }
Size.__index = Size
core.Size = Size  -- (a library table: replay guards never walk it, stdlib/replay_state.lua)
Size.__tostring = function(s) return "{" .. table.concat(s, ", ") .. "}" end
function Size.equals(a, b)
  if type(b) ~= "table" or #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
Size.__eq = Size.equals
function Size:numel()
  local n = 1
  for i = 1, #self do n = n * self[i] end
  return n
end

function props.shape(t)
  local p, s = ptr(t), setmetatable({}, Size)
  for i = 0, p._ndim - 1 do s[i + 1] = tonumber(p._sizes[i]) end
  return s
end
function props.dtype(t) return dtypes[ptr(t)._dtype] end
function props.device(t)
  local p = ptr(t)
  return p._dev_type == 0 and "cpu" or ("cuda:" .. p._dev_index)
end

-- x.mT / x.mH: the last two dims swapped (real tensors: mH is mT); x.T: all dims reversed; x.H:
-- a matrix transposed
function props.mT(t)
  local n = ptr(t)._ndim
  if n < 2 then fail(string.format("mT: expected a matrix or a batch of matrices, got a %d-d tensor", n)) end
  return t:transpose(-2, -1)
end
function props.T(t)
  local n, perm = ptr(t)._ndim, {}
  for i = 1, n do perm[i] = n + 1 - i end
  return n < 2 and t or t:permute(perm)
end
props.mH = props.mT
function props.H(t)
  local n = ptr(t)._ndim
  if n ~= 2 then fail(string.format("H: expected a matrix (a 2-D tensor), got a %d-d tensor (mH: batches of matrices)", n)) end
  return t:t()
end

local function norm_dim(op, d, n)
  local m = n == 0 and 1 or n
  if type(d) ~= "number" or d ~= math.floor(d) then fail(string.format("%s: dim expected an integer, got %s", op, tostring(d))) end
  if d == 0 or d > m or d < -m then
    fail(string.format("%s: dim %d is out of range for a %d-d tensor (expected 1..%d or -%d..-1)", op, d, n, m, m))
  end
  return d > 0 and d - 1 or d + m
end
methods._norm_dim = norm_dim

function methods:dim() return ptr(self)._ndim end
function methods:numel()
  local p, n = ptr(self), 1
  for i = 0, p._ndim - 1 do n = n * tonumber(p._sizes[i]) end
  return n
end
function methods:size(d)
  if d == nil then return props.shape(self) end
  local p = ptr(self)
  if p._ndim == 0 then fail("size: a 0-d tensor has no dims") end
  return tonumber(p._sizes[norm_dim("size", d, p._ndim)])
end
function methods:stride(d)
  local p = ptr(self)
  if d == nil then
    local s = {}
    for i = 0, p._ndim - 1 do s[i + 1] = tonumber(p._strides[i]) end
    return s
  end
  if p._ndim == 0 then fail("stride: a 0-d tensor has no dims") end
  return tonumber(p._strides[norm_dim("stride", d, p._ndim)])
end
function methods:is_contiguous() return api.is_contiguous(ptr(self)) ~= 0 end
function methods:_shape_str() return "{" .. table.concat(props.shape(self), ",") .. "}" end

-- Reading a value out of a lazy tensor (one a compiled function has not computed yet) is a
-- graph break (core.need).
local need = core.need

local ITEM = ffi.new("double[1]")
function methods:item()
  if ctx.capturing ~= 0 or ptr(self)._storage == nil or ptr(self)._lazy ~= nil then need(self, "item()") end
  local rc = api.item(ctx, ptr(self), ITEM)
  if rc ~= 0 then core.raise(rc) end
  local v = ITEM[0]
  if ptr(self)._dtype == BOOL then return v ~= 0 end
  return v
end

-- nested Lua tables (a number for a 0-d tensor; booleans for bool tensors)
function methods:totable()
  if ctx.capturing ~= 0 or ptr(self)._storage == nil or ptr(self)._lazy ~= nil then need(self, "totable()") end
  local n = methods.numel(self)
  local buf = ffi.new("double[?]", math.max(n, 1))
  local rc = api.read_all(ctx, ptr(self), buf, n)
  if rc ~= 0 then core.raise(rc) end
  local shape, isbool = props.shape(self), ptr(self)._dtype == BOOL
  local pos = 0
  local function build(d)
    if d > #shape then
      local v = buf[pos]
      pos = pos + 1
      if isbool then return v ~= 0 end
      return v
    end
    local t = {}
    for i = 1, shape[d] do t[i] = build(d + 1) end
    return t
  end
  return build(1)
end

-- x:record_stream(s): x's memory is also used by stream s's work, so that when x is dropped its
-- memory is handed out again only after that work (torch.Tensor.record_stream).
function methods:record_stream(s)
  require("crescent.cuda").check_stream(s, "record_stream")
  if ctx.capturing ~= 0 then need(self, "record_stream()") end
  if api.record_stream(ctx, ptr(self), s.id) ~= 0 then core.raise(-1) end
end

function methods:data_ptr()
  if ctx.capturing ~= 0 or ptr(self)._storage == nil or ptr(self)._lazy ~= nil then need(self, "data_ptr()") end
  local ptr = api.data_ptr(ctx, ptr(self))
  if ptr == nil then core.raise() end
  return ptr
end

-- x:to(dtype | device | {dtype =, device =}) and the device shorthands
local to = ops.to.fn
function methods:to(what)
  if type(what) == "table" and not is_tensor(what) then return to(self, nil, what) end
  if is_tensor(what) then return to(self, nil, { dtype = what.dtype, device = what.device }) end
  return to(self, what)
end

-- indexing: x[i] == x:select(1, i); x[i] = v copies into the slice ------------------------------
local select_ = ops.select and ops.select.fn
local copy_, fill_ = ops.copy_.fn, ops.fill_.fn

-- no silent nil: a string key that is no field or method raises, naming what exists (other keys:
-- crescent.indexing)
local suggest = require "crescent.suggest"
local function unknown_key(k)
  if ops[k] and ops[k].func then fail(("tensor: no method %q: T.%s is a function, not a method"):format(k, k)) end
  local hint, fields = suggest.hint(k, methods, props), {}
  for name in pairs(props) do fields[#fields + 1] = name end
  table.sort(fields, function(a, b) return a:lower() < b:lower() end)
  fail(("tensor: no field or method %q%s; the fields are %s, the methods the ops (x:add(y))"):format(k, hint, table.concat(fields, ", ")))
end

local mt = core.tensor_mt
-- other keys: x[idx], x[mask], x[{entries}] and their assignments (crescent.indexing)
local indexing = require "crescent.indexing"
indexing.bind(ops)
local index_get, index_set = indexing.get, indexing.set
methods.index, methods.index_put_ = indexing.index, indexing.index_put_

mt.__index = function(t, k)
  local m = methods[k]
  if m ~= nil then return m end
  if type(k) == "number" then return select_(t, 1, k) end
  local p = props[k]
  if p ~= nil then return p(t) end
  if type(k) == "string" then return unknown_key(k) end
  return index_get(t, k)
end
mt.__newindex = function(t, k, v)
  if type(k) ~= "number" then return index_set(t, k, v) end
  local slice = select_(t, 1, k)
  if type(v) == "number" or type(v) == "boolean" then fill_(slice, v) else copy_(slice, indexing.setitem_value(v)) end
end
mt.__len = function(t)
  if ptr(t)._ndim == 0 then fail("#: a 0-d tensor has no length") end
  return tonumber(ptr(t)._sizes[0])
end
mt.__tostring = function(t)
  if ctx.capturing ~= 0 or ptr(t)._storage == nil or ptr(t)._lazy ~= nil then need(t, "tostring()") end
  local s = api.format(ctx, ptr(t))
  if s == nil then core.raise() end
  return ffi.string(s)
end
mt.__gc = core.release_handle
mt.__eq = function(a, b) return is_tensor(a) and is_tensor(b) and ptr(a) == ptr(b) end
local function no_order() fail("tensor: < and <= are Lua ordering, not elementwise: use x:lt(y), x:le(y), x:gt(y), x:ge(y)") end
mt.__lt, mt.__le = no_order, no_order
mt.__add = ops.add.fn
mt.__sub = ops.sub.fn
mt.__mul = ops.mul.fn
mt.__div = ops.div.fn
mt.__pow = ops.pow.fn
mt.__mod = ops.remainder.fn
local neg = ops.neg.fn
mt.__unm = function(a) return neg(a) end  -- (Lua passes the operand twice: neg refuses a 2nd argument)


return { ops = ops, methods = methods, props = props, norm_dim = norm_dim }
