-- topk and sort: values and 1-based indices against PyTorch 1.13 (indices shifted by one),
-- along every dim, with NaN and ties, on strided inputs, every dtype; k bounds and bad input.
local T = require "crescent"
local R = require "torch_ref"

expect.covers("topk", "sort")

T.manual_seed(11)
local errs = expect.error_checker("test_sorting.lua")

-- distinct values (so every index is determined) in dtype, optionally with a NaN
local function distinct(shape, dtype, nan)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local _, perm = T.rand(n):sort()              -- a random permutation of 1..n
  local x = (perm - (n + 1) / 2):to(dtype):view(shape)
  if nan and (dtype == "float32" or dtype == "float64") then x:view(-1)[2] = 0 / 0 end
  return x
end

local suite = R.suite()
local function both(group, key, expr, inputs, fn)
  suite:case(group, key, expr, inputs, function()
    local v, i = fn()
    return T.stack({ v:double(), i:double() }, 1)
  end)
end
for _, dt in ipairs({ "float32", "float64", "int32", "int64", "float16", "bfloat16" }) do
  local x = distinct({ 4, 6, 5 }, dt, true)
  local ref = "(lambda r: torch.stack([r[0].double(), r[1].double() + 1]))"
  both("topk " .. dt, "topk last " .. dt, ref .. "(torch.topk(x, 3))", { x = x }, function() return x:topk(3) end)
  both("topk " .. dt, "topk dim 2 smallest " .. dt, ref .. "(torch.topk(x, 2, 1, False))", { x = x },
    function() return T.topk(x, 2, 2, false) end)
  both("topk " .. dt, "topk dim 1 all " .. dt, ref .. "(torch.topk(x, 4, 0))", { x = x }, function() return x:topk(4, 1) end)
  both("topk " .. dt, "topk of a transpose " .. dt, ref .. "(torch.topk(x.transpose(0, 2), 2))", { x = x },
    function() return x:transpose(1, 3):topk(2) end)
  both("sort " .. dt, "sort last " .. dt, ref .. "(torch.sort(x))", { x = x }, function() return x:sort() end)
  both("sort " .. dt, "sort dim 1 descending " .. dt, ref .. "(torch.sort(x, 0, True))", { x = x },
    function() return x:sort(1, true) end)
end
suite:check()

