-- View ops: view, reshape, transpose, permute, t, unsqueeze, squeeze, expand, flatten, narrow,
-- select, slice, x[i] / x[i] = v. Shapes, strides and values are checked against PyTorch 1.13
-- (one python run for the whole file), storage sharing by writing through views.
local T = require "crescent"

expect.covers("view", "reshape", "transpose", "permute", "t", "unsqueeze", "squeeze", "expand", "flatten",
  "narrow", "select", "slice", "as_strided", "detach")

local R = require "torch_ref"
local A = R.A  -- A(2, 3) = arange(6):view(2, 3), here and in the python snippets (int64 in both)

-- {name, crescent, PyTorch}: Lua dims are 1-based, PyTorch's 0-based
local NC = "A(4,6)[:, ::2]"  -- {4,3} with strides {6,2}
local cases = {
  { "view 2x3x4", function() return A(24):view(2, 3, 4) end, "A(24).view(2,3,4)" },
  { "view table", function() return A(24):view({ 4, 6 }) end, "A(24).view(4,6)" },
  { "view -1", function() return A(2, 3, 4):view(-1, 4) end, "A(2,3,4).view(-1,4)" },
  { "view -1 middle", function() return A(2, 3, 4):view(2, -1, 2) end, "A(2,3,4).view(2,-1,2)" },
  { "view flat", function() return A(2, 3, 4):view(-1) end, "A(2,3,4).view(-1)" },
  { "view non-contiguous flat", function() return A(4, 6):slice(2, 1, 6, 2):view(12) end, NC .. ".view(12)" },
  { "view non-contiguous split", function() return A(4, 6):slice(2, 1, 6, 2):view(2, 2, 3) end, NC .. ".view(2,2,3)" },
  { "view transposed unit dims", function() return A(2, 3):t():view(3, 1, 2, 1) end, "A(2,3).t().view(3,1,2,1)" },
  { "view transposed split", function() return A(4, 6):t():view(2, 3, 4) end, "A(4,6).t().view(2,3,4)" },
  { "view 0-d to 1x1x1", function() return T.tensor(5):view(1, 1, 1) end, "torch.tensor(5).view(1,1,1)" },
  { "view 1 to 0-d", function() return T.tensor({ 7 }):view({}) end, "torch.tensor([7]).view([])" },
  { "view zero-size", function() return T.zeros(0, 3):view(3, 0) end, "torch.zeros(0,3).view(3,0)" },
  { "view zero-size -1", function() return T.zeros(0, 3):view(-1, 3) end, "torch.zeros(0,3).view(-1,3)" },
  { "view expanded", function() return A(3):expand(2, 3):view(2, 1, 3) end, "A(3).expand(2,3).view(2,1,3)" },
  { "reshape contiguous", function() return A(2, 3, 4):reshape(4, -1) end, "A(2,3,4).reshape(4,-1)" },
  { "reshape transposed", function() return A(2, 3):t():reshape(6) end, "A(2,3).t().reshape(6)" },
  { "reshape permuted", function() return A(2, 3, 4):permute(3, 1, 2):reshape(4, 6) end, "A(2,3,4).permute(2,0,1).reshape(4,6)" },
  { "reshape viewable nc", function() return A(4, 6):slice(2, 1, 6, 2):reshape(12) end, NC .. ".reshape(12)" },
  { "reshape expanded", function() return A(3):expand(2, 3):reshape(6) end, "A(3).expand(2,3).reshape(6)" },
  { "transpose", function() return A(2, 3, 4):transpose(1, 3) end, "A(2,3,4).transpose(0,2)" },
  { "transpose negative", function() return A(2, 3, 4):transpose(-1, -2) end, "A(2,3,4).transpose(-1,-2)" },
  { "transpose same", function() return A(2, 3):transpose(2, 2) end, "A(2,3).transpose(1,1)" },
  { "transpose 0-d", function() return T.tensor(3):transpose(1, -1) end, "torch.tensor(3).transpose(0,-1)" },
  { "permute", function() return A(2, 3, 4):permute(2, 3, 1) end, "A(2,3,4).permute(1,2,0)" },
  { "permute table", function() return A(2, 3, 4):permute({ 3, 1, 2 }) end, "A(2,3,4).permute(2,0,1)" },
  { "permute negative", function() return A(2, 3, 4):permute(-1, 1, -2) end, "A(2,3,4).permute(-1,0,-2)" },
  { "permute nc", function() return A(4, 6):slice(2, 1, 6, 2):permute(2, 1) end, NC .. ".permute(1,0)" },
  { "t 2-d", function() return A(2, 3):t() end, "A(2,3).t()" },
  { "t 1-d", function() return A(4):t() end, "A(4).t()" },
  { "t 0-d", function() return T.tensor(2):t() end, "torch.tensor(2).t()" },
  { "t of t", function() return A(2, 3):t():t() end, "A(2,3).t().t()" },
  { "unsqueeze 1", function() return A(2, 3):unsqueeze(1) end, "A(2,3).unsqueeze(0)" },
  { "unsqueeze 2", function() return A(2, 3):unsqueeze(2) end, "A(2,3).unsqueeze(1)" },
  { "unsqueeze end", function() return A(2, 3):unsqueeze(3) end, "A(2,3).unsqueeze(2)" },
  { "unsqueeze -1", function() return A(2, 3):unsqueeze(-1) end, "A(2,3).unsqueeze(-1)" },
  { "unsqueeze -3", function() return A(2, 3):unsqueeze(-3) end, "A(2,3).unsqueeze(-3)" },
  { "unsqueeze nc", function() return A(2, 3):t():unsqueeze(2) end, "A(2,3).t().unsqueeze(1)" },
  { "unsqueeze 0-d", function() return T.tensor(4):unsqueeze(1) end, "torch.tensor(4).unsqueeze(0)" },
  { "squeeze all", function() return A(1, 2, 1, 3, 1):squeeze() end, "A(1,2,1,3,1).squeeze()" },
  { "squeeze dim", function() return A(1, 2, 1, 3):squeeze(3) end, "A(1,2,1,3).squeeze(2)" },
  { "squeeze non-1 dim", function() return A(1, 2, 3):squeeze(2) end, "A(1,2,3).squeeze(1)" },
  { "squeeze negative", function() return A(2, 3, 1):squeeze(-1) end, "A(2,3,1).squeeze(-1)" },
  { "squeeze table", function() return A(1, 2, 1, 3, 1):squeeze({ 1, -1 }) end, "A(1,2,1,3,1).squeeze(0).squeeze(-1)" },
  { "squeeze 0-d", function() return T.tensor(1):squeeze() end, "torch.tensor(1).squeeze()" },
  { "squeeze to 0-d", function() return A(1, 1):squeeze() end, "A(1,1).squeeze()" },
  { "squeeze zero-size", function() return T.zeros(1, 0):squeeze() end, "torch.zeros(1,0).squeeze()" },
  { "expand", function() return A(3, 1):expand(3, 4) end, "A(3,1).expand(3,4)" },
  { "expand -1", function() return A(3, 1):expand(-1, 2) end, "A(3,1).expand(-1,2)" },
  { "expand leading", function() return A(3):expand(2, 1, 3) end, "A(3).expand(2,1,3)" },
  { "expand leading 1", function() return A(3):expand(1, 3) end, "A(3).expand(1,3)" },
  { "expand table", function() return A(1, 2):expand({ 3, 2 }) end, "A(1,2).expand([3,2])" },
  { "expand 0-d", function() return T.tensor(7):expand(2, 2) end, "torch.tensor(7).expand(2,2)" },
  { "expand 0-d to 1", function() return T.tensor(7):expand(1) end, "torch.tensor(7).expand(1)" },
  { "expand to zero", function() return A(2, 1):expand(4, 2, 0) end, "A(2,1).expand(4,2,0)" },
  { "expand nc", function() return A(2, 3):t():unsqueeze(2):expand(3, 4, 2) end, "A(2,3).t().unsqueeze(1).expand(3,4,2)" },
  { "flatten", function() return A(2, 3, 4):flatten() end, "A(2,3,4).flatten()" },
  { "flatten 2", function() return A(2, 3, 4):flatten(2) end, "A(2,3,4).flatten(1)" },
  { "flatten 1..2", function() return A(2, 3, 4):flatten(1, 2) end, "A(2,3,4).flatten(0,1)" },
  { "flatten neg", function() return A(2, 3, 4, 5):flatten(-3, -2) end, "A(2,3,4,5).flatten(-3,-2)" },
  { "flatten same", function() return A(2, 3):flatten(2, 2) end, "A(2,3).flatten(1,1)" },
  { "flatten permuted copy", function() return A(2, 3, 4):permute(3, 1, 2):flatten() end, "A(2,3,4).permute(2,0,1).flatten()" },
  { "flatten permuted view", function() return A(2, 3, 4):permute(3, 1, 2):flatten(2) end, "A(2,3,4).permute(2,0,1).flatten(1)" },
  { "flatten 0-d", function() return T.tensor(9):flatten() end, "torch.tensor(9).flatten()" },
  { "flatten zero-size", function() return T.zeros(2, 0, 3):flatten(2) end, "torch.zeros(2,0,3).flatten(1)" },
  { "narrow", function() return A(4, 5):narrow(2, 2, 3) end, "A(4,5).narrow(1,1,3)" },
  { "narrow dim 1", function() return A(4, 5):narrow(1, 3, 2) end, "A(4,5).narrow(0,2,2)" },
  { "narrow negative start", function() return A(4, 5):narrow(-1, -2, 2) end, "A(4,5).narrow(-1,-2,2)" },
  { "narrow empty at end", function() return A(4, 5):narrow(2, 6, 0) end, "A(4,5).narrow(1,5,0)" },
  { "narrow nc", function() return A(4, 5):t():narrow(2, 2, 2) end, "A(4,5).t().narrow(1,1,2)" },
  { "select", function() return A(2, 3, 4):select(2, 3) end, "A(2,3,4).select(1,2)" },
  { "select first", function() return A(2, 3, 4):select(1, 1) end, "A(2,3,4).select(0,0)" },
  { "select negative", function() return A(2, 3, 4):select(-1, -1) end, "A(2,3,4).select(-1,-1)" },
  { "select 1-d", function() return A(5):select(1, 4) end, "A(5).select(0,3)" },
  { "select nc", function() return A(3, 4):t():select(1, 2) end, "A(3,4).t().select(0,1)" },
  { "slice", function() return A(10):slice(1, 2, 5) end, "A(10)[1:5]" },
  { "slice step", function() return A(10):slice(1, 2, 9, 3) end, "A(10)[1:9:3]" },
  { "slice step past stop", function() return A(10):slice(1, 1, 10, 4) end, "A(10)[0:10:4]" },
  { "slice negative", function() return A(10):slice(1, -3, -1) end, "A(10)[-3:]" },
  { "slice clamp", function() return A(10):slice(1, -100, 100) end, "A(10)[-100:100]" },
  { "slice empty", function() return A(10):slice(1, 5, 4) end, "A(10)[4:4]" },
  { "slice dim 2", function() return A(3, 6):slice(2, 2, 6, 2) end, "A(3,6)[:, 1:6:2]" },
  { "slice nil bounds", function() return A(3, 6):slice(-1, nil, nil, 2) end, "A(3,6)[:, ::2]" },
  { "slice nc", function() return A(4, 6):t():slice(2, 2, 4) end, "A(4,6).t()[:, 1:4]" },
  { "slice zero-size", function() return T.zeros(0, 2):slice(1, 1, 3) end, "torch.zeros(0,2)[0:3]" },
  { "index x[i]", function() return A(3, 4)[2] end, "A(3,4)[1]" },
  { "index x[-1]", function() return A(3, 4)[-1] end, "A(3,4)[-1]" },
  { "index x[i][j]", function() return A(3, 4)[3][2] end, "A(3,4)[2][1]" },
  { "chain 1", function() return A(2, 3, 4):transpose(1, 3):narrow(2, 2, 2):select(1, 3) end,
    "A(2,3,4).transpose(0,2).narrow(1,1,2).select(0,2)" },
  { "chain 2", function() return A(4, 6):slice(2, 1, 6, 2):t():unsqueeze(1):expand(2, 3, 4):flatten(1, 2) end,
    "A(4,6)[:, ::2].t().unsqueeze(0).expand(2,3,4).flatten(0,1)" },
  { "chain 3", function() return A(2, 3, 4):permute(3, 1, 2):reshape(2, 2, 6):slice(3, 2, 6, 2):squeeze() end,
    "A(2,3,4).permute(2,0,1).reshape(2,2,6)[:, :, 1:6:2].squeeze()" },
  { "chain 4", function() return A(5, 4):view(2, 10):slice(2, 3, 10, 3):t():reshape(-1) end,
    "A(5,4).view(2,10)[:, 2:10:3].t().reshape(-1)" },
  { "dtype float16", function() return A(2, 3):half():t():slice(1, 2, 3) end, "A(2,3).half().t()[1:3]" },
  { "dtype bool", function() return A(2, 3):gt(2):permute(2, 1):select(2, 2) end, "(A(2,3) > 2).permute(1,0).select(1,1)" },
  { "dtype float64", function() return A(2, 3):double():unsqueeze(1):expand(4, 2, 3) end, "A(2,3).double().unsqueeze(0).expand(4,2,3)" },
}

