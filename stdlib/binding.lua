-- crescent.binding: builds the Lua function of every registry op from its schema.
--
-- Schema: comma-separated "name:TYPE" with an optional "?" (may be nil) or "..." (rest of the
-- arguments, for sizes), and a final "opts:{key:TYPE, ...}" for an options table.
-- TYPE: T tensor, TN tensor or number, N number, I integer, D dim, B boolean, S string,
--       Is integer list (a number, a table, or the varargs), Ds dims (number or table),
--       TL list of tensors, Data nested table of numbers (T.tensor).
-- Each wrapper is generated Lua source (loadstring), so LuaJIT traces a straight line of
-- argument stores and one call; argument errors name the op, the argument and what was given.
local core = require "crescent.core"
local ffi, api, ctx = core.ffi, core.api, core.ctx
local is_tensor, wrap, ptr = core.is_tensor, core.wrap, core.ptr

local M = {}
local MAXARGS, OUTCAP = 16, 64
local ARGS = ffi.new("cr_value[?]", MAXARGS)
local OUTS = ffi.new("cr_tensor*[?]", OUTCAP)
local INTS, TLIST = {}, {}  -- per argument slot buffers, grown on demand
for i = 0, MAXARGS - 1 do
  INTS[i] = { cap = 16, buf = ffi.new("int64_t[16]") }
  TLIST[i] = { cap = 16, buf = ffi.new("cr_tensor*[16]") }