describe("topk and sort", function()
  it("keep the order of position between equal values", function()
    local x = T.tensor({ 2, 1, 2, 1, 2 })
    local v, i = x:topk(3)
    expect.eq(v:totable(), { 2, 2, 2 })
    expect.eq(i:totable(), { 1, 3, 5 })
    v, i = x:sort()
    expect.eq(i:totable(), { 2, 4, 1, 3, 5 })
  end)
  it("put NaN first when taking the largest, last in an ascending sort", function()
    local x = T.tensor({ 1, 0 / 0, 3 })
    local v, i = x:topk(1)
    expect.truthy(v:item() ~= v:item())
    expect.eq(i:totable(), { 2 })
    v, i = x:sort()
    expect.eq(i:totable(), { 1, 3, 2 })
  end)
  it("take k = 0 and k = n, 0-d and empty inputs", function()
    local x = T.randn(3, 4)
    expect.eq(x:topk(0).shape, { 3, 0 })
    local v = x:topk(4)
    local s = x:sort(2, true)
    expect.close(v, s)
    local v0, i0 = T.tensor(5):topk(1)
    expect.eq(v0:item(), 5)
    expect.eq(i0:item(), 1)
    expect.eq(T.empty(0, 3):topk(2).shape, { 0, 2 })
    expect.eq(T.empty(2, 0):sort().shape, { 2, 0 })
    local b, bi = T.tensor({ true, false, true }):sort()
    expect.eq(b:totable(), { false, true, true })
    expect.eq(bi:totable(), { 2, 1, 3 })
  end)
  it("sort a line long enough to be sorted in chunks and merged, ties in order of position", function()
    for _, desc in ipairs({ false, true }) do
      local n = 2 ^ 18
      local x = T.randint(0, 50, { n }):float()
      x[7] = 0 / 0
      local v, i = x:sort(1, desc)
      expect.truthy(T.allclose(x:index_select(1, i), v, { rtol = 0, atol = 0, equal_nan = true }), "the indices give the values")
      local a, b, ia, ib = v:narrow(1, 1, n - 1), v:narrow(1, 2, n - 1), i:narrow(1, 1, n - 1), i:narrow(1, 2, n - 1)
      expect.eq(desc and v[1]:isnan():item() or v[n]:isnan():item(), true)
      local real = a:isnan():logical_or(b:isnan()):logical_not()
      local ordered = desc and a:ge(b) or a:le(b)
      expect.truthy(ordered:logical_or(real:logical_not()):all():item(), "ordered")
      expect.truthy(a:ne(b):logical_or(ia:lt(ib)):all():item(), "equal values in order of position")
    end
  end)
  it("sort long lines by radix as the comparison order does: every dtype, NaN, -0, ties, any threads", function()
    -- (topk of n - 1 takes the comparison sort: its order is the reference)
    local function same_order(x, d, desc, what)
      local n = x:size(d)
      local v, i = x:sort(d, desc)
      local tv, ti = x:topk(n - 1, d, desc)
      expect.eq(i:narrow(d, 1, n - 1):eq(ti):all():item(), true, what .. ": indices")
      local a, b = v:narrow(d, 1, n - 1):double(), tv:double()
      local same = a:eq(b):logical_and((1 / a):eq(1 / b)):logical_or(a:isnan():logical_and(b:isnan()))
      expect.eq(same:all():item(), true, what .. ": values (zeros' signs included)")
      return v, i
    end
    for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" }) do
      local n = 5000
      local x = dt == "bool" and T.rand(n):lt(0.5) or (T.randn(n) * 100):floor()
      if dt:find("float") then
        x = x:masked_fill(T.rand(n):lt(0.05), 0 / 0):masked_fill(T.rand(n):lt(0.05), -0.0):masked_fill(T.rand(n):lt(0.01), -1 / 0)
      end
      x = x:to(dt)
      for _, desc in ipairs({ false, true }) do
        same_order(x, 1, desc, dt .. " 1-D")
        same_order(x:view(2, 2500):t(), 1, desc, dt .. " two lines")
      end
    end
    local x = (T.randn(2 ^ 17) * 1000):floor():masked_fill(T.rand(2 ^ 17):lt(0.01), 0 / 0)
    local threads = T.get_num_threads()
    T.set_num_threads(1)
    local v1, i1 = same_order(x, 1, false, "one thread")
    T.set_num_threads(3)
    local v3, i3 = same_order(x, 1, false, "three threads")
    T.set_num_threads(threads)
    expect.eq(i1:eq(i3):all():item(), true, "the same indices on 1 and 3 threads")
  end)
  it("are captured by T.compile with the same results", function()
    local f = T.compile(function(x) local v, i = x:topk(3); return v * 2, i end, { backend = "cpu" })
    for _ = 1, 3 do
      local x = T.randn(5, 9)
      local v, i = f(x)
      local ev, ei = x:topk(3)
      expect.close(v, ev * 2)
      expect.eq(i:totable(), ei:totable())
    end
  end)
  it("reject bad k and dims", function()
    local x = T.randn(2, 5)
    errs(function() local _ = x:topk(6) end, "topk", "k expected a number in [0, 5]", "got 6")
    errs(function() local _ = x:topk(-1) end, "topk", "got -1")
    errs(function() local _ = x:topk(1.5) end, "topk", "integer")
    errs(function() local _ = x:topk(1, 3) end, "topk", "dim")
    errs(function() local _ = x:sort(0) end, "sort", "dim")
    local s = T.tensor(3)  -- a 0-d tensor orders along dim 1 or -1 only, as torch's 0 / -1
    errs(function() local _ = s:topk(1, 1.5) end, "topk", "argument 3 (dim) expected an integer", "1.5")
    errs(function() local _ = s:sort(2) end, "sort", "dim 2 is out of range for a 0-d tensor")
    expect.eq({ s:topk(1, -1):item(), s:sort(1):item() }, { 3, 3 })
    local v, i = s:topk(0)  -- (a 0-d result holds the value whatever k, as torch's)
    expect.eq({ v:item(), i:item() }, { 3, 1 })
    errs(function() local _ = x:sort(1, "yes") end, "sort", "descending")
  end)
end)
