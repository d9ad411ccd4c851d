-- Everyday controls (API.md section 11): T.set_num_threads / T.get_num_threads, T.set_printoptions
-- (PyTorch's printing options: the expected strings are what torch prints), T.time; bad values
-- and unknown options raise naming the valid choices.
local T = require "crescent"
local S = expect

describe("T.set_num_threads / T.get_num_threads", function()
  it("resize the one pool; kernels and products give the same results on any count", function()
    local n0 = T.get_num_threads()
    S.truthy(n0 >= 1 and n0 <= 256, "threads " .. n0)
    T.manual_seed(3)
    local a, b = T.randn(257, 300), T.randn(300, 129)
    local want_mm, want_sum = a:matmul(b), (a * 2 + 1):sum()
    local ok, err = pcall(function()
      for _, n in ipairs({ 1, 3, 2 }) do
        T.set_num_threads(n)
        S.eq(T.get_num_threads(), n)
        S.close(a:matmul(b), want_mm, 1e-4, 1e-4)  -- (blocks of other shapes: other roundings)
        S.close((a * 2 + 1):sum(), want_sum, 1e-5, 1e-3)
      end
    end)
    T.set_num_threads(n0)
    if not ok then error(err, 0) end
    S.eq(T.get_num_threads(), n0)
  end)
  it("reject a count that is not a whole number from 1 to 256", function()
    local n0 = T.get_num_threads()
    for _, bad in ipairs({ 0, -1, 257, 1.5, "2", 1 / 0 }) do
      S.errors(function() T.set_num_threads(bad) end, "set_num_threads: expected a whole number of threads from 1 to 256, got")
    end
    S.eq(T.get_num_threads(), n0)
  end)
  it("start from CRESCENT_NUM_THREADS; a bad value is an error naming the valid ones", function()
    local out, err, status = S.crescent({ "-e", "print(crescent.get_num_threads())" }, { env = "CRESCENT_NUM_THREADS=3" })
    S.eq({ out, status }, { "3\n", 0 }, err)
    for _, bad in ipairs({ "abc", "0", "300", "2x" }) do
      _, err, status = S.crescent({ "-e", "print(1)" }, { env = "CRESCENT_NUM_THREADS=" .. bad })
      S.eq(status, 1, err)
      S.truthy(err:find('CRESCENT_NUM_THREADS: expected a whole number of threads from 1 to 256, got "' .. bad .. '"', 1, true), err)
    end
  end)
end)

describe("T.set_flush_denormal", function()
  -- PyTorch's: subnormal inputs read as zero, subnormal results are zero, on the pool's threads too
  local function with_flush(fn)
    local ok, err = pcall(fn)
    T.set_flush_denormal(false)
    if not ok then error(err, 0) end
  end
  local tiny = 1e-40  -- a float32 subnormal
  local function zeros(t) return t:eq(0):all():item() end
  it("flushes inputs and results to zero while on, in eager, pooled and compiled kernels alike", function()
    local big = T.full({ 2 ^ 20 }, tiny, { dtype = "float32" })  -- (parallel_for shares it out)
    S.truthy(not zeros(big * 2))
    S.truthy(T.tensor({ -100 }):exp():item() > 0)
    local got = {}  -- read once the mode is off: while on, reading a value flushes it too
    with_flush(function()
      S.eq(T.set_flush_denormal(true), true)
      got.mul, got.tiny_result = T.tensor({ tiny }):mul(1), T.tensor({ 1e-30 }):mul(1e-10)
      got.pooled = big * 2
      got.exp = T.tensor({ -100, -1000, -87.5 }):exp()  -- (subnormal results built as bits: flushed too)
      got.sigmoid = T.tensor({ -100 }):sigmoid()
      got.softmax = T.tensor({ { 0, -100 } }, { dtype = "float32" }):softmax(2)
      got.exp64 = T.tensor({ -745 }, { dtype = "float64" }):exp()
      local f = T.compile(function(x) return x * 3 + 0 end)
      for i = 1, 4 do got[i] = f(big) end
    end)
    S.eq({ got.mul:item(), got.tiny_result:item(), got.exp:totable(), got.sigmoid:item(), got.softmax:totable(),
           got.exp64:item() }, { 0, 0, { 0, 0, 0 }, 0, { { 1, 0 } }, 0 })
    S.truthy(zeros(got.pooled))
    for i = 1, 4 do S.truthy(zeros(got[i])) end
    S.truthy(not zeros(big * 2))
    S.eq(T.tensor({ tiny }):mul(1):item(), T.tensor({ tiny }):item())
    S.truthy(T.tensor({ -100 }):exp():item() > 0)
  end)
  it("takes a boolean", function()
    local want = "set_flush_denormal: argument 1 %(mode%) expected a boolean, got "
    for _, bad in ipairs({ 1, "true" }) do S.errors(function() T.set_flush_denormal(bad) end, want) end
    S.errors(function() T.set_flush_denormal() end, want .. "nil")
  end)
end)

describe("T.set_printoptions", function()
  local function with_options(fn)
    local ok, err = pcall(fn)
    T.set_printoptions({ profile = "default" })
    if not ok then error(err, 0) end
  end
  it("sets precision, threshold, edgeitems, linewidth and sci_mode as torch.set_printoptions", function()
    with_options(function()
      T.set_printoptions({ precision = 2 })
      S.eq(tostring(T.tensor({ 1.12345, 2.5 })), "tensor([1.12, 2.50])")
      T.set_printoptions({ threshold = 5 })  -- precision stays 2
      S.eq(tostring(T.arange(10)), "tensor([0, 1, 2,  ..., 7, 8, 9])")
      S.eq(tostring(T.tensor({ 1.12345 })), "tensor([1.12])")
      T.set_printoptions({ edgeitems = 1 })
      S.eq(tostring(T.arange(10)), "tensor([0,  ..., 9])")
      T.set_printoptions({ edgeitems = 0 })  -- (numpy's [...]; torch 1.13 prints all or raises)
      S.eq(tostring(T.arange(10)), "tensor([...])")
      S.eq(tostring(T.arange(12):view(3, 4)), "tensor([...])")
      T.set_printoptions({ profile = "default" })
      S.eq(tostring(T.arange(10)), "tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])")
      S.eq(tostring(T.tensor({ 1.12345 })), "tensor([1.1235])")
      T.set_printoptions({ linewidth = 20 })
      S.eq(tostring(T.arange(6):float()), "tensor([0., 1., 2.,\n        3., 4., 5.])")
      T.set_printoptions({ sci_mode = true })  -- linewidth back to 80? no: only sci_mode resets
      S.eq(tostring(T.tensor({ 1.5, 2.5 })), "tensor([1.5000e+00,\n        2.5000e+00])")
      T.set_printoptions({ linewidth = 80, sci_mode = false })
      -- the widths are the automatic (scientific) mode's, the values printed fixed: torch does so
      S.eq(tostring(T.tensor({ 1e-5, 1 })), "tensor([    0.0000,     1.0000])")
      T.set_printoptions({})  -- sci_mode left out: chosen from the values again
      S.eq(tostring(T.tensor({ 1e-5, 1 })), "tensor([1.0000e-05, 1.0000e+00])")
    end)
  end)
  it("has torch's profiles", function()
    with_options(function()
      T.set_printoptions({ profile = "short" })
      S.eq(tostring(T.tensor({ 1.12345 })), "tensor([1.12])")
      S.eq(tostring(T.arange(1001)), "tensor([   0,    1,  ...,  999, 1000])")
      T.set_printoptions({ profile = "full" })
      S.truthy(not tostring(T.arange(2000)):find("...", 1, true), "full: no summary")
      T.set_printoptions({ profile = "short", precision = 3 })  -- the options after the profile
      S.eq(tostring(T.tensor({ 1.12345 })), "tensor([1.123])")
    end)
  end)
  it("rejects unknown options and bad values, naming the valid ones", function()
    with_options(function()
      S.errors(function() T.set_printoptions({ precison = 2 }) end,
        'set_printoptions: unknown option "precison" %(expected one of: edgeitems, linewidth, precision, profile, sci_mode, threshold%)')
      S.errors(function() T.set_printoptions({ profile = "long" }) end, 'set_printoptions: profile expected "default", "short" or "full", got "long"')
      S.errors(function() T.set_printoptions({ precision = -1 }) end, "set_printoptions: precision expected a whole number from 0 to 60, got %-1")
      S.errors(function() T.set_printoptions({ threshold = 1.5 }) end, "set_printoptions: threshold expected a non%-negative whole number or math.huge")
      S.errors(function() T.set_printoptions({ linewidth = 0 }) end, "set_printoptions: linewidth expected a positive whole number, got 0")
      S.errors(function() T.set_printoptions({ sci_mode = "yes" }) end, "set_printoptions: sci_mode expected a boolean")
      S.errors(function() T.set_printoptions(3) end, "set_printoptions: expected a table of options, got 3")
      S.eq(tostring(T.tensor({ 1.12345 })), "tensor([1.1235])", "unchanged by the bad calls")
    end)
  end)
end)

describe("T.time", function()
  it("is a monotonic clock in seconds", function()
    local t0 = T.time()
    S.eq(type(t0), "number")
    os.execute("sleep 0.2")
    local dt = T.time() - t0
    S.truthy(dt >= 0.15, "0.2 s of sleep measured as " .. dt .. " s")
  end)
end)

describe("T.bench and T.compiler.stats", function()
  S.native_it("bench waits for the compiles it started; stats count them, their time and what is pending", function()
    local saved = { sync = T.config.sync_compile, dir = T.config.cache_dir }
    T.config.sync_compile, T.config.cache_dir = false, "0"  -- compiled in the background, never from a cache
    local ok, err = pcall(function()
      T.compiler.reset()
      local fn = function(v) return (v * 1.6875 - 0.8125):tanh() * v end
      local f = T.compile(fn, { hot = 0 })
      local r = T.bench(f, { T.randn(64) }, { warmup = 1, reps = 3 })
      S.truthy(r.median_us > 0, "median_us")
      local s = T.compiler.stats()
      S.eq(s.compiles_pending, 0, "compiles pending after bench")
      S.truthy(s.graphs_compiled >= 1 and s.kernels_compiled >= 1, ("graphs %d, kernels %d"):format(s.graphs_compiled, s.kernels_compiled))
      S.truthy(s.compile_ms > 0, "compile_ms " .. s.compile_ms)
      S.eq(s.kernels_loaded, 0, "kernels loaded")
      local g = T.compile(fn, { hot = 0 })  -- the same kernels: from the cache in memory
      T.bench(g, { T.randn(64) }, { warmup = 1, reps = 3 })
      s = T.compiler.stats()
      S.truthy(s.kernels_loaded >= 1, "kernels loaded " .. s.kernels_loaded)
      T.compiler.reset()
      s = T.compiler.stats()
      S.eq({ s.compile_ms, s.compiles_pending, s.kernels_loaded }, { 0, 0, 0 }, "after reset")
    end)
    T.config.sync_compile, T.config.cache_dir = saved.sync, saved.dir
    if not ok then error(err, 0) end
  end)
  it("bench checks its arguments and options", function()
    local f = function(x) return x + 1 end
    for _, c in ipairs({
      { { reps = 0 }, "option reps expected an integer >= 1, got 0" },
      { { reps = 2.5 }, "option reps expected an integer >= 1, got 2.5" },
      { { batch = 0 }, "option batch expected an integer >= 1, got 0" },
      { { warmup = -1 }, "option warmup expected an integer >= 0, got %-1" },
      { { reps = "x" }, "option reps expected an integer >= 1, got x" },
      { { reps = 1 / 0 }, "option reps expected an integer >= 1, got inf" },
      { { warmup = 1 / 0 }, "option warmup expected an integer >= 0, got inf" },
      { { rep = 100 }, "unknown option 'rep' %(expected one of: batch, reps, warmup%)" },
    }) do
      S.errors(function() return T.bench(f, { T.ones(2) }, c[1]) end, "bench: " .. c[2])
    end
    S.errors(function() return T.bench(f, T.ones(2)) end, "bench: argument 2 %(args%) expected a table of fn's arguments, got a tensor")
    S.truthy(T.bench(f, { T.ones(2) }, { warmup = 0, reps = 1 }).median_us >= 0, "one rep")
  end)
end)

describe("the Lua side's constants and settings", function()
  local core = require "crescent.core"
  local C = core.ffi.C
  it("T.compiler.stats() names every number api.cap_stats writes", function()
    local n = 0
    for _, v in pairs(T.compiler.stats()) do
      n = n + 1
      S.eq(type(v), "number", "a stat")
    end
    S.eq(n, C.CR_CAP_STATS, "stats")
  end)
  it("names each dtype by the C side's code", function()
    for _, d in ipairs({ "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" }) do
      S.eq(T.zeros(2, { dtype = d }).dtype, d)
    end
    S.eq(core.dtypes[C.CR_INT64], "int64")
    S.eq(T.ones(1, { dtype = "bool" }):item(), true)  -- (a bool tensor's values are booleans)
  end)
  it("reads CRESCENT_* settings through the C++ table, which rejects an undeclared variable", function()
    S.eq(core.setting("CRESCENT_NVRTC_OPTIONS"), os.getenv("CRESCENT_NVRTC_OPTIONS"), "a declared setting")
    S.errors(function() core.setting("CRESCENT_NO_SUCH_SETTING") end, "no setting CRESCENT_NO_SUCH_SETTING")
  end)
end)

describe("T.__config__ / T.backends.cpu (PyTorch's)", function()
  -- vm/cpu_blas.hpp: OpenBLAS's core is named from the capability of crescent's kernels, unless
  -- OPENBLAS_CORETYPE names one (then it is the user's)
  it("say what the CPU kernels and the products run with", function()
    local cap = T.backends.cpu.get_cpu_capability()
    S.truthy(cap == "AVX512" or cap == "AVX2", "capability " .. tostring(cap))
    local text = T.__config__.show()
    S.truthy(text:find(T._VERSION, 1, true) == 1, text)
    S.truthy(text:find("  - CPU capability: " .. cap .. "\n", 1, true), text)
    local core = text:match("  %- BLAS: OpenBLAS, core (%w+) %(named by crescent%)\n")
    if os.getenv("OPENBLAS_CORETYPE") then core = text:match("core (%w+) %(OPENBLAS_CORETYPE%)") end
    S.eq(core, os.getenv("OPENBLAS_CORETYPE") or (cap == "AVX512" and "SkylakeX" or "Haswell"), text)
    S.truthy(text:find("  %- CUDA: " .. (T.cuda.is_available() and "%d+ device" or "no device")), text)
    local out, err, status = S.crescent({ "-e", "io.write(require('crescent').__config__.show())" },
      { env = "OPENBLAS_CORETYPE=Haswell CRESCENT_CPU_MARCH=x86-64-v3" })
    S.eq(status, 0, err)
    S.truthy(out:find("  - CPU capability: AVX2\n", 1, true), out)
    S.truthy(out:find("  - BLAS: OpenBLAS, core Haswell (OPENBLAS_CORETYPE)\n", 1, true), out)
    out, err, status = S.crescent({ "-e", "io.write(require('crescent').backends.cpu.get_cpu_capability())" },
      { env = "CRESCENT_CPU_MARCH=x86-64-v2" })
    S.eq({ status, out }, { 0, "DEFAULT" }, err)  -- (no AVX2 in generated kernels at that level)
  end)
end)
