-- Dynamic shapes (API.md section 5, issue 6): with dynamic = nil a dim that changes once becomes
-- symbolic (one recompile) and every later size reuses the compiled code; dynamic = true is
-- symbolic from the start; T.mark_dynamic marks one dim; dynamic = false specialises. Results
-- must equal eager for every size, compile counts stay bounded, and CRESCENT_LOGS=recompiles /
-- T.explain name the symbolic dims. Runs on the CPU (native code when libgccjit loads, else the
-- eager backend of captured graphs) and, where a GPU is present, on CUDA.
local T = require "crescent"
local S = expect
local errs = S.error_checker("test_dynamic.lua")

local function stat(k) return T.compiler.stats()[k] end

-- Runs the crescent executable with `args` (and `stdin` text); returns stdout and stderr together.
local function run_crescent(args, stdin, env)
  return (S.crescent(args, { stdin = stdin, env = env, merge = true }))
end

-- Runs `code` (T is crescent) with CRESCENT_LOGS=`logs`: its log must hold `want` and one recompile.
local function one_recompile_logged(code, logs, want)
  local out = run_crescent({ "-e", "T = crescent; " .. code }, nil, "CRESCENT_LOGS=" .. logs)
  S.truthy(out:find(want, 1, true) ~= nil, "recompile log: " .. out)
  S.eq(select(2, out:gsub("new variant", "")), 1, "one recompile: " .. out)
  return out
end