R.check_exact("views match PyTorch", cases)

-- ---- storage sharing ---------------------------------------------------------------------------

local ffi = require "ffi"
local function ptr(x) return tonumber(ffi.cast("intptr_t", x:data_ptr())) end
local function total(x) local s = 0; for _, v in ipairs(x:flatten():totable()) do s = s + v end; return s end

describe("views share storage", function()
  it("writes through every view op reach the base", function()
    local ops = {
      function(x) return x:view(6) end,
      function(x) return x:reshape(3, 2) end,
      function(x) return x:transpose(1, 2) end,
      function(x) return x:permute(2, 1) end,
      function(x) return x:t() end,
      function(x) return x:unsqueeze(1) end,
      function(x) return x:unsqueeze(3):squeeze() end,
      function(x) return x:flatten() end,
      function(x) return x:narrow(2, 1, 3) end,
      function(x) return x:slice(1, 1, 2) end,
    }
    for k, f in ipairs(ops) do
      local x = T.zeros(2, 3)
      f(x):fill_(k)
      expect.eq(x:totable(), { { k, k, k }, { k, k, k } }, "view op " .. k)
    end
  end)
  it("select, narrow and slice write only their part", function()
    local x = T.zeros(3, 4)
    x:select(2, 2):fill_(1)
    x:narrow(1, 3, 1):fill_(2)
    x:slice(2, 3, 4, 1):select(1, 1):fill_(3)
    expect.eq(x:totable(), { { 0, 1, 3, 3 }, { 0, 1, 0, 0 }, { 2, 2, 2, 2 } })
  end)
  it("a strided slice writes every step-th element", function()
    local x = T.zeros(10)
    x:slice(1, 2, 10, 3):fill_(1)
    expect.eq(x:totable(), { 0, 1, 0, 0, 1, 0, 0, 1, 0, 0 })
  end)
  it("views start at the right element of the base", function()
    local x = A(3, 4)
    expect.eq(ptr(x:select(1, 2)) - ptr(x), 4 * 8)
    expect.eq(ptr(x:narrow(2, 3, 2)) - ptr(x), 2 * 8)
    expect.eq(ptr(x:view(12)), ptr(x))
  end)
  it("reshape shares when it can and copies when it must", function()
    local x = T.zeros(2, 3)
    x:reshape(6):fill_(1)
    expect.eq(total(x), 6)
    local y = T.zeros(2, 3)
    local r = y:t():reshape(6)
    r:fill_(1)
    expect.eq(total(y), 0, "a copy must not write back")
    expect.truthy(r:is_contiguous())
  end)
  it("flatten shares when it can and copies when it must", function()
    local x = T.zeros(2, 3, 4)
    x:flatten(2):fill_(1)
    expect.eq(total(x), 24)
    local y = T.zeros(2, 3, 4)
    y:permute(3, 1, 2):flatten():fill_(1)
    expect.eq(total(y), 0)
  end)
  it("expand reads the base through stride 0", function()
    local x = T.tensor({ 1, 2, 3 })
    local e = x:expand(2, 3)
    expect.eq(e:stride(), { 0, 1 })
    x:fill_(5)
    expect.eq(e:totable(), { { 5, 5, 5 }, { 5, 5, 5 } })
  end)
  it("a view outlives its base", function()
    local v
    do
      local x = A(2, 3)
      v = x:t():select(1, 3)
    end
    collectgarbage()
    collectgarbage()
    expect.eq(v:totable(), { 2, 5 })
  end)
  it("a chain of views writes to the base", function()
    local x = T.zeros(2, 3, 4)
    x:transpose(1, 3):slice(1, 2, 4, 2):select(3, 2):narrow(2, 1, 1):fill_(1)
    -- transpose -> {4,3,2}; slice dim 1 rows 2,4 (of the old last dim); select old dim 1 index 2;
    -- narrow old dim 2 to index 1
    local want = T.zeros(2, 3, 4)
    want[2][1][2] = 1
    want[2][1][4] = 1
    expect.eq(x:totable(), want:totable())
  end)
end)

