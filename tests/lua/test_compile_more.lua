-- More of T.compile: CRESCENT_DEBUG_DIR / T.config.debug_dir dumps and the perf log; lazy values
-- and raw pointers; reduce-overhead's purity rule for library functions with hidden state.
local T = require "crescent"
local S = expect

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("*a")
  f:close()
  return s
end

describe("compiled graph dumps", function()
  S.native_it("writes guards, the recorded and the optimised graph and the compile time per graph", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p " .. dir)
    local saved = T.config.debug_dir
    T.config.debug_dir = dir
    local f = T.compile(function(x)
      local a = x + 1
      local b = x + 1  -- merged with a
      return (a * b):sin()
    end)
    for _ = 1, 4 do f(T.ones(3)) end
    T.config.debug_dir = saved
    f(T.ones(3))
    local p = io.popen('ls "' .. dir .. '"')
    local files, native = {}, {}
    for name in p:lines() do
      local suffix = name:match("%.(%a+%.%a+)$")
      if suffix and ({ ["loops.txt"] = 1, ["fusion.txt"] = 1, ["kernels.c"] = 1, ["gccjit.c"] = 1, ["timings.txt"] = 1 })[suffix] then
        native[suffix] = true  -- the native code generator's dumps of the same graph
      else
        files[#files + 1] = name
      end
    end
    p:close()
    S.eq(#files, 1)
    for _, suffix in ipairs({ "loops.txt", "fusion.txt", "kernels.c", "timings.txt" }) do S.truthy(native[suffix], suffix) end
    local text = read(dir .. "/" .. files[1])
    os.execute('rm -rf "' .. dir .. '"')
    S.truthy(text:find("guards of segment ending at return of", 1, true), text)
    S.truthy(text:find("input %0: float32{3} strides {1}", 1, true), text)
    S.truthy(text:find("-- recorded\ngraph", 1, true), text)
    S.truthy(text:find("-- optimised\ngraph", 1, true), text)
    S.truthy(text:find("%d+ = sin%(") and text:find("test_compile_more%.lua:%d+"), text)
    S.truthy(text:find("-- compile time: [%d.]+ us"), text)
    -- the recorded graph has both adds, the optimised one a single add
    local recorded = text:match("%-%- recorded\n(.-)%-%- optimised")
    local optimised = text:match("%-%- optimised\n(.-)%-%- compile time")
    local _, n_rec = recorded:gsub("= add%(", "")
    local _, n_opt = optimised:gsub("= add%(", "")
    S.eq({ n_rec, n_opt }, { 2, 1 })
  end)

  it("logs the compile time of each graph with CRESCENT_LOGS=perf", function()
    local bin = os.getenv("CRESCENT_BIN") or "build/crescent"
    local script = os.tmpname()
    local out = os.tmpname()
    local h = assert(io.open(script, "w"))
    h:write([[local T = require "crescent"
local f = T.compile(function(x) return x * 2 + 1 end)
for _ = 1, 4 do f(T.ones(2)) end
]])
    h:close()
    os.execute(string.format('CRESCENT_LOGS=perf "%s" "%s" 2> "%s"', bin, script, out))
    local log = read(out)
    os.remove(script)
    os.remove(out)
    S.truthy(log:find("%[crescent perf%] .- compiled in [%d.]+ us %(2 ops %-> 2%)"), log)
  end)
end)

describe("lazy values and raw pointers", function()
  it("computes a value the graph dropped before its input is written through data_ptr", function()
    local ffi = require "ffi"
    local store = {}
    local f = T.compile(function(x) store.y = x * 3; return x + 1 end)
    for _ = 1, 4 do f(T.ones(3)) end  -- compiled: store.y is not an output yet
    local x = T.ones(3)
    f(x)
    S.truthy(require("crescent.core").ptr(store.y)._storage == nil, "store.y should still be lazy (dropped by the graph)")
    local p = ffi.cast("float*", x:data_ptr())
    for i = 0, 2 do p[i] = 100 end  -- a write the runtime cannot see
    S.eq(store.y:totable(), { 3, 3, 3 })
    S.eq(x:totable(), { 100, 100, 100 })
  end)
end)

describe("reduce-overhead and hidden state", function()
  it("never replays a function that draws from math.random, and replays one reading math.pi", function()
    local f = T.compile(function(x)
      if math.random() < 0.5 then return x + 1 end
      return x - 1
    end, { mode = "reduce-overhead" })
    local g = T.compile(function(x) return x * math.pi end, { mode = "reduce-overhead" })
    math.randomseed(7)
    T.compiler.reset()
    local x, seen = T.zeros(1), {}
    for _ = 1, 40 do seen[f(x):item()] = true end
    S.eq({ seen[1], seen[-1] }, { true, true })
    S.eq(T.compiler.stats().replays, 0)
    for _ = 1, 10 do S.close(g(T.ones(1)), { math.pi }) end
    S.truthy(T.compiler.stats().replays >= 5, "g should be replayed")
  end)
end)

describe("reduce-overhead replays", function()
  local function replays() return T.compiler.stats().replays end
  it("replay a plan with tensor and value arguments, upvalue weights and mixed results", function()
    T.compiler.reset()
    local model = { w = T.tensor({ 1, 2, 3 }), b = T.tensor({ 10, 20, 30 }) }
    local f = T.compile(function(x, scale, tag)
      return x * model.w * scale + model.b, tag, x:sum()
    end, { mode = "reduce-overhead" })
    local x = T.tensor({ 1, 1, 1 })
    for _ = 1, 4 do f(x, 2, "a") end
    local r0 = replays()
    local y, tag, s = f(x, 2, "a")
    S.truthy(replays() == r0 + 1, "the call should be a replay")
    S.eq({ y:totable(), tag, s:item() }, { { 12, 24, 36 }, "a", 3 })
    -- a new weight behind the same upvalue is read at the next call (still a replay)
    model.w = T.tensor({ 3, 2, 1 })
    S.eq(f(x, 2, "a"):totable(), { 16, 24, 32 })
    S.eq(replays(), r0 + 2)
    -- another value argument, another shape, another argument count: the normal compiled path
    S.eq(f(x, 3, "a"):totable(), { 19, 26, 33 })
    S.eq(f(T.ones(2, 3), 2, "a"):totable(), { { 16, 24, 32 }, { 16, 24, 32 } })
    S.eq(select(2, f(x, 2, "b")), "b")
    S.eq(replays(), r0 + 2)
    S.eq(f(x, 2, "a"):totable(), { 16, 24, 32 })  -- the plan still stands
    S.eq(replays(), r0 + 3)
    -- T.compiler.reset() drops the plan: the function is probed and planned again
    T.compiler.reset()
    for _ = 1, 6 do S.eq(f(x, 2, "a"):totable(), { 16, 24, 32 }) end
    S.truthy(replays() >= 1, "replays after a reset")
  end)
end)

-- Minimal programs the random-program fuzzer found (tests/lua/test_compile_fuzz.lua).
describe("fuzzer regressions", function()
  local function check(fn, make_inputs, calls)
    local store_c, store_e = {}, {}
    local cf = T.compile(fn(store_c), { hot = 0 })
    local ef = fn(store_e)
    local kept_c, kept_e = {}, {}
    for call = 1, calls do
      cf(make_inputs(call))
      ef(make_inputs(call))
      kept_c[call], kept_e[call] = store_c.s, store_e.s  -- read after the next calls
    end
    for call = 1, calls do S.eq(kept_c[call]:totable(), kept_e[call]:totable()) end
  end

  it("a stored view of a value written in place by a later segment sees the write", function()
    check(function(store)
      return function(y, k)
        local t1 = T.full({ 4 }, k, { dtype = "float64" })
        store.s = t1[3]
        local t3 = T.sub(t1, t1, { alpha = 1e-3 })
        if y:sum():item() > 0 then t3[3] = 1e-3 else t3[4] = -0.25 end
        t1:sub_(t3)
      end
    end, function(call) return T.tensor({ call % 2 == 0 and 1 or -1 }), 2.25 end, 5)
  end)

  it("a value read before a write through another input sharing its storage keeps the old data", function()
    check(function(store)
      return function(x, y)
        local t11 = x:contiguous()  -- x itself
        local t21 = t11:unsqueeze(2)
        local _ = t21:mean():item()
        local t27 = y:floor()
        store.s = t27:ceil() * t11:reciprocal()
        t21[3] = t27
      end
    end, function(call)
      T.manual_seed(100 + call)
      return T.randn(3, 2), T.randn({})
    end, 5)
  end)
end)

describe("fuzzer regressions: repeated views and ops that return their input", function()
  it("a write through one of two contiguous() of a view of an input reaches the input", function()
    local f = T.compile(function(x)
      local t = x:view(2, 5)
      local a, _ = t:contiguous(), t:contiguous()  -- both are t itself
      local _ = x:sum():item()
      a:fill_(1)
    end, { hot = 0 })
    for _ = 1, 4 do
      local x = T.zeros(2, 5)
      f(x)
      S.eq(x:sum():item(), 10)
    end
  end)
  it("a stored duplicate view of an input sees a later write to the input", function()
    local store, kept = {}, {}
    local f = T.compile(function(x)
      local a = x:narrow(1, 4, 1)
      local b = x:narrow(1, 4, 1)  -- merged with a: the same storage
      store.s = b
      local w = a * 1
      local _ = x:sum():item()
      x[4] = 2
      return w:contiguous()
    end, { hot = 0 })
    for call = 1, 4 do f(T.ones(4)); kept[call] = store.s end
    for call = 1, 4 do S.eq(kept[call]:totable(), { 2 }) end
  end)
  it("a no-op to() of a view is the view: it sees a later write", function()
    local store = {}
    local f = T.compile(function(y, v)
      local a = y:permute(1, 2)
      local _, c = a:to("float64"), a:to("float64")
      local _ = a:sum():item()
      store.s = c
      y[5] = v
    end, { hot = 0 })
    for _ = 1, 4 do
      f(T.ones(5, 1, { dtype = "float64" }), T.tensor({ 7.0 }, { dtype = "float64" }))
      S.eq(store.s:totable(), { { 1 }, { 1 }, { 1 }, { 1 }, { 7 } })
    end
  end)
  it("takes add_'s alpha positionally, as API.md writes it", function()
    local x = T.ones(2)
    x:add_(T.ones(2), 2)
    S.eq(x:totable(), { 3, 3 })
    S.eq(T.sub(T.ones(1), T.ones(1), 3):totable(), { -2 })
  end)
end)

describe("ops that fail inside a compiled function", function()
  it("replay a metadata error under pcall; an index error is not remembered and keeps its line", function()
    local f = T.compile(function(x, idx)
      local ok1 = pcall(function() return x + T.zeros(5) end)  -- shapes: fails every call
      local r = x:index_select(1, idx)  -- @index_select: its values decide
      return ok1, r
    end)
    local line = 0
    for n, text in ipairs((function()
      local t, f2 = {}, assert(io.open(debug.getinfo(1, "S").source:sub(2)))  -- this file
      for l in f2:lines() do t[#t + 1] = l end
      f2:close()
      return t
    end)()) do
      if text:find("-- @" .. "index_select", 1, true) then line = n end  -- not this line
    end
    local x = T.tensor({ 10, 20, 30 })
    for call = 1, 6 do
      if call % 2 == 1 then
        local err = S.errors(function() f(x, T.tensor({ 9 })) end, "index_select: index 9 is out of range")
        S.truthy(err:find("test_compile_more.lua:" .. line .. ":", 1, true), err)
      else
        local ok1, r = f(x, T.tensor({ 2 }))
        S.eq(ok1, false)
        S.eq(r:totable(), { 20 })
      end
    end
  end)
end)

describe("unused ops that fail on values (issue 32, F15)", function()
  -- eager raises at an index out of range (or an integer division by zero) even when the result
  -- is unused: dead-code elimination must keep the op, and native code must check it
  local fns = {
    index_select = function(x, i) local _ = x:index_select(1, i); return x + 1 end,
    gather = function(x, i) local _ = x:gather(1, i:view(-1, 1):expand(-1, 3)); return x * 2 end,
    embedding = function(x, i) local _ = T.embedding(i:view(1, -1), x); return x - 1 end,
    fmod = function(x, i) local _ = T.fmod(i, i - 1); return x + 1 end,  -- an index 1 divides by zero
  }
  S.native_it("raise in compiled code as in eager, once the graph is hot and compiled", function()
    local x, good, bad = T.randn(5, 3), T.tensor({ 2, 5 }), T.tensor({ 1, 9 })
    for name, fn in pairs(fns) do
      local ok, want = pcall(fn, x, bad)
      S.eq(ok, false, name .. ": eager must raise")
      for _, backend in ipairs({ "auto", "eager" }) do
        local before = T.compiler.stats()
        local f = T.compile(fn, { backend = backend })
        for _ = 1, 3 do S.eq(f(x, good):totable(), fn(x, good):totable(), name) end
        local st = T.compiler.stats()
        local made = st.kernels_compiled + st.disk_cache_hits - before.kernels_compiled - before.disk_cache_hits
        if backend == "auto" then S.truthy(made > 0, name .. ": no native code") end
        local ok2, got = pcall(f, x, bad)
        S.eq({ ok2, got }, { false, want }, name .. " (" .. backend .. ")")
        S.eq(f(x, good):totable(), fn(x, good):totable(), name .. " after the error")
      end
    end
  end)
end)

describe("booleans where numbers go, in native code (issue 32)", function()
  S.native_it("count as 0 and 1, as eager reads them (norm's p, add's alpha, arange's bounds)", function()
    local x, b, c = T.randn(3, 5), T.tensor({ true, false, true }), T.tensor({ true, true, false })
    local fns = {
      function() return x:norm(-1, false, { p = true }) end,
      function() return T.add(b, c, { alpha = false }) end,
      function() return T.arange(-2, true, { dtype = "float64" }) * 2 end,
      function() return T.linspace(true, 4, 4) + 0 end,
    }
    for k, fn in ipairs(fns) do
      local f, want = T.compile(fn), fn()
      for _ = 1, 3 do
        local got = f()
        S.eq({ got.dtype, got:totable() }, { want.dtype, want:totable() }, "case " .. k)
      end
    end
  end)
end)

describe("random draws in compiled graphs", function()
  S.native_it("draw eager's numbers in eager's order, around a randint range the loops leave to eager", function()
    local f = T.compile(function(x)
      return x + T.randint(-5, 7, { 3, 4 }), T.rand(9), T.randint(-2 ^ 52, 2 ^ 52, { 4 }) * 2,  -- |lo| + span > 2^53: eager
        T.randn(5, { dtype = "float64" }), T.randint(3, 9, { 7 }, { dtype = "int32" }), T.randint(0, 2, { 6 }, { dtype = "bool" })
    end)
    local x = T.zeros(3, 4):long()
    for i = 1, 4 do
      T.manual_seed(100 + i)
      local got = { f(x) }
      local next_got = T.rand(1):item()
      T.manual_seed(100 + i)
      local want = { x + T.randint(-5, 7, { 3, 4 }), T.rand(9), T.randint(-2 ^ 52, 2 ^ 52, { 4 }) * 2,
        T.randn(5, { dtype = "float64" }), T.randint(3, 9, { 7 }, { dtype = "int32" }), T.randint(0, 2, { 6 }, { dtype = "bool" }) }
      S.eq(next_got, T.rand(1):item(), "the generator after call " .. i)
      for k = 1, #want do
        S.eq({ got[k].dtype, got[k]:totable() }, { want[k].dtype, want[k]:totable() }, "call " .. i .. " result " .. k)
      end
    end
    S.truthy(T.compiler.stats().kernels_compiled > 0, "nothing was compiled")
  end)
end)
