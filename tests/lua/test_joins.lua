-- Joining and splitting: T.cat, T.stack, split, chunk. Shapes, strides, dtypes and values are
-- checked against PyTorch 1.13 (one python run for the whole file); split/chunk pieces must be
-- views of their input.
local T = require "crescent"

expect.covers("cat", "stack", "split", "chunk")

local R = require "torch_ref"
local A = R.A  -- A(2, 3) = arange(6):view(2, 3), here and in the python snippets (int64 in both)

-- {name, crescent, PyTorch, is_list}: Lua dims are 1-based, PyTorch's 0-based
local cases = {
  { "cat dim 1", function() return T.cat({ A(2, 3), A(1, 3) }) end, "torch.cat([A(2,3), A(1,3)])" },
  { "cat dim 2", function() return T.cat({ A(2, 3), A(2, 1), A(2, 2) }, 2) end, "torch.cat([A(2,3), A(2,1), A(2,2)], 1)" },
  { "cat dim -1", function() return T.cat({ A(2, 2, 2), A(2, 2, 3) }, -1) end, "torch.cat([A(2,2,2), A(2,2,3)], -1)" },
  { "cat 1-d", function() return T.cat({ A(3), A(2), A(1) }, 1) end, "torch.cat([A(3), A(2), A(1)], 0)" },
  { "cat single", function() return T.cat({ A(2, 3) }, 2) end, "torch.cat([A(2,3)], 1)" },
  { "cat transposed", function() return T.cat({ A(3, 2):t(), A(2, 3) }, 2) end, "torch.cat([A(3,2).t(), A(2,3)], 1)" },
  { "cat strided", function() return T.cat({ A(4, 6):slice(2, 1, 6, 2), A(4, 6):narrow(2, 2, 2) }, 2) end,
    "torch.cat([A(4,6)[:, ::2], A(4,6)[:, 1:3]], 1)" },
  { "cat expanded", function() return T.cat({ A(3):expand(2, 3), A(1, 3) }) end, "torch.cat([A(3).expand(2,3), A(1,3)])" },
  { "cat same tensor", function() local x = A(2, 2); return T.cat({ x, x, x }, 2) end, "torch.cat([A(2,2)] * 3, 1)" },
  { "cat zero-size part", function() return T.cat({ A(2, 3), T.zeros(0, 3):long(), A(1, 3) }) end,
    "torch.cat([A(2,3), torch.zeros(0,3).long(), A(1,3)])" },
  { "cat all zero-size", function() return T.cat({ T.zeros(2, 0), T.zeros(2, 0) }, 2) end, "torch.cat([torch.zeros(2,0), torch.zeros(2,0)], 1)" },
  { "cat legacy empty", function() return T.cat({ T.zeros(0), A(2, 3):float(), T.zeros(0) }, 2) end,
    "torch.cat([torch.zeros(0), A(2,3).float(), torch.zeros(0)], 1)" },
  { "cat only empty", function() return T.cat({ T.zeros(0), T.zeros(0, { dtype = "int32" }) }) end,
    "torch.cat([torch.zeros(0), torch.zeros(0, dtype=torch.int32)])" },
  { "cat int32+float32", function() return T.cat({ A(2):int(), T.tensor({ 0.5, 1.5 }) }) end,
    "torch.cat([A(2).int(), torch.tensor([0.5, 1.5])])" },
  { "cat int32+int64", function() return T.cat({ A(2):int(), A(2) }) end, "torch.cat([A(2).int(), A(2)])" },
  { "cat bool+int32", function() return T.cat({ A(2):gt(0), A(2):int() }) end, "torch.cat([A(2) > 0, A(2).int()])" },
  { "cat f16+bf16", function() return T.cat({ A(2):half(), A(2):bfloat16() }) end, "torch.cat([A(2).half(), A(2).bfloat16()])" },
  { "cat f32+f64", function() return T.cat({ A(2):float(), A(2):double() }) end, "torch.cat([A(2).float(), A(2).double()])" },
  { "cat bool", function() return T.cat({ A(3):gt(1), A(2):lt(1) }) end, "torch.cat([A(3) > 1, A(2) < 1])" },
  { "cat legacy empty promotes", function() return T.cat({ T.zeros(0, { dtype = "float64" }), A(2) }) end,
    "torch.cat([torch.zeros(0, dtype=torch.float64), A(2)])" },
  { "stack dim 1", function() return T.stack({ A(2, 3), A(2, 3) }) end, "torch.stack([A(2,3), A(2,3)])" },
  { "stack dim 2", function() return T.stack({ A(2, 3), A(2, 3), A(2, 3) }, 2) end, "torch.stack([A(2,3)] * 3, 1)" },
  { "stack last", function() return T.stack({ A(2, 3), A(2, 3):t():t() }, 3) end, "torch.stack([A(2,3), A(2,3)], 2)" },
  { "stack -1", function() return T.stack({ A(2), A(2) }, -1) end, "torch.stack([A(2), A(2)], -1)" },
  { "stack 0-d", function() return T.stack({ T.tensor(1), T.tensor(2.5) }) end, "torch.stack([torch.tensor(1), torch.tensor(2.5)])" },
  { "stack transposed", function() return T.stack({ A(3, 2):t(), A(2, 3) }, 2) end, "torch.stack([A(3,2).t(), A(2,3)], 1)" },
  { "stack zero-size", function() return T.stack({ T.zeros(0, 2), T.zeros(0, 2) }, 2) end, "torch.stack([torch.zeros(0,2)] * 2, 1)" },
  { "stack promotes", function() return T.stack({ A(2):int(), A(2):half() }) end, "torch.stack([A(2).int(), A(2).half()])" },
  { "split number", function() return A(5, 2):split(2) end, "A(5,2).split(2)" },
  { "split even", function() return A(4, 2):split(2) end, "A(4,2).split(2)" },
  { "split dim 2", function() return A(2, 7):split(3, 2) end, "A(2,7).split(3, 1)" },
  { "split bigger than dim", function() return A(3, 2):split(10) end, "A(3,2).split(10)" },
  { "split sizes", function() return A(6, 2):split({ 1, 3, 2 }) end, "A(6,2).split([1,3,2])" },
  { "split sizes with 0", function() return A(2, 4):split({ 0, 4, 0 }, -1) end, "A(2,4).split([0,4,0], -1)" },
  { "split one size", function() return A(3):split({ 3 }) end, "A(3).split([3])" },
  { "split transposed", function() return A(4, 6):t():split(4, 1) end, "A(4,6).t().split(4, 0)" },
  { "split strided", function() return A(4, 6):slice(2, 1, 6, 2):split(2, 2) end, "A(4,6)[:, ::2].split(2, 1)" },
  { "split empty dim", function() return T.zeros(0, 2):split(3) end, "torch.zeros(0,2).split(3)" },
  { "split empty dim 0", function() return T.zeros(0, 2):split(0) end, "torch.zeros(0,2).split(0)" },
  { "split empty sizes", function() return T.zeros(0, 2):split({ 0, 0 }) end, "torch.zeros(0,2).split([0,0])" },
  { "chunk even", function() return A(6):chunk(3) end, "A(6).chunk(3)" },
  { "chunk uneven", function() return A(7):chunk(3) end, "A(7).chunk(3)" },
  { "chunk fewer", function() return A(6):chunk(4) end, "A(6).chunk(4)" },
  { "chunk more than size", function() return A(2, 3):chunk(5, 2) end, "A(2,3).chunk(5, 1)" },
  { "chunk one", function() return A(2, 3):chunk(1) end, "A(2,3).chunk(1)" },
  { "chunk negative dim", function() return A(2, 3, 5):chunk(2, -1) end, "A(2,3,5).chunk(2, -1)" },
  { "chunk transposed", function() return A(5, 3):t():chunk(2, 2) end, "A(5,3).t().chunk(2, 1)" },
  { "chunk empty dim", function() return T.zeros(2, 0):chunk(3, 2) end, "torch.zeros(2,0).chunk(3, 1)" },
  { "T.split", function() return T.split(A(5), 2) end, "torch.split(A(5), 2)" },
  { "T.chunk", function() return T.chunk(A(5), 2) end, "torch.chunk(A(5), 2)" },
}