describe("in-place ops on views write through to the base", function()
  it("add_ on a transposed view", function()
    local x = T.zeros(2, 3)
    x:t():add_(T.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }))
    expect.eq(x:totable(), { { 1, 3, 5 }, { 2, 4, 6 } })
  end)
  it("add_ with alpha on a strided slice", function()
    local x = T.ones(6)
    x:slice(1, 1, 6, 2):add_(T.tensor({ 1, 2, 3 }), { alpha = 10 })
    expect.eq(x:totable(), { 11, 1, 21, 1, 31, 1 })
  end)
  it("mul_ on a selected row", function()
    local x = A(2, 3):float()
    x:select(1, 2):mul_(2)
    expect.eq(x:totable(), { { 0, 1, 2 }, { 6, 8, 10 } })
  end)
  it("fill_ and zero_ on narrowed columns", function()
    local x = T.ones(3, 4)
    x:narrow(2, 2, 2):fill_(7)
    x:narrow(1, 3, 1):zero_()
    expect.eq(x:totable(), { { 1, 7, 7, 1 }, { 1, 7, 7, 1 }, { 0, 0, 0, 0 } })
  end)
  it("copy_ into a permuted view", function()
    local x = T.zeros(2, 3)
    x:permute(2, 1):copy_(A(3, 2))
    expect.eq(x:totable(), { { 0, 2, 4 }, { 1, 3, 5 } })
  end)
  it("copy_ broadcasts into a view", function()
    local x = T.zeros(3, 3)
    x:slice(1, 2, 3):copy_(T.tensor({ 1, 2, 3 }))
    expect.eq(x:totable(), { { 0, 0, 0 }, { 1, 2, 3 }, { 1, 2, 3 } })
  end)
  it("copy_ of itself changes nothing but still counts as an in-place write", function()
    local x = A(2, 3)
    local v = x:view(3, 2)
    expect.eq(x:copy_(x):totable(), { { 0, 1, 2 }, { 3, 4, 5 } })
    x:view(3, 2):copy_(v)  -- (another handle on the same elements)
    x:t():copy_(x:t())
    expect.eq(x:totable(), { { 0, 1, 2 }, { 3, 4, 5 } })
    -- (a shifted view of the same storage is no self-copy: the source is read out first)
    local y = T.arange(0, 5):float()
    y:narrow(1, 2, 4):copy_(y:narrow(1, 1, 4))
    expect.eq(y:totable(), { 0, 0, 1, 2, 3 })
    -- the version counter still moves: a tensor saved for backward and copied onto itself raises
    local w = T.ones(3, { requires_grad = true })
    local h = w * 1
    local z = (h * h):sum()
    h:copy_(h)
    expect.errors(function() z:backward() end, "modified by an inplace operation")
  end)
  it("clamp_ on a reshaped view", function()
    local x = A(2, 3):float()
    x:view(6):clamp_(1, 4)
    expect.eq(x:totable(), { { 1, 1, 2 }, { 3, 4, 4 } })
  end)
  it("in-place ops through x[i]", function()
    local x = T.zeros(2, 2)
    x[1]:add_(3)
    x[2][2]:fill_(5)
    expect.eq(x:totable(), { { 3, 3 }, { 0, 5 } })
  end)
