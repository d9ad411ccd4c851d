-- CUDA kernels beyond pointwise and reductions (jit/cuda/): gathers with their position checks,
-- extreme positions, random draws (the CPU's Philox numbers), the library kernels (cumsum, sort,
-- topk), fused attention with and without masks, fused layer_norm and cross_entropy's gradient,
-- each against the CPU. The device tensors, eager ops, memory and streams are in test_cuda.lua.
-- Every case needs a GPU and skips cleanly without one.
local T = require "crescent"

local errs = expect.error_checker("test_cuda_kernels.lua")
local need_gpu = expect.need_gpu
local with_cudnn_sdp = require "with_cudnn_sdp"

describe("CUDA kernels", function()
  it("index_copy_ / index_put_ with one index tensor write on the device; a bad index raises at the next sync", function()
    need_gpu()
    local h = T.cuda.stats().host_ops
    for _, dt in ipairs { "float32", "bfloat16", "int64", "bool" } do
      local x, v = (T.randn(2, 3, 7, 4) * 4):to(dt), (T.randn(2, 3, 2, 4) * 4):to(dt)
      local pos = T.tensor({ 6, 2 }):long()
      expect.eq(x:cuda():index_copy_(3, pos:cuda(), v:cuda()):cpu():totable(), x:clone():index_copy_(3, pos, v):totable(), dt)
      local row, at = x[2], T.tensor(1):long()  -- a 0-d index
      expect.eq(x:cuda():index_copy_(1, at:cuda(), row:cuda()):cpu():totable(), x:clone():index_copy_(1, at, row):totable(), dt)
      if dt ~= "bool" then
        local y, w = x:view(42, 4), (T.randn(3, 4) * 4):to(dt)
        local idx = T.tensor({ 5, 40, 5 }):long()  -- (accumulated: repeated positions add)
        expect.close(y:cuda():index_put_({ idx:cuda() }, w:cuda(), true):cpu():double(),
          y:clone():index_put_({ idx }, w, true):double(), 1e-2, 1e-2)
      end
    end
    expect.eq(T.cuda.stats().host_ops, h, "host ops")
    local x = T.zeros(2, 5, 3):cuda()
    x:index_copy_(2, T.tensor({ 9 }):long():cuda(), T.ones(2, 1, 3):cuda())
    expect.errors(function() T.cuda.synchronize() end, "index_put_: index 9 is out of range")
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
      ("test_cuda_kernels.lua:%d: index_select: index 17 is out of range for dim 2 of size 16"):format(line))
    expect.eq(T.embedding(T.tensor({ 50 }):long():cuda(), w):cpu():totable(), { w:cpu()[50]:totable() })
    for _ = 1, 3 do expect.close(f(x:cuda(), idx:cuda()):cpu(), want, 1e-5, 1e-5) end
  end)
  it("check the positions of an unused gather in a compiled graph, as eager does (issue 32, F15)", function()
    need_gpu()
    local fns = {
      function(x, i) local _ = x:index_select(1, i); return x + 1 end,
      function(x, i) local _ = x:gather(1, i:view(-1, 1):expand(-1, 3)); return x * 2 end,
      function(x, i) local _ = T.embedding(i:view(1, -1), x); return x - 1 end,
    }
    local x, good, bad = T.randn(5, 3):cuda(), T.tensor({ 2, 5 }):cuda(), T.tensor({ 1, 9 }):cuda()
    for k, fn in ipairs(fns) do
      errs(function() local _ = fn(x, bad):cpu() end, "cpu", "index 9 is out of range")
      local f = T.compile(fn)
      for _ = 1, 3 do expect.eq(f(x, good):cpu():totable(), fn(x, good):cpu():totable(), "case " .. k) end
      errs(function() local _ = f(x, bad):cpu() end, "cpu", "index 9 is out of range")
      expect.eq(f(x, good):cpu():totable(), fn(x, good):cpu():totable(), "case " .. k .. " after the error")
    end
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
  it("find the extremes of a few long rows over thread-block clusters: ties, NaN, -inf, eager and compiled", function()
    need_gpu()
    T.manual_seed(45)
    local fns = { function(t) return t:argmax(-1, true) end, function(t) return t:argmin(2) end,
      function(t) local v, i = t:max(2); return v, i end, function(t) return t:amax(-1) end,
      function(t) return t:argmax() end }
    for _, dt in ipairs { "float32", "int64", "bfloat16" } do
      local x = (T.randn(3, 50257) * 100):to(dt)
      x[1][40000], x[1][9001], x[1][50257] = 1e4, 1e4, 1e4  -- (a tie across blocks: the first position wins)
      x[2]:fill_(dt == "int64" and -2 ^ 62 or -math.huge)
      x[2][30000] = dt == "int64" and -2 ^ 62 or -math.huge
      if dt ~= "int64" then x[3][45000], x[3][12345] = 0 / 0, 0 / 0 end -- (the first NaN is the extreme)
      local d = x:cuda()
      for k, fn in ipairs(fns) do
        local f = T.compile(fn)
        local want = { fn(x) }
        for round = 1, 3 do
          for j, got in ipairs({ (round == 1 and fn or f)(d) }) do
            local a, b = got:cpu():double(), want[j]:double()
            expect.eq(a:eq(b):logical_or(a:ne(a):logical_and(b:ne(b))):all():item(), true,
              ("%s fn %d result %d round %d"):format(dt, k, j, round))
          end
        end
      end
    end
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
  it("run cumsum of long rows in one pass (look-back over tiles of 4096): odd sizes, many rows, every dtype", function()
    need_gpu()
    T.manual_seed(13)
    -- (just past a chunk, a tile +- 1, many tiles with a short last one, many rows of several tiles)
    for _, shape in ipairs({ { 16385 }, { 2, 4095 * 5 }, { 4097 * 9 }, { 1, 2 ^ 20 + 1 }, { 37, 20001 }, { 300, 16999 } }) do
      local x = T.randn(unpack(shape))
      local d = #shape
      expect.close(T.cumsum(x:cuda(), d):cpu(), T.cumsum(x, d), 1e-4, 1e-4, table.concat(shape, "x"))
      -- integers exact: every tile's carry reaches the end of its row
      local ints = (x * 1000):to("int64")
      expect.eq(T.cumsum(ints:cuda(), d):cpu():eq(T.cumsum(ints, d)):all():item(), true, "int64 " .. table.concat(shape, "x"))
    end
    local ones = T.ones(3, 2 ^ 21 + 3):to("int32")
    local got = T.cumsum(ones:cuda(), 2):cpu()
    expect.eq(got:eq(T.arange(1, 2 ^ 21 + 4):long():expand(3, 2 ^ 21 + 3)):all():item(), true, "ones")
    local bools = T.rand(2, 50001):lt(0.5)
    expect.eq(T.cumsum(bools:cuda(), 2):cpu():eq(T.cumsum(bools, 2)):all():item(), true, "bool")
    for _, dt in ipairs({ "float16", "bfloat16", "float64" }) do
      local h = T.randn(3, 30001):to(dt)
      expect.close(T.cumsum(h:cuda(), 2):cpu():double(), T.cumsum(h, 2):double(), 1e-2, 1e-2, dt)
    end
    -- under T.use_deterministic_algorithms floats take the chunked passes: the same bits every run
    T.use_deterministic_algorithms(true)
    local x = T.randn(2, 100003):double():cuda()
    local a, b = T.cumsum(x, 2):cpu(), T.cumsum(x, 2):cpu()
    T.use_deterministic_algorithms(false)
    expect.eq(a:eq(b):all():item(), true, "deterministic")
    expect.close(a, T.cumsum(x:cpu(), 2), 1e-9, 1e-9)
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
    -- a whole sort of lines longer than 4096: the radix sort (test_cuda_select.lua has more)
    same({ logits:cuda():sort(2, true) }, { logits:sort(2, true) }, "sort of 50257")
    same({ logits:cuda():topk(3000, 2, false) }, { logits:topk(3000, 2, false) }, "topk 3000 of 50257")
    local tall = (T.randn(9000, 3) * 4):round()
    same({ tall:cuda():sort(1) }, { tall:sort(1) }, "sort of columns of 9000, ties")
    expect.eq(T.cuda.stats().host_ops, host_ops)
  end)
  it("run attention as one fused kernel (tensor cores for 16-bit, FMA for float32): lengths, causal, layouts, graphs", function()
    need_gpu()
    with_cudnn_sdp(false, function()
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
      check(T.attention(q5:cuda(), k5:cuda(), k5:cuda(), nil, true), q5, k5, k5, 1 / math.sqrt(24), true,
            "head size 24, causal")
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
      -- (the first call runs as recorded)
      for _ = 1, 3 do expect.close(f(dq, dk, dv):cpu(), want:cpu(), 4e-3, 4e-3) end
      expect.eq(f(dq, dk, dv):cpu():totable(), want:cpu():totable(), "compiled pattern")
      -- (float32: 80 query rows, the tiled kernel; up to 8 the split kernel, 9 to 31 the composite)
      local fq, fk, fv = T.randn(2, 4, 80, 64):cuda(), dk:float(), dv:float()
      local want32 = T.attention(fq, fk, fv, 1 / 8)
      for _ = 1, 3 do expect.close(f(fq, fk, fv):cpu(), want32:cpu(), 1e-4, 1e-4) end
      expect.eq(f(fq, fk, fv):cpu():totable(), want32:cpu():totable(), "compiled float32 pattern")
      expect.eq(T.cuda.stats().host_ops, host_ops)
    end)
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
    -- the scale applied to q before the product (decoders' form): the same kernel
    local prescaled = T.compile(function(a, b, c, m)
      return T.matmul(T.matmul(a * 0.125, b:transpose(-2, -1)):masked_fill(m, -math.huge):softmax(-1), c)
    end)
    for _ = 1, 2 do expect.close(prescaled(q, k, v, blocked):cpu(), want_f:cpu(), 4e-3, 4e-3) end
    expect.eq(prescaled(q, k, v, blocked):cpu():totable(), want_f:cpu():totable(), "compiled pre-scaled pattern")
    expect.eq(plus(q, k, v, added):cpu():totable(), want_p:cpu():totable(), "compiled added-mask pattern")
    -- a mask over more than two batch dims: the composite on the device
    local q5, m5 = T.randn(2, 2, 2, 40, 16):half(), T.randn(2, 2, 2, 40, 40):half()
    local got = T.attention(q5:cuda(), q5:cuda(), q5:cuda(), nil, false, m5:cuda())
    expect.close(got:cpu():double(), T.attention(q5:double(), q5:double(), q5:double(), nil, false, m5:double()), 4e-3, 4e-3)
    expect.eq(T.cuda.stats().host_ops, host_ops)
  end)
  it("add into positions on the device (index_add, scatter_add, the gathers' gradients), checking them there", function()
    need_gpu()
    local h = T.cuda.stats().host_ops
    for _, dt in ipairs { "float32", "float64", "int32", "int64", "bool", "float16", "bfloat16" } do
      local floating = dt:match("float") ~= nil
      local x = (T.randn(6, 9) * 4):to(dt)
      local src = (T.randn(6, 5) * 4):to(dt)
      local cols = T.tensor({ 9, 1, 3, 3, 1 }):long() -- repeated positions collide
      local sidx = T.randint(1, 7, { 4, 5 }):long()
      local alpha = floating and 0.5 or 2
      local cases = {
        { x:cuda():index_add(2, cols:cuda(), src:cuda(), { alpha = alpha }), x:index_add(2, cols, src, { alpha = alpha }) },
        { x:t():cuda():index_add(1, cols:cuda(), src:t():cuda()), x:t():index_add(1, cols, src:t()) }, -- strided
        { x:cuda():scatter_add(1, sidx:cuda(), src:cuda()), x:scatter_add(1, sidx, src) },
        { x:cuda():index_add_(2, cols:int():cuda(), src:cuda()), x:clone():index_add_(2, cols:int(), src) },
      }
      for i, c in ipairs(cases) do
        expect.eq({ c[1].device, c[1].dtype, c[1].shape }, { "cuda:0", dt, c[2].shape }, dt .. " case " .. i)
        -- (colliding float additions run in no fixed order: their last bits may differ)
        local tol = dt == "float32" and 1e-5 or (dt:match("16") and 2e-2 or 0)
        expect.close(c[1]:cpu():double(), c[2]:double(), tol, tol, dt .. " case " .. i)
      end
    end
    -- embedding's gradient adds the rows of its output's gradient on the device
    local w = T.randn(50, 8, { requires_grad = true })
    local dw = w:detach():cuda():requires_grad_()
    local ids = T.tensor({ { 3, 9, 3 }, { 50, 1, 3 } }):long()
    T.embedding(ids, w):mul(T.arange(1, 49):view(2, 3, 8)):sum():backward()
    T.embedding(ids:cuda(), dw):mul(T.arange(1, 49):view(2, 3, 8):cuda()):sum():backward()
    expect.close(dw.grad:cpu(), w.grad, 1e-6, 1e-6)
    expect.eq(T.cuda.stats().host_ops, h, "ops on host copies")
    -- a bad position adds nothing, and raises at the next synchronisation, naming the op
    local y = T.zeros(4, 3):cuda():index_add(1, T.tensor({ 2, 5 }):long():cuda(), T.ones(2, 3):cuda())
    errs(function() local _ = y:cpu() end, "cpu", "index_add: index 5 is out of range for dim 1 of size 4 (expected 1..4)",
      "found by a CUDA kernel that ran before this synchronisation")
    expect.eq(y:cpu():totable(), { { 0, 0, 0 }, { 1, 1, 1 }, { 0, 0, 0 }, { 0, 0, 0 } })
  end)
  it("run layer_norm forward and backward as fused kernels: every floating dtype, the CPU's values, deterministic", function()
    need_gpu()
    local h = T.cuda.stats().host_ops
    -- (rows of 768, 1024 and 40: a warp a row; of 5, 1200, 1 and 33: a block a row)
    local shapes = { { { 8, 64, 768 }, { 768 } }, { { 37, 5 }, { 5 } }, { { 3, 4, 300 }, { 4, 300 } }, { { 2, 1 }, { 1 } },
                     { { 1000, 33 }, { 33 } }, { { 0, 16 }, { 16 } }, { { 5, 1024 }, { 1024 } }, { { 70, 40 }, { 40 } } }
    for _, dt in ipairs { "float32", "float64", "float16", "bfloat16" } do
      local tol = dt == "float64" and 1e-10 or (dt == "float32" and 1e-4 or 3e-2)
      for si, s in ipairs(shapes) do
        local x, w, b = (T.randn(s[1]) * 2 + 0.5):to(dt), T.randn(s[2]):to(dt), T.randn(s[2]):to(dt)
        local go = T.randn(s[1]):to(dt)
        local function run(dev, with_w, with_b)
          local xr = x:clone():to(dev):requires_grad_()  -- (a fresh leaf each run, on the CPU too)
          local wr = with_w and w:clone():to(dev):requires_grad_() or nil
          local br = with_b and b:clone():to(dev):requires_grad_() or nil
          local y = T.F.layer_norm(xr, s[2], wr, br)
          y:backward(go:to(dev))
          return { y:detach():cpu():double(), xr.grad:cpu():double(), wr and wr.grad:cpu():double(), br and br.grad:cpu():double() }
        end
        for _, wb in ipairs { { true, true }, { false, false }, { true, false }, { false, true } } do
          local want, got = run("cpu", wb[1], wb[2]), run("cuda", wb[1], wb[2])
          local what = string.format("%s shape %d weight %s bias %s", dt, si, tostring(wb[1]), tostring(wb[2]))
          expect.close(got[1], want[1], tol, tol, what .. " out")
          expect.close(got[2], want[2], tol, tol, what .. " grad input")
          -- (the column sums of 16-bit gradients round once from float32: a looser bound)
          local ctol = dt:match("16") and 1e-1 or tol * 10
          if got[3] then expect.close(got[3], want[3], ctol, ctol, what .. " grad weight") end
          if got[4] then expect.close(got[4], want[4], ctol, ctol, what .. " grad bias") end
          local again = run("cuda", wb[1], wb[2])
          for i = 1, 4 do
            if got[i] then expect.eq(again[i]:totable(), got[i]:totable(), what .. " deterministic " .. i) end
          end
        end
      end
    end
    expect.eq(T.cuda.stats().host_ops, h, "ops on host copies")
    -- mean / rstd on the device, float32 for 16-bit inputs; double backward takes the composition
    local x = T.randn(4, 32):cuda()
    local _, mean, rstd = T._layer_norm(x:half(), { 32 })
    expect.eq({ mean.device, mean.dtype, rstd.shape }, { "cuda:0", "float32", { 4, 1 } })
    local xc = T.randn(3, 8, { dtype = "float64" })
    local function dd(dev)
      local xr = xc:clone():to(dev):requires_grad_()
      local g = T.autograd.grad(T.F.layer_norm(xr, 8):pow(3):sum(), { xr }, nil, { create_graph = true })[1]
      g:square():sum():backward()
      return xr.grad:cpu()
    end
    expect.close(dd("cuda"), dd("cpu"), 1e-9, 1e-9)
  end)
  it("reduce 0-d tensors on the device, every dtype", function()
    need_gpu()
    local h = T.cuda.stats().host_ops
    for _, dt in ipairs { "float32", "float64", "float16", "bfloat16", "int64", "bool" } do
      local x = T.tensor(dt == "bool" and 1 or -2.5):to(dt)
      local dx = x:cuda()
      for i, fn in ipairs { function(t) return t:sum() end, function(t) return t:amax(1, true) end,
                            function(t) return t:prod() end, function(t) return t:argmax() end, function(t) return t:all() end } do
        local got, want = fn(dx), fn(x)
        expect.eq({ got.dtype, got.shape, tostring(got:cpu()) }, { want.dtype, want.shape, tostring(want) }, dt .. " case " .. i)
      end
    end
    expect.eq(T.cuda.stats().host_ops, h, "ops on host copies")
  end)
  it("run cross_entropy's gradient as one fused kernel: options, spatial targets, every floating dtype", function()
    need_gpu()
    local h = T.cuda.stats().host_ops
    local opts = { {}, { reduction = "sum" }, { reduction = "none" }, { ignore_index = 3, label_smoothing = 0.1 },
                   { weight = true, ignore_index = 2, label_smoothing = 0.2 }, { weight = true, reduction = "none" } }
    local shapes = { { { 64, 1000 }, { 64 } }, { { 7 }, {} }, { { 3, 5, 4, 2 }, { 3, 4, 2 } }, { { 5, 9000 }, { 5 } } }
    for _, dt in ipairs { "float32", "float64", "float16", "bfloat16" } do
      local tol = dt == "float64" and 1e-10 or (dt == "float32" and 1e-5 or 2e-2)
      for si, s in ipairs(shapes) do
        local C = s[1][#s[1] == 1 and 1 or 2]
        local x = (T.randn(s[1]) * 3):to(dt)
        local t = #s[2] == 0 and T.tensor(3, { dtype = "int64" }) or T.randint(1, C + 1, s[2])
        local cw = (T.rand(C) + 0.5):to(dt)
        for oi, o in ipairs(opts) do
          local function run(dev)
            local oo = {}
            for kk, v in pairs(o) do oo[kk] = v end
            if o.weight then oo.weight = cw:to(dev) end
            local xr = x:clone():to(dev):requires_grad_()
            local l = T.F.cross_entropy(xr, t:to(dev), oo)
            ;(l:dim() > 0 and (l:float() * T.arange(1, l:numel() + 1):view(l.shape):float():to(dev)):sum() or l):backward()
            return l:detach():cpu():double(), xr.grad:cpu():double()
          end
          local l1, g1 = run("cpu")
          local l2, g2 = run("cuda")
          local what = string.format("%s shape %d options %d", dt, si, oi)
          expect.close(l2, l1, tol * 10, tol * 10, what .. " loss")
          expect.close(g2, g1, tol, tol, what .. " grad")
        end
      end
    end
    expect.eq(T.cuda.stats().host_ops, h, "ops on host copies")
  end)
  it("run cross_entropy of 16-bit scores in float32 (autocast's) without a float32 copy of them", function()
    need_gpu()
    -- (9000 classes: two blocks a row in the gradient, groups of vectors, a head and a tail)
    local shapes = { { { 64, 1000 }, { 64 } }, { { 3, 9000 }, { 3 } }, { { 3, 5, 4, 2 }, { 3, 4, 2 } }, { { 6, 3 }, { 6 } } }
    for _, low in ipairs { "bfloat16", "float16" } do
      for si, s in ipairs(shapes) do
        local C = s[1][2]
        local x = (T.randn(s[1]) * 4):to(low)
        if si == 4 then  -- masked scores: -inf in a row, and a row of -inf but the target
          x[1][2], x[2][1], x[2][3] = -math.huge, -math.huge, -math.huge
        end
        local t = si == 4 and T.tensor({ 1, 2, 3, 1, 2, 3 }) or T.randint(1, C + 1, s[2])
        local cw = T.rand(C) + 0.5
        for oi, o in ipairs { { nil, -100, 0, "mean" }, { true, 3, 0.1, "sum" }, { nil, 2, 0, "none" } } do
          local function run(dev)
            local xr = x:clone():to(dev):requires_grad_()
            local l = T._cross_entropy(xr, t:to(dev), o[1] and cw:to(dev) or nil, o[2], o[3], o[4], "float32")
            ;(l:dim() > 0 and (l * T.arange(1, l:numel() + 1):view(l.shape):float():to(dev)):sum() or l):backward()
            return l, xr.grad
          end
          local l1, g1 = run("cpu")
          local l2, g2 = run("cuda")
          local what = string.format("%s shape %d options %d", low, si, oi)
          expect.eq({ l2.dtype, g2.dtype }, { "float32", low }, what)
          expect.close(l2:cpu(), l1, 1e-5, 1e-5, what .. " loss")
          expect.close(g2:cpu():float(), g1:float(), 1e-2, 1e-2, what .. " grad")
        end
      end
    end
    -- scores starting 2 bytes past a 16-byte boundary (a row of odd length in) and their fresh
    -- gradient aligned: the rows' kernel stores at the scores' offsets, so the general one runs
    for _, low in ipairs { "bfloat16", "float16" } do
      local big, t = (T.randn(8, 9001) * 4):to(low), T.randint(1, 9002, { 7 })
      local function run(dev)
        local xr = big:to(dev):narrow(1, 2, 7):detach():requires_grad_()
        local l = T._cross_entropy(xr, t:to(dev), nil, -100, 0.1, "sum", "float32")
        l:backward()
        return l, xr.grad
      end
      local l1, g1 = run("cpu")
      local l2, g2 = run("cuda")
      expect.close(l2:cpu(), l1, 1e-5, 1e-5, low .. " offset scores loss")
      expect.close(g2:cpu():float(), g1:float(), 1e-2, 1e-2, low .. " offset scores grad")
    end
    -- a large 16-bit gradient whose rows are off 16 bytes comes in rows padded to 16 bytes
    -- (9001 classes: rows start at every 2-byte offset), so the head's products run in place
    for _, low in ipairs { "bfloat16", "float16" } do
      local x, t = (T.randn(128, 9001) * 4):to(low), T.randint(1, 9002, { 128 })
      local function run(dev)
        local xr = x:clone():to(dev):requires_grad_()
        local l = T._cross_entropy(xr, t:to(dev), nil, -100, 0.1, "mean", "float32")
        return l, T.autograd.grad(l, { xr })[1]
      end
      local l1, g1 = run("cpu")
      local l2, g2 = run("cuda")
      expect.eq(g2:stride(), { 9008, 1 }, low .. " padded rows")
      expect.close(l2:cpu(), l1, 1e-5, 1e-5, low .. " padded rows loss")
      expect.close(g2:cpu():float(), g1:float(), 1e-2, 1e-2, low .. " padded rows grad")
    end
    -- under autocast F.cross_entropy passes dtype = "float32": the scores' gradient stays 16-bit
    local w = T.randn(50, 16, { device = "cuda", requires_grad = true })
    local h = T.randn(8, 16, { device = "cuda" })
    local l = T.autocast("cuda", { dtype = "bfloat16" }, function()
      return T.F.cross_entropy(T.F.linear(h, w), T.randint(1, 51, { 8 }):cuda())
    end)
    expect.eq(l.dtype, "float32")
    expect.eq(tostring(l.grad_fn), "<CrossEntropyBackward>")
    l:backward()
    expect.eq(w.grad.dtype, "float32")
  end)
  it("trains a 50257-token head under 16-bit autocast: its gradients as float32 computes them", function()
    need_gpu()
    T.manual_seed(23)
    local h, w, t = T.randn(128, 768):cuda(), (T.randn(50257, 768) * 0.05):cuda(), T.randint(1, 50258, { 128 }):cuda()
    for _, low in ipairs { "bfloat16", "float16" } do
      local hr, wr = h:clone():requires_grad_(), w:clone():requires_grad_()
      local l = T.autocast("cuda", { dtype = low }, function() return T.F.cross_entropy(T.F.linear(hr, wr), t) end)
      l:backward()
      -- the reference: the same 16-bit values in float32
      local hf, wf = h:to(low):float():requires_grad_(), w:to(low):float():requires_grad_()
      local lf = T.F.cross_entropy(T.F.linear(hf, wf), t)
      lf:backward()
      expect.close(l:cpu(), lf:cpu(), 1e-2, 1e-2, low .. " loss")
      for _, p in ipairs { { hr.grad, hf.grad, "input" }, { wr.grad, wf.grad, "weight" } } do
        local want = p[2]:cpu():double()
        expect.close(p[1]:cpu():double(), want, 0, 2e-2 * want:abs():max():item(), low .. " " .. p[3] .. " grad")
      end
    end
  end)
  it("update parameters with the fused optimizer kernels: the CPU's results bit for bit in float32", function()
    need_gpu()
    local shapes = { { 300, 7 }, { 4097 }, { 3 }, { 1 }, { 2, 3, 4 } }
    local function run(device, dtype, make, steps)
      T.manual_seed(7)
      local ps = {}
      for i, s in ipairs(shapes) do ps[i] = T.randn(s):to(dtype):to(device):requires_grad_() end
      for _ = 1, 60 do ps[#ps + 1] = T.randn(5):to(dtype):to(device):requires_grad_() end -- past 48 a launch
      local opt = make(ps)
      for k = 1, steps do
        for i, p in ipairs(ps) do p.grad = (T.randn(p.shape) * k + i):to(dtype):to(device) end
        opt:step()
      end
      local out = {}
      for i, p in ipairs(ps) do out[i] = p:detach():cpu() end
      return out
    end
    local makers = {
      adamw = function(ps) return T.optim.AdamW(ps, { lr = 1e-2, weight_decay = 0.1 }) end,
      adam = function(ps) return T.optim.Adam(ps, { lr = 1e-2, weight_decay = 0.01, amsgrad = true }) end,
      sgd = function(ps) return T.optim.SGD(ps, { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 1e-3 }) end,
      sgd_plain = function(ps) return T.optim.SGD(ps, { lr = 0.1, maximize = true }) end,
    }
    for name, make in pairs(makers) do
      for _, dt in ipairs { "float32", "float64", "bfloat16" } do
        local want, got = run("cpu", dt, make, 4), run("cuda", dt, make, 4)
        for i = 1, #want do
          if dt == "bfloat16" then expect.close(got[i]:float(), want[i]:float(), 1e-2, 1e-2, name .. " " .. i)
          else expect.eq(got[i]:totable(), want[i]:totable(), name .. " " .. dt .. " param " .. i) end
        end
      end
    end
    -- one fused call per device; a list mixing devices is refused by the op
    local a, b = T.ones(3), T.ones(3):cuda()
    errs(function() T._fused_sgd({ a, b }, { a, b }, {}, { 0, 0 }, { lr = 1 }) end, "_fused_sgd",
      "param 2 expected param 1's device cpu, got cuda:0")
  end)
  it("16-bit products with dims or rows off a multiple of 8 (a 50257 vocabulary): the same values", function()
    need_gpu()
    T.manual_seed(22)
    for _, dt in ipairs { "bfloat16", "float16" } do
      local cx, cw = T.randn(256, 768):to(dt):cuda(), (T.randn(50257, 768) * 0.05):to(dt):cuda()
      local cg = T.randn(256, 50257):to(dt):cuda()
      -- the reference: float32 products on the device from the same 16-bit values (exact products)
      local x, w, g = cx:float(), cw:float(), cg:float()
      local function near(got, want, what)
        expect.close(got:cpu():double(), want:cpu():double(), 0.03, 0.02, dt .. " " .. what)
      end
      near(T.matmul(cx, cw:t()), T.matmul(x, w:t()), "N odd")
      near(T.matmul(cg, cw), T.matmul(g, w), "K odd")
      near(T.matmul(cg:t(), cx), T.matmul(g:t(), x), "M odd, transposed")
      near(T.matmul(cx:narrow(2, 2, 767), cw:narrow(2, 2, 767):t()),
        T.matmul(x:narrow(2, 2, 767), w:narrow(2, 2, 767):t()), "rows off 16 bytes")
      -- rows of a wider buffer, 16-byte aligned, NaN past them: in place over the dims rounded
      -- down to 8 plus thin products for the rest, with or without a copied operand beside
      local wide = T.full({ 256, 50264 }, 0 / 0, { dtype = dt, device = "cuda" })
      local gv = wide:narrow(2, 1, 50257):copy_(cg)
      near(T.matmul(gv, cw), T.matmul(g, w), "K odd, aligned rows")
      near(T.matmul(gv:t(), cx), T.matmul(g:t(), x), "M odd, aligned rows")
      near(T.matmul(gv, cw:narrow(2, 2, 767)), T.matmul(g, w:narrow(2, 2, 767)),
        "K odd, aligned rows beside rows off 16 bytes")
    end
  end)
  it("compiled column sums that also store their fused element-wise values (bias gradients), and column softmax", function()
    need_gpu()
    T.manual_seed(21)
    -- (a bias gradient beside gelu's backward in the storage dtype; few, many and ragged columns)
    local f = T.compile(function(a, b)
      local y = a:float() * T.sigmoid(b)
      return y:to(a.dtype), y:sum(1), T.softmax(b, 1)
    end, { hot = 0 })
    -- (8192 x 768 and 5000 x 37: blocks share the columns, each a slice of the rows)
    for _, c in ipairs { { 4096, 3072, "bfloat16" }, { 768, 4096, "float32" }, { 333, 70, "float32" }, { 70, 333, "bfloat16" },
                         { 8192, 768, "bfloat16" }, { 5000, 37, "float32" } } do
      local a, b = T.randn(c[1], c[2]):to(c[3]), T.randn(c[1], c[2])
      local y, s, p = f(a:cuda(), b:cuda())
      local _, s2 = f(a:cuda(), b:cuda())  -- (compiled calls both: the first may have run eagerly)
      local _, s3 = f(a:cuda(), b:cuda())
      expect.close(s3:cpu(), s2:cpu(), 0, 0)  -- the same sums, bit for bit
      local wy = a:double() * T.sigmoid(b:double())
      local tol = c[3] == "bfloat16" and 1e-2 or 1e-5
      local what = ("%d x %d %s"):format(c[1], c[2], c[3])
      expect.close(y:cpu():double(), wy:to(c[3]):double(), tol, tol, what .. " values")
      expect.close(s:cpu():double(), wy:sum(1), 1e-4 * math.sqrt(c[1]), 1e-4, what .. " column sums")
      expect.close(p:cpu():double(), T.softmax(b:double(), 1), 1e-6, 1e-5, what .. " column softmax")
    end
  end)
end)