R.check_exact("joins match PyTorch", cases)

describe("cat and stack", function()
  it("return new contiguous tensors that do not alias their inputs", function()
    local x = T.zeros(2, 2)
    local c = T.cat({ x, x })
    local s = T.stack({ x, x })
    expect.truthy(c:is_contiguous() and s:is_contiguous())
    c:fill_(1)
    s:fill_(2)
    expect.eq(x:totable(), { { 0, 0 }, { 0, 0 } })
  end)
  it("take float values across dtypes", function()
    local r = T.cat({ T.tensor({ 1.5 }, { dtype = "float64" }), T.tensor({ 2 }, { dtype = "int32" }) })
    expect.eq(r.dtype, "float64")
    expect.eq(r:totable(), { 1.5, 2 })
    local s = T.stack({ T.tensor({ true, false }), T.tensor({ 3, 4 }, { dtype = "float16" }) })
    expect.eq(s.dtype, "float16")
    expect.eq(s:totable(), { { 1, 0 }, { 3, 4 } })
  end)
  it("handle many and large inputs", function()
    local parts = {}
    for i = 1, 100 do parts[i] = T.full({ 1, 3 }, i) end
    local r = T.cat(parts)
    expect.eq(r.shape, { 100, 3 })
    expect.eq(r[57]:totable(), { 57, 57, 57 })
    local big = T.cat({ T.ones(300, 400), T.zeros(300, 400) }, 2)  -- above the parallel grain
    expect.eq(big.shape, { 300, 800 })
    expect.eq(big[300][400]:item(), 1)
    expect.eq(big[300][401]:item(), 0)
    local st = T.stack({ T.ones(300, 400), T.zeros(300, 400) }, 3)
    expect.eq(st.shape, { 300, 400, 2 })
    expect.eq(st[123][321]:totable(), { 1, 0 })
  end)
  it("cat reject bad inputs", function()
    expect.errors(function() return T.cat({}) end, "cat: ", "non%-empty list")
    expect.errors(function() return T.cat({ T.tensor(1), T.tensor(2) }) end, "cat: ", "tensor 1 is 0%-d", "cannot be concatenated")
    expect.errors(function() return T.cat({ A(2, 3), A(2, 2) }) end, "cat: ",
      "sizes of tensors must match except in dim 1: tensor 1 has shape {2,3}, tensor 2 has shape {2,2}")
    expect.errors(function() return T.cat({ A(2, 3), A(6) }, 1) end, "cat: ", "same number of dims", "{2,3}", "{6}")
    expect.errors(function() return T.cat({ A(2, 3), A(2, 3) }, 3) end, "cat: ", "dim 3 is out of range for a 2%-d tensor")
    expect.errors(function() return T.cat({ A(2, 3), A(2, 3) }, 0) end, "cat: ", "dim 0 is out of range")
    expect.errors(function() return T.cat({ A(2, 3), A(2, 3) }, 1.5) end, "cat: ", "integer")
    expect.errors(function() return T.cat({ A(2), 3 }) end, "cat: ", "list of tensors", "number")
    expect.errors(function() return T.cat(A(2)) end, "cat: ", "list of tensors")
    expect.errors(function() return T.cat({ T.zeros(0) }, 2) end, "cat: ", "dim 2 is out of range")
  end)
  it("stack rejects bad inputs", function()
    expect.errors(function() return T.stack({}) end, "stack: ", "non%-empty list")
    expect.errors(function() return T.stack({ A(2, 3), A(3, 2) }) end, "stack: ",
      "expected tensors of equal shape, got {2,3} %(tensor 1%) and {3,2} %(tensor 2%)")
    expect.errors(function() return T.stack({ A(2, 3), A(2, 3) }, 4) end, "stack: ", "dim 4 is out of range for stacking 2%-d tensors %(expected 1..3 or %-3..%-1%)")
    expect.errors(function() return T.stack({ A(2, 3), A(2, 3) }, -4) end, "stack: ", "out of range")
    expect.errors(function() return T.stack({ A(2, 3), "x" }) end, "stack: ", "list of tensors")
  end)
  it("are functions only", function()
    expect.errors(function() return A(2).cat end, 'no method "cat": T.cat is a function, not a method')
    expect.errors(function() return A(2).stack end, 'no method "stack": T.stack is a function, not a method')
  end)
end)

