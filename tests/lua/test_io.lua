-- T.save / T.load (safetensors) and T.save_npy / T.load_npy: round trips of every dtype,
-- non-contiguous inputs, files written by NumPy and by a hand-written Python safetensors writer,
-- files read back by Python, and a catalogue of malformed files that must each raise a clear
-- error naming the operation, the file and the problem.
local T = require "crescent"

local SH = require "shell"
local TB = require "torch_bridge"
local HAVE_NUMPY, NO_NUMPY = TB.have("numpy")

local DIR = SH.tmpdir()
local function path(name) return DIR .. "/" .. name end

-- Runs the Python source `src` with the arguments given; its output (stdout and stderr).
local function python(src, ...)
  local script = path("script.py")
  SH.write(script, src)
  return (TB.script(script, ...))
end

local function write_bytes(name, s)
  SH.write(path(name), s)
  return path(name)
end
local read_bytes = SH.read
-- n as `width` little-endian bytes (n < 2^53)
local function le(n, width)
  local b = {}
  for i = 1, width do
    b[i] = string.char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(b)
end
local function esc(s) return (s:gsub("%p", "%%%0")) end

local DTYPES = { "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" }

-- a tensor of `shape` with varied values of `dtype`
local function sample(shape, dtype)
  if dtype == "bool" then return T.randn(shape):gt(0) end
  if dtype == "int32" or dtype == "int64" then return T.randint(-1000, 1000, shape, { dtype = dtype }) end
  return T.randn(shape):mul(100):to(dtype)
end

local function same(got, want)
  expect.eq(got.dtype, want.dtype, "dtype")
  expect.eq(got.shape, want.shape, "shape")
  expect.eq(got:totable(), want:totable(), "values")
end

local SHAPES = { {}, { 0 }, { 5 }, { 3, 4 }, { 2, 0, 3 }, { 2, 3, 4 }, { 1, 1, 1, 7 } }