end
local C = ffi.C  -- (vm/abi.h's codes: enum cr_value_tag, enum cr_op_flag)
local TAG = { none = C.CR_TAG_NONE, tensor = C.CR_TAG_TENSOR, number = C.CR_TAG_NUMBER, bool = C.CR_TAG_BOOL,
              ints = C.CR_TAG_INTS, tensors = C.CR_TAG_TENSORS, string = C.CR_TAG_STRING, doubles = C.CR_TAG_DOUBLES }
local T_NONE, T_TENSOR, T_NUMBER, T_BOOL = TAG.none, TAG.tensor, TAG.number, TAG.bool
M.TAG = TAG

local function describe(v)
  if is_tensor(v) then return v.dtype .. " tensor of shape " .. v:_shape_str() end
  if type(v) == "string" then return 'string "' .. v .. '"' end
  return type(v)
end
M.describe = describe

local fail = core.fail
local function argerr(op, i, name, expected, v)
  fail(string.format("%s: argument %d (%s) expected %s, got %s", op, i, name, expected, describe(v)))
end

-- stores ------------------------------------------------------------------------------------
local put = {}
function put.T(i, v, op, name)
  if is_tensor(v) then ARGS[i].tag = T_TENSOR; ARGS[i].ptr = ptr(v)
  else argerr(op, i + 1, name, "a tensor", v) end
end
function put.TN(i, v, op, name)
  local t = type(v)
  if t == "number" then ARGS[i].tag = T_NUMBER; ARGS[i].num = v
  elseif is_tensor(v) then ARGS[i].tag = T_TENSOR; ARGS[i].ptr = ptr(v)
  elseif t == "boolean" then ARGS[i].tag = T_BOOL; ARGS[i].num = v and 1 or 0
  else argerr(op, i + 1, name, "a tensor or a number", v) end
end
function put.N(i, v, op, name)
  if type(v) == "number" then ARGS[i].tag = T_NUMBER; ARGS[i].num = v
  elseif type(v) == "boolean" then ARGS[i].tag = T_BOOL; ARGS[i].num = v and 1 or 0
  else argerr(op, i + 1, name, "a number", v) end
end
-- a norm's order: a number, or "fro" (Frobenius: the 2-norm over the dims)
function put.P(i, v, op, name)
  if v == "fro" then v = 2 end
  if type(v) == "number" then ARGS[i].tag = T_NUMBER; ARGS[i].num = v
  elseif type(v) == "boolean" then ARGS[i].tag = T_BOOL; ARGS[i].num = v and 1 or 0  -- (as put.N)
  elseif v == "nuc" then fail(op .. ': the nuclear norm (p = "nuc") is not implemented')
  else argerr(op, i + 1, name, 'a number or "fro"', v) end
end
-- an integer (a size, dim or count): a boolean is refused, as PyTorch refuses True there
function put.I(i, v, op, name)
  if type(v) == "number" then ARGS[i].tag = T_NUMBER; ARGS[i].num = v
  else argerr(op, i + 1, name, "an integer", v) end
end
put.D = put.I
function put.B(i, v, op, name)
  if type(v) == "boolean" then ARGS[i].tag = T_BOOL; ARGS[i].num = v and 1 or 0
  else argerr(op, i + 1, name, "a boolean", v) end
end
function put.S(i, v, op, name)
  if type(v) == "string" then ARGS[i].tag = TAG.string; ARGS[i].str = v
  else argerr(op, i + 1, name, "a string", v) end
end
local function ints_buf(i, n)
  local b = INTS[i]
  if n > b.cap then b.cap = n; b.buf = ffi.new("int64_t[?]", n) end
  return b.buf
end
-- a number, or a list of numbers
function put.Is(i, v, op, name)
  if type(v) == "number" then ARGS[i].tag = T_NUMBER; ARGS[i].num = v; return end
  if type(v) ~= "table" or is_tensor(v) then argerr(op, i + 1, name, "an integer or a list of integers", v) end
  local n = #v
  local buf = ints_buf(i, n)
  for k = 1, n do
    local x = v[k]
    if type(x) ~= "number" then argerr(op, i + 1, name, "a list of integers", x) end
    if x ~= math.floor(x) then
      fail(string.format("%s: argument %d (%s) expected integers, got %s", op, i + 1, name, tostring(x)))
    end
    buf[k - 1] = x
  end
  ARGS[i].tag = TAG.ints; ARGS[i].n = n; ARGS[i].ptr = buf
end
put.Ds = put.Is
function put.TL(i, v, op, name)
  if type(v) ~= "table" or is_tensor(v) then argerr(op, i + 1, name, "a list of tensors", v) end
  local n = #v
  local b = TLIST[i]
  if n > b.cap then b.cap = n; b.buf = ffi.new("cr_tensor*[?]", n) end
  for k = 1, n do
    local t = v[k]
    if not is_tensor(t) then argerr(op, i + 1, name, "a list of tensors", t) end
    b.buf[k - 1] = ptr(t)
  end
  ARGS[i].tag = TAG.tensors; ARGS[i].n = n; ARGS[i].ptr = b.buf
end
-- A data table that is no list: a hole (a nil before its end: {1, nil, 3}) or keys other than
-- 1..n (n = #x); raises naming the first.
local function not_a_list(op, x, n, d)
  local function hole(k, after)
    fail(string.format("%s: data has a hole at depth %d: element %d is nil, element %s is not (a list cannot hold nil)",
      op, d, k, tostring(after)))
  end
  for k = 1, n do if x[k] == nil then hole(k, n) end end
  local keys = {}
  for k in pairs(x) do
    if not (type(k) == "number" and k >= 1 and k <= n and k == math.floor(k)) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b)
    if type(a) == "number" and type(b) == "number" then return a < b end
    return tostring(a) < tostring(b)
  end)
  local k = keys[1]
  if type(k) == "number" and k == math.floor(k) and k > n then hole(n + 1, k) end
  fail(string.format("%s: data expected a list at depth %d, got a table with the key %s", op, d,
    type(k) == "string" and ('"' .. k .. '"') or tostring(k)))
end

-- torch.tensor's dtype of data holding tensors: promote_types over the tensors' dtypes and the
-- numbers' (an integer int64, a fraction float32, a boolean bool)
local CATEGORY = { bool = 0, int32 = 1, int64 = 1 }
local RANK = { float16 = 1, bfloat16 = 1, float32 = 2, float64 = 3 }
local function promote(a, b)
  if a == nil or a == b then return b end
  local ca, cb = CATEGORY[a] or 2, CATEGORY[b] or 2
  if ca ~= cb then return ca > cb and a or b end
  if ca == 1 then return "int64" end
  if (a == "float16" and b == "bfloat16") or (a == "bfloat16" and b == "float16") then return "float32" end
  return RANK[a] > RANK[b] and a or b
end