describe("split and chunk", function()
  it("return views of the input", function()
    local x = T.zeros(4, 3)
    local parts = x:split(2)
    parts[2]:fill_(1)
    x:chunk(3, 2)[3]:add_(5)
    expect.eq(x:totable(), { { 0, 0, 5 }, { 0, 0, 5 }, { 1, 1, 6 }, { 1, 1, 6 } })
    local t = T.zeros(3, 4)
    for i, p in ipairs(t:t():split({ 1, 3 })) do p:fill_(i) end
    expect.eq(t:totable(), { { 1, 2, 2, 2 }, { 1, 2, 2, 2 }, { 1, 2, 2, 2 } })
  end)
  it("pieces outlive the input", function()
    local parts
    do parts = A(6):chunk(2) end
    collectgarbage()
    collectgarbage()
    expect.eq(parts[2]:totable(), { 3, 4, 5 })
  end)
  it("return plain Lua tables, also with many pieces", function()
    local parts = A(200):split(1)
    expect.eq(#parts, 200)
    expect.eq(parts[200]:item(), 199)
    expect.eq(getmetatable(parts), nil)
  end)
  it("split rejects bad sizes", function()
    local x = A(6, 2)
    expect.errors(function() return x:split(0) end, "split: ", "split size 0 cannot split dim 1 of size 6")
    expect.errors(function() return x:split(-1) end, "split: ", "non%-negative, got %-1")
    expect.errors(function() return x:split(2.5) end, "split: ", "integer")
    expect.errors(function() return x:split({ 2, 2 }) end, "split: ", "split sizes {2,2} add up to 4 but dim 1 has size 6")
    expect.errors(function() return x:split({ 7, -1 }) end, "split: ", "non%-negative", "{7,%-1}")
    expect.errors(function() return x:split({ 3, 3.5 }) end, "split: ", "integer")
    expect.errors(function() return x:split({}) end, "split: ", "add up to 0")
    expect.errors(function() return x:split(2, 3) end, "split: ", "dim 3 is out of range")
    expect.errors(function() return x:split(2, 0) end, "split: ", "dim 0 is out of range")
    expect.errors(function() return x:split() end, "split: ", "size")
    expect.errors(function() return T.tensor(1):split(1) end, "split: ", "0%-d")
    expect.errors(function() return A(3):expand(2 ^ 40, 3):split(1) end, "split: ", "would hold", "at most")
  end)
  it("chunk rejects bad counts", function()
    local x = A(6, 2)
    expect.errors(function() return x:chunk(0) end, "chunk: ", "number of chunks must be positive, got 0")
    expect.errors(function() return x:chunk(-2) end, "chunk: ", "positive, got %-2")
    expect.errors(function() return x:chunk(1.5) end, "chunk: ", "integer")
    expect.errors(function() return x:chunk() end, "chunk: ", "chunks")
    expect.errors(function() return x:chunk(2, 3) end, "chunk: ", "dim 3 is out of range")
    expect.errors(function() return T.tensor(1):chunk(1) end, "chunk: ", "0%-d")
    expect.errors(function() return T.zeros(0):chunk(2 ^ 30) end, "chunk: ", "would hold", "at most")
  end)
  it("errors carry the caller's location", function()
    expect.errors(function() local _ = A(2):chunk(0) end, "test_joins.lua:%d+: chunk: ")
    expect.errors(function() local _ = T.cat({}) end, "test_joins.lua:%d+: cat: ")
  end)
end)