end)

describe("x[i] and x[i] = v", function()
  it("x[i] selects along dim 1 and shares storage", function()
    local x = A(3, 2)
    expect.eq(x[1]:totable(), { 0, 1 })
    expect.eq(x[3]:totable(), { 4, 5 })
    expect.eq(x[-2]:totable(), { 2, 3 })
    expect.eq(x[2][2]:item(), 3)
    expect.eq(x[2][2].shape, {})
  end)
  it("x[i] = number fills the slice", function()
    local x = T.zeros(2, 3)
    x[2] = 4
    expect.eq(x:totable(), { { 0, 0, 0 }, { 4, 4, 4 } })
    x[1][3] = -1
    expect.eq(x:totable(), { { 0, 0, -1 }, { 4, 4, 4 } })
    local v = T.zeros(4)
    v[-1] = 9
    expect.eq(v:totable(), { 0, 0, 0, 9 })
  end)
  it("x[i] = tensor copies (with broadcasting and conversion)", function()
    local x = T.zeros(2, 3)
    x[1] = T.tensor({ 1, 2, 3 }, { dtype = "int32" })
    x[2] = T.tensor(7)
    expect.eq(x:totable(), { { 1, 2, 3 }, { 7, 7, 7 } })
    expect.eq(x.dtype, "float32")
  end)
  it("x[i] = v on a non-contiguous tensor reaches the base", function()
    local base = T.zeros(3, 2)
    local x = base:t()
    x[2] = T.tensor({ 1, 2, 3 })
    expect.eq(base:totable(), { { 0, 1 }, { 0, 2 }, { 0, 3 } })
  end)
  it("bool tensors", function()
    local x = T.zeros(2, 2, { dtype = "bool" })
    x[1][2] = true
    expect.eq(x:totable(), { { false, true }, { false, false } })
  end)
  it("bad indices raise", function()
    local x = A(3, 2)
    expect.errors(function() return x[0] end, "select: ", "index 0 is out of range", "1%-based")
    expect.errors(function() return x[4] end, "select: ", "index 4 is out of range for dim 1 of size 3")
    expect.errors(function() return x[-4] end, "select: ", "index %-4 is out of range")
    expect.errors(function() return x[1.5] end, "select: ", "integer")
    expect.errors(function() x[4] = 1 end, "select: ", "out of range")
    expect.errors(function() x[1] = T.zeros(3) end, "copy_: ", "{3}", "{2}")
    expect.errors(function() return T.tensor(1)[1] end, "select: ", "0%-d")
  end)
  it("errors carry the caller's location", function()
    local x = A(2)
    expect.errors(function() local _ = x[3] end, "test_views.lua:%d+: select: ")
    expect.errors(function() local _ = x:view(3) end, "test_views.lua:%d+: view: ")
  end)
end)