-- the sizes of the sweeps: every size up to 33, then powers of two, their neighbours and primes
local SIZES = {}
for n = 1, 33 do SIZES[#SIZES + 1] = n end
for _, n in ipairs { 61, 63, 64, 65, 97, 127, 128, 129, 199, 255, 256, 257 } do SIZES[#SIZES + 1] = n end
local FEW = { 1, 2, 3, 7, 16, 31, 64, 127, 257 }

local function close(got, want, tol, what)
  S.eq(got.shape, want.shape, what)
  if want:numel() == 0 then return end
  local err = (got:double() - want:double()):abs():max():item()
  local scale = math.max(1, want:double():abs():max():item())
  if not (err <= tol * scale) then error(string.format("%s: max error %g (tolerance %g)", what, err, tol * scale), 2) end
end

-- Calls the compiled and the plain function on args(n) for every n, compares, and returns the
-- compile counters' growth.
local function sweep(fn, args, sizes, opts, tol)
  local f = T.compile(fn, opts or { hot = 0 })
  T.compiler.reset()
  for _, n in ipairs(sizes) do
    local a = { args(n) }
    local got, want = f(unpack(a)), fn(unpack(a))
    close(got, want, tol or 1e-5, "size " .. n)
  end
  return T.compiler.stats()
end

describe("automatic dynamic shapes (dynamic = nil)", function()
  it("pointwise with broadcasting: every size from 1 to 257 with at most 2 compilations", function()
    local s = sweep(function(x, b) return (x * 2 + b):relu() - 1 end,
                    function(n) return T.randn(n, 24), T.randn(24) end, SIZES)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled: " .. s.graphs_compiled)
    S.eq(s.recompiles, 1)
  end)
  it("reductions over a dynamic and over a static dim", function()
    local s = sweep(function(x) return x:sum(2) + x:amax(1):sum() end,
                    function(n) return T.randn(n, 19) end, SIZES, nil, 1e-5)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled: " .. s.graphs_compiled)
    s = sweep(function(x) return x:sum(2) * 0.5 end, function(n) return T.randn(5, n) end, SIZES, nil, 1e-5)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled (reduced dim dynamic): " .. s.graphs_compiled)
  end)
  it("softmax and layer_norm over a dynamic batch and a dynamic row", function()
    local ln_w, ln_b = T.randn(40), T.randn(40)
    local s = sweep(function(x) return T.F.layer_norm(x:softmax(2) * 3, { 40 }, ln_w, ln_b) end,
                    function(n) return T.randn(n, 40) end, SIZES, nil, 1e-4)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled: " .. s.graphs_compiled)
    s = sweep(function(x) return x:softmax(-1) end, function(n) return T.randn(3, n) end, SIZES, nil, 1e-5)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled (softmax over the dynamic dim): " .. s.graphs_compiled)
  end)
  it("mean, var and layer_norm over a dim whose size changes: 1 / n is a parameter, not a new kernel", function()
    local s = sweep(function(x) return x:mean(2) * x:var(2) + x:std(2, false) end,
                    function(n) return T.randn(4, n + 1) + 1 end, SIZES, nil, 1e-4)  -- (n = 1: var is NaN)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled (mean / var): " .. s.graphs_compiled)
    s = sweep(function(x) return T.F.layer_norm(x, { x:size(2) }) * 2 end,
              function(n) return T.randn(3, n) end, SIZES, nil, 1e-4)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled (layer_norm): " .. s.graphs_compiled)
  end)
  it("matmul with a dynamic batch", function()
    local w = T.randn(32, 16)
    local s = sweep(function(x) return (x:matmul(w) + 1):tanh() end, function(n) return T.randn(n, 32) end, FEW, nil, 1e-4)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled: " .. s.graphs_compiled)
  end)
  it("reshape / view with -1, transpose and cat of symbolic sizes", function()
    local s = sweep(function(x, y)
      local v = x:view(-1, 4):t()          -- {4, 2n}
      local c = T.cat({ v, y:t() }, 2)     -- {4, 3n}
      return c:reshape(-1):exp():sum() + c:mean(1):sum()
    end, function(n) return T.randn(n, 8), T.randn(n, 4) end, FEW, nil, 1e-4)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled: " .. s.graphs_compiled)
  end)
  it("a value computed from a size specialises on it, and stays correct", function()
    local f = T.compile(function(x) return x:narrow(1, 1, x:size(1) - 1) * 2 end, { hot = 0 })
    for _, n in ipairs { 2, 3, 5, 3 } do
      local x = T.randn(n, 3)
      close(f(x), x:narrow(1, 1, n - 1) * 2, 0, "size " .. n)
    end
  end)
  it("logs the dim that became symbolic", function()
    one_recompile_logged("f = T.compile(function(x) return x + 1 end, { hot = 0 }); " ..
                         "f(T.ones(2, 3)); f(T.ones(5, 3)); f(T.ones(9, 3))", "recompiles", "input 1 dim 1: 2 -> 5")
  end)
  it("names the guard that failed once a dim is symbolic: a stride change, old and new", function()
    local out = run_crescent({ "-e", "T = crescent; f = T.compile(function(x, w) return x:matmul(w) end, { hot = 0 }); " ..
      "w = T.randn(8, 3); f(T.randn(4, 8), w); f(T.randn(5, 8), w); f(T.randn(6, 8), T.randn(3, 8):t())" },
      nil, "CRESCENT_LOGS=recompiles")
    S.truthy(out:find("input 1 dim 1: 4 -> 5 (symbolic from now on)", 1, true), out)
    S.truthy(out:find("matmul: argument 2 (other) `w`: strides {3,1} -> {1,8}", 1, true), out)
    S.truthy(not out:find("-> symbolic", 1, true) and not out:find("18446744073709551615", 1, true), out)
  end)
  it("names symbolic sizes s0, s1 in guards, recompiles and T.explain; a variable by its Lua name", function()
    local out = run_crescent({ "-e", "T = crescent; f = T.compile(function(x, w) return (x * w):sum(2) end, { hot = 0 }); " ..
      "for n = 2, 3 do f(T.ones(n, 3), T.ones(n, 3)) end; " ..
      "local w = T.ones(3, 4):t(); f(T.ones(4, 3), w); " ..
      "g = T.compile(function(x, w) return (x * w):sum(2) end, { dynamic = true }); " ..
      "print(T.explain(g, T.ones(5, 3), T.ones(5, 3)))" }, nil, "CRESCENT_LOGS=recompiles,guards")
    S.truthy(out:find("mul: input 1 dim 1: 2 -> 3, input 2 dim 1: 2 -> 3 (symbolic from now on)", 1, true), out)
    S.truthy(out:find("input 1 (%0): float32{s0,3} strides contiguous\n  input 2 (%1): float32{s1,3} strides contiguous", 1, true), out)
    S.truthy(out:find("mul: argument 2 (other) `w`: strides contiguous -> {1,4}", 1, true), out)
    S.truthy(out:find("symbolic: graph 1 s0 = input 1 dim 1 (size 5 now)", 1, true), out)
    S.truthy(out:find("symbolic: graph 1 s2 = input 2 dim 1 (size 5 now)", 1, true), out)
    S.truthy(not out:find("18446744073709551615", 1, true) and not out:find("%-[12][,}]"), out)
  end)
end)

describe("dynamic = true, mark_dynamic, dynamic = false", function()
  it("dynamic = true compiles once for all sizes", function()
    local s = sweep(function(x) return (x - x:mean(2, true)):pow(2):sum(2) end,
                    function(n) return T.randn(n, 6) end, FEW, { hot = 0, dynamic = true }, 1e-4)
    S.eq(s.recompiles, 0)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled: " .. s.graphs_compiled)
  end)
  it("mark_dynamic: one compile for every batch size", function()
    local fn = function(x) return (x * 3):sigmoid():sum(2) end
    local f = T.compile(fn, { hot = 0 })
    T.compiler.reset()
    for _, n in ipairs(FEW) do
      local x = T.mark_dynamic(T.randn(n, 10), 1)
      close(f(x), fn(x), 1e-5, "size " .. n)
    end
    S.eq(stat("graphs_compiled"), 1)
    S.eq(stat("recompiles"), 0)
  end)
  it("dynamic = false specialises on every size", function()
    local f = T.compile(function(x) return x * 2 end, { hot = 0, dynamic = false })
    T.compiler.reset()
    for _, n in ipairs { 1, 2, 3, 4 } do close(f(T.ones(n)), T.ones(n) * 2, 0, "size " .. n) end
    S.eq(stat("recompiles"), 3)
  end)
  it("T.explain lists symbolic dims", function()
    local f = T.compile(function(x) return x:sum(1) end, { dynamic = true })
    local e = T.explain(f, T.ones(4, 6))
    S.eq(#e.symbolic_dims, 2)
    S.eq(e.symbolic_dims[1].dim, 1)
    S.eq(e.symbolic_dims[1].size, 4)
    S.eq(e.symbolic_dims[2].size, 6)
    S.truthy(tostring(e):find("symbolic", 1, true) ~= nil, tostring(e))
    local x = T.mark_dynamic(T.ones(3, 5), 2)
    e = T.explain(function(a) return a * 2 end, x)
    S.eq(#e.symbolic_dims, 1)
    S.eq(e.symbolic_dims[1].dim, 2)
  end)
  it("rejects bad mark_dynamic arguments", function()
    errs(function() T.mark_dynamic(3, 1) end, "mark_dynamic", "tensor")
    errs(function() T.mark_dynamic(T.ones(2, 2), 0) end, "mark_dynamic", "dim")
    errs(function() T.mark_dynamic(T.ones(2, 2), 1, { max = 1 }) end, "mark_dynamic", "outside")
    errs(function() T.mark_dynamic(T.ones(2, 2), 1, { low = 1 }) end, "mark_dynamic", "low")
  end)
end)

-- Numbers that change from call to call (a learning rate, a step counter, a threshold computed
-- in Lua): an operand number of a pointwise op that changes once varies from then on - the
-- kernels read it at run time - while numbers that decide shapes or code (dims, pow's exponent)
-- keep specialising. `native` runs each case with native code where it can (the CPU here; the
-- GPU case is below).
local function numbers_sweep(fn, args, values, opts, tol)
  local f = T.compile(fn, opts or { hot = 0 })
  T.compiler.reset()
  local x = args()
  for i, v in ipairs(values) do
    local got, want = f(x, v), fn(x, v)
    S.eq(got.dtype, want.dtype, "dtype for " .. tostring(v))
    close(got, want, tol or 1e-6, "value " .. tostring(v) .. " (call " .. i .. ")")
  end
  return T.compiler.stats()
end

local VALUES = {}
for i = 1, 40 do VALUES[i] = (i % 7 - 3) * 0.37 + i / 8 end  -- integral ones among them (5 at i = 8...)

describe("automatic dynamic numbers (dynamic = nil)", function()
  it("operand numbers that change compile once more, then serve every value", function()
    local s = numbers_sweep(function(x, a)
      return ((x * a + (1 - a)):clamp(-a, a * 2) - T.where(x:gt(a), a, 0.25)):exp()
    end, function() return T.randn(37, 29) end, VALUES)
    S.eq(s.recompiles, 1)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled: " .. s.graphs_compiled)
  end)
  it("every number of a call that changed is learnt in the same recompile, after a graph break too", function()
    local fn = function(x, a, b)
      local y = x * a + b
      local m = y:abs():max():item()  -- a graph break: the next segment's number comes from data
      return (y / m - b):tanh()
    end
    local f = T.compile(fn, { hot = 0 })
    T.compiler.reset()
    local x = T.randn(50, 20)
    for i = 1, 30 do
      local a, b = 0.1 * i + 0.05, 1 / i
      close(f(x, a, b), fn(x, a, b), 1e-6, "call " .. i)
    end
    -- one recompile per segment: a and b in the first, m (and b) in the second
    S.eq(stat("recompiles"), 2)
  end)
  it("the kernels are not compiled again for new values", function()
    S.need_native_cpu()
    local fn = function(x, a) return (x + a):sigmoid() * a end
    local f = T.compile(fn, { hot = 0 })
    T.compiler.reset()
    local sync = T.config.sync_compile
    T.config.sync_compile = true  -- (kernels_compiled counts compiles that finished)
    local x = T.randn(1000)
    f(x, 1.5); f(x, 2.5); f(x, 3.5)  -- recorded, recorded as varying, compiled
    local k = stat("kernels_compiled")
    for i = 1, 20 do close(f(x, i * 0.1), fn(x, i * 0.1), 1e-6, "call " .. i) end
    T.config.sync_compile = sync
    S.eq(stat("kernels_compiled"), k)  -- (0 when the disk cache had them)
    S.eq(stat("graphs_compiled"), 1)
  end)
  it("integer tensors: the number's class (integral or not) decides the dtype, and is guarded", function()
    local fn = function(x, a) return x * a + a end
    local f = T.compile(fn, { hot = 0 })
    T.compiler.reset()
    local x = T.arange(1, 25):view(4, 6):int()
    for _, a in ipairs { 2, 3, -7, 2.5, 0.25, 4, 1e9, -0.5 } do
      local got, want = f(x, a), fn(x, a)
      S.eq(got.dtype, want.dtype, "dtype for " .. a)
      close(got, want, 0, "value " .. a)
    end
    S.truthy(stat("recompiles") <= 3, "recompiles: " .. stat("recompiles"))
  end)
  it("add's alpha, addcmul's value and in-place updates vary too (an optimiser's step)", function()
    local fn = function(w, g, m, lr)
      local m2 = m * 0.9 + g                       -- (constants stay literal)
      local w2 = w:add(m2, -lr):addcmul(g, m2, lr * 0.01)
      local v = w:clone()
      v:add_(g, -lr)                               -- an in-place op runs on the eager kernels
      return w2, v
    end
    local f = T.compile(fn, { hot = 0 })
    T.compiler.reset()
    local w, g, m = T.randn(40, 30), T.randn(40, 30), T.randn(40, 30)
    for i = 1, 20 do
      local lr = 0.3 / i
      local a, b = f(w, g, m, lr)
      local ea, eb = fn(w, g, m, lr)
      close(a, ea, 1e-6, "w2, call " .. i)
      close(b, eb, 1e-6, "v, call " .. i)
    end
    S.eq(stat("recompiles"), 1)
  end)
  it("a number computed from a size varies with it: one recompile for sizes and numbers together", function()
    local s = sweep(function(x) return x:sum(2) / x:size(2) + x:size(1) end,
                    function(n) return T.randn(n, n + 1) end, FEW, nil, 1e-5)
    S.eq(s.recompiles, 1)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled: " .. s.graphs_compiled)
  end)
  it("numbers that decide shapes or code keep specialising: dims, pow's exponent", function()
    local fn = function(x, p) return x:abs():pow(p):sum(1) end
    local s = numbers_sweep(fn, function() return T.randn(6, 9) end, { 2, 3, 0.5, 2, 1.5 }, nil, 1e-5)
    S.eq(s.recompiles, 3)  -- 2, 3, 0.5, 1.5
    local g = function(x, d) return x:softmax(d) * d end
    local s2 = numbers_sweep(g, function() return T.randn(5, 7) end, { 1, 2, 1, 2 }, nil, 1e-6)
    S.eq(s2.recompiles, 1)
  end)
  it("values kept by Lua are recomputed with their own call's numbers", function()
    local kept = {}
    local fn = function(x, a)
      local t = x * a
      kept[#kept + 1] = t  -- kept by Lua, read after later calls ran
      return (t + 1):sum()
    end
    local f = T.compile(fn, { hot = 0 })
    local x = T.randn(8, 8)
    for i = 1, 12 do f(x, i * 0.5 + 0.01) end
    for i = 1, 12 do close(kept[i], x * (i * 0.5 + 0.01), 1e-6, "kept value of call " .. i) end
  end)
  it("a scale that varies keeps attention's math (the fused pattern takes constant scales only)", function()
    local fn = function(q, k, v, s) return (q:matmul(k:transpose(-2, -1)) * s):softmax(-1):matmul(v) end
    local f = T.compile(fn, { hot = 0 })
    local q, k, v = T.randn(2, 6, 8), T.randn(2, 6, 8), T.randn(2, 6, 8)
    for i = 1, 8 do close(f(q, k, v, 0.1 * i), fn(q, k, v, 0.1 * i), 1e-5, "scale " .. 0.1 * i) end
  end)
  it("reduce-overhead replays use the numbers of the call they replay", function()
    local fn = function(x, a) return (x - a):relu() * a end
    local f = T.compile(fn, { mode = "reduce-overhead" })
    local x = T.randn(100)
    for i = 1, 30 do
      local a = ({ 0.25, 0.5, 0.75 })[i % 3 + 1]
      close(f(x, a), fn(x, a), 1e-6, "call " .. i .. " (a = " .. a .. ")")
    end
  end)
  it("dynamic = false specialises on every value; dynamic = true never recompiles for one", function()
    local fn = function(x, a) return x * a - a end
    local s = numbers_sweep(fn, function() return T.randn(10) end, { 1.5, 2.5, 3.5, 4.5 }, { hot = 0, dynamic = false })
    S.eq(s.recompiles, 3)
    s = numbers_sweep(fn, function() return T.randn(10) end, { 1.5, 2.5, 3.5, 4.5 }, { hot = 0, dynamic = true })
    S.eq(s.recompiles, 0)
  end)
  it("logs the number that began to vary, and the guards say it varies", function()
    local out = one_recompile_logged("f = T.compile(function(x, a) return x * a end, { hot = 0 }); " ..
                                     "for i = 1, 5 do f(T.ones(3), i + 0.5) end", "recompiles,guards",
                                     "mul: argument 2: 1.5 -> 2.5")
    S.truthy(out:find("mul argument 2 varies", 1, true) ~= nil, "guards log: " .. out)
  end)
end)

describe("automatic dynamic numbers on CUDA", function()
  it("a learning-rate-like number on the GPU: one recompile, no new kernels, values as the CPU's", function()
    if not T.cuda.is_available() then S.skip("no CUDA device") end
    local fn = function(w, g, lr) return (w - g * lr):clamp(-lr * 10, lr * 10) end
    local f = T.compile(fn, { hot = 0 })
    T.compiler.reset()
    local sync = T.config.sync_compile
    T.config.sync_compile = true
    local w, g = T.randn(300, 70), T.randn(300, 70)
    local wc, gc = w:cuda(), g:cuda()
    local k
    for i = 1, 25 do
      local lr = 0.5 / i
      close(f(wc, gc, lr):cpu(), fn(w, g, lr), 1e-6, "call " .. i)
      if i == 3 then k = stat("kernels_compiled") end
    end
    T.config.sync_compile = sync
    S.eq(stat("recompiles"), 1)
    S.eq(stat("kernels_compiled"), k)
  end)
end)

describe("growing sequences", function()
  it("a KV-cache loop growing by 1 per call compiles at most twice over 500 steps", function()
    local d = 16
    local wq, wk, wv = T.randn(d, d) * 0.2, T.randn(d, d) * 0.2, T.randn(d, d) * 0.2
    local function step(x, k, v)  -- x {1, d}; k, v {t, d}: append, attend, return
      k = T.cat({ k, x:matmul(wk) }, 1)
      v = T.cat({ v, x:matmul(wv) }, 1)
      local att = (x:matmul(wq):matmul(k:t()) / math.sqrt(d)):softmax(-1)
      return att:matmul(v), k, v
    end
    local f = T.compile(step)
    T.compiler.reset()
    local k, v = T.zeros(0, d), T.zeros(0, d)
    local ke, ve = k, v
    local x = T.randn(1, d)
    for i = 1, 500 do
      local y, ye
      y, k, v = f(x, k, v)
      ye, ke, ve = step(x, ke, ve)
      if i % 50 == 0 or i < 4 then close(y, ye, 1e-4, "step " .. i) end
      x = y
    end
    S.eq(k:size(1), 500)
    S.truthy(stat("graphs_compiled") <= 2, "graphs compiled: " .. stat("graphs_compiled"))
  end)
end)

-- Sequence lengths that change from call to call, with the model's positions made inside the
-- compiled function (arange of a size) and heads merged by a copying reshape.
describe("sequence-length sweeps", function()
  it("arange and zeros of a size, and a copying reshape: one recompile for every length", function()
    local s = sweep(function(x)
      local n = x:size(1)
      local pos = T.arange(n):float():view(-1, 1)
      local z = T.zeros({ n, 3 })
      return (x + pos + z):t():reshape(-1):sin():sum()
    end, function(n) return T.randn(n, 3) end, FEW, nil, 1e-5)
    S.eq(s.recompiles, 1)
    S.truthy(s.graphs_compiled <= 2, "graphs compiled: " .. s.graphs_compiled)
  end)
  it("logs the integer that became symbolic", function()
    one_recompile_logged("local f = T.compile(function(x) return x + T.arange(x:size(1)) end, {hot = 0}) "
      .. "f(T.ones(3)); f(T.ones(5)); f(T.ones(7))", "recompiles", "arange: argument 1 (an integer of a shape)")
  end)
  it("views of a longer row (strides changing with the length): one recompile; an expanded one is another", function()
    local f = T.compile(function(x) return (x * 2 + 1):cumsum(2) + x:sum(2, true) end, { hot = 0 })
    T.compiler.reset()
    for _, n in ipairs { 9, 7, 12, 5, 9, 3 } do
      local x = T.randn(4, n + 1):narrow(2, 2, n)
      close(f(x), (x * 2 + 1):cumsum(2) + x:sum(2, true), 1e-5, "length " .. n)
    end
    S.eq(stat("recompiles"), 1)
    local e = T.randn(4, 1):expand(4, 6)  -- (stride 0: guarded as it is)
    close(f(e), (e * 2 + 1):cumsum(2) + e:sum(2, true), 1e-5, "expanded")
    S.eq(stat("recompiles"), 2)
  end)
  -- the GPT of examples/models/gpt2.lua, small and seeded, over a vocabulary of V
  local V = 20
  local function tiny_gpt()
    local root = debug.getinfo(1, "S").source:sub(2):match("^(.*)/tests/lua/") or "."
    package.path = root .. "/examples/?.lua;" .. package.path
    T.manual_seed(3)
    return require("models.gpt2").new({ vocab = V, n_ctx = 16, d = 16, n_head = 2, n_layer = 2 })
  end
  -- (trained with T.compile(model) against the same model eagerly)
  it("a compiled GPT trains on a length sweep as eagerly, with one recompile", function()
    local me, mc = tiny_gpt(), tiny_gpt()
    local f = T.compile(mc)
    T.compiler.reset()
    for i, n in ipairs { 16, 12, 9, 16, 5, 12 } do
      local ids, targets = T.randint(0, V, { 2, n }), T.randint(1, V + 1, { 2 * n })
      local le = T.F.cross_entropy(me(ids):view(-1, V), targets)
      local lc = T.F.cross_entropy(f(ids):view(-1, V), targets)
      le:backward()
      lc:backward()
      close(lc, le, 1e-5, "loss of call " .. i)
      local pe, pc = me:parameters(), mc:parameters()
      for k = 1, #pe do close(pc[k].grad, pe[k].grad, 1e-4, "gradient " .. k .. " of call " .. i) end
      for k = 1, #pe do pe[k].grad, pc[k].grad = nil, nil end
    end
    S.eq(stat("recompiles"), 1)
    S.truthy(stat("graphs_compiled") <= 2, "graphs compiled: " .. stat("graphs_compiled"))
  end)
  it("a whole compiled GPT step (forward, backward, AdamW) on a length sweep: one graph, float64 as eager", function()
    local function trainer()
      local m = tiny_gpt():double()
      local opt = T.optim.AdamW(m:parameters(), { lr = 1e-2 })
      return m, function(ids, targets)
        local loss = T.F.cross_entropy(m(ids):view(-1, V), targets)
        loss:backward()
        opt:step()
        opt:zero_grad()
        return loss
      end
    end
    local me, eager = trainer()
    local mc, step = trainer()
    step = T.compile(step)
    T.compiler.reset()
    local lens = { 16, 12, 9, 16, 5, 12, 9, 7, 16, 5, 12 }
    for i, n in ipairs(lens) do
      local ids, targets = T.randint(0, V, { 2, n }), T.randint(1, V + 1, { 2 * n })
      if i == 8 then T.compiler.wait() end  -- (the last lengths on the native instances)
      close(step(ids, targets), eager(ids, targets), 1e-10, "loss of step " .. i)
    end
    local pe, pc = me:parameters(), mc:parameters()
    for k = 1, #pe do close(pc[k], pe[k], 1e-10, "parameter " .. k) end
    -- (the backward is traced per length into the step's graph: no graph break at backward())
    S.eq(stat("recompiles"), 1)
    S.eq(stat("graph_breaks"), 0)
    S.truthy(stat("graphs_compiled") <= 2, "graphs compiled: " .. stat("graphs_compiled"))
  end)
  it("a whole step with dropout and two backward() calls on a length sweep: eager's draws and gradients", function()
    local function run(compiled)
      T.manual_seed(7)
      local a, b = T.nn.Linear(4, 8):double(), T.nn.Linear(8, 3):double()
      local params = a:parameters()
      for _, p in ipairs(b:parameters()) do params[#params + 1] = p end
      local opt = T.optim.Adam(params, { lr = 0.01 })
      local step = function(x)
        opt:zero_grad()
        local l1 = (T.F.dropout(b(a(x):relu()), 0.3, true) ^ 2):mean()
        l1:backward()
        local l2 = b(a(x:narrow(2, 1, 3))):abs():sum()
        l2:backward()
        opt:step()
        return l1 + l2
      end
      if compiled then step = T.compile(step) end
      local losses = {}
      for i, n in ipairs({ 5, 7, 9, 11, 13, 7, 5, 9, 11 }) do
        T.manual_seed(100 + i)
        if i == 7 then T.compiler.wait() end
        losses[i] = step(T.randn(3, n, 4):double())
      end
      return losses, params
    end
    T.compiler.reset()
    local want, wp = run(false)
    local got, gp = run(true)
    for i = 1, #want do close(got[i], want[i], 1e-12, "loss " .. i) end
    for k = 1, #wp do close(gp[k], wp[k], 1e-12, "parameter " .. k) end
    S.eq(stat("recompiles"), 1)
    S.eq(stat("graph_breaks"), 0)
  end)
end)

describe("the REPL keeps its compiled code", function()
  it("batch 1, 7, 64, 1000 at the crescent prompt: at most 2 compilations, results equal eager", function()
    local out = run_crescent({}, table.concat({
      "T = crescent",
      "g = function(x) return (x * 2 + 1):softmax(2):sum(2) end",
      "f = T.compile(g)",
      "worst = 0",
      "for _, n in ipairs({1, 7, 64, 1000}) do x = T.randn(n, 33); for _ = 1, 3 do " ..
        "worst = math.max(worst, (f(x) - g(x)):abs():max():item()) end end",
      "s = T.compiler.stats()",
      "print('compiled', s.graphs_compiled, 'recompiles', s.recompiles, 'worst', worst)",
    }, "\n") .. "\n")
    local compiled, recompiles, worst = out:match("compiled\t(%d+)\trecompiles\t(%d+)\tworst\t(%S+)")
    S.truthy(compiled ~= nil, "REPL output: " .. out)
    S.truthy(tonumber(compiled) <= 2, "graphs compiled: " .. out)
    S.truthy(tonumber(recompiles) <= 1, "recompiles: " .. out)
    S.truthy(tonumber(worst) <= 1e-5, "largest difference: " .. out)
  end)
end)

describe("dynamic shapes on CUDA", function()
  it("a sweep of batch sizes on the GPU equals the CPU", function()
    if not T.cuda.is_available() then S.skip("no CUDA device") end
    local fn = function(x, b) return T.F.layer_norm((x + b):softmax(2), { 48 }) * 2 end
    local f = T.compile(fn, { hot = 0 })
    T.compiler.reset()
    local b = T.randn(48)
    for _, n in ipairs(FEW) do
      local x = T.randn(n, 48)
      close(f(x:cuda(), b:cuda()):cpu(), fn(x, b), 1e-4, "size " .. n)
    end
    S.truthy(stat("graphs_compiled") <= 2, "graphs compiled: " .. stat("graphs_compiled"))
  end)
end)
