-- CUDA graphs (issue 38): mode = "reduce-overhead" on CUDA records a proven plan into a CUDA
-- graph and replays it with one launch; T.cuda.CUDAGraph / T.cuda.graph capture by hand. Every
-- case checks that a graph was recorded (so a host replay cannot pass for one) and compares
-- against the same ops run eagerly. Skipped without a GPU.
local T = require "crescent"
local S = expect

local function stats() return T.compiler.stats() end

-- fn compiled with reduce-overhead and called with args() until a call launched a CUDA graph.
local function graphed(fn, args)
  local f = T.compile(fn, { mode = "reduce-overhead" })
  for _ = 1, 12 do
    local r0 = stats().cudagraph_replays
    f(args())
    T.compiler.wait()
    if stats().cudagraph_replays == r0 + 1 then return f end
  end
  error("the function was never replayed from a CUDA graph", 2)
end

local function same(got, want, msg) S.close(got:cpu(), want:cpu(), 1e-6, 1e-6, msg) end

describe("reduce-overhead records CUDA graphs", function()
  it("replays with new argument values (copied into the graph's buffers)", function()
    S.need_gpu()
    local w = T.randn({ 16, 16 }):cuda()
    local fn = function(x, y) return (x:matmul(w) + y):relu() * 2, (x - y):sum(-1) end
    local f = graphed(fn, function() return T.randn({ 8, 16 }):cuda(), T.randn({ 8, 16 }):cuda() end)
    for _ = 1, 5 do
      local x, y = T.randn({ 8, 16 }):cuda(), T.randn({ 8, 16 }):cuda()
      local r0, c0 = stats().cudagraph_replays, T.cuda.stats()
      local a, b = f(x, y)
      local c1 = T.cuda.stats()
      S.eq(stats().cudagraph_replays, r0 + 1)
      -- one graph launch: its nodes counted, no kernel or cuBLAS call launched from the host
      S.eq({ c1.graph_launches - c0.graph_launches, c1.kernel_launches - c0.kernel_launches, c1.blas_calls - c0.blas_calls },
        { 1, 0, 0 }, "work queued by the replay")
      S.truthy(c1.graph_nodes - c0.graph_nodes >= 2, ("the graph's nodes (a matmul and a kernel at least): %d")
        :format(c1.graph_nodes - c0.graph_nodes))
      local ea, eb = fn(x, y)
      same(a, ea)
      same(b, eb)
    end
  end)

  it("keeps a replay's results valid after the next replay", function()
    S.need_gpu()
    local f = graphed(function(x) return x * 3 + 1 end, function() return T.ones(64):cuda() end)
    local r1 = f(T.full({ 64 }, 1):cuda())
    local r2 = f(T.full({ 64 }, 2):cuda())
    local v1 = r1:narrow(1, 1, 10)  -- a view of the first result, made before the third replay
    local r3 = f(T.full({ 64 }, 3):cuda())
    S.eq(r1:cpu():totable()[1], 4)
    S.eq(v1:cpu():totable(), { 4, 4, 4, 4, 4, 4, 4, 4, 4, 4 })
    S.eq(r2:cpu():totable()[64], 7)
    S.eq(r3:cpu():totable()[1], 10)
  end)

  it("writes an argument the function changes in place back to it", function()
    S.need_gpu()
    local f = graphed(function(a) a:add_(1); return a * 2 end, function() return T.zeros(5):cuda() end)
    local x = T.zeros(5):cuda()
    local r0 = stats().cudagraph_replays
    local y = f(x)
    S.eq(stats().cudagraph_replays, r0 + 1)
    S.eq(x:cpu():totable(), { 1, 1, 1, 1, 1 })
    S.eq(y:cpu():totable(), { 2, 2, 2, 2, 2 })
  end)

  it("reads weights of the Lua state at their address: in-place updates are seen", function()
    S.need_gpu()
    local lin = T.nn.Linear(4, 3):cuda()
    lin:requires_grad_(false)
    local f = graphed(function(x) return lin(x) end, function() return T.ones(2, 4):cuda() end)
    local x = T.randn({ 2, 4 }):cuda()
    lin.weight:mul_(2)
    local r0 = stats().cudagraph_replays
    local got = f(x)
    S.eq(stats().cudagraph_replays, r0 + 1)
    same(got, lin(x))
  end)

  it("records again when a weight of the Lua state is replaced", function()
    S.need_gpu()
    local holder = { w = T.ones(6):cuda() }
    local f = graphed(function(x) return x * holder.w end, function() return T.ones(6):cuda() end)
    holder.w = T.full({ 6 }, 5):cuda()
    local got
    for _ = 1, 4 do got = f(T.ones(6):cuda()) end
    S.eq(got:cpu():totable(), { 5, 5, 5, 5, 5, 5 })
  end)

  it("replays random ops from the graph, drawing the numbers eager draws", function()
    S.need_gpu()
    -- dropout-like: a mask and a sample of the same calls' generator counters
    local fn = function(x) return x * T.rand({ 4, 64 }, { device = "cuda" }):ge(0.5) + T.randn({ 4, 64 }, { device = "cuda" }) end
    local x = T.ones({ 4, 64 }):cuda()
    local f = graphed(fn, function() return x end)
    S.truthy(stats().cudagraphs_recorded >= 1, "a graph was recorded")
    T.manual_seed(7)
    local got = {}
    for i = 1, 6 do
      local r0 = stats().cudagraph_replays
      got[i] = f(x):cpu()
      S.eq(stats().cudagraph_replays, r0 + 1, "replayed from the graph")
    end
    local after = T.rand({ 3 }, { device = "cuda" }):cpu()
    T.manual_seed(7)
    for i = 1, 6 do S.truthy(got[i]:equal(fn(x):cpu()), ("call %d: the numbers eager draws"):format(i)) end
    S.truthy(after:equal(T.rand({ 3 }, { device = "cuda" }):cpu()), "the generator advanced as eager's")
    S.truthy(not got[1]:equal(got[2]), "each replay draws new numbers")
  end)

  -- found by tests/lua/test_compile_fuzz.lua on CUDA (2026-12-04): results that were an argument's
  -- static buffer, and a host copy recorded as a graph node that read freed host memory
  it("returns the argument itself where the function returns an argument or a view of one", function()
    S.need_gpu()
    local fns = {
      function(x) local _ = x:sin(); return x end,
      function(x) x:mul_(2); return x:t() end,
      function(x, y) y:add_(x); return x end,
    }
    for i, fn in ipairs(fns) do
      local f = T.compile(fn, { mode = "reduce-overhead" })
      for call = 1, 7 do
        local x, y = T.randn({ 2, 3 }):cuda(), T.zeros({ 2, 3 }):cuda()
        local x0 = x:clone()
        local r = f(x, y)
        T.compiler.wait()
        local want = i == 2 and (x0 * 2):t() or x0
        same(r, want, ("function %d, call %d: the result"):format(i, call))
        r:add_(1)  -- written through the result: the argument changes, as eager's
        same(i == 2 and x:t() or x, want + 1,
          ("function %d, call %d: the argument after a write to the result"):format(i, call))
        if i == 3 then same(y, x0, ("call %d: the argument written in place"):format(call)) end
      end
    end
  end)

  it("records an int64 fill (a memset), and replays from the host work that copies from host memory", function()
    S.need_gpu()
    local cases = {
      { function(y) y:fill_(2); y[1] = -3 end, { { -3, -3, -3 }, { 2, 2, 2 } }, true },
      -- a strided fill: a memset and the copy kernel
      { function(y) y:t():fill_(2); y[1] = -3 end, { { -3, -3, -3 }, { 2, 2, 2 } }, true },
      -- a host tensor copied in: host memory read at every replay, so no graph
      { function(y) y:copy_(T.tensor({ { -3, -3, -3 }, { 2, 2, 2 } }, { dtype = "int64" })) end, { { -3, -3, -3 }, { 2, 2, 2 } }, false },
    }
    for i, case in ipairs(cases) do
      local f = T.compile(case[1], { mode = "reduce-overhead" })
      local g0 = stats().cudagraph_replays
      for call = 1, 7 do
        local y = T.randint(-5, 6, { 2, 3 }):cuda()
        f(y)
        T.compiler.wait()
        S.eq(y:cpu():totable(), case[2], ("case %d, call %d"):format(i, call))
      end
      S.eq(stats().cudagraph_replays > g0, case[3], ("case %d: replayed from a CUDA graph"):format(i))
    end
  end)

  it("records nothing with T.config.cudagraphs = false", function()
    S.need_gpu()
    T.config.cudagraphs = false
    local ok, err = pcall(function()
      local f = T.compile(function(x) return x - 1 end, { mode = "reduce-overhead" })
      local rec0, rep0 = stats().cudagraphs_recorded, stats().replays
      for _ = 1, 6 do f(T.ones(3):cuda()); T.compiler.wait() end
      S.truthy(stats().replays > rep0, "the plan replays from the host")
      S.eq(stats().cudagraphs_recorded, rec0)
    end)
    T.config.cudagraphs = true
    if not ok then error(err, 0) end
  end)

  it("bounds memory over 1,000 changing shapes", function()
    S.need_gpu()
    local f = T.compile(function(x) return (x * 2):exp() end, { mode = "reduce-overhead" })
    local seed = 7
    local function sweep(calls)  -- sizes drawn from 200 (a fixed sequence)
      for _ = 1, calls do
        seed = (seed * 1103515245 + 12345) % 2 ^ 31
        local n = 1 + seed % 200
        local x = T.ones(n * 1000):cuda()
        f(x); S.close(f(x)[n * 1000]:cpu(), T.tensor(math.exp(2)), 1e-6, 1e-6, "size " .. n * 1000)
      end
      T.compiler.wait()
      collectgarbage(); collectgarbage()
      T.cuda.synchronize()
      return T.cuda.stats()
    end
    local s1 = sweep(200)
    local s2 = sweep(800)  -- 1,000 calls in all, the same sizes again
    local mib = 2 ^ 20
    S.truthy(s2.in_use <= s1.in_use + 8 * mib, ("memory in use grew from %.1f MiB to %.1f MiB")
      :format(s1.in_use / mib, s2.in_use / mib))
    S.truthy(s2.reserved <= s1.reserved + 64 * mib, ("reserved memory grew from %.1f MiB to %.1f MiB")
      :format(s1.reserved / mib, s2.reserved / mib))
    T.compiler.reset()
    collectgarbage(); collectgarbage()
    T.cuda.synchronize()
    S.truthy(T.cuda.stats().in_use <= s2.in_use, "T.compiler.reset() kept the graphs' memory")
  end)
end)