-- ---- bad inputs --------------------------------------------------------------------------------

describe("view / reshape reject bad sizes", function()
  local x = A(2, 3)
  it("wrong number of elements", function()
    expect.errors(function() return x:view(4, 2) end, "view: ", "shape {4,2} is invalid for a tensor of 6 elements")
    expect.errors(function() return x:reshape(5) end, "reshape: ", "invalid for a tensor of 6 elements")
    expect.errors(function() return x:view(-1, 4) end, "view: ", "{%-1,4} is invalid")
  end)
  it("more than one -1", function()
    expect.errors(function() return x:view(-1, -1) end, "view: ", "only one size may be %-1")
    expect.errors(function() return x:reshape({ -1, 3, -1 }) end, "reshape: ", "only one size may be %-1")
  end)
  it("negative sizes other than -1", function()
    expect.errors(function() return x:view(-2, -3) end, "view: ", "non%-negative")
    expect.errors(function() return x:reshape(-6) end, "reshape: ", "non%-negative")
  end)
  it("non-integral sizes", function()
    expect.errors(function() return x:view(2.5, 2) end, "view: ", "integer")
    expect.errors(function() return x:view(6.5) end, "view: ", "integer")
    expect.errors(function() return x:reshape({ 3, 2.5 }) end, "reshape: ", "integer")
  end)
  it("non-number sizes", function()
    expect.errors(function() return x:view("6") end, "view: ", "integer")
    expect.errors(function() return x:view({ 2, "3" }) end, "view: ", "list of integers")
  end)
  it("an ambiguous -1", function()
    expect.errors(function() return T.zeros(0, 3):view(0, -1) end, "view: ", "ambiguous")
  end)
  it("a view the strides cannot express", function()
    expect.errors(function() return x:t():view(6) end, "view: ", "view size {6} is not compatible with input tensor's size {3,2} and stride {1,3}", "reshape")
    expect.errors(function() return A(4, 6):slice(2, 1, 4, 2):view(8) end, "view: ", "not compatible")
    expect.errors(function() return A(3):expand(2, 3):view(6) end, "view: ", "not compatible")
  end)
  it("too many elements or dims", function()
    expect.errors(function() return x:view(2 ^ 40, 2 ^ 40) end, "view: ", "too many elements")
    expect.errors(function() return T.zeros(1):view(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1) end, "view: ", "at most 16")
  end)
  it("not a tensor", function()
    expect.errors(function() return T.view(3, 1) end, "view: ", "tensor")
  end)
end)

