-- The Lua side of the fuzz_ops target (tests/fuzz/fuzz_ops.cpp): fuzz_one(bytes) decodes the
-- bytes into one call of a registry op and runs it under pcall. The outcome must be a result or a
-- Lua error whose message is a string naming the op; anything else raises (a finding).
--
-- Decoding: byte 1 picks the op (sorted registry names), byte 2 the argument style (from the
-- op's schema, with some arguments of a random kind, or all random), byte 3 the argument count
-- of the random style; each argument then reads its kind and value bytes. Bytes past the end read
-- as 0, so every input decodes. Numbers come from a table of edge values (0, -1, NaN, inf, 2^31,
-- 2^63, ...); sizes stay small or are far too large to allocate (the fuzz run caps allocations,
-- see scripts/fuzz.sh), so a run never fills the machine's memory.
local T = require "crescent"

local NAMES = {}
for name in pairs(T._ops) do NAMES[#NAMES + 1] = name end
table.sort(NAMES)

local NUMBERS = { 0, 1, 2, 3, -1, -2, 0.5, -0.0, 1.5, 7, 16, 1e-300, 1e300, 1 / 0, -1 / 0, 0 / 0,
                  2 ^ 31, 2 ^ 31 - 1, -2 ^ 31, 2 ^ 32, 2 ^ 53, 2 ^ 63, -2 ^ 63, 2 ^ 40, 2 ^ 46, 2 ^ 47,
                  -16, 4, 5, 8, 0.25, 1e-7, 2 ^ 64 }
local STRINGS = { "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool", "cpu", "cuda",
                  "cuda:1", "tanh", "none", "", "x", "1", "mean", "sum", "\0", ("a"):rep(300) }
local OPT_KEYS = { "dtype", "device", "keepdim", "alpha", "approximate", "correction", "value", "dim",
                   "out", "unbiased", "p", "step", "memory_format" }

-- The decoder: a cursor over the bytes.
local bytes, pos
local function byte()
  pos = pos + 1
  return bytes:byte(pos) or 0
end
local function pick(list) return list[byte() % #list + 1] end

-- Tensors of odd shapes, dtypes and layouts, made fresh for each call (ops may write in place).
local MAKERS = {
  function() return T.tensor(1.5) end,
  function() return T.zeros(0) end,
  function() return T.ones(1, 0, 3) end,
  function() return T.arange(6):view(2, 3) end,
  function() return T.arange(12, { dtype = "float32" }):view(3, 4):t() end,                 -- strided
  function() return T.tensor({ 1, 2, 3 }):expand(4, 3) end,                                 -- stride 0
  function() return T.arange(10, { dtype = "float64" }):slice(1, 2, 9, 3) end,              -- step 3
  function() return T.tensor({ 1, 0, 1 }, { dtype = "bool" }) end,
  function() return T.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "int32" }) end,
  function() return T.tensor({ 1, 2, -1, 0, 100 }, { dtype = "int64" }) end,               -- odd indices
  function() return T.ones(2, 3, { dtype = "float16" }) end,
  function() return T.full({ 3, 1 }, 0.5, { dtype = "bfloat16" }) end,
  function() return T.zeros(1, 2, 1, 2, 1) end,
  function() return T.tensor({ 0 / 0, 1 / 0, -1 / 0, -0.0 }) end,
  function() return T.ones(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1) end,           -- 16 dims
  function() return T.arange(64):view(4, 4, 4):permute(3, 1, 2) end,
  function() return T.tensor(3, { dtype = "int64" }) end,
}

local value  -- forward: a value of a random kind

local function number() return pick(NUMBERS) end
local function tensor() return pick(MAKERS)() end
local function list_of(make)
  local t = {}
  for i = 1, byte() % 5 do t[i] = make() end
  return t
end
local function small_int()
  local b = byte()
  return b < 200 and (b % 7) - 2 or number()
end
local function options(keys, depth)
  local t = {}
  for _ = 1, byte() % 4 do
    local k = keys[byte() % #keys + 1]
    t[type(k) == "table" and k.name or k] = value(depth + 1)
  end
  return t
end

local KINDS = {
  function() return nil end,
  function() return byte() % 2 == 1 end,
  number,
  function() return pick(STRINGS) end,
  tensor,
  function() return list_of(small_int) end,
  function() return list_of(tensor) end,
  function(depth) return depth < 2 and options(OPT_KEYS, depth) or nil end,
  function(depth) return depth < 2 and list_of(function() return value(depth + 1) end) or {} end,
}
value = function(depth) return KINDS[byte() % #KINDS + 1](depth or 0) end

-- A value of the schema type, mostly; one argument in eight is of a random kind instead.
local TYPED = {
  T = tensor,
  TN = function() return byte() % 2 == 0 and tensor() or number() end,
  N = number, I = small_int, D = small_int,
  B = function() return byte() % 2 == 1 end,
  S = function() return pick(STRINGS) end,
  Is = function() return byte() % 2 == 0 and small_int() or list_of(small_int) end,
  Ds = function() return byte() % 2 == 0 and small_int() or list_of(small_int) end,
  TL = function() return list_of(tensor) end,
  Data = function() return byte() % 2 == 0 and list_of(number) or { list_of(small_int), list_of(small_int) } end,
}
local function typed(ty)
  if byte() % 8 == 0 then return value() end
  return (TYPED[ty] or value)()
end

local function schema_args(op, args)
  local n = 0
  for _, p in ipairs(op.params) do
    if p.optional and byte() % 3 == 0 then
      n = n + 1  -- left out (nil)
    elseif p.rest then
      for _ = 1, byte() % 4 do n = n + 1; args[n] = typed(p.type == "Is" and "I" or p.type) end
    else
      n = n + 1
      args[n] = typed(p.type)
    end
  end
  if op.opts and byte() % 2 == 0 then n = n + 1; args[n] = options(op.opts.list, 0) end
  return n
end

local function random_args(args)
  local n = byte() % 6
  for i = 1, n do args[i] = value() end
  return n
end

-- Reads the whole result (a view with bad strides or a short storage shows up under ASan).
local function use(r)
  if T.is_tensor(r) and r:numel() <= 4096 then tostring(r) end
end

-- CRESCENT_FUZZ_SHOW=1 prints each call before it runs (to read a finding: rerun its input).
local SHOW = os.getenv("CRESCENT_FUZZ_SHOW") == "1"
local function show(v, depth)
  if T.is_tensor(v) then return ("%s%s(stride %s)"):format(v.dtype, v:_shape_str(), table.concat(v:stride(), ",")) end
  if type(v) == "string" then return ("%q"):format(v) end
  if type(v) ~= "table" or (depth or 0) > 3 then return tostring(v) end
  local parts = {}
  for k, x in pairs(v) do parts[#parts + 1] = tostring(k) .. "=" .. show(x, (depth or 0) + 1) end
  return "{" .. table.concat(parts, ", ") .. "}"
end
local function show_call(name, args, n)
  local parts = {}
  for i = 1, n do parts[i] = show(args[i]) end
  io.stderr:write(("fuzz_ops call: %s(%s)\n"):format(name, table.concat(parts, ", ")))
end

function fuzz_one(input)
  bytes, pos = input, 0
  local name = pick(NAMES)
  local op = T._ops[name]
  local args = {}
  local n = byte() % 4 == 0 and random_args(args) or schema_args(op, args)
  if SHOW then show_call(name, args, n) end
  local ok, r1, r2 = pcall(op.fn, unpack(args, 1, n))
  if ok then
    use(r1)
    use(r2)
    return
  end
  if type(r1) ~= "string" then error(("%s: raised a %s instead of a message"):format(name, type(r1))) end
  if not r1:find(name, 1, true) then error(("%s: the error does not name the op: %s"):format(name, r1)) end
end