describe("T.cuda.CUDAGraph", function()
  it("captures eager work and replays it on new static-input values", function()
    S.need_gpu()
    local x = T.zeros(32):cuda()
    local w = T.randn({ 32 }):cuda()
    local g = T.cuda.CUDAGraph()
    local y = T.cuda.graph(g, function() return (x * w + 1):tanh() end)
    S.truthy(g.nodes >= 1)
    for k = 1, 3 do
      local v = T.randn({ 32 }):cuda()
      x:copy_(v)
      g:replay()
      same(y, (v * w + 1):tanh(), "replay " .. k)
    end
  end)

  it("shares a memory pool between graphs replayed in order", function()
    S.need_gpu()
    local x = T.ones(8):cuda()
    local g1, g2 = T.cuda.CUDAGraph(), T.cuda.CUDAGraph()
    local a = T.cuda.graph(g1, function() return x + 1 end)
    local b = T.cuda.graph(g2, function() return a * 10 end, { pool = g1:pool() })
    x:fill_(2)
    g1:replay(); g2:replay()
    S.eq(b:cpu():totable()[1], 30)
  end)

  it("raises on a synchronisation inside a capture, and the stream works after it", function()
    S.need_gpu()
    local x = T.ones(4):cuda()
    local g = T.cuda.CUDAGraph()
    S.errors(function() T.cuda.graph(g, function() return (x * 2):sum():item() end) end, "capturing")
    S.eq((x + 1):cpu():totable(), { 2, 2, 2, 2 })
    S.errors(function() g:replay() end, "nothing captured")
  end)
end)