describe("dim rearrangements reject bad dims", function()
  local x = A(2, 3, 4)
  it("transpose", function()
    expect.errors(function() return x:transpose(1, 4) end, "transpose: ", "dim 4 is out of range for a 3%-d tensor")
    expect.errors(function() return x:transpose(0, 1) end, "transpose: ", "dim 0 is out of range")
    expect.errors(function() return x:transpose(-4, 1) end, "transpose: ", "dim %-4 is out of range")
    expect.errors(function() return x:transpose(1.5, 2) end, "transpose: ", "integer")
    expect.errors(function() return x:transpose(1) end, "transpose: ", "dim1")
  end)
  it("permute", function()
    expect.errors(function() return x:permute(1, 2) end, "permute: ", "not a permutation of the 3 dims")
    expect.errors(function() return x:permute(1, 2, 3, 4) end, "permute: ", "not a permutation")
    expect.errors(function() return x:permute(1, 1, 2) end, "permute: ", "more than once")
    expect.errors(function() return x:permute(1, 2, -3) end, "permute: ", "more than once")
    expect.errors(function() return x:permute(1, 2, 5) end, "permute: ", "out of range")
    expect.errors(function() return x:permute(1, 2, 0) end, "permute: ", "dim 0 is out of range")
  end)
  it("t", function()
    expect.errors(function() return x:t() end, "t: ", "at most 2 dims, got a 3%-d tensor")
  end)
  it("unsqueeze", function()
    expect.errors(function() return x:unsqueeze(5) end, "unsqueeze: ", "dim 5 is out of range for inserting a dim into a 3%-d tensor %(expected 1..4 or %-4..%-1%)")
    expect.errors(function() return x:unsqueeze(-5) end, "unsqueeze: ", "out of range")
    expect.errors(function() return x:unsqueeze(0) end, "unsqueeze: ", "dim 0")
    expect.errors(function() return x:unsqueeze() end, "unsqueeze: ", "dim")
    expect.errors(function() return A(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1):unsqueeze(1) end, "unsqueeze: ", "at most 16")
  end)
  it("squeeze", function()
    expect.errors(function() return x:squeeze(4) end, "squeeze: ", "dim 4 is out of range")
    expect.errors(function() return x:squeeze({ 1, 1 }) end, "squeeze: ", "more than once")
    expect.errors(function() return x:squeeze(1.5) end, "squeeze: ", "integer")
  end)
  it("flatten", function()
    expect.errors(function() return x:flatten(3, 1) end, "flatten: ", "start dim 3 comes after end dim 1")
    expect.errors(function() return x:flatten(4) end, "flatten: ", "dim 4 is out of range")
    expect.errors(function() return x:flatten(1, 0) end, "flatten: ", "dim 0")
  end)
end)

