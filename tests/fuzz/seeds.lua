-- Writes the seed corpora of the fuzz targets: small valid files of each format (every dtype,
-- scalars, empty tensors, Fortran order, big-endian and small-integer .npy descrs, a version 2.0
-- .npy header) and one call of every registry op.
--   crescent tests/fuzz/seeds.lua DIR    (writes DIR/safetensors, DIR/npy, DIR/ops)
local T = require "crescent"
local dir = assert(arg[1], "usage: seeds.lua DIR")
for _, sub in ipairs({ "safetensors", "npy", "ops" }) do os.execute("mkdir -p '" .. dir .. "/" .. sub .. "'") end

local function write(path, bytes)
  local f = assert(io.open(path, "wb"))  -- (LuaJIT's f:write returns true, not f: no chaining)
  assert(f:write(bytes))
  f:close()
end

local function iota(shape, dtype)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local x = T.arange(n, { dtype = "float64" })
  if dtype == "bool" then x = x:fmod(2) end
  return (x - 2):to(dtype):reshape(shape)
end

-- safetensors: one file of every dtype, then mixed files
local st = dir .. "/safetensors/"
for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" }) do
  T.save(st .. dt .. ".safetensors", { x = iota({ 2, 3 }, dt) })
end
T.save(st .. "mixed.safetensors", { w = iota({ 3, 2 }, "float32"), b = iota({ 4 }, "int64"), m = iota({ 5 }, "bool"),
                                    e = iota({ 0, 3 }, "float64"), s = iota({}, "float16") })
T.save(st .. "empty.safetensors", {})

-- npy: every dtype NumPy has, a scalar, an empty and a 3-d array
local np = dir .. "/npy/"
for _, dt in ipairs({ "float32", "float64", "float16", "int32", "int64", "bool" }) do
  T.save_npy(np .. dt .. ".npy", iota({ 3, 4 }, dt))
end
T.save_npy(np .. "scalar.npy", iota({}, "float64"))
T.save_npy(np .. "empty.npy", iota({ 0, 2 }, "float32"))
T.save_npy(np .. "3d.npy", iota({ 2, 1, 3 }, "int32"))
-- hand-made headers: what NumPy writes for other arrays
local function npy(major, header, data)
  header = header .. (" "):rep((64 - (12 + #header) % 64) % 64) .. "\n"
  local len = #header
  local prefix = major == 1 and string.char(len % 256, math.floor(len / 256))
    or string.char(len % 256, math.floor(len / 256) % 256, 0, 0)
  return "\147NUMPY" .. string.char(major, 0) .. prefix .. header .. data
end
local six = string.char(0, 1, 2, 3, 4, 5)
write(np .. "fortran.npy", npy(1, "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3), }", six))
write(np .. "bigendian.npy", npy(1, "{'descr': '>i2', 'fortran_order': False, 'shape': (3,), }", six))
write(np .. "uint32.npy", npy(1, "{'descr': '<u4', 'fortran_order': False, 'shape': (1,), }", six:sub(1, 4)))
write(np .. "v2.npy", npy(2, "{'descr': '|i1', 'fortran_order': False, 'shape': (6,), }", six))

-- ops: byte 1 picks the op (sorted names, as ops_harness.lua does), the rest its arguments
local names = {}
for name in pairs(T._ops) do names[#names + 1] = name end
table.sort(names)
for i, name in ipairs(names) do
  write(dir .. "/ops/" .. name, string.char(i - 1, 1, 4, 2, 3, 5, 1, 2, 7, 0, 9))
end