describe("safetensors round trips", function()
  for _, dtype in ipairs(DTYPES) do
    it("keeps every shape and value of " .. dtype, function()
      local items = {}
      for i, shape in ipairs(SHAPES) do items["t" .. i] = sample(shape, dtype) end
      T.save(path("rt.safetensors"), items)
      local back = T.load(path("rt.safetensors"))
      for name, x in pairs(items) do same(back[name], x) end
      local n = 0
      for _ in pairs(back) do n = n + 1 end
      expect.eq(n, #SHAPES, "number of tensors")
    end)
  end
  it("mixes dtypes in one file and names a single tensor 'tensor'", function()
    local items = {}
    for _, dtype in ipairs(DTYPES) do items[dtype] = sample({ 3, 2 }, dtype) end
    T.save(path("mixed.safetensors"), items)
    local back = T.load(path("mixed.safetensors"))
    for name, x in pairs(items) do same(back[name], x) end
    local x = sample({ 4 }, "float32")
    T.save(path("single.safetensors"), x)
    same(T.load(path("single.safetensors")).tensor, x)
  end)
  it("keeps names with quotes, backslashes, control characters and UTF-8", function()
    local items = { ['a"b'] = T.ones(1), ["c\\d"] = T.zeros(2), ["line\nbreak\t"] = T.ones(3), ["日本"] = T.ones(1), [""] = T.zeros(1) }
    T.save(path("names.safetensors"), items)
    local back = T.load(path("names.safetensors"))
    for name, x in pairs(items) do same(back[name], x) end
  end)
  -- issue 32: names crossed the C boundary as C strings, so "a\0b" and "a\0c" both became "a"
  -- and one tensor was silently lost
  it("keeps names with NUL bytes apart (JSON's \\u0000)", function()
    local items = { ["a\0b"] = T.ones(2), ["a\0c"] = T.zeros(3), a = T.full({ 1 }, 7), ["\0"] = T.ones(1) }
    T.save(path("nul.safetensors"), items)
    local back = T.load(path("nul.safetensors"))
    local n = 0
    for _ in pairs(back) do n = n + 1 end
    expect.eq(n, 4, "number of tensors")
    for name, x in pairs(items) do same(back[name], x) end
    expect.truthy(read_bytes(path("nul.safetensors")):find('"a\\u0000b"', 1, true), "the header escapes NUL")
  end)
  it("loads more tensors than the first output buffer holds", function()
    local items = {}
    for i = 1, 300 do items[string.format("t%03d", i)] = T.full({ 2 }, i) end
    T.save(path("many.safetensors"), items)
    local back = T.load(path("many.safetensors"))
    for name, x in pairs(items) do same(back[name], x) end
  end)
  it("accepts a null __metadata__", function()
    local h = '{"__metadata__":null,"a":{"dtype":"I32","shape":[],"data_offsets":[0,4]}}'
    local p = write_bytes("nullmeta.safetensors", le(#h, 8) .. h .. "\5\0\0\0")
    expect.eq(T.load(p).a:totable(), 5)
  end)
  it("saves an empty table as a file with no tensors", function()
    T.save(path("none.safetensors"), {})
    expect.eq(next(T.load(path("none.safetensors"))), nil)
  end)
  it("writes the data buffer 8-byte aligned with names sorted", function()
    T.save(path("sorted.safetensors"), { b = T.ones(1), a = T.ones(3), c = T.ones(2) })
    local s = read_bytes(path("sorted.safetensors"))
    local n = s:byte(1) + 256 * s:byte(2)
    expect.eq((8 + n) % 8, 0, "data alignment")
    local header = s:sub(9, 8 + n)
    expect.truthy(header:find('"a"', 1, true) < header:find('"b"', 1, true), header)
    expect.truthy(header:find('"b"', 1, true) < header:find('"c"', 1, true), header)
    expect.eq(#s, 8 + n + 6 * 4, "file size")
  end)
end)

describe("npy round trips", function()
  for _, dtype in ipairs(DTYPES) do
    if dtype ~= "bfloat16" then
      it("keeps every shape and value of " .. dtype, function()
        for _, shape in ipairs(SHAPES) do
          local x = sample(shape, dtype)
          T.save_npy(path("rt.npy"), x)
          same(T.load_npy(path("rt.npy")), x)
        end
      end)
    end
  end
  it("refuses bfloat16, which NumPy lacks", function()
    expect.errors(function() T.save_npy(path("bf.npy"), T.ones(2):bfloat16()) end, "save_npy: ", "bfloat16")
  end)
  it("writes a 64-byte aligned version 1.0 header", function()
    T.save_npy(path("hdr.npy"), T.ones(2, 3))
    local s = read_bytes(path("hdr.npy"))
    expect.eq(s:sub(1, 8), "\147NUMPY\1\0")
    local hlen = s:byte(9) + 256 * s:byte(10)
    expect.eq((10 + hlen) % 64, 0, "alignment")
    expect.truthy(s:sub(11, 10 + hlen):find("'shape': (2, 3)", 1, true), s:sub(11, 10 + hlen))
  end)
end)

describe("non-contiguous tensors", function()
  local function views()
    local base = T.arange(60):float():view(3, 4, 5)
    return {
      transposed = base:transpose(1, 3),
      narrowed = base:narrow(3, 2, 3),
      selected = base:select(2, 2),
      expanded = T.arange(4):expand(3, 4),
      permuted = base:to("float16"):permute(2, 3, 1),
    }
  end
  it("are saved with their logical values (safetensors)", function()
    local ok, items = pcall(views)
    if not ok then expect.skip("view ops are not built: " .. tostring(items)) end
    for _, x in pairs(items) do expect.truthy(not x:is_contiguous()) end
    T.save(path("views.safetensors"), items)
    local back = T.load(path("views.safetensors"))
    for name, x in pairs(items) do
      same(back[name], x:contiguous())
      expect.truthy(back[name]:is_contiguous())
    end
  end)
  it("are saved with their logical values (npy)", function()
    local ok, items = pcall(views)
    if not ok then expect.skip("view ops are not built: " .. tostring(items)) end
    for _, x in pairs(items) do
      T.save_npy(path("view.npy"), x)
      same(T.load_npy(path("view.npy")), x:contiguous())
    end
  end)
end)

-- Values of the Python-written files: element i (0-based, row-major) of each kind.
local function value_of(kind, i)
  if kind == "f" then return (i - 3) * 0.5 end
  if kind == "i" then return i * 7 - 20 end
  if kind == "u" then return i * 3 end
  return i % 3 == 0
end
local function expected(shape, kind)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local flat = {}
  for i = 1, n do flat[i] = value_of(kind, i - 1) end
  if #shape == 0 then return flat[1] end
  local pos = 0
  local function build(d)
    local t = {}
    for k = 1, shape[d] do
      if d == #shape then pos = pos + 1; t[k] = flat[pos] else t[k] = build(d + 1) end
    end
    return t
  end
  return build(1)
end

local PY_COMMON = [[
import sys, json, struct
import numpy as np
D = sys.argv[1]
def vals(kind, shape):
    n = int(np.prod(shape)) if len(shape) else 1
    i = np.arange(n)
    v = {'f': (i - 3) * 0.5, 'i': i * 7 - 20, 'u': i * 3, 'b': i % 3 == 0}[kind]
    return v.reshape(shape)
def bf16_bytes(a):
    return (a.astype(np.float32).view(np.uint32) >> 16).astype('<u2').tobytes()
]]

describe("files written by Python", function()
  local NPY = {  -- file, descr, shape, kind, loaded dtype, extra np.save arguments
    { "f4", "<f4", { 2, 3 }, "f", "float32" }, { "f8", "<f8", { 4 }, "f", "float64" },
    { "f2", "<f2", { 3, 2 }, "f", "float16" }, { "i4", "<i4", { 2, 2, 2 }, "i", "int32" },
    { "i8", "<i8", { 5 }, "i", "int64" }, { "b1", "|b1", { 7 }, "b", "bool" },
    { "u1", "|u1", { 6 }, "u", "int32" }, { "i1", "|i1", { 6 }, "i", "int32" },
    { "i2", "<i2", { 2, 3 }, "i", "int32" }, { "u2", "<u2", { 3 }, "u", "int32" },
    { "u4", "<u4", { 3 }, "u", "int64" }, { "bigf4", ">f4", { 2, 3 }, "f", "float32" },
    { "bigi8", ">i8", { 4 }, "i", "int64" }, { "scalar", "<f8", {}, "f", "float64" },
    { "empty", "<f4", { 0, 3 }, "f", "float32" }, { "fortran", "<f4", { 2, 3, 4 }, "f", "float32", "fortran" },
    { "fortranb", "|b1", { 3, 5 }, "b", "bool", "fortran" },
  }
  local written = false
  local function write_npy_files()
    if written then return end
    local lines = { PY_COMMON }
    for _, c in ipairs(NPY) do
      local shape = "(" .. table.concat(c[3], ", ") .. (#c[3] == 1 and ",)" or ")")
      local arr = string.format("vals('%s', %s).astype('%s')", c[4], shape, c[2])
      if c[6] == "fortran" then arr = "np.asfortranarray(" .. arr .. ")" end
      lines[#lines + 1] = string.format("np.save(D + '/py_%s.npy', %s)", c[1], arr)
    end
    lines[#lines + 1] = "print('written')"
    local out = python(table.concat(lines, "\n"), DIR)
    assert(out:find("written"), out)
    written = true
  end
  for _, c in ipairs(NPY) do
    it("np.save " .. c[1] .. " (" .. c[2] .. ")", function()
      if not HAVE_NUMPY then expect.skip(NO_NUMPY) end
      write_npy_files()
      local x = T.load_npy(path("py_" .. c[1] .. ".npy"))
      expect.eq(x.dtype, c[5], "dtype")
      expect.eq(x.shape, c[3], "shape")
      expect.eq(x:totable(), expected(c[3], c[4]), "values")
      expect.truthy(x:is_contiguous())
    end)
  end

  it("hand-written safetensors (padding, metadata, file order, empty tensors)", function()
    if not HAVE_NUMPY then expect.skip(NO_NUMPY) end
    local out = python(PY_COMMON .. [[
entries = [('zeta', 'F32', vals('f', (2, 3)).astype('<f4').tobytes(), [2, 3]),
           ('alpha', 'I64', vals('i', (4,)).astype('<i8').tobytes(), [4]),
           ('empty', 'F64', b'', [0, 5]),
           ('half', 'F16', vals('f', (3,)).astype('<f2').tobytes(), [3]),
           ('brain', 'BF16', bf16_bytes(vals('f', (2, 2))), [2, 2]),
           ('int', 'I32', vals('i', (1, 3)).astype('<i4').tobytes(), [1, 3]),
           ('flag', 'BOOL', vals('b', (5,)).astype('|b1').tobytes(), [5]),
           ('scalar', 'F64', vals('f', ()).astype('<f8').tobytes(), [])]
header, off, blob = {'__metadata__': {'source': 'python', 'format': 'np'}}, 0, b''
for name, code, data, shape in entries:
    header[name] = {'dtype': code, 'shape': shape, 'data_offsets': [off, off + len(data)]}
    off += len(data); blob += data
h = json.dumps(header, indent=1).encode()
h += b' ' * (7 - len(h) % 8) + b'\n'
open(D + '/py.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + blob)
print('written')
]], DIR)
    assert(out:find("written"), out)
    local r = T.load(path("py.safetensors"))
    local want = {
      zeta = { "float32", { 2, 3 }, "f" }, alpha = { "int64", { 4 }, "i" }, empty = { "float64", { 0, 5 }, "f" },
      half = { "float16", { 3 }, "f" }, brain = { "bfloat16", { 2, 2 }, "f" }, int = { "int32", { 1, 3 }, "i" },
      flag = { "bool", { 5 }, "b" }, scalar = { "float64", {}, "f" },
    }
    for name, w in pairs(want) do
      local x = r[name]
      expect.truthy(x, "missing " .. name)
      expect.eq(x.dtype, w[1], name .. " dtype")
      expect.eq(x.shape, w[2], name .. " shape")
      expect.eq(x:totable(), expected(w[2], w[3]), name .. " values")
    end
  end)
end)

describe("files read by Python", function()
  it("np.load reads our .npy and a Python safetensors reader reads our files", function()
    if not HAVE_NUMPY then expect.skip(NO_NUMPY) end
    local function from(kind, shape, dtype)
      return T.tensor(expected(shape, kind), { dtype = dtype })
    end
    local st = {
      f32 = from("f", { 2, 3 }, "float32"), f64 = from("f", { 4 }, "float64"), f16 = from("f", { 3 }, "float16"),
      bf16 = from("f", { 2, 2 }, "bfloat16"), i32 = from("i", { 3, 1 }, "int32"), i64 = from("i", { 5 }, "int64"),
      b = from("b", { 4 }, "bool"),
    }
    T.save(path("ours.safetensors"), st)
    for _, name in ipairs({ "f32", "f64", "f16", "i32", "i64", "b" }) do T.save_npy(path("ours_" .. name .. ".npy"), st[name]) end
    local out = python(PY_COMMON .. [[
want = {'f32': ('f', (2, 3), '<f4'), 'f64': ('f', (4,), '<f8'), 'f16': ('f', (3,), '<f2'), 'bf16': ('f', (2, 2), 'bf16'),
        'i32': ('i', (3, 1), '<i4'), 'i64': ('i', (5,), '<i8'), 'b': ('b', (4,), '|b1')}
raw = open(D + '/ours.safetensors', 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n].decode('utf-8'))
data = raw[8 + n:]
bad = []
for name, (kind, shape, descr) in want.items():
    e = header[name]
    b, en = e['data_offsets']
    if descr == 'bf16':
        a = (np.frombuffer(data[b:en], '<u2').astype(np.uint32) << 16).view(np.float32)
    else:
        a = np.frombuffer(data[b:en], descr)
    a = a.reshape(e['shape'])
    if tuple(e['shape']) != shape or not np.array_equal(a, vals(kind, shape)): bad.append('st:' + name)
    if descr != 'bf16':
        x = np.load(D + '/ours_' + name + '.npy')
        if x.dtype != np.dtype(descr) or x.shape != shape or not np.array_equal(x, vals(kind, shape)): bad.append('npy:' + name)
print('bad: ' + ','.join(bad) if bad else 'all ok')
]], DIR)
    expect.eq(out, "all ok\n")
  end)
end)

-- Malformed files --------------------------------------------------------------------------------
local function st_file(header, data) return le(#header, 8) .. header .. (data or "") end
local F32x2 = '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'

local BAD_ST = {  -- name, bytes, expected message pattern
  { "empty file", "", "too short" },
  { "5 bytes", "\1\0\0\0\0", "too short" },
  { "length beyond the file", le(1000, 8) .. "{}", "header length 1000 exceeds the 2 bytes" },
  { "absurd length", le(2 ^ 52, 8) .. "{}", "exceeds" },
  { "not JSON", st_file("hello"), "does not start with '{'" },
  { "array root", st_file("[1]"), "does not start with '{'" },
  { "bad JSON", st_file('{"a":}'), "invalid JSON: unexpected character '}'" },
  { "unterminated JSON", st_file('{"a":{"dtype":"F32"'), "invalid JSON" },
  { "junk after the JSON", st_file('{} x'), "invalid JSON: unexpected character after the end" },
  { "trailing comma", st_file('{"a":1,}'), "invalid JSON: expected a string key" },
  { "leading zero", st_file('{"a":{"dtype":"F32","shape":[02],"data_offsets":[0,8]}}', ("\0"):rep(8)), "leading zero" },
  { "bad escape", st_file('{"a\\q":1}'), "invalid escape" },
  { "lone surrogate", st_file('{"\\udc00":1}'), "surrogate" },
  { "control character", st_file('{"a\1":1}'), "control character" },
  { "invalid UTF-8", st_file('{"\255":1}'), "invalid UTF%-8" },
  { "overlong UTF-8", st_file('{"\192\175":1}'), "invalid UTF%-8" },
  { "deep nesting", st_file('{"__metadata__":' .. ("["):rep(100) .. ("]"):rep(100) .. "}"), "nesting deeper" },
  { "duplicate names", st_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', ("\0"):rep(8)), 'duplicate key "a"' },
  { "entry not an object", st_file('{"a":[1]}'), 'tensor "a": expected an object, got an array' },
  { "unknown dtype", st_file('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', "\0\0"), 'unsupported dtype "U8"' },
  { "dtype not a string", st_file('{"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}', ("\0"):rep(8)), "dtype expected a string, got a number" },
  { "missing key", st_file('{"a":{"dtype":"F32","shape":[2]}}'), 'missing key "data_offsets"' },
  { "extra key", st_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}', ("\0"):rep(8)), 'unexpected key "x"' },
  { "negative dim", st_file('{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}', ("\0"):rep(8)), "non%-negative integers" },
  { "fractional dim", st_file('{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}', ("\0"):rep(8)), "got 2.0" },
  { "dim beyond int64", st_file('{"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}}', ("\0"):rep(8)), "below 2%^63" },
  { "huge dims", st_file('{"a":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}'), "too large" },
  { "overflowing product", st_file('{"a":{"dtype":"F32","shape":[9223372036854775807,9223372036854775807],"data_offsets":[0,8]}}', ("\0"):rep(8)), "too large" },
  { "17 dims", st_file('{"a":{"dtype":"F32","shape":[' .. ("1,"):rep(16) .. '1],"data_offsets":[0,4]}}', ("\0"):rep(4)), "17 dims" },
  { "shape not an array", st_file('{"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}}', ("\0"):rep(8)), "shape expected an array" },
  { "three offsets", st_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}}', ("\0"):rep(8)), "an array of 3" },
  { "begin after end", st_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}', ("\0"):rep(8)), "begin > end" },
  { "offsets past the buffer", st_file(F32x2, ("\0"):rep(4)), "run past the 4%-byte data buffer" },
  { "offsets not matching the shape", st_file('{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', ("\0"):rep(8)), "hold 8 bytes, but shape {3} of F32 needs 12" },
  { "overlapping tensors", st_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', ("\0"):rep(8)), "overlaps" },
  { "a hole in the buffer", st_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', ("\0"):rep(8)), "bytes %[0, 4%) of the data buffer belong to no tensor" },
  { "trailing bytes", st_file(F32x2, ("\0"):rep(12)), "4 bytes after the last tensor" },
  { "bad bool byte", st_file('{"a":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}}', "\1\0\2"), "bool element 2 holds the byte 2" },
  { "metadata not an object", st_file('{"__metadata__":[]}'), "__metadata__ expected an object or null" },
  { "metadata value not a string", st_file('{"__metadata__":{"k":1}}'), '__metadata__ value "k" expected a string' },
}

describe("malformed safetensors files raise clear errors", function()
  for _, c in ipairs(BAD_ST) do
    it(c[1], function()
      local p = write_bytes("bad.safetensors", c[2])
      expect.errors(function() T.load(p) end, "test_io%.lua:%d+: load: " .. esc(p) .. ": ", c[3])
    end)
  end
  it("every truncation of a valid file", function()
    T.save(path("valid.safetensors"), { a = T.randn(3, 2), b = T.arange(4), c = T.ones(2):gt(0) })
    local s = read_bytes(path("valid.safetensors"))
    for n = 0, #s - 1 do
      local p = write_bytes("cut.safetensors", s:sub(1, n))
      expect.errors(function() T.load(p) end, "load: " .. esc(p) .. ": ")
    end
  end)
  it("a missing file and a directory", function()
    expect.errors(function() T.load(path("nope.safetensors")) end, "load: .*nope%.safetensors: cannot open %(No such file")
    expect.errors(function() T.load(DIR) end, "load: " .. esc(DIR) .. ": not a regular file %(a directory%)")
  end)
end)

local function npy_file(header, data, version)
  version = version or 1
  local len = version == 1 and le(#header, 2) or le(#header, 4)
  return "\147NUMPY" .. string.char(version, 0) .. len .. header .. (data or "")
end
local function npy_hdr(descr, fortran, shape) return "{'descr': '" .. descr .. "', 'fortran_order': " .. fortran .. ", 'shape': " .. shape .. ", }\n" end
local Z8 = ("\0"):rep(8)

local BAD_NPY = {
  { "empty file", "", "not a %.npy file" },
  { "wrong magic", "\147NUMPZ\1\0\10\0", "not a %.npy file" },
  { "version 4.0", "\147NUMPY\4\0\10\0", "unsupported %.npy version 4%.0" },
  { "version 1.1", "\147NUMPY\1\1\10\0", "unsupported %.npy version 1%.1" },
  { "truncated header length", "\147NUMPY\2\0\10\0", "truncated inside the header length" },
  { "header length beyond the file", "\147NUMPY\1\0\200\0{}", "header length 200 exceeds the 2 bytes" },
  { "header not a dict", npy_file("[1, 2]\n"), "expected '{'" },
  { "unterminated dict", npy_file("{'descr': '<f4'"), "expected ',' or '}'" },
  { "text after the dict", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x"), "unexpected text after the header dict" },
  { "missing shape", npy_file("{'descr': '<f4', 'fortran_order': False}\n"), "no 'shape' key" },
  { "extra key", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}\n", Z8), "unexpected header key 'x'" },
  { "duplicate key", npy_file("{'descr': '<f4', 'descr': '<f4'}\n"), "duplicate key 'descr'" },
  { "unsupported descr", npy_file(npy_hdr("<c8", "False", "(1,)"), Z8), "unsupported dtype descr '<c8'" },
  { "'|' with a wide type", npy_file(npy_hdr("|f4", "False", "(2,)"), Z8), "unsupported dtype descr '|f4'" },
  { "structured descr", npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n", Z8), "expected a string, True, False" },
  { "fortran_order not a bool", npy_file(npy_hdr("<f4", "0", "(2,)"), Z8), "fortran_order expected True or False" },
  { "shape not a tuple", npy_file(npy_hdr("<f4", "False", "2"), Z8), "shape expected a tuple" },
  { "1-tuple without comma", npy_file(npy_hdr("<f4", "False", "(2)"), Z8), "1%-tuple needs a comma" },
  { "negative dim", npy_file(npy_hdr("<f4", "False", "(-2,)"), Z8), "negative dim" },
  { "huge dims", npy_file(npy_hdr("<f4", "False", "(4294967296, 4294967296, 0)")), "too large" },
  { "integer overflow", npy_file(npy_hdr("<f4", "False", "(99999999999999999999,)")), "integer too large" },
  { "17 dims", npy_file(npy_hdr("<f4", "False", "(" .. ("1, "):rep(17) .. ")"), Z8), "17 dims" },
  { "escape in a string", npy_file("{'de\\scr': '<f4'}\n"), "unsupported character" },
  { "truncated data", npy_file(npy_hdr("<f4", "False", "(3,)"), Z8), "truncated: shape {3} of '<f4' needs 12 bytes of data, the file has 8" },
  { "trailing data", npy_file(npy_hdr("<f4", "False", "(1,)"), Z8), "4 bytes after the array data" },
  { "bad bool byte", npy_file(npy_hdr("|b1", "False", "(2,)"), "\1\3"), "bool element 1 holds the byte 3" },
  { "version 2 header length beyond the file", "\147NUMPY\2\0\255\255\255\255{}", "header length 4294967295 exceeds" },
}

describe("malformed npy files raise clear errors", function()
  for _, c in ipairs(BAD_NPY) do
    it(c[1], function()
      local p = write_bytes("bad.npy", c[2])
      expect.errors(function() T.load_npy(p) end, "test_io%.lua:%d+: load_npy: " .. esc(p) .. ": ", c[3])
    end)
  end
  it("accepts version 2.0 and 3.0 headers", function()
    local p = write_bytes("v2.npy", npy_file(npy_hdr("<f4", "False", "(2,)"), "\0\0\128\63\0\0\0\64", 2))
    expect.eq(T.load_npy(p):totable(), { 1, 2 })
    p = write_bytes("v3.npy", npy_file(npy_hdr("<i4", "False", "()"), "\7\0\0\0", 3))
    expect.eq(T.load_npy(p):totable(), 7)
  end)
  it("every truncation of a valid file", function()
    T.save_npy(path("valid.npy"), T.randn(3, 2))
    local s = read_bytes(path("valid.npy"))
    for n = 0, #s - 1 do
      local p = write_bytes("cut.npy", s:sub(1, n))
      expect.errors(function() T.load_npy(p) end, "load_npy: " .. esc(p) .. ": ")
    end
  end)
end)

describe("bad arguments to the IO functions", function()
  it("name the function and the problem", function()
    expect.errors(function() T.save(1, T.ones(1)) end, "save: argument 1 %(path%) expected a string")
    expect.errors(function() T.save(path("x"), 5) end, "save: argument 2 expected a tensor or a table")
    expect.errors(function() T.save(path("x"), { a = 5 }) end, "save: argument 2 .* got a = number")
    expect.errors(function() T.save(path("x"), { T.ones(1) }) end, "save: argument 2 .* got a number key %(1; a list of tensors needs names")
    expect.errors(function() T.save(path("x"), { [1] = T.ones(1) }) end, "save: argument 2")
    expect.errors(function() T.save(path("x"), { __metadata__ = T.ones(1) }) end, "save: .*reserved")
    expect.errors(function() T.save(path("x"), { ["\255"] = T.ones(1) }) end, "save: .*not valid UTF%-8")
    expect.errors(function() T.load(nil) end, "load: argument 1 %(path%) expected a string")
    expect.errors(function() T.save_npy(path("x"), {}) end, "save_npy: argument 2 %(tensor%) expected a tensor")
    expect.errors(function() T.load_npy(3) end, "load_npy: argument 1 %(path%) expected a string")
  end)
  it("refuse paths with a NUL byte (the C side would cut them there)", function()
    for _, f in ipairs({ "save", "load", "save_npy", "load_npy" }) do
      expect.errors(function() T[f](path("x\0y"), T.ones(1)) end, f .. ": argument 1 %(path%) contains a NUL byte")
    end
    expect.eq(io.open(path("x"), "rb"), nil, "no file written at the path cut at the NUL")
  end)
  it("report unwritable paths", function()
    expect.errors(function() T.save(DIR .. "/no/such/dir/x.safetensors", T.ones(1)) end, "save: .*cannot open for writing")
    expect.errors(function() T.save_npy(DIR .. "/no/such/dir/x.npy", T.ones(1)) end, "save_npy: .*cannot open for writing")
  end)
end)

-- Files that are not regular files, the kernel cache, peak memory (issue 32) --------------------
local quote = SH.quote

-- Runs `script` in a child crescent, killed after 120 s: a regression that blocks on a FIFO fails
-- the spec instead of hanging the suite. Returns its stdout and stderr, then "rc=<status>".
local function run_child(script, env)
  local bin = expect.need_bin()
  local p = write_bytes("child.lua", script)
  local out, code = SH.run((env or "") .. " timeout -s KILL 120 " .. quote(bin) .. " " .. quote(p))
  return out .. ("rc=%d\n"):format(code)
end

describe("files that are not regular files", function()
  it("T.load / T.save of a FIFO or /dev/zero fail at once, naming the kind", function()
    os.execute("rm -f " .. quote(path("fifo")) .. " " .. quote(path("zero")) .. "; mkfifo " .. quote(path("fifo")) ..
      "; ln -s /dev/zero " .. quote(path("zero")))
    local out = run_child(([=[
local T = require "crescent"
for _, c in ipairs({ { "load", %q }, { "load_npy", %q }, { "load", %q }, { "save", %q } }) do
  local ok, err = pcall(T[c[1]], c[2], T.ones(1))
  print(ok, err)
end
]=]):format(path("fifo"), path("fifo"), path("zero"), path("fifo")))
    for _, want in ipairs({
      "load: " .. esc(path("fifo")) .. ": not a regular file %(a FIFO%)",
      "load_npy: " .. esc(path("fifo")) .. ": not a regular file %(a FIFO%)",
      "load: " .. esc(path("zero")) .. ": not a regular file %(a character device%)",
      "save: " .. esc(path("fifo")) .. ": not a regular file or a character device %(a FIFO%)",
    }) do
      expect.truthy(out:find("false\t[^\n]*" .. want), "child output:\n" .. out)
    end
    expect.truthy(out:find("rc=0\n$"), "child output:\n" .. out)
  end)
  it("a FIFO in place of a kernel cache entry is a miss, and is replaced", function()
    expect.need_native_cpu()
    local dir = path("cache")
    os.execute("rm -rf " .. quote(dir) .. "; mkdir -p " .. quote(dir))
    local script = ([[
local T = require "crescent"
T.config.sync_compile, T.config.cache_dir = true, %q
local fn = function(x) return (x * 1.4375 + 0.3125):tanh():sum(1) end
local f = T.compile(fn, { hot = 0 })
local x = T.arange(12):float():view(3, 4) / 7
local r
for _ = 1, 3 do r = f(x) end
local s = T.compiler.stats()
print(s.kernels_compiled, s.disk_cache_hits, s.eager_fallbacks, r:eq(fn(x)):all():item())
]]):format(dir)
    -- a line of the output (a compile past CRESCENT_PROGRESS_AFTER on a loaded machine notes its
    -- progress on stderr first)
    local function line(out, pattern) return ("\n" .. out):find("\n" .. pattern) end
    local first = run_child(script)
    expect.truthy(line(first, "[1-9]%d*\t0\t0\ttrue\n"), "first run:\n" .. first)
    -- every entry becomes a FIFO (nothing ever writes to it: opening it to read would block)
    local fifos = SH.run("cd " .. quote(dir) .. " && for f in *.so; do rm \"$f\" && mkfifo \"$f\" && echo \"$f\"; done")
    expect.truthy(fifos:find("%.so\n"), "no cache entry made into a FIFO: " .. fifos)
    local second = run_child(script)
    expect.truthy(line(second, "[1-9]%d*\t0\t0\ttrue\n"), "second run (a miss, compiled again):\n" .. second)
    expect.truthy(second:find("rc=0\n$"), "second run:\n" .. second)
    local third = run_child(script)
    expect.truthy(line(third, "0\t[1-9]%d*\t0\ttrue\n"), "third run (the replaced entries hit):\n" .. third)
    os.execute("rm -rf " .. quote(dir))
  end)
  -- T.load read the whole file into memory, then copied each tensor out of it (peak: twice the
  -- file); the data now goes straight into the tensors. The bound leaves half the file to spare.
  it("T.load's peak memory grows by about the tensors' size, not twice the file", function()
    local mb = 96
    local p = path("big.safetensors")
    local made = run_child(("require('crescent').save(%q, { w = require('crescent').zeros(%d * 2^18) })"):format(p, mb))
    expect.truthy(made:find("^rc=0\n$"), made)
    local out = run_child(([[
local T = require "crescent"
local function hwm()
  local f = assert(io.open("/proc/self/status"))
  local kb = tonumber(f:read("*a"):match("VmHWM:%%s*(%%d+)"))
  f:close()
  return kb
end
local before = hwm()
local t = T.load(%q)
print(hwm() - before, t.w:numel())
]]):format(p))
    os.remove(p)
    local grew, numel = out:match("^(%d+)\t(%d+)\n")
    expect.truthy(grew, "child output:\n" .. out)
    expect.eq(tonumber(numel), mb * 2 ^ 18, "elements loaded")
    expect.truthy(tonumber(grew) < 1.5 * mb * 1024, ("peak RSS grew by %d KiB for a %d MiB file"):format(grew, mb))
  end)

  it("a loop that only loads collects its garbage, as one of ops does", function()
    local t = T.randn(128, 1024)  -- (512 KiB)
    T.save_npy(path("loop.npy"), t)
    T.save(path("loop.safetensors"), { t = t })
    collectgarbage()
    local base, peak = T.memory_stats().in_use, 0
    for i = 1, 600 do  -- (300 MiB loaded each way, every result garbage at once)
      local _ = i % 2 == 0 and T.load_npy(path("loop.npy")) or T.load(path("loop.safetensors"))
      peak = math.max(peak, T.memory_stats().in_use - base)
    end
    expect.truthy(peak < 150 * 2 ^ 20, ("%.0f MiB in use at the peak"):format(peak / 2 ^ 20))
  end)
end)

describe("cleanup", function()
  it("removes the temporary directory", function()
    SH.rm(DIR)
    expect.truthy(true)
  end)
end)