describe("expand rejects bad sizes", function()
  local x = A(2, 1)
  it("a non-singleton dim that differs", function()
    expect.errors(function() return x:expand(3, 4) end, "expand: ", "expanded size 3 must match the existing size 2 at non%-singleton dim 1")
  end)
  it("fewer sizes than dims", function()
    expect.errors(function() return x:expand(4) end, "expand: ", "at least the number of dims")
  end)
  it("-1 in a new leading dim", function()
    expect.errors(function() return x:expand(-1, 2, 4) end, "expand: ", "%-1 is not allowed in a new leading dim")
  end)
  it("negative and non-integral sizes", function()
    expect.errors(function() return x:expand(2, -2) end, "expand: ", "non%-negative")
    expect.errors(function() return x:expand(2, 2.5) end, "expand: ", "integer")
  end)
  it("too many elements", function()
    expect.errors(function() return x:expand(2 ^ 40, 2, 2 ^ 40) end, "expand: ", "too many elements")
  end)
end)

describe("narrow / select / slice reject bad ranges", function()
  local x = A(4, 5)
  it("narrow", function()
    expect.errors(function() return x:narrow(2, 0, 1) end, "narrow: ", "start 0 is out of range", "1%-based")
    expect.errors(function() return x:narrow(2, 7, 0) end, "narrow: ", "start 7 is out of range for dim 2 of size 5")
    expect.errors(function() return x:narrow(2, -6, 1) end, "narrow: ", "start %-6 is out of range")
    expect.errors(function() return x:narrow(2, 2, -1) end, "narrow: ", "length must be non%-negative, got %-1")
    expect.errors(function() return x:narrow(2, 4, 3) end, "narrow: ", "runs past the end of dim 2 of size 5")
    expect.errors(function() return x:narrow(3, 1, 1) end, "narrow: ", "dim 3 is out of range")
    expect.errors(function() return x:narrow(1, 1.5, 1) end, "narrow: ", "integer")
    expect.errors(function() return x:narrow(1, 1, 2.5) end, "narrow: ", "integer")
    expect.errors(function() return T.tensor(1):narrow(1, 1, 1) end, "narrow: ", "0%-d")
  end)
  it("select", function()
    expect.errors(function() return x:select(2, 0) end, "select: ", "index 0 is out of range", "1%-based")
    expect.errors(function() return x:select(2, 6) end, "select: ", "index 6 is out of range for dim 2 of size 5")
    expect.errors(function() return x:select(1, -5) end, "select: ", "index %-5")
    expect.errors(function() return x:select(3, 1) end, "select: ", "dim 3 is out of range")
    expect.errors(function() return x:select(1, 2.5) end, "select: ", "integer")
    expect.errors(function() return T.zeros(0, 2):select(1, 1) end, "select: ", "empty")
    expect.errors(function() return T.tensor(1):select(1, 1) end, "select: ", "0%-d")
  end)
  it("slice", function()
    expect.errors(function() return x:slice(2, 1, 5, 0) end, "slice: ", "step must be positive, got 0")
    expect.errors(function() return x:slice(2, 5, 1, -1) end, "slice: ", "step must be positive, got %-1")
    expect.errors(function() return x:slice(2, 1.5, 3) end, "slice: ", "integer")
    expect.errors(function() return x:slice(2, 1, 3, 1.5) end, "slice: ", "integer")
    expect.errors(function() return x:slice(0, 1, 3) end, "slice: ", "dim 0 is out of range")
    expect.errors(function() return T.tensor(1):slice(1, 1, 1) end, "slice: ", "0%-d")
  end)
  it("slice clamps instead of raising", function()
    expect.eq(x:slice(2, 0, 2).shape, { 4, 2 })        -- 0 is before the first element
    expect.eq(x:slice(2, 3, 0).shape, { 4, 0 })        -- ... and stops before it
    expect.eq(x:slice(2, 6, 9).shape, { 4, 0 })        -- past the end: empty
    expect.eq(x:slice(2, -9, -5):totable()[1], { 0 })  -- -5 is the first element
    expect.eq(x:slice(2, 2):totable()[1], { 1, 2, 3, 4 })
  end)
end)

