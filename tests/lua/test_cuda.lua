-- CUDA tensors (vm/devices.hpp, jit/cuda/): device memory, copies in both directions for every
-- dtype and for views, ops on CUDA tensors (generated kernels; the few without one run on host copies),
-- the caching allocator, out-of-memory, device errors, T.bench's device timer. Every case that
-- needs a GPU skips cleanly without one; the errors of a machine without CUDA are checked here.
local T = require "crescent"

local errs = expect.error_checker("test_cuda.lua")
local GPU = T.cuda.is_available()
local function need_gpu() if not GPU then expect.skip("no CUDA device: " .. T.cuda.unavailable_reason()) end end

describe("without a GPU", function()
  it("CUDA tensors raise an error that says why", function()
    if GPU then expect.skip("a CUDA device is present") end
    expect.eq(T.cuda.device_count(), 0)
    errs(function() local _ = T.ones(2):cuda() end, "cuda", "CUDA is not available")
    errs(function() local _ = T.zeros(2, { device = "cuda" }) end, "zeros", "CUDA is not available")
    errs(function() local _ = T.ones(2):to("cuda:1") end, "to", "CUDA is not available")
    T.cuda.synchronize()  -- a no-op without devices
    errs(function() local _ = T.cuda.Stream() end, "cuda", "streams and events need a CUDA device")
    errs(function() local _ = T.cuda.current_stream() end, "cuda", "streams and events need a CUDA device")
    errs(function() T.cuda.Event():record() end, "cuda", "streams and events need a CUDA device")
  end)
  it("check the arguments of streams and events", function()
    errs(function() local _ = T.cuda.Stream({ priority = -1 }) end, "T.cuda.Stream", "unknown option 'priority'")
    errs(function() local _ = T.cuda.Event({ timing = true }) end, "T.cuda.Event", "unknown option 'timing'")
    errs(function() T.ones(2):record_stream(3) end, "record_stream", "expected a stream (T.cuda.Stream()), got number")
    errs(function() T.cuda.set_stream(T.ones(2)) end, "T.cuda.set_stream", "expected a stream (T.cuda.Stream()), got a tensor")
    errs(function() T.cuda.Event():elapsed_time(T.cuda.Event()) end, "Event:elapsed_time", "both events must be recorded first")
    expect.truthy(T.cuda.Event():query())  -- an event never recorded has passed, as in PyTorch
    expect.eq({ T.cuda.stream(nil, function(a, b) return a + b, nil, 7 end, 1, 2) }, { 3, nil, 7 })
  end)
end)