-- nested tables of numbers / booleans -> flat doubles + shape (in the next slot)
local MAX_DEPTH = 16  -- (vm/tensor.hpp kMaxDims)
function put.Data(i, v, op, name)
  local flat, shape, bools, numbers, path = {}, {}, false, false, {}
  local leaf_dtype, tensors, in_tensor = nil, false, nil  -- (in_tensor: the depth of the tensor walked)
  local function walk(x, d)
    local tx = type(x)
    if tx == "number" or tx == "boolean" then
      if shape[d] ~= nil then fail(op .. ": data is ragged: expected a table at depth " .. d) end
      if not in_tensor then
        leaf_dtype = promote(leaf_dtype, tx == "boolean" and "bool" or x == math.floor(x) and "int64" or "float32")
      end
      if tx == "boolean" then bools = true; x = x and 1 or 0 else numbers = true end
      flat[#flat + 1] = x
      shape.leaf = shape.leaf or d
      if shape.leaf ~= d then fail(op .. ": data is ragged: nested tables of different depths") end
      return
    end
    if is_tensor(x) then  -- a tensor inside the data counts as its nested table, and its dtype
      tensors, leaf_dtype = true, promote(leaf_dtype, x.dtype)
      local values = x:totable()
      if type(values) ~= "table" then  -- (its value, without the number's dtype rule)
        if shape[d] ~= nil then fail(op .. ": data is ragged: expected a table at depth " .. d) end
        numbers = true
        flat[#flat + 1] = type(values) == "boolean" and (values and 1 or 0) or values
        shape.leaf = shape.leaf or d
        if shape.leaf ~= d then fail(op .. ": data is ragged: nested tables of different depths") end
        return
      end
      x, in_tensor = values, in_tensor or d
      tx = "table"
    end
    if tx ~= "table" then
      fail(string.format("%s: data expected numbers or nested tables of numbers, got %s", op, describe(x)))
    end
    if d > MAX_DEPTH then
      for k = 1, d - 1 do
        if path[k] == x then fail(string.format("%s: data is cyclic: the table at depth %d contains itself", op, k)) end
      end
      fail(string.format("%s: data is nested deeper than %d tables (tensors have at most %d dims)", op, MAX_DEPTH, MAX_DEPTH))
    end
    path[d] = x
    local n, count = #x, 0
    for _ in pairs(x) do count = count + 1 end
    if count ~= n then not_a_list(op, x, n, d) end
    if shape[d] == nil then shape[d] = n
    elseif shape[d] ~= n then
      fail(string.format("%s: data is ragged: expected %d elements at depth %d, got %d", op, shape[d], d, n))
    end
    for k = 1, n do walk(x[k], d + 1) end
    if n == 0 then shape.leaf = shape.leaf or d + 1 end
    if in_tensor == d then in_tensor = nil end
  end
  walk(v, 1)
  local dims = {}
  for d = 1, (shape.leaf or 1) - 1 do dims[d] = shape[d] or 0 end
  local buf = ffi.new("double[?]", math.max(#flat, 1))
  for k = 1, #flat do buf[k - 1] = flat[k] end
  -- num = 1: every value was a boolean (a bool tensor); mixed data is numeric, as torch.tensor
  ARGS[i].tag = TAG.doubles; ARGS[i].n = #flat; ARGS[i].ptr = buf; ARGS[i].num = (bools and not numbers) and 1 or 0
  ARGS[i].str = tensors and leaf_dtype or nil  -- (the dtype the data's tensors give, as torch.tensor's)
  M._keep = buf  -- alive until the call returns
  put.Is(i + 1, dims, op, "shape")
end
M.put = put

-- an options table: a plain table whose keys are strings (or an empty table)
local function is_opts(v)
  return type(v) == "table" and not is_tensor(v) and (next(v) == nil or type(next(v)) == "string")
end
M.is_opts = is_opts

local function known_keys(keys)
  local known = {}
  for name in pairs(keys) do known[#known + 1] = name end
  table.sort(known)
  return table.concat(known, ", ")
end

local function put_opts(base, opts, keys, op)
  -- a trailing argument where the options go that is no table: say so (pairs() would raise a
  -- message without the op)
  if type(opts) ~= "table" then
    fail(string.format("%s: options expected a table (keys: %s), got %s", op, known_keys(keys), describe(opts)))
  end
  for k in pairs(opts) do
    if keys[k] == nil then
      fail(string.format("%s: unknown option '%s' (expected one of: %s)", op, tostring(k), known_keys(keys)))
    end
  end
  for name, slot in pairs(keys) do
    local v = opts[name]
    local i = base + slot.index
    if v == nil then ARGS[i].tag = T_NONE else put[slot.type](i, v, op, name) end
  end
end

-- An argument past the last one an op takes: Lua would drop it, so a misspelt or unsupported
-- option ({rounding_mode =} of an op without it) would pass unnoticed; PyTorch refuses both.
local function extra_arg(op, nmax, v, keys)
  if is_opts(v) and next(v) ~= nil then
    local k = next(v)
    if keys and next(keys) then
      fail(string.format("%s: unknown option '%s' (expected one of: %s)", op, tostring(k), known_keys(keys)))
    end
    fail(string.format("%s: unknown option '%s' (%s takes no options)", op, tostring(k), op))
  end
  fail(string.format("%s: expected at most %d argument%s, got one more: %s", op, nmax, nmax == 1 and "" or "s", describe(v)))
end
M.extra_arg = extra_arg

-- outputs ----------------------------------------------------------------------------------
local function finish(n, op)
  if n < 0 then core.raise(n) end
  if ctx.service ~= 0 then core.service() end
  if n > OUTCAP then
    local buf = ffi.new("cr_tensor*[?]", n)
    api.take_outputs(ctx, buf, n)
    return buf
  end
  return OUTS
end

local function wrap_list(n, buf)
  local r = {}
  for k = 1, n do r[k] = wrap(buf[k - 1]) end
  return r
end

-- schema parsing ---------------------------------------------------------------------------
local function parse(schema)
  local params, opts = {}, nil
  local body = schema:gsub("opts:{(.-)}", function(inner)
    opts = { list = {} }
    for key, ty in inner:gmatch("([%w_]+):(%w+)") do opts.list[#opts.list + 1] = { name = key, type = ty } end
    return ""
  end)
  for item in body:gmatch("[^,]+") do
    local name, ty, mod = item:match("^%s*([%w_]+):(%w+)(%p*)%s*$")
    if name then params[#params + 1] = { name = name, type = ty, optional = mod == "?", rest = mod == "..." } end
  end
  return params, opts
end
M.parse = parse

-- code generation ----------------------------------------------------------------------------
local function gen_source(name, op, info, params, opts)
  local np = #params
  local L = {}
  local function emit(s) L[#L + 1] = s end
  local rest = np > 0 and params[np].rest
  local argnames = {}
  for k = 1, np do argnames[k] = "a" .. k end
  emit("local put, put_opts, OPTKEYS, ARGS, OUTS, api, ctx, finish, wrap, wrap_list, is_opts, collect_rest, size_break, extra_arg = ...")
  if rest then
    emit("return function(...)")
    emit("  local nv = select('#', ...)")
    local fixed = np - 1
    for k = 1, fixed do emit(string.format("  local a%d = (select(%d, ...))", k, k)) end
    emit("  local opts")
    if opts then emit(string.format("  if nv > %d and is_opts((select(nv, ...))) then opts = (select(nv, ...)); nv = nv - 1 end", fixed)) end
    emit(string.format("  local a%d = collect_rest(%d, nv, ...)", np, fixed + 1))
  else
    -- (`extra`: one slot past the last argument, to refuse what Lua would drop)
    emit("return function(" .. table.concat(argnames, ", ") .. (opts and (np > 0 and ", " or "") .. "opts" or "")
      .. ((np > 0 or opts) and ", " or "") .. "extra)")
    emit(string.format("  if extra ~= nil then extra_arg(%q, %d, extra, %s) end", name, np + (opts and 1 or 0),
      opts and "OPTKEYS" or "nil"))
    local lone = opts and #opts.list == 1 and opts.list[1].type
    if lone == "N" or lone == "P" then
      -- a lone numeric option may also come positionally: x:add_(y, 2) == x:add_(y, {alpha = 2})
      emit(string.format("  if type(opts) == 'number'%s then opts = { %s = opts } end",
        lone == "P" and " or type(opts) == 'string'" or "", opts.list[1].name))
    end
    if opts then
      -- the options table may come early when trailing optional arguments are left out
      emit("  if opts == nil then")
      for k = np, 1, -1 do
        -- data tables ({} included) are never an options table, nor is {} in a required slot
        -- (randint(0, 5, {}): the size of a 0-d tensor)
        if params[k].type ~= "Data" then
          emit(string.format("    if is_opts(a%d)%s then opts, a%d = a%d, nil end", k,
            params[k].optional and "" or string.format(" and next(a%d) ~= nil", k), k, k))
        end
        if not params[k].optional then break end
      end
      emit("  end")
    end
  end
  for k, p in ipairs(params) do
    local v = "a" .. k
    if p.optional then
      emit(string.format("  if %s == nil then ARGS[%d].tag = %d else put.%s(%d, %s, %q, %q) end", v, k - 1, T_NONE, p.type, k - 1, v, name, p.name))
    else
      emit(string.format("  put.%s(%d, %s, %q, %q)", p.type, k - 1, v, name, p.name))
    end
  end
  local nargs = np
  if params[np] and params[np].type == "Data" then nargs = nargs + 1 end
  if opts then
    -- unrolled: a loop here would start its own trace inside every op call
    local clear = {}
    for i = nargs, nargs + #opts.list - 1 do clear[#clear + 1] = string.format("ARGS[%d].tag = %d", i, T_NONE) end
    emit(string.format("  if opts == nil then %s else put_opts(%d, opts, OPTKEYS, %q) end",
      table.concat(clear, "; "), nargs, name))
    nargs = nargs + #opts.list
  end
  if bit.band(info.flags, C.CR_OP_DATA_SIZE) ~= 0 then  -- result sizes from the values: a graph break first
    emit(string.format("  if ctx.capturing ~= 0 then size_break(%q) end", name))
  end
  emit(string.format("  local n = api.call(ctx, %d, ARGS, %d, OUTS, %d)", op, nargs, OUTCAP))
  emit(string.format("  local buf = finish(n, %q)", name))
  local flags = info.flags
  if bit.band(flags, C.CR_OP_RETURNS_SELF) ~= 0 then emit("  return a1")
  elseif bit.band(flags, C.CR_OP_LIST_OUT) ~= 0 then emit("  return wrap_list(n, buf)")
  elseif bit.band(flags, C.CR_OP_MULTI_OUT) ~= 0 then
    emit("  if n == 1 then return wrap(buf[0]) end")
    emit("  if n == 3 then return wrap(buf[0]), wrap(buf[1]), wrap(buf[2]) end")
    emit("  return wrap(buf[0]), wrap(buf[1])")
  else emit("  return wrap(buf[0])") end
  emit("end")
  return table.concat(L, "\n"), nargs
end

-- the rest of the arguments: numbers, or one table
local function collect_rest(first, nv, ...)
  if nv == first then
    local v = (select(first, ...))
    return v  -- a single number or a table
  end
  local t = {}
  for k = first, nv do t[#t + 1] = (select(k, ...)) end
  return t
end

-- Inside a compiled function an op whose result sizes come from the values (nonzero) ends the
-- graph at the caller's line (a sync point with dynamic = true, else a graph break); the op then
-- runs eagerly (vm/graph/recorder.cpp Recorder::data_size).
local function size_break(name)
  local rc = api.cap_data_size(ctx, name, core.where())
  if rc < 0 then core.raise(rc) end
end

M.ops = {}  -- name -> { fn =, info =, params =, opts =, source = }

function M.build()
  for op = 0, api.op_count - 1 do
    local info = api.op_info(op)
    local name = ffi.string(info.name)
    local schema = ffi.string(info.schema)
    local params, opts = parse(schema)
    local optkeys = {}
    if opts then for i, o in ipairs(opts.list) do optkeys[o.name] = { index = i - 1, type = o.type } end end
    local src = gen_source(name, op, info, params, opts)
    local chunk = assert(loadstring(src, "=[crescent] op " .. name))
    local fn = chunk(put, put_opts, optkeys, ARGS, OUTS, api, ctx, finish, wrap, wrap_list, is_opts, collect_rest, size_break,
      extra_arg)
    M.ops[name] = { fn = fn, kind = info.kind, flags = info.flags, params = params, opts = opts,
                    schema = schema, source = src,
                    method = bit.band(info.flags, C.CR_OP_NO_METHOD) == 0, func = bit.band(info.flags, C.CR_OP_NO_FUNCTION) == 0 }
  end
  return M.ops
end

return M
