-- tostring(x): PyTorch's printing (torch/_tensor_str.py, default options), compared string for
-- string with torch's str() of the same values, plus hard-coded cases that need no Python.
local T = require "crescent"

local TB = require "torch_bridge"
local HAVE_TORCH, NO_TORCH = TB.have("torch")

-- nested Lua data -> Python literal of the same values
local function pylit(v, dtype)
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = pylit(x, dtype) end
    return "[" .. table.concat(parts, ", ") .. (#v == 1 and "," or "") .. "]"
  end
  if type(v) == "boolean" then return v and "True" or "False" end
  if v ~= v then return "float('nan')" end
  if v == math.huge then return "float('inf')" end
  if v == -math.huge then return "float('-inf')" end
  if dtype == "bool" then return v ~= 0 and "True" or "False" end
  if v == 0 and 1 / v < 0 then return "-0.0" end
  if dtype == "int32" or dtype == "int64" then return string.format("%d", v) end
  return string.format("%.17g", v)
end

-- deterministic pseudo-random values (an LCG), shaped as nested tables
local seed = 12345
local function rnd()
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed / 2147483648
end
local function nested(shape, gen, d, counter)
  d, counter = d or 1, counter or { 0 }
  local t = {}
  for i = 1, shape[d] do
    if d == #shape then
      counter[1] = counter[1] + 1
      t[i] = gen(counter[1])
    else
      t[i] = nested(shape, gen, d + 1, counter)
    end
  end
  return t
end
local function normal() return (rnd() + rnd() + rnd() - 1.5) * 2 end

-- The cases: data (nested table), dtype, and optionally a transform applied on both sides
-- (lua = function(x) ... end, py = "x.t()"). Sizes are T.empty sizes when `empty` is given.
local nan, inf = 0 / 0, math.huge
local cases = {
  { "int-valued floats", { { 1, 2 }, { 3, 4 } } },
  { "fixed point", nested({ 5, 6 }, function(i) return (i - 1) / 7 end) },
  { "negative fixed", { -1.5, 2.25, -0.125, 3 } },
  { "tiny values -> sci", { 1e-5, 1 } },
  { "large range -> sci", { 1e10, 1 } },
  { "int mode ratio > 1000 -> sci", { 1, 2000 } },
  { "above 1e8 -> sci", { 123456789, 1 } },
  { "nan inf mixture", { 1.5, nan, inf, -inf } },
  { "only nan", { nan } },
  { "zero and nan", { 0, nan } },
  { "ints with inf", { 1, inf } },
  { "infinities", { inf, -inf } },
  { "negative zero", { -0.0, 1 } },
  { "all zeros", { 0, 0, 0 } },
  { "rounding ties", { 0.00005, 0.00015, 1.00025, 2.5 } },
  { "0-d float", 3.5 },
  { "0-d int", 7, "int64" },
  { "0-d bool", true, "bool" },
  { "0-d float64", 2, "float64" },
  { "0-d int32", -3, "int32" },
  { "bool matrix", { { true, false, true }, { false, false, true } }, "bool" },
  { "int32 suffix", { 1, -20, 300 }, "int32" },
  { "int64 wide", { 1, -9007199254740991, 42 }, "int64" },
  { "float16", { 1, 2.5, -0.125 }, "float16" },
  { "bfloat16", { 1, 2.5, 1000 }, "bfloat16" },
  { "float64", { 1 / 3, 2 / 3 }, "float64" },
  { "3-d", nested({ 2, 3, 4 }, function(i) return i end) },
  { "4-d", nested({ 2, 2, 2, 3 }, function(i) return i * 0.5 end) },
  { "long vector wraps", nested({ 60 }, function(i) return i end) },
  { "long rows wrap", nested({ 3, 25 }, function(i) return i / 3 end) },
  { "random normal", nested({ 5, 7 }, normal) },
  { "summarised 1-d", nested({ 2000 }, function(i) return i end), "int64" },
  { "summarised 1-d floats", nested({ 1500 }, function(i) return i / 10 end) },
  { "summarised 2-d", nested({ 40, 50 }, function(i) return i * 0.25 end) },
  { "summarised 2 x 600", nested({ 2, 600 }, normal) },
  { "summarised 3-d", nested({ 11, 10, 10 }, function(i) return i end), "int32" },
  { "summarised bool", nested({ 1001 }, function(i) return i % 3 == 0 end), "bool" },
  { "summary formats edges only", nested({ 2000 }, function(i) return (i > 3 and i < 1998) and 1e-9 or i end) },
  { "float64 suffix fits", nested({ 5 }, function(i) return i / 3 end), "float64" },
  { "float64 suffix, short", nested({ 8 }, function(i) return i / 3 end), "float64" },
  { "float64 suffix, line end", nested({ 9 }, function(i) return i / 3 end), "float64" },
  { "float64 suffix, wraps", nested({ 10 }, function(i) return i / 3 end), "float64" },
  { "float16 suffix wraps", nested({ 3, 8 }, function(i) return i * 100.5 end), "float16" },
  { "empty 1-d", {} },
  { "empty int64", {}, "int64" },
  { "empty bool", {}, "bool" },
  { "empty (0, 3)", nil, "float32", empty = { 0, 3 } },
  { "empty (2, 0, 3) int32", nil, "int32", empty = { 2, 0, 3 } },
  { "transposed", nested({ 3, 4 }, function(i) return i / 4 end), lua = function(x) return x:t() end, py = "x.t()" },
}

local function build_lua(c)
  local dtype = c[3] or "float32"
  local x
  if c.empty then x = T.empty(c.empty, { dtype = dtype })
  else x = T.tensor(c[2], { dtype = dtype }) end
  if c.lua then x = c.lua(x) end
  return x
end

local function build_py(c)
  local dtype = c[3] or "float32"
  local src
  if c.empty then src = string.format("torch.empty(%s, dtype=torch.%s)", pylit(c.empty, "int64"), dtype)
  else src = string.format("torch.tensor(%s, dtype=torch.%s)", pylit(c[2], dtype), dtype) end
  return "x = " .. src .. "\n" .. (c.py and ("x = " .. c.py .. "\n") or "")
end

local expected  -- case name -> torch's str(), by one python process (the PyTorch bridge)
local function torch_strings()
  if expected then return expected end
  local batch = TB.batch()
  for _, c in ipairs(cases) do batch:add(c[1], "str(x)", nil, build_py(c)) end
  local res = assert(batch:run())
  expected = {}
  for _, c in ipairs(cases) do
    local r = res[c[1]]
    assert(r and r.str, "python gave no string for " .. c[1] .. ": " .. tostring(r and r.error))
    expected[c[1]] = r.str:gsub("dtype=torch%.", "dtype=")  -- Lua dtypes are plain strings
  end
  return expected
end

describe("tostring matches torch's str()", function()
  for _, c in ipairs(cases) do
    it(c[1], function()
      if not HAVE_TORCH then expect.skip(NO_TORCH) end
      if c.lua and not pcall(build_lua, c) then expect.skip("the transform needs ops that are not built yet") end
      local want = torch_strings()[c[1]]
      local got = tostring(build_lua(c))
      if got ~= want then error(string.format("\nexpected:\n%s\ngot:\n%s", want, got)) end
    end)
  end
end)

describe("tostring without Python", function()
  local function check(x, want) expect.eq(tostring(x), want) end
  it("prints the basic forms", function()
    check(T.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float32" }), "tensor([[1., 2.],\n        [3., 4.]])")
    check(T.tensor({ { 1.5, 2 }, { 3, 4 } }), "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]])")
    check(T.tensor(3.5), "tensor(3.5000)")
    check(T.tensor({ 1e-5, 1 }), "tensor([1.0000e-05, 1.0000e+00])")
    check(T.tensor({ 0, 0 / 0 }, { dtype = "float32" }), "tensor([0., nan])")
    check(T.tensor({ true, false }), "tensor([ True, False])")
    check(T.tensor({ 1, 2 }, { dtype = "float16" }), "tensor([1., 2.], dtype=float16)")
    check(T.tensor({ 1, 2 }, { dtype = "int32" }), "tensor([1, 2], dtype=int32)")
  end)
  it("prints empty tensors with their size and dtype", function()
    check(T.empty(0), "tensor([])")
    check(T.empty(0, 3), "tensor([], size=(0, 3))")
    check(T.empty(0, { dtype = "int64" }), "tensor([], dtype=int64)")
    check(T.empty(2, 0, { dtype = "bool" }), "tensor([], size=(2, 0), dtype=bool)")
  end)
  it("summarises above 1000 elements with 3 edge items", function()
    check(T.arange(1001), "tensor([   0,    1,    2,  ...,  998,  999, 1000])")
    check(T.arange(1000), tostring(T.arange(1000)))  -- 1000 elements: not summarised
    expect.truthy(not tostring(T.arange(1000)):find("...", 1, true), "1000 elements must print in full")
  end)
  it("reads only the printed elements of huge tensors", function()
    local s = tostring(T.zeros(1000, 1000, 4))
    expect.truthy(#s < 2000, "summary too long: " .. #s)
    expect.truthy(s:find("...", 1, true), "no ... in " .. s)
  end)
end)