describe("CUDA tensors", function()
  it("copy to the device and back, every dtype, views included", function()
    need_gpu()
    for _, dt in ipairs(expect.DTYPES) do
      local x = (dt == "bool") and T.rand(5, 7):lt(0.5) or T.randn(5, 7):mul(10):to(dt)
      local d = x:cuda()
      expect.eq(d.device, "cuda:0")
      expect.eq(d.dtype, dt)
      expect.eq(d:cpu():totable(), x:totable())
      expect.eq(x:t():cuda():cpu():totable(), x:t():totable())            -- a transposed source
      expect.eq(d:narrow(2, 2, 3):t():cpu():totable(), x:narrow(2, 2, 3):t():totable())  -- a device view
      expect.eq(d:to("cpu"):totable(), x:totable())
    end
    expect.eq(T.tensor(3.5):cuda():item(), 3.5)
    expect.truthy(tostring(T.ones(2):cuda()):find("device='cuda:0'", 1, true))
  end)
  it("make tensors from Lua tables on the device ({device = ...} after the data's hidden shape)", function()
    need_gpu()
    -- the compile fuzzer's first CUDA run crashed here: the host kernel wrote into device memory
    local a = T.tensor({ { 1, 2 }, { 3, 4 } }, { device = "cuda" })
    expect.eq({ a.device, a.dtype }, { "cuda:0", "int64" })
    expect.eq(a:cpu():totable(), { { 1, 2 }, { 3, 4 } })
    local b = T.tensor({ 0.5, true }, { dtype = "float64", device = "cuda" })
    expect.eq(b:cpu():totable(), { 0.5, 1 })
  end)
  it("reduce empty inputs: no rows, or rows of no elements, eager and compiled", function()
    need_gpu()
    -- the compile fuzzer's CUDA run found a division by zero in the reduction's launch size
    local f = function(x) return x:sum(2), x:amax(1), x:mean(2, true), (x * 2):sum() end
    local c = T.compile(f, { hot = 0 })
    for _, shape in ipairs({ { 0, 5 }, { 3, 0 }, { 0, 0 } }) do
      local x = T.zeros(shape)
      local ok = pcall(function() return x:amax(1) end)  -- amax of no elements raises, as in PyTorch
      local g = ok and f or function(y) return y:sum(2), y:mean(2, true), (y * 2):sum() end
      local cg = ok and c or T.compile(g, { hot = 0 })
      for _, fn in ipairs({ g, cg }) do
        local want, got = { g(x) }, { fn(x:cuda()) }
        for i = 1, #want do
          expect.eq(got[i].shape, want[i].shape)
          expect.eq(got[i]:cpu():totable(), want[i]:totable())
        end
      end
    end
  end)
  it("copy_ into a device view writes only the view", function()
    need_gpu()
    local d = T.zeros(4, 4):cuda()
    d:narrow(1, 2, 2):narrow(2, 2, 2):copy_(T.ones(2, 2))
    local want = T.zeros(4, 4)
    want:narrow(1, 2, 2):narrow(2, 2, 2):fill_(1)
    expect.eq(d:cpu():totable(), want:totable())
    d[1]:fill_(7)
    expect.eq(d:cpu()[1]:totable(), { 7, 7, 7, 7 })
    d:zero_()
    expect.eq(d:cpu():sum():item(), 0)
  end)
  it("run every kind of op with the CPU's results", function()
    need_gpu()
    T.manual_seed(4)
    local a, b = T.randn(6, 5), T.randn(5, 3)
    local da, db = a:cuda(), b:cuda()
    local cases = {
      { function(x) return x + 1 end, "add" },
      { function(x) return T.sin(x) * 2 end, "sin" },
      { function(x) return x:softmax(-1) end, "softmax" },
      { function(x) return x:sum(1) end, "sum" },
      { function(x) return x:max(2) end, "max" },
      { function(x) return x:reshape(30):narrow(1, 3, 10) end, "views" },
      { function(x) return T.cat({ x, x }, 1) end, "cat" },
      { function(x) return x:topk(2) end, "topk" },
    }
    for _, c in ipairs(cases) do
      local got, want = c[1](da), c[1](a)
      expect.eq(got.device, "cuda:0", c[2])
      expect.close(got:cpu(), want, 1e-6, 1e-6)
    end
    expect.close(T.matmul(da, db):cpu(), T.matmul(a, b), 1e-5, 1e-5)
    local z = T.zeros(2, 3, { device = "cuda" })
    expect.eq(z.device, "cuda:0")
    T.manual_seed(1)
    local r1 = T.randn(4, { device = "cuda" })
    T.manual_seed(1)
    expect.eq(r1:cpu():totable(), T.randn(4):totable())  -- Philox: the same values on both devices
    local x = T.ones(3):cuda()
    x:add_(2)
    x:mul_(T.tensor(2))  -- a 0-d CPU tensor is a scalar
    expect.eq(x:cpu():totable(), { 6, 6, 6 })
  end)
  it("multiply matrices with cuBLAS: batches, broadcasting, transposes, linear, every dtype", function()
    need_gpu()
    T.manual_seed(8)
    local cases = {
      { T.randn(7, 5), T.randn(5, 3) }, { T.randn(4, 7, 5), T.randn(5, 3) }, { T.randn(2, 3, 5, 4), T.randn(3, 4, 6) },
      { T.randn(5, 7):t(), T.randn(3, 5):t() }, { T.randn(1, 9), T.randn(9, 300) }, { T.randn(300, 9), T.randn(9) },
    }
    for i, c in ipairs(cases) do
      for _, dt in ipairs({ "float32", "float64", "int64" }) do
        local a, b = c[1]:mul(3):to(dt), c[2]:mul(3):to(dt)
        local got = T.matmul(a:cuda(), b:cuda())
        expect.eq(got.device, "cuda:0")
        expect.close(got:cpu(), T.matmul(a, b), 1e-5, 1e-4)
      end
    end
    local x, w, bias = T.randn(6, 8), T.randn(4, 8), T.randn(4)
    expect.close(T.linear(x:cuda(), w:cuda(), bias:cuda()):cpu(), T.linear(x, w, bias), 1e-5, 1e-5)
    local p, q = T.randn(3, 2, 4), T.randn(3, 4, 5)
    expect.close(T.bmm(p:cuda(), q:cuda()):cpu(), T.bmm(p, q), 1e-5, 1e-5)
  end)
  it("run eager ops as generated CUDA kernels, cached per op and layout", function()
    need_gpu()
    T.compiler.reset()
    local x = T.randn(33, 65)
    local dx = x:cuda()
    local h0 = T.cuda.stats().host_ops
    local eager = {
      function(v) return T.exp(v) * 2 + 1 end, function(v) return v:sum(-1) end, function(v) return v:t():amax(1) end,
      function(v) return v:softmax(1) end, function(v) return T.where(v:gt(0), v, v * 0.1) end,
      function(v) return v:narrow(2, 3, 40):mean(1, true) end, function(v) return v:double():sqrt():isnan() end,
      function(v) return v * T.tensor(3) end, function(v) return v:clamp(-0.5, v:t():t() * 0.5) end,
      function(v) return T.lerp(v, v * 2, 0.25), T.addcmul(v, v, v, -0.5) end,
      function(v) return v:gt(0.5):any(2), v:all(), v:lt(3):all(1, true) end,
      function(v) return T.tril(v, 2), v:t():triu(-1), T.tril(v:gt(0), -40), v:long():triu(70) end,
      function(v)  -- generators on the tensor's device: arange / linspace / eye
        local o = { device = v.device }
        return v + T.eye(33, 65, o), T.arange(-3, 40, 0.5, o), T.linspace(0.1, 1e3, 11, { dtype = "float64", device = v.device }),
          T.arange(7, { dtype = "int32", device = v.device })
      end,
    }
    local on_host = {}
    for i, f in ipairs(eager) do
      local h = T.cuda.stats().host_ops
      for _ = 1, 2 do
        local want, got = { f(x) }, { f(dx) }
        for k = 1, #want do expect.close(got[k]:cpu(), want[k], 1e-5, 1e-5) end
      end
      if T.cuda.stats().host_ops > h then on_host[#on_host + 1] = i end
    end
    expect.eq(on_host, {}, "cases that ran on the host")
    expect.eq((dx + 1).device, "cuda:0")
    expect.eq(T.cuda.stats().host_ops, h0)
  end)
  -- operand numbers are kernel arguments (jit/cuda/eager.cpp): a scalar that changes at every call
  -- reuses one kernel; before, each value compiled a module and the 65th went to host copies
  it("take new operand numbers without new kernels, as eager gives them", function()
    need_gpu()
    local x, i = T.randn(7, 9), T.randint(-5, 6, { 7, 9 }):int()
    local dx, di = x:cuda(), i:cuda()
    local h = T.cuda.stats().host_ops
    for k = 1, 150 do
      local s = k * 0.37 - 20
      expect.close((dx * s + k):cpu(), x * s + k, 1e-6, 1e-6, "x * " .. s .. " + " .. k)
      expect.eq((di + k):cpu():totable(), (i + k):totable(), "int32 + " .. k)    -- an integral number: integer arithmetic
      expect.close((di * s):cpu(), i * s, 1e-6, 1e-6, "int32 * " .. s)            -- a fractional one: float
      expect.close(T.where(dx:gt(s / 40), dx, s):cpu(), T.where(x:gt(s / 40), x, s), 0, 0)
      expect.close(dx:clamp(-k / 50, k / 50):cpu(), x:clamp(-k / 50, k / 50), 0, 0)
    end
    expect.eq(T.cuda.stats().host_ops, h, "ops that ran on host copies")
  end)
  -- in-place ops run their op's kernel and a device copy into self; copies, conversions and joins
  -- between layouts are generated copy kernels (the output written in the destination's layout)
  it("run in-place ops, conversions, copies between layouts and joins on the device", function()
    need_gpu()
    T.manual_seed(5)
    local x, y = T.randn(6, 10), T.randn(6, 10)
    local function cases(a, b)
      local r = {}
      local c = a:clone(); c:add_(b); r[#r + 1] = c
      c = a:clone(); c:mul_(2.5):sub_(b, { alpha = 2 }); r[#r + 1] = c
      c = a:clone(); c:t():div_(b:t() + 4); r[#r + 1] = c             -- through a transposed view
      c = a:clone(); c:narrow(2, 3, 4):clamp_(-0.5, 0.5); r[#r + 1] = c -- a strided view, gaps kept
      c = a:clone(); c:masked_fill_(b:lt(0), 7); r[#r + 1] = c
      c = a:clone(); c:add_(c); r[#r + 1] = c                          -- self as an argument
      c = a:clone(); c:copy_(b[1]); r[#r + 1] = c                      -- a broadcast source
      c = a:clone(); c:t():copy_(b:t():double()); r[#r + 1] = c        -- converted, transposed
      r[#r + 1] = a:t():contiguous()
      r[#r + 1] = a:double():half():float()
      r[#r + 1] = (a * 100):long()
      r[#r + 1] = T.cat({ a, b:narrow(2, 1, 3), a:t():t() }, 2)
      r[#r + 1] = T.stack({ a, b }, 3)
      return r
    end
    local want = cases(x, y)
    local h = T.cuda.stats().host_ops
    local got = cases(x:cuda(), y:cuda())
    expect.eq(T.cuda.stats().host_ops, h, "ops on host copies")
    for i = 1, #want do
      expect.eq({ got[i].device, got[i].dtype, got[i].shape }, { "cuda:0", want[i].dtype, want[i].shape }, "case " .. i)
      expect.close(got[i]:cpu():double(), want[i]:double(), 1e-6, 1e-6)
    end
    -- in place in a compiled function: the write reaches the caller's tensor
    local f = T.compile(function(a, b) a:mul_(b); return a + 1 end, { hot = 0 })
    local a, da = x:clone(), x:cuda()
    for _ = 1, 3 do a:mul_(y) end
    for _ = 1, 3 do f(da, y:cuda()) end
    expect.close(da:cpu(), a, 1e-6, 1e-6)
    expect.eq(T.cuda.stats().host_ops, h, "ops on host copies (compiled)")
    errs(function() local _ = x:long():cuda():add_(y:cuda()) end, "add_", "cannot be written into")
  end)
  -- float16 / bfloat16 compute in float32 and round once per stored value, as the CPU kernels do:
  -- eager ops as generated kernels (none on host copies), compiled graphs, cuBLAS products with
  -- float32 accumulation. References: the CPU's 16-bit results, and float64 for the products.
  it("compute float16 and bfloat16 on the device: eager kernels, compiled graphs, matmul", function()
    need_gpu()
    local function near(got, want, tol, what)
      local ok, err = pcall(expect.close, got, want, tol, tol)
      if not ok then error(what .. ": " .. tostring(err), 2) end
    end
    T.manual_seed(16)
    local cases = {
      function(v, w) return (v + 1) * w, T.sin(v), T.exp(v - 2), v:sigmoid(), T.relu(v - w), v:gelu() end,
      function(v, w) return T.where(v:gt(w), v, w * 0.5), v:lt(0.25), v:float(), v:double():half(), v:int() end,
      function(v) return v:sum(-1), v:mean(1), v:amax(2, true), v:t():amin(2), v:var(-1) end,
      function(v) return v:softmax(-1), v:log_softmax(1), v:logsumexp(-1), v:t():softmax(-1) end,
      function(v, w) return T.F.layer_norm(v, 96, w[1], w[2]) end,
      function(v) return v:masked_fill(v:lt(0), -0.1), (v * 1000):exp() end,
    }
    for _, dt in ipairs({ "float16", "bfloat16" }) do
      local rel = dt == "float16" and 2e-3 or 1.6e-2
      local x, y = (T.randn(40, 96) * 2):to(dt), T.randn(40, 96):to(dt)
      local dx, dy = x:cuda(), y:cuda()
      for i, f in ipairs(cases) do
        local want = { f(x, y) }
        local h = T.cuda.stats().host_ops
        local got = { f(dx, dy) }
        expect.eq(T.cuda.stats().host_ops, h, dt .. " case " .. i .. ": ops on host copies")
        local cf = T.compile(f)
        local comp
        for _ = 1, 3 do comp = { cf(dx, dy) } end
        for k = 1, #want do
          local what = ("%s case %d result %d"):format(dt, i, k)
          expect.eq({ got[k].device, got[k].dtype, comp[k].dtype }, { "cuda:0", want[k].dtype, want[k].dtype }, what)
          local tol = (want[k].dtype == "float16" or want[k].dtype == "bfloat16") and rel or 1e-5
          near(got[k]:cpu():double(), want[k]:double(), tol, what .. " eager")
          near(comp[k]:cpu():double(), want[k]:double(), tol, what .. " compiled")
        end
      end
      -- products: float32 accumulation, against float64 of the same 16-bit inputs
      local a, b = T.randn(3, 64, 80):to(dt), T.randn(80, 48):to(dt)
      local bias = T.randn(48):to(dt)
      local p = T.matmul(a:cuda(), b:cuda())
      expect.eq({ p.dtype, p.device }, { dt, "cuda:0" })
      expect.close(p:cpu():double(), T.matmul(a:double(), b:double()), rel, rel * 8)
      local l = T.linear(a:cuda(), b:t():cuda(), bias:cuda())
      expect.close(l:cpu():double(), T.linear(a:double(), b:t():double(), bias:double()), rel, rel * 8)
    end
  end)
  it("gather on the device (index_select, gather, embedding), checking the positions there", function()
    need_gpu()
    local h = T.cuda.stats().host_ops
    for _, dt in ipairs { "float32", "float64", "int32", "int64", "bool", "float16", "bfloat16" } do
      local x = (T.randn(6, 9) * 4):to(dt)
      local xt = x:t() -- a strided source
      local cols, rows = T.tensor({ 9, 1, 3, 3, 7 }):long(), T.tensor({ 2, 6 }):int()
      local pos = T.randint(1, 7, { 4, 9 }):long()
      local ids = T.tensor({ { 3, 9, 1 }, { 7, 7, 2 } }):long()
      local dx, dxt = x:cuda(), xt:cuda()
      local cases = {
        { dx:index_select(2, cols:cuda()), x:index_select(2, cols) },
        { dx:index_select(-2, rows:cuda()), x:index_select(-2, rows) },
        { dxt:index_select(2, rows:cuda()), xt:index_select(2, rows) },
        { dx:gather(1, pos:cuda()), x:gather(1, pos) },
        { T.embedding(ids:cuda(), dxt), T.embedding(ids, xt) },
        { dx:index_select(1, T.tensor({}):long():cuda()), x:index_select(1, T.tensor({}):long()) },
      }
      for i, c in ipairs(cases) do
        expect.eq({ c[1].device, c[1].dtype, c[1].shape }, { "cuda:0", dt, c[2].shape }, dt .. " case " .. i)
        expect.eq(c[1]:cpu():double():totable(), c[2]:double():totable(), dt .. " case " .. i)
      end
    end
    expect.eq(T.cuda.stats().host_ops, h, "ops on host copies")
    -- compiled: fused with their users, the positions computed in the kernel
    local x, idx = T.randn(8, 16), T.tensor({ 16, 2, 5 }):long()
    local line = debug.getinfo(1, "l").currentline + 1
    local f = T.compile(function(a, i) return (a:exp():index_select(2, i + 1 - 1) * 2):sum(-1) end)
    local want = (x:exp():index_select(2, idx) * 2):sum(-1)
    for _ = 1, 3 do expect.close(f(x:cuda(), idx:cuda()):cpu(), want, 1e-5, 1e-5) end
    -- a bad position: reported at the next synchronisation (the op does not wait), naming the op
    -- and its line; the device stays usable
    local w = T.randn(50, 8):cuda()
    local bad = T.embedding(T.tensor({ 3, 51 }):long():cuda(), w)
    errs(function() local _ = bad:cpu() end, "cpu", "embedding: index 51 is out of range for a weight of 50 rows (expected 1..50)",
      "found by a CUDA kernel that ran before this synchronisation")
    errs(function() local _ = x:cuda():index_select(2, T.tensor({ 0 }):long():cuda()); T.cuda.synchronize() end,
      "index_select", "index 0 is out of range for dim 2 of size 16 (expected 1..16)")
    errs(function() local _ = f(x:cuda(), T.tensor({ 16, 17, 1 }):long():cuda()):cpu() end, "cpu",  -- (and the op's line, compiled)
      ("test_cuda.lua:%d: index_select: index 17 is out of range for dim 2 of size 16"):format(line))
    expect.eq(T.embedding(T.tensor({ 50 }):long():cuda(), w):cpu():totable(), { w:cpu()[50]:totable() })
    for _ = 1, 3 do expect.close(f(x:cuda(), idx:cuda()):cpu(), want, 1e-5, 1e-5) end
  end)
  it("find extreme positions on the device (argmax, argmin, max / min with indices)", function()
    need_gpu()
    local h = T.cuda.stats().host_ops
    for _, dt in ipairs { "float32", "float64", "int32", "int64", "bool", "float16", "bfloat16" } do
      local x = (dt == "bool") and T.rand(7, 300):lt(0.5) or (T.randn(7, 300) * 3):to(dt)
      if dt:find("float") then x[2][5], x[2][9], x[4][300] = 0 / 0, 0 / 0, 0 / 0 end -- the first NaN is the extreme
      local d = x:cuda()
      local v, i = d:max(2)
      local vw, iw = x:max(2)
      local v2, i2 = d:min(1, true)
      local v2w, i2w = x:min(1, true)
      local cases = { { d:argmax(2), x:argmax(2) }, { d:argmin(-1, true), x:argmin(-1, true) }, { d:argmax(), x:argmax() },
        { d:t():argmin(2), x:t():argmin(2) }, { i, iw }, { v, vw }, { i2, i2w }, { v2, v2w } }
      for k, c in ipairs(cases) do
        expect.eq({ c[1].device, c[1].dtype, c[1].shape }, { "cuda:0", c[2].dtype, c[2].shape }, dt .. " case " .. k)
        local a, b = c[1]:cpu():double(), c[2]:double()
        expect.eq(a:eq(b):logical_or(a:ne(a):logical_and(b:ne(b))):all():item(), true, dt .. " case " .. k)
      end
    end
    expect.eq(T.cuda.stats().host_ops, h, "ops on host copies")
  end)
  it("draw random numbers on the device (rand, randn, randint), the CPU's numbers (Philox), eager and compiled", function()
    need_gpu()
    local h = T.cuda.stats().host_ops
    T.manual_seed(7)
    local u, n = T.rand(300, 7, { device = "cuda" }), T.randn(1001, { device = "cuda", dtype = "float64" })
    local i = T.randint(-4, 2 ^ 40, { 33 }, { device = "cuda" })
    local after = T.rand(1):item()
    T.manual_seed(7)
    local u0, n0 = T.rand(300, 7), T.randn(1001, { dtype = "float64" })
    expect.eq(i:cpu():totable(), T.randint(-4, 2 ^ 40, { 33 }):totable(), "randint")
    expect.eq(T.rand(1):item(), after, "the generator advanced as on the CPU")
    expect.eq({ u.device, u.dtype, n.dtype }, { "cuda:0", "float32", "float64" })
    expect.eq(u:cpu():eq(u0):all():item(), true, "uniform: the same bits")
    expect.close(n:cpu(), n0, 1e-14, 1e-14)  -- (CUDA's log / cos: within an ulp of glibc's)
    expect.eq(T.cuda.stats().host_ops, h, "ops on host copies")
    local f = T.compile(function(x) return x + T.rand(x:size(1), x:size(2), { device = x.device }) end)
    local x = T.randn(64, 33)
    for i = 1, 3 do
      T.manual_seed(i)
      local got = f(x:cuda())
      T.manual_seed(i)
      expect.eq(got:cpu():eq(x + T.rand(64, 33)):all():item(), true, "compiled, call " .. i)
    end
  end)
  it("run cumsum on the device (a library kernel): rows, columns, long and short rows, every dtype", function()
    need_gpu()
    T.manual_seed(12)
    local host_ops = T.cuda.stats().host_ops
    local x = T.randn(7, 3000)
    local cases = {
      { x, 2 }, { x, 1 }, { x:t(), 2 }, { T.randn(4, 5, 6), 2 }, { T.randn(3, 20), 2 }, { T.randn(100000), 1 },
      { T.randn(0, 5), 2 }, { T.tensor(2.5), 1 }, { x:narrow(2, 3, 1500), 2 }, { T.randn(3, 40000), 2 },
    }
    for _, c in ipairs(cases) do
      local want = T.cumsum(c[1], c[2])
      local got = T.cumsum(c[1]:cuda(), c[2])
      expect.eq(got.shape, want.shape)
      expect.close(got:cpu(), want, 1e-5, 1e-6)
    end
    -- other dtypes: integers exact (int32 and bool sum into int64; {dtype = int32} wraps on both), 16-bit floats
    local ints = (T.randn(6, 700) * 1000):to("int32")
    expect.eq(T.cumsum(ints:cuda(), 2):cpu():totable(), T.cumsum(ints, 2):totable())
    expect.eq(T.cumsum(ints:cuda(), 2).dtype, "int64")
    local huge = T.full({ 3, 100 }, 2 ^ 30, { dtype = "int32" })
    expect.eq(T.cumsum(huge:cuda(), 2, { dtype = "int32" }):cpu():totable(), T.cumsum(huge, 2, { dtype = "int32" }):totable())
    local bools = T.rand(5, 300):lt(0.5)
    expect.eq(T.cumsum(bools:cuda(), 1):cpu():totable(), T.cumsum(bools, 1):totable())
    expect.eq(T.cumsum(x:cuda(), 2, { dtype = "float64" }):cpu():totable(), T.cumsum(x, 2, { dtype = "float64" }):totable())
    for _, dt in ipairs({ "float16", "bfloat16", "float64" }) do
      local h = T.randn(5, 1500):to(dt)
      expect.close(T.cumsum(h:cuda(), 2):cpu():float(), T.cumsum(h, 2):float(), 1e-2, 1e-2, dt)
    end
    -- in a compiled graph it is an extern step between generated kernels
    local f = T.compile(function(v) return T.cumsum(v * 2, 2):sin() end, { hot = 0 })
    expect.close(f(x:cuda()):cpu(), T.cumsum(x * 2, 2):sin(), 1e-4, 1e-4)
    expect.eq(T.cuda.stats().host_ops, host_ops)
  end)
  it("sort and take the top k on the device (library kernels): NaN, ties, every dtype, long lines", function()
    need_gpu()
    T.manual_seed(13)
    local host_ops = T.cuda.stats().host_ops
    local function same(got, want, what)
      for i = 1, #want do
        expect.eq(got[i].device, "cuda:0", what)
        expect.eq(got[i]:cpu():totable(), want[i]:totable(), what)
      end
    end
    -- ties (small integers as floats) and NaNs: the order is total, so values and indices are exact
    local x = (T.randn(6, 300) * 3):round()
    x[2][7], x[2][100], x[5][1] = 0 / 0, 0 / 0, 0 / 0
    local dx = x:cuda()
    for _, desc in ipairs({ false, true }) do
      same({ dx:sort(2, desc) }, { x:sort(2, desc) }, "sort rows")
      same({ dx:sort(1, desc) }, { x:sort(1, desc) }, "sort columns")
      same({ dx:t():sort(2, desc) }, { x:t():sort(2, desc) }, "sort transposed")
      same({ dx:topk(7, 2, not desc) }, { x:topk(7, 2, not desc) }, "topk")
    end
    local y = T.randn(3, 40, 5)
    same({ y:cuda():sort(2) }, { y:sort(2) }, "a middle dim")
    for _, dt in ipairs({ "float64", "float16", "bfloat16", "int32", "int64", "bool" }) do
      local v = dt == "bool" and T.rand(4, 50):lt(0.5) or (T.randn(4, 50) * 20):to(dt)
      same({ v:cuda():sort(2, true) }, { v:sort(2, true) }, dt)
      same({ v:cuda():topk(5) }, { v:topk(5) }, dt)
    end
    -- a vocabulary-sized line: topk keeps each 4096-chunk's first k, then orders the candidates
    local logits = T.randn(3, 50257)
    logits[1][50000] = 0 / 0
    same({ logits:cuda():topk(50) }, { logits:topk(50) }, "topk of 50257")
    same({ logits:cuda():topk(2048, 2, false) }, { logits:topk(2048, 2, false) }, "topk 2048 smallest")
    same({ T.tensor(3.5):cuda():sort() }, { T.tensor(3.5):sort() }, "0-d")
    same({ T.randn(0, 4):cuda():sort(2) }, { T.randn(0, 4):sort(2) }, "empty")
    expect.eq(({ dx:topk(0) })[1].shape, { 6, 0 })
    -- a whole sort of lines longer than 4096: sorted chunks merged pairwise (an odd run count here)
    same({ logits:cuda():sort(2, true) }, { logits:sort(2, true) }, "sort of 50257")
    same({ logits:cuda():topk(3000, 2, false) }, { logits:topk(3000, 2, false) }, "topk 3000 of 50257")
    local tall = (T.randn(9000, 3) * 4):round()
    same({ tall:cuda():sort(1) }, { tall:sort(1) }, "sort of columns of 9000, ties")
    expect.eq(T.cuda.stats().host_ops, host_ops)
  end)
  it("run attention as one fused kernel (tensor cores for 16-bit, FMA for float32): lengths, causal, layouts, graphs", function()
    need_gpu()
    T.manual_seed(21)
    local host_ops = T.cuda.stats().host_ops
    local TOL = { float16 = 4e-3, bfloat16 = 3e-2, float32 = 1e-4, float64 = 1e-10 }
    local function check(got, q, k, v, scale, causal, what)
      expect.eq({ got.device, got.dtype }, { "cuda:0", q.dtype }, what)
      local want = T.attention(q:double(), k:double(), v:double(), scale, causal)  -- the CPU kernel in float64
      expect.close(got:cpu():double(), want, TOL[q.dtype], TOL[q.dtype])
    end
    -- {batch, heads, L, S, E, causal}: lengths off the 64-row / 64-key tiles, S = 0, L = 0, one key
    local cases = { { 2, 3, 70, 130, 64, false }, { 1, 2, 64, 64, 16, true }, { 2, 1, 129, 17, 32, true },
                    { 1, 1, 5, 300, 128, false }, { 3, 2, 100, 40, 64, true }, { 1, 1, 1, 1, 64, false },
                    { 1, 2, 0, 5, 64, false }, { 1, 2, 5, 0, 64, true }, { 1, 1, 200, 300, 128, true } }
    for _, dt in ipairs({ "float16", "bfloat16", "float32" }) do
      for _, c in ipairs(cases) do
        local B, H, L, S, E, causal = unpack(c)
        local q, k, v = T.randn(B, H, L, E):to(dt), T.randn(B, H, S, E):to(dt), T.randn(B, H, S, E):to(dt)
        check(T.attention(q:cuda(), k:cuda(), v:cuda(), 0.2, causal), q, k, v, 0.2, causal, dt .. " " .. tostring(c))
      end
    end
    -- layouts: heads split from {B, L, H, E} (GPT-2's transpose), an expanded key, a 3-d and a
    -- 2-d call, rows that are not 16-byte aligned (copied first), a head size of no kernel (composite)
    local x = T.randn(2, 33, 4, 64):half()
    local q = x:transpose(2, 3)
    local k = T.randn(2, 1, 50, 64):half():expand(2, 4, 50, 64)
    local v = T.randn(2, 4, 50, 64):half()
    check(T.attention(q:cuda(), k:cuda(), v:cuda()), q, k, v, 1 / 8, false, "strided")
    check(T.attention(x:cuda():transpose(2, 3), k:cuda(), v:cuda(), nil, true), q, k, v, 1 / 8, true, "device view")
    local q3, k3 = T.randn(6, 20, 32):bfloat16(), T.randn(6, 24, 32):bfloat16()
    check(T.attention(q3:cuda(), k3:cuda(), k3:cuda(), 0.5), q3, k3, k3, 0.5, false, "3-d")
    local q2, k2 = T.randn(20, 72):half():narrow(2, 5, 64), T.randn(24, 64):half()
    check(T.attention(q2:cuda(), k2:cuda(), k2:cuda()), q2, k2, k2, 1 / 8, false, "unaligned rows")
    local q5, k5 = T.randn(2, 9, 24):half(), T.randn(2, 11, 24):half()
    check(T.attention(q5:cuda(), k5:cuda(), k5:cuda()), q5, k5, k5, 1 / math.sqrt(24), false, "head size 24")
    check(T.attention(q5:cuda(), k5:cuda(), k5:cuda(), nil, true), q5, k5, k5, 1 / math.sqrt(24), true, "head size 24, causal")
    local q6, k6 = T.randn(2, 7, 8):double(), T.randn(2, 12, 8):double()  -- (float64: the composite)
    check(T.attention(q6:cuda(), k6:cuda(), k6:cuda(), 0.3, true), q6, k6, k6, 0.3, true, "float64, causal")
    -- float32 (the FMA kernel): head sizes apart, strided heads, a head size it does not take (composite)
    local qf, kf, vf = T.randn(2, 3, 70, 20), T.randn(2, 3, 90, 20), T.randn(2, 3, 90, 48)
    check(T.attention(qf:cuda(), kf:cuda(), vf:cuda(), 0.3, true), qf, kf, vf, 0.3, true, "float32 20 / 48")
    local xf, kx, vx = T.randn(2, 70, 4, 64), T.randn(2, 1, 50, 64):expand(2, 4, 50, 64), T.randn(2, 4, 50, 32)
    check(T.attention(xf:cuda():transpose(2, 3), kx:cuda(), vx:cuda()), xf:transpose(2, 3), kx, vx, 1 / 8, false,
          "float32 strided")
    local vg = T.randn(2, 3, 90, 40)
    check(T.attention(qf:cuda(), kf:cuda(), vg:cuda(), 0.3), qf, kf, vg, 0.3, false, "float32 head size 40")
    -- F.scaled_dot_product_attention without a mask is this op on the device
    local dq, dk, dv = q:cuda():contiguous(), k:cuda(), v:cuda()
    expect.eq(T.F.scaled_dot_product_attention(dq, dk, dv, { causal = true }):cpu():totable(),
              T.attention(dq, dk, dv, nil, true):cpu():totable())
    -- the recorded pattern matmul -> / 8 -> softmax -> matmul compiles to the same kernel: same bits
    local f = T.compile(function(a, b, c) return T.matmul((T.matmul(a, b:transpose(-2, -1)) / 8):softmax(-1), c) end)
    local want = T.attention(dq, dk, dv, 1 / 8)
    for _ = 1, 3 do expect.close(f(dq, dk, dv):cpu(), want:cpu(), 4e-3, 4e-3) end  -- (the first call runs as recorded)
    expect.eq(f(dq, dk, dv):cpu():totable(), want:cpu():totable(), "compiled pattern")
    -- (float32: 80 query rows, the fused kernel; below 32 rows attention runs the composite)
    local fq, fk, fv = T.randn(2, 4, 80, 64):cuda(), dk:float(), dv:float()
    local want32 = T.attention(fq, fk, fv, 1 / 8)
    for _ = 1, 3 do expect.close(f(fq, fk, fv):cpu(), want32:cpu(), 1e-4, 1e-4) end
    expect.eq(f(fq, fk, fv):cpu():totable(), want32:cpu():totable(), "compiled float32 pattern")
    expect.eq(T.cuda.stats().host_ops, host_ops)
  end)
  it("run attention with a mask in the fused kernel: bool and added, broadcast, strided", function()
    need_gpu()
    T.manual_seed(22)
    local host_ops = T.cuda.stats().host_ops
    local TOL = { float16 = 4e-3, bfloat16 = 3e-2, float32 = 1e-4 }
    for _, shape in ipairs({ { 2, 3, 70, 130, 64 }, { 1, 2, 33, 77, 32 } }) do  -- (an odd S: the last key alone)
      for _, dt in ipairs({ "float16", "bfloat16", "float32" }) do
        local B, H, L, S, E = unpack(shape)
        local q, k, v = T.randn(B, H, L, E):to(dt), T.randn(B, H, S, E):to(dt), T.randn(B, H, S, E):to(dt)
        local keep = T.eye(L, S):bool()  -- (every bool row keeps a key)
        local masks = { T.randn(L, S):to(dt), T.randn(H, 1, S):to(dt), T.randn(B, 1, L, S):to(dt),
                        T.randn(B, H, S, L):to(dt):transpose(3, 4), T.rand(L, S):gt(0.5):logical_or(keep),
                        T.rand(B, 1, 1, S):gt(0.7):logical_or(T.eye(1, S):bool()) }
        for i, m in ipairs(masks) do
          local got = T.attention(q:cuda(), k:cuda(), v:cuda(), 0.2, false, m:cuda())
          local want = T.attention(q:double(), k:double(), v:double(), 0.2, false, m.dtype == "bool" and m or m:double())
          expect.eq({ got.device, got.dtype }, { "cuda:0", dt })
          expect.close(got:cpu():double(), want, TOL[dt], TOL[dt], dt .. " mask " .. i .. " S " .. S)
        end
        -- a row that sees no key is NaN, as softmax and the CPU kernel
        local m = T.ones(L, S):bool()
        m[3] = false
        local got = T.attention(q:cuda(), k:cuda(), v:cuda(), nil, false, m:cuda()):cpu()
        expect.truthy(got:select(3, 3):isnan():all():item(), dt .. " masked row")
        expect.eq(got:narrow(3, 4, 5):isnan():any():item(), false)
        -- F.scaled_dot_product_attention with a mask is this op on the device
        local dm = masks[1]:cuda()
        expect.eq(T.F.scaled_dot_product_attention(q:cuda(), k:cuda(), v:cuda(), { mask = dm, scale = 0.2 }):cpu():totable(),
                  T.attention(q:cuda(), k:cuda(), v:cuda(), 0.2, false, dm):cpu():totable(), dt .. " sdpa")
      end
    end
    -- compiled: matmul -> / 8 -> (masked_fill | + mask) -> softmax -> matmul is rewritten to the
    -- kernel with the mask: the same bits as T.attention (after the first call, run as recorded)
    local q, k, v = T.randn(2, 4, 48, 64):half():cuda(), T.randn(2, 4, 50, 64):half():cuda(), T.randn(2, 4, 50, 64):half():cuda()
    local blocked = T.rand(2, 1, 1, 50):gt(0.8):cuda()
    local added = T.randn(48, 50):half():cuda()
    local filled = T.compile(function(a, b, c, m)
      return T.matmul((T.matmul(a, b:transpose(-2, -1)) / 8):masked_fill(m, -math.huge):softmax(-1), c)
    end)
    local plus = T.compile(function(a, b, c, m) return T.matmul((T.matmul(a, b:transpose(-2, -1)) / 8 + m):softmax(-1), c) end)
    local want_f, want_p = T.attention(q, k, v, 1 / 8, false, blocked:logical_not()), T.attention(q, k, v, 1 / 8, false, added)
    for _ = 1, 2 do
      expect.close(filled(q, k, v, blocked):cpu(), want_f:cpu(), 4e-3, 4e-3)
      expect.close(plus(q, k, v, added):cpu(), want_p:cpu(), 4e-3, 4e-3)
    end
    expect.eq(filled(q, k, v, blocked):cpu():totable(), want_f:cpu():totable(), "compiled masked_fill pattern")
    expect.eq(plus(q, k, v, added):cpu():totable(), want_p:cpu():totable(), "compiled added-mask pattern")
    -- a mask over more than two batch dims: the composite on the device
    local q5, m5 = T.randn(2, 2, 2, 40, 16):half(), T.randn(2, 2, 2, 40, 40):half()
    local got = T.attention(q5:cuda(), q5:cuda(), q5:cuda(), nil, false, m5:cuda())
    expect.close(got:cpu():double(), T.attention(q5:double(), q5:double(), q5:double(), nil, false, m5:double()), 4e-3, 4e-3)
    expect.eq(T.cuda.stats().host_ops, host_ops)
  end)
  it("refuse tensors of two devices in one op, as PyTorch", function()
    need_gpu()
    errs(function() local _ = T.ones(3):cuda() + T.ones(3) end, "add", "expected all tensors on one device, got cpu and cuda:0")
    errs(function() local _ = T.ones(3):to("cuda:9") end, "to", "device cuda:9 does not exist")
  end)
  it("reuse cached device memory: no driver allocation per op in steady state", function()
    need_gpu()
    local x = T.randn(256, 256):cuda()
    for _ = 1, 5 do
      local _ = (x + 1):sum()
      collectgarbage()
    end
    local before = T.cuda.stats()
    for _ = 1, 50 do
      local _ = (x + 1):sum()
      collectgarbage()  -- results die at once, as in a steady loop; otherwise garbage piles up
    end
    local after = T.cuda.stats()
    expect.eq(after.driver_allocs, before.driver_allocs)
    expect.truthy(after.cache_hits > before.cache_hits)
    x = nil
    collectgarbage()
    T.cuda.empty_cache()
    expect.eq(T.cuda.stats().reserved, T.cuda.stats().in_use)
  end)
  it("collect dropped device tensors within the garbage budget, without a collection per op", function()
    need_gpu()
    -- 300 dropped 64 MiB results: Lua collects them about every 4 GiB (cuda::garbage_budget),
    -- so device memory in use stays bounded and the driver is asked for at most a budget's worth
    local x = T.randn(2 ^ 24):cuda()
    collectgarbage()
    local before, peak = T.cuda.stats(), 0
    for _ = 1, 300 do
      local _ = x + 1
      peak = math.max(peak, T.cuda.stats().in_use)
    end
    local after = T.cuda.stats()
    expect.truthy(peak - before.in_use <= (4 * 1024 + 128) * 2 ^ 20, "in use grew by " .. (peak - before.in_use))
    expect.truthy(after.driver_allocs - before.driver_allocs <= 72, "driver allocations " .. (after.driver_allocs - before.driver_allocs))
    expect.truthy(after.cache_hits - before.cache_hits >= 200, "cache hits " .. (after.cache_hits - before.cache_hits))
  end)
  it("hand dropped blocks out again before the cache holds a budget's worth (a collection per 64 MiB from the driver)", function()
    need_gpu()
    -- 100 dropped 16 MiB results on a fresh cache: without the driver-bytes rule each one was a
    -- cuMemAlloc until 4 GiB of them had piled up
    collectgarbage()
    T.cuda.empty_cache()
    local x = T.randn(2 ^ 22):cuda()
    local before = T.cuda.stats()
    for _ = 1, 100 do local _ = x + 1 end
    local after = T.cuda.stats()
    expect.truthy(after.driver_allocs - before.driver_allocs <= 40, "driver allocations " .. (after.driver_allocs - before.driver_allocs))
    expect.truthy(after.cache_hits - before.cache_hits >= 60, "cache hits " .. (after.cache_hits - before.cache_hits))
  end)
  it("raise a Lua error when device memory runs out, and keep working", function()
    need_gpu()
    errs(function() local _ = T.empty(2 ^ 41, { device = "cuda" }) end, "empty", "out of memory allocating", "on cuda:0")
    expect.eq(T.ones(2):cuda():cpu():totable(), { 1, 1 })
  end)
  it("time device work with T.bench and keep compiled functions correct", function()
    need_gpu()
    local x = T.randn(64, 64):cuda()
    local r = T.bench(function(v) return v * 2 end, { x }, { reps = 5 })
    expect.truthy(r.median_us > 0 and r.min_us <= r.max_us)
    r = T.bench(function(v) return v * 2 end, { x }, { reps = 5, batch = 8 })
    expect.truthy(r.median_us > 0 and r.min_us <= r.max_us)
    local f = T.compile(function(v) return (v * 2):relu():sum(-1) end)
    for _ = 1, 3 do expect.close(f(x):cpu(), (x:cpu() * 2):relu():sum(-1), 1e-5, 1e-5) end
  end)
  it("move modules with :to('cuda') and run them", function()
    need_gpu()
    local m = T.nn.Sequential(T.nn.Linear(4, 8), T.nn.GELU(), T.nn.LayerNorm(8))
    local x = T.randn(3, 4)
    local want = m(x)
    m:to("cuda")
    expect.eq(m[1].weight.device, "cuda:0")
    expect.close(m(x:cuda()):cpu(), want, 1e-5, 1e-6)
  end)
  it("compile fused graphs to CUDA kernels (NVRTC) with the CPU's results", function()
    need_gpu()
    T.compiler.reset()
    T.manual_seed(6)
    local x, b, w = T.randn(64, 300), T.randn(300), T.randn(300)
    local cases = {
      { "pw_chain", function(v) return T.sin((v + 1) * 2) end },
      { "bias_relu", function(v, bb) return T.relu(v + bb) end },
      { "softmax", function(v) return v:softmax(-1) end },
      { "layer_norm", function(v, bb, ww) return T.F.layer_norm(v, 300, ww, bb) end },
      { "sums", function(v) return v:sum(), v:sum(1), v:amax(2, true) end },
      { "transposed", function(v) return (v:t() * 3):exp():mean(2) end },
      { "with an extern", function(v, bb) return T.matmul((v + 1):relu(), bb:view(300, 1)):tanh() end },
    }
    local dx, db, dw = x:cuda(), b:cuda(), w:cuda()
    for _, c in ipairs(cases) do
      local f = T.compile(c[2])
      local want = { c[2](x, b, w) }
      for _ = 1, 3 do
        local got = { f(dx, db, dw) }
        for i = 1, #want do
          expect.eq(got[i].device, "cuda:0", c[1])
          expect.close(got[i]:cpu(), want[i], 1e-4, 1e-4)
        end
      end
    end
    local s = T.compiler.stats()
    expect.truthy(s.kernels_compiled + s.disk_cache_hits > 0, "no CUDA kernel was compiled")
    expect.eq(s.eager_fallbacks, 0)
  end)
  -- T.config.sync_compile = false, the default outside the specs: NVRTC and the module load run on
  -- the background thread (its own current context), every call meanwhile gives eager results
  it("compiles graphs in the background while they run on the eager kernels", function()
    need_gpu()
    expect.background_compile(function(t) return t:cuda() end, function(got, want, what)
      expect.eq(got.device, "cuda:0", what)
      expect.close(got:cpu(), want, 1e-5, 1e-5)
    end)
  end)
end)

-- Streams and events as PyTorch has them (jit/cuda/streams.hpp): the ordering cases queue a few
-- milliseconds of matrix products first, so a missing wait would let the other stream read the
-- buffer before it is written, and the memory case would get the pending block back.
describe("CUDA streams and events", function()
  local ffi = require "ffi"
  local function ptr(t) return tonumber(ffi.cast("intptr_t", t:data_ptr())) end
  -- ~100 ms of device work queued in a few host calls (the stream's pool is filled first, so that
  -- the products' results come from the cache: a driver allocation would take host time)
  local function busy(m) for _ = 1, 6 do local _ = m:matmul(m) end end
  local function big_matrix(s)
    local m = T.randn(8192, 8192, { device = "cuda" })
    T.cuda.stream(s, function() busy(m) end)
    T.cuda.synchronize()
    collectgarbage()
    return m
  end

  it("run eager ops, copies, matmul and compiled graphs on a stream, then restore the current one", function()
    need_gpu()
    local s = T.cuda.Stream()
    expect.eq(s.device, "cuda:0")
    expect.truthy(s ~= T.cuda.default_stream() and T.cuda.current_stream() == T.cuda.default_stream())
    expect.truthy(tostring(s):find("cuda stream %d+ of cuda:0"))
    local x = T.randn(64, 33)
    local xd = x:cuda()
    local f = T.compile(function(a) return (a * 2):sin():sum(2) end, { hot = 0 })
    s:wait_stream(T.cuda.current_stream())
    local y, z, m, h = T.cuda.stream(s, function()
      expect.eq(T.cuda.current_stream(), s)
      return (xd + 1):exp(), f(xd), xd:matmul(xd:t()), x:cuda():cpu()
    end)
    expect.eq(T.cuda.current_stream(), T.cuda.default_stream())
    T.cuda.current_stream():wait_stream(s)
    expect.close(y:cpu(), (x + 1):exp(), 1e-5, 1e-5)
    expect.close(z:cpu(), (x * 2):sin():sum(2), 1e-4, 1e-4)
    expect.close(m:cpu(), x:matmul(x:t()), 1e-4, 1e-4)
    expect.eq(h:totable(), x:totable())
    -- the previous stream comes back when the function raises
    expect.truthy(not pcall(T.cuda.stream, s, function() error("inside") end))
    expect.eq(T.cuda.current_stream(), T.cuda.default_stream())
    T.cuda.set_stream(s)
    expect.eq(T.cuda.current_stream(), s)
    T.cuda.set_stream(T.cuda.default_stream())
    -- a compiled function that switches streams breaks its graph there
    local g = T.compile(function(a)
      local b = a * 3
      return T.cuda.stream(s, function() return b + 1 end)
    end, { hot = 0 })
    local r = g(xd)
    s:synchronize()
    expect.close(r:cpu(), x * 3 + 1, 1e-5, 1e-5)
  end)

  it("order work across streams with wait_stream and with events", function()
    need_gpu()
    local s = T.cuda.Stream()
    local big = big_matrix()
    for _, how in ipairs({ "wait_stream", "event" }) do
      local buf = T.zeros(2 ^ 20, { device = "cuda" })
      T.cuda.synchronize()
      busy(big)
      buf:fill_(1)
      if how == "wait_stream" then s:wait_stream(T.cuda.current_stream())
      else s:wait_event(T.cuda.current_stream():record_event()) end
      local copy = T.cuda.stream(s, function() return buf:clone() end)
      expect.truthy(not T.cuda.current_stream():query(), "the products ended before the copy was queued: make busy() longer")
      s:synchronize()
      expect.truthy(s:query())
      expect.eq(copy:sum():item(), 2 ^ 20, how)
    end
  end)

  it("time work with events", function()
    need_gpu()
    local big = big_matrix()
    local a, b = T.cuda.Event({ enable_timing = true }), T.cuda.Event({ enable_timing = true })
    a:record()
    busy(big)
    b:record()
    b:synchronize()
    expect.truthy(b:query() and a:query())
    local ms = a:elapsed_time(b)
    expect.truthy(ms > 0.1 and ms < 10000, "elapsed " .. ms .. " ms")
    local untimed = T.cuda.Event()
    untimed:record()
    untimed:synchronize()
    errs(function() local _ = untimed:elapsed_time(b) end, "Event:elapsed_time", "both events must be created with {enable_timing = true}")
  end)

  it("hand a freed block to another stream only after the streams that used it (record_stream)", function()
    need_gpu()
    local s = T.cuda.Stream()
    local big = big_matrix(s)
    local x = T.ones(2 ^ 20, { device = "cuda" })
    local p = ptr(x)
    local _ = x * 2  -- (its kernel loaded now: loading a module waits for every stream)
    s:wait_stream(T.cuda.current_stream())
    local y = T.cuda.stream(s, function()
      busy(big)
      return x * 2  -- reads x on s, after the products
    end)
    x:record_stream(s)
    x = nil
    collectgarbage()
    local fresh = T.empty(2 ^ 20, { device = "cuda" })  -- the default stream, same size: not x's block yet
    expect.truthy(not s:query(), "the products ended before the check: make busy() longer")
    expect.truthy(ptr(fresh) ~= p, "x's block was handed out while stream s still read it")
    s:synchronize()
    fresh = nil
    collectgarbage()
    local again = T.empty(2 ^ 20, { device = "cuda" })
    expect.eq(ptr(again), p)  -- s's work has passed: the block is back in the default stream's pool
    T.cuda.current_stream():wait_stream(s)
    expect.eq(y:sum():item(), 2 ^ 21)
    -- blocks allocated on a stream return to that stream's pool
    local on_s = T.cuda.stream(s, function() return T.empty(3 * 2 ^ 18, { device = "cuda" }) end)
    local q = ptr(on_s)
    on_s = nil
    collectgarbage()
    expect.truthy(ptr(T.empty(3 * 2 ^ 18, { device = "cuda" })) ~= q)
    expect.eq(ptr(T.cuda.stream(s, function() return T.empty(3 * 2 ^ 18, { device = "cuda" }) end)), q)
  end)

  it("report a bad gather position at the synchronisation of the stream that ran it", function()
    need_gpu()
    local s = T.cuda.Stream()
    local src, idx = T.randn(4, 3):cuda(), T.tensor({ 1, 9 }):cuda()
    s:wait_stream(T.cuda.current_stream())
    T.cuda.stream(s, function() local _ = src:index_select(2, idx) end)
    errs(function() s:synchronize() end, "index_select", "index 9 is out of range for dim 2 of size 3")
    T.cuda.synchronize()  -- reported once
  end)
end)
