-- CUDA tensors (vm/devices.hpp, jit/cuda/): device memory, copies in both directions for every
-- dtype and for views, ops on CUDA tensors (generated kernels; the few without one run on host copies),
-- the caching allocator, out-of-memory, device errors, T.bench's device timer (gathers, random
-- draws, library kernels and attention: test_cuda_kernels.lua). Every case that
-- needs a GPU skips cleanly without one; the errors of a machine without CUDA are checked here.
local T = require "crescent"

local errs = expect.error_checker("test_cuda.lua")
local GPU = T.cuda.is_available()
local need_gpu = expect.need_gpu

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
  it("count no device memory", function()
    if GPU then expect.skip("a CUDA device is present") end
    T.cuda.reset_peak_memory_stats()
    expect.eq({ T.cuda.memory_allocated(), T.cuda.memory_reserved(), T.cuda.max_memory_allocated(),
                T.cuda.max_memory_reserved() }, { 0, 0, 0, 0 })
    errs(function() T.cuda.memory_allocated("gpu") end, "cuda", 'expected a device index or "cuda:N", got gpu')
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
  it("fills a strided view of every dtype on the device, writing only the view", function()
    need_gpu()
    local h0 = T.cuda.stats().host_ops
    for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" }) do
      for _, v in ipairs(dt == "bool" and { 1 } or { 0, -3, 7 }) do
        local want = T.arange(20):reshape(4, 5):to(dt)
        local d = want:cuda()
        for _, pick in ipairs({ function(x) return x:t():narrow(1, 2, 3) end, function(x) return x:narrow(2, 5, 1) end,
          function(x) return x:view(-1):narrow(1, 3, 12):view(3, 4):narrow(2, 2, 2) end }) do
          pick(want):fill_(v)
          pick(d):fill_(v)
          expect.eq(d:cpu():totable(), want:totable(), dt .. " " .. v)
        end
      end
    end
    expect.eq(T.cuda.stats().host_ops, h0, "host copies")
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
      -- vectors (the GEMV's few rows; a dot product's result has no dims)
      { T.randn(9), T.randn(9) }, { T.randn(9), T.randn(9, 5) }, { T.randn(3, 9), T.randn(9) },
      { T.randn(2, 3, 9), T.randn(9) },
    }
    for i, c in ipairs(cases) do
      for _, dt in ipairs({ "float32", "float64", "int64" }) do
        local a, b = c[1]:mul(3):to(dt), c[2]:mul(3):to(dt)
        local got = T.matmul(a:cuda(), b:cuda())
        expect.eq(got.device, "cuda:0")
        expect.close(got:cpu(), T.matmul(a, b), 1e-5, 1e-4)
      end
    end
    -- heads split off one projection: the batch steps by head within an entry, unevenly across
    -- entries (a strided-batched call per entry)
    local qkv = T.randn(2, 5, 36) * 3
    for _, dt in ipairs({ "float32", "float64" }) do
      local h, dh = qkv:to(dt), qkv:to(dt):cuda()
      local function heads(t, i) return t:narrow(3, 12 * (i - 1) + 1, 12):reshape(2, 5, 3, 4):transpose(2, 3) end
      expect.close(T.matmul(heads(dh, 1), heads(dh, 2):transpose(-2, -1)):cpu(),
        T.matmul(heads(h, 1), heads(h, 2):transpose(-2, -1)), 1e-5, 1e-4)
      local m = T.randn(3, 4, 2):to(dt)
      expect.close(T.matmul(heads(dh, 3), m:cuda()):cpu(), T.matmul(heads(h, 3), m), 1e-5, 1e-4)
      local m2 = T.randn(2, 4, 2):to(dt)  -- (batch {3, 2} against {2})
      expect.close(T.matmul(heads(dh, 3):transpose(1, 2), m2:cuda()):cpu(), T.matmul(heads(h, 3):transpose(1, 2), m2), 1e-5, 1e-4)
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
  -- eager kernels are size-generic (jit/cuda/eager.cpp: templates, as a dynamic graph's): tensors of
  -- new sizes compile no new modules, and past 64 sizes an op still runs on the device
  it("take tensors of new sizes without new kernels", function()
    need_gpu()
    require("crescent.core").api.wait_compiles()  -- (earlier cases' specialised kernels: below)
    local h, m0 = T.cuda.stats().host_ops, nil
    for k = 1, 100 do
      local x = T.randn(k, (k * 7) % 300 + 2)
      local dx = x:cuda()
      expect.close((dx * 2 + 1):cpu(), x * 2 + 1, 1e-6, 1e-6, "x * 2 + 1 at " .. k)
      expect.close(dx:sum(-1):cpu(), x:sum(-1), 1e-5, 1e-5, "sum at " .. k)
      expect.close(dx:softmax(-1):cpu(), x:softmax(-1), 1e-6, 1e-6, "softmax at " .. k)
      if k == 10 then m0 = T.cuda.stats().modules_compiled end
    end
    expect.eq(T.cuda.stats().modules_compiled, m0, "modules compiled after the first 10 sizes")
    expect.eq(T.cuda.stats().host_ops, h, "ops that ran on host copies")
    -- a size called often gets kernels specialised to it (compiled in the background, taken
    -- between two calls): the values stay the eager ones throughout
    local x = T.randn(37, 300)
    local dx = x:cuda()
    for k = 1, 40 do
      if k == 20 then require("crescent.core").api.wait_compiles() end
      expect.close((dx * 2 + 1):cpu(), x * 2 + 1, 1e-6, 1e-6, "x * 2 + 1, call " .. k)
      expect.close(dx:softmax(-1):cpu(), x:softmax(-1), 1e-6, 1e-6, "softmax, call " .. k)
    end
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
      function(v) local lo, hi = v:aminmax({ dim = 2 }); local a, b = v:t():aminmax(); return lo, hi, a, b end,
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
  -- A chain rounds to 16 bits after each op, as eager does; vector groups convert their lanes in
  -- pairs (jit/cuda/pointwise.cpp), other kernels one by one: the same bits either way.
  it("round 16-bit chains after each op: compiled == eager == the CPU, bit for bit", function()
    need_gpu()
    local function gelu(x) return 0.5 * x * (1 + T.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) end
    local function arith(x, y) return ((x * 3 + y) * (x - 0.1) + 1000) / (y + 2.5) end
    T.manual_seed(17)
    for _, dt in ipairs({ "float16", "bfloat16" }) do
      -- paired lanes (rows of 256), single lanes (rows of 37), a transposed operand
      for _, case in ipairs({ { 64, 256 }, { 33, 37 }, { 64, 256, t = true } }) do
        local base = T.randn(case[1], case[2]) * 4
        local special = { 1 / 0, -1 / 0, 0 / 0, 6e4, -6e4, 3e38, 1e-6, -1e-7, 1e-39, 0, -0.0, 65504 }
        for i, v in ipairs(special) do base:view(-1):narrow(1, i, 1):fill_(v) end
        local x, y = base:to(dt), T.randn(case[1], case[2]):to(dt)
        if case.t then x, y = x:t(), T.randn(case[2], case[1]):to(dt) end
        local dx, dy = x:cuda(), y:cuda()
        for name, f in pairs({ gelu = gelu, arith = arith }) do
          local what = ("%s %s %dx%d%s"):format(dt, name, case[1], case[2], case.t and " transposed" or "")
          local cf, got = T.compile(f), nil
          for _ = 1, 3 do got = cf(dx, dy) end
          local eager = f(dx, dy)
          expect.close(got:cpu(), eager:cpu(), 0, 0, what .. ": compiled against eager")
          if name == "arith" then expect.close(eager:cpu(), f(x, y), 0, 0, what .. ": the device against the CPU") end
        end
      end
    end
  end)
  it("refuse tensors of two devices in one op, as PyTorch", function()
    need_gpu()
    errs(function() local _ = T.ones(3):cuda() + T.ones(3) end, "add", "expected all tensors on one device, got cpu and cuda:0")
    errs(function() local _ = T.ones(3):to("cuda:9") end, "to", 'device "cuda:9": this machine has ', "CUDA device")
  end)
  -- (on sm_90 the first launch asks every device whether it may overlap launches: asking must not
  -- leave another device's context current, which made every launch fail on 2-GPU machines)
  it("run kernels on every device, switching between them, with the CPU's results", function()
    need_gpu()
    local n = T.cuda.device_count()
    if n < 2 then expect.skip("one CUDA device: nothing to switch between") end
    T.manual_seed(9)
    local x = T.randn(64, 33)
    local want = ((x * 2):exp() + 1):sum(2)
    for _, d in ipairs({ 0, n - 1, 0, 1 }) do
      local got = ((x:to("cuda:" .. d) * 2):exp() + 1):sum(2)
      expect.eq(got.device, "cuda:" .. d)
      expect.close(got:cpu(), want, 1e-5, 1e-5, "device " .. d)
    end
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
    -- (segments partly in use stay: reserved >= in use)
    expect.truthy(T.cuda.stats().reserved >= T.cuda.stats().in_use)
  end)
  it("count memory as torch.cuda does: allocated, reserved, their peaks; empty_cache gives segments back", function()
    need_gpu()
    collectgarbage()
    T.cuda.empty_cache()
    local mib = 2 ^ 20
    local r0, a0 = T.cuda.memory_reserved(), T.cuda.memory_allocated()
    T.cuda.reset_peak_memory_stats()
    expect.eq(T.cuda.max_memory_allocated(), a0)
    local big = T.empty(2 ^ 24, { device = "cuda" })  -- 64 MiB
    local grew = T.cuda.memory_allocated() - a0
    expect.truthy(grew >= 64 * mib and grew <= 65 * mib, "allocated grew by " .. grew)
    local a1 = T.cuda.memory_allocated()
    big = nil
    collectgarbage()
    expect.eq(T.cuda.memory_allocated(), a0)
    local peak = T.cuda.max_memory_allocated()
    expect.truthy(peak >= a1 and peak <= a1 + mib, "peak " .. peak .. ", allocated " .. a1)
    expect.truthy(T.cuda.max_memory_reserved() >= T.cuda.memory_reserved())
    -- a freed 64 MiB block serves two 30 MiB tensors: no new segment
    local held = T.cuda.memory_reserved()
    local a, b = T.empty(30 * 2 ^ 18, { device = "cuda" }), T.empty(30 * 2 ^ 18, { device = "cuda" })
    expect.eq(T.cuda.memory_reserved(), held)
    a, b = nil, nil
    collectgarbage()
    T.cuda.empty_cache()
    expect.eq(T.cuda.memory_reserved(), r0)
    expect.eq(T.cuda.stats().peak_reserved, T.cuda.max_memory_reserved())
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

-- Streams and events as PyTorch has them (vm/cuda/streams.hpp): the ordering cases queue a few
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