describe("views of every dtype", function()
  for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" }) do
    it(dt, function()
      local x = T.tensor({ { 1, 0, 1 }, { 0, 1, 1 } }, { dtype = dt })
      local y = x:t():unsqueeze(2):expand(3, 2, 2):select(2, 2)
      expect.eq(y.dtype, dt)
      local one, zero = 1, 0
      if dt == "bool" then one, zero = true, false end
      expect.eq(y:totable(), { { one, zero }, { zero, one }, { one, one } })
    end)
  end
end)

describe("zero-size views", function()
  it("keep their shapes through every op", function()
    local x = T.zeros(2, 0, 3)
    expect.eq(x:view(0, 6).shape, { 0, 6 })
    expect.eq(x:reshape(3, -1).shape, { 3, 0 })
    expect.eq(x:transpose(1, 3).shape, { 3, 0, 2 })
    expect.eq(x:permute(2, 3, 1).shape, { 0, 3, 2 })
    expect.eq(x:unsqueeze(2).shape, { 2, 1, 0, 3 })
    expect.eq(x:unsqueeze(2):squeeze().shape, { 2, 0, 3 })
    expect.eq(x:expand(4, 2, 0, 3).shape, { 4, 2, 0, 3 })
    expect.eq(x:flatten().shape, { 0 })
    expect.eq(x:narrow(3, 2, 2).shape, { 2, 0, 2 })
    expect.eq(x:select(1, 2).shape, { 0, 3 })
    expect.eq(x:slice(2, 1, 5).shape, { 2, 0, 3 })
    expect.eq(x:narrow(2, 1, 0):totable(), { {}, {} })
  end)
end)

describe("in-place writes into expanded views", function()
  it("raise instead of writing one slot several times", function()
    local T = require "crescent"
    local e = T.zeros(1, 3):expand(4, 3)
    expect.errors(function() e:add_(1) end, "add_: cannot write into an expanded tensor")
    expect.errors(function() e:copy_(T.ones(4, 3)) end, "copy_: cannot write into an expanded tensor")
    local ok = T.zeros(1, 3):expand(1, 3)  -- size-1 stride-0 dims are fine
    ok:add_(1)
  end)
  it("fill_ and zero_ write the one value every alias takes, as torch's", function()
    local T = require "crescent"
    local base = T.zeros(1, 3)
    local e = base:expand(4, 3)
    e:fill_(2)
    expect.eq(base:totable(), { { 2, 2, 2 } })
    e:fill_(T.tensor(5))
    expect.eq(e:totable()[4], { 5, 5, 5 })
    e:zero_()
    expect.eq(base:totable(), { { 0, 0, 0 } })
  end)
end)

describe("as_strided", function()
  local errs = expect.error_checker("test_views.lua")
  it("lays any strides over the storage, offset counted from its start", function()
    local x = T.arange(12)
    local y = x:as_strided({ 3, 2 }, { 4, 1 }, 1)
    expect.eq(y:totable(), { { 1, 2 }, { 5, 6 }, { 9, 10 } })
    expect.eq(y:stride(), { 4, 1 })
    -- the offset defaults to the input's own
    expect.eq(x:narrow(1, 3, 4):as_strided({ 2 }, { 2 }):totable(), { 2, 4 })
    y:fill_(-1)  -- a view: writes reach the base
    expect.eq(x:totable()[2], -1)
    expect.eq(x:as_strided({ 0, 5 }, { 1, 1 }, 99):numel(), 0)  -- empty: never reads
  end)
  it("rejects layouts that leave the storage", function()
    local x = T.arange(6)
    errs(function() local _ = x:as_strided({ 2, 3 }, { 3, 2 }) end, "as_strided", "reach element 7 of a storage of 6")
    errs(function() local _ = x:as_strided({ 2 }, { 1 }, -1) end, "as_strided", "reach element")
    errs(function() local _ = x:as_strided({ 2 }, { 1, 1 }) end, "as_strided", "different lengths")
    errs(function() local _ = x:as_strided({ 2 }, { -1 }) end, "as_strided", "non-negative")
  end)
end)

describe("detach", function()
  it("views the same elements outside autograd: storage shared, no grad, not a view for autograd", function()
    local x = T.randn(3, 4, { requires_grad = true })
    local y = (x * 2):t()
    local d = y:detach()
    expect.eq({ d.shape, d:stride(), d.requires_grad, d.grad_fn }, { y.shape, y:stride(), false, nil })
    expect.eq(d:totable(), y:totable())
    d:zero_()  -- writes y's storage: y reads zeros (PyTorch shares the storage too)
    expect.eq(y:sum():item(), 0)
    expect.eq(T.detach(x).requires_grad, false)
  end)
end)
