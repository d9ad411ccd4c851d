-- T.compile on edge cases, each a regression: values the graph dropped that a raw-pointer write
-- would change, the programs the random-program fuzzer found (views written in place, repeated
-- views, ops that return their input), ops that fail inside a compiled function or on values
-- whose result is unused, booleans where numbers go, and random draws in eager's order.
local T = require "crescent"
local S = expect

local THIS_FILE = debug.getinfo(1, "S").source:match("[^/]*$")  -- "test_compile_edge_cases.lua"

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
      local t, f2 = {}, assert(io.open(debug.getinfo(1, "S").source:sub(2)))
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
        S.truthy(err:find(THIS_FILE .. ":" .. line .. ":", 1, true), err)
      else
        local ok1, r = f(x, T.tensor({ 2 }))
        S.eq(ok1, false)
        S.eq(r:totable(), { 20 })
      end
    end
  end)
end)

describe("Lua code after an op that fails on its values", function()
  -- the graph fails when it runs, at the return: the Lua code after the failing op has run, and
  -- tensors it stored from that call have no value (docs/compile.md, "Errors and values"); nor
  -- has the failing op's own result, whose elements past the failure were never computed
  S.native_it("leaves what it stored from the failed call without a value, recorded and compiled", function()
    local why = "this tensor has no value: the compiled function that made it stopped with an error"
    for _, backend in ipairs { "eager", "auto" } do
      local store = {}
      local f = T.compile(function(x, d)
        local r = T.remainder(x, d)
        store.r, store.s = r, x + 1
        return r
      end, { backend = backend })
      local x = T.tensor({ 4, 5, 6, 7 })
      for _ = 1, 3 do S.eq(f(x, T.tensor({ 3, 2, 5, 4 })):totable(), { 1, 1, 1, 3 }) end
      T.compiler.wait()
      S.errors(function() f(x, T.tensor({ 3, 2, 0, 4 })) end, "remainder: integer division by zero")
      for _, k in ipairs { "r", "s" } do S.errors(function() return store[k]:totable() end, why) end
      S.eq(f(x, T.tensor({ 3, 2, 5, 4 })):totable(), { 1, 1, 1, 3 }, backend)
      S.eq({ store.r:totable(), store.s:totable() }, { { 1, 1, 1, 3 }, { 5, 6, 7, 8 } }, backend)
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
    local st = T.compiler.stats()  -- (a kernel of an earlier run comes from the disk cache)
    S.truthy(st.kernels_compiled + st.disk_cache_hits > 0, "nothing was compiled")
  end)
end)

describe("reductions of 0-d tensors", function()
  -- lowered as reductions over one dim of size 1 (on CUDA the eager op is such a kernel too)
  local cases = {
    function(x) return x:sum() end, function(x) return x:amax() end, function(x) return x:prod() end,
    function(x) return x:sum(1, true) end, function(x) return x:logsumexp(-1) end, function(x) return x:argmax() end,
    function(x) return x:max(1) end, function(x) return x:any() end, function(x) return x:all() end,
    function(x) return (x * 2):sum() + 1 end, function(x) return x:mean() end, function(x) return x:var() end,
    function(x) return x:std(1, { correction = 0 }) end, function(x) return x:norm() end,
  }
  it("give eager's values when compiled", function()
    for i, fn in ipairs(cases) do
      for _, dt in ipairs(i <= 10 and { "float32", "float64", "int64", "bool" } or { "float32", "float64" }) do
        local x = T.tensor(dt == "bool" and 1 or -2.5):to(dt)
        local want = { fn(x) }
        local f = T.compile(fn)
        for call = 1, 3 do
          local got = { f(x) }
          for k = 1, #want do
            S.eq({ got[k].dtype, got[k].shape, tostring(got[k]) }, { want[k].dtype, want[k].shape, tostring(want[k]) },
              ("case %d %s call %d result %d"):format(i, dt, call, k))
          end
        end
      end
    end
  end)
end)

-- What a compiled call leaves until Lua collects its handles (a lazy header per op, the record
-- that recomputes dropped values) comes from the host caches' huge pages: from malloc's growing
-- heap it cost a page fault per 4 KiB, and the first ~70 calls of a 60-op function were 9x slower.
describe("host memory of the first compiled calls", function()
  it("a 60-op chain keeps nothing from malloc's heap per call", function()
    local ffi = require "ffi"
    pcall(ffi.cdef, [[ struct cr_mallinfo2 { size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks,
                       uordblks, fordblks, keepcost; }; struct cr_mallinfo2 mallinfo2(void); ]])
    local ok, mallinfo2 = pcall(function() return ffi.C.mallinfo2 end)
    if not ok then S.skip("no glibc mallinfo2") end
    local f = T.compile(function(x)
      for _ = 1, 20 do x = (x * 1.01 + 0.5):relu() end
      return x
    end)
    local x = T.randn(1024)
    for _ = 1, 4 do f(x) end  -- recorded, then compiled
    local before = tonumber(mallinfo2().uordblks)
    for _ = 1, 36 do f(x) end
    local per_call = (tonumber(mallinfo2().uordblks) - before) / 36
    -- (was ~39 KB a call: 60 headers of 512 B, their record, the output's block)
    S.truthy(per_call < 1024, "malloc's heap grew by " .. per_call .. " bytes a call")
    local want = x
    for _ = 1, 20 do want = (want * 1.01 + 0.5):relu() end
    S.eq(f(x):totable(), want:totable())
  end)
end)

-- Values that depend on an in-place write or a random draw are kept when Lua still reaches them
-- after the function's first run (a full collection learns which); the rest are dropped so that
-- they fuse, and computed from the state the run left (its draws again) if Lua reaches one later.
describe("values after an in-place write", function()
  it("keeps what Lua reaches, gives eager's values, and the others stay out of the graph", function()
    local keep = {}
    local f = T.compile(function(x, buf)
      buf:add_(x)
      local z = buf * 2        -- reads the written storage: not recomputable later
      keep.last = z + 1        -- reached: kept
      return (z * z):sum()     -- z * z: dropped, fused into the sum
    end)
    local buf_c, buf_e = T.zeros(4), T.zeros(4)
    for i = 1, 6 do
      local x = T.arange(4):float() * i
      local got = f(x, buf_c)
      buf_e:add_(x)
      local z = buf_e * 2
      S.eq(got:item(), (z * z):sum():item(), "call " .. i)
      S.eq(keep.last:totable(), (z + 1):totable(), "call " .. i)
    end
    -- keep.last of an earlier call survives later writes to buf
    local before = keep.last
    f(T.ones(4), buf_c)
    S.eq(before:totable(), (buf_e * 2 + 1):totable())
  end)
  -- (a graph compiled to native code drops z; without a native backend the recorded graph runs)
  -- A dropped value Lua reaches only later is computed from the state the run left: the writes
  -- came before its reads, and the inputs written are unchanged since.
  local function dropped_z(stash)
    return T.compile(function(x, buf, save)
      buf:add_(x)
      local t = T.zeros(3)
      t:add_(buf)                -- a storage of the graph's own, written: written again
      local z = t * 3
      if save then stash.z = z end  -- (not a tensor op: the trace does not see the branch)
      return (z + 1):sum()
    end)
  end
  S.native_it("computes a dropped value Lua reaches only later from the state the run left", function()
    local stash = {}
    local f = dropped_z(stash)
    local buf = T.zeros(3)
    for _ = 1, 4 do f(T.ones(3), buf, false) end
    T.compiler.wait()  -- compiled without z (a background compile: wait for it)
    f(T.ones(3), buf, true)
    f(T.ones(3), T.zeros(3), false)  -- another call: other inputs, stash.z untouched
    S.eq(stash.z:totable(), { 15, 15, 15 })
    f(T.ones(3), buf, true)  -- recompiled: z is an output now
    S.eq(stash.z:totable(), { 18, 18, 18 })
  end)
  S.native_it("raises a clear error for a dropped value whose written input changed since", function()
    local stash = {}
    local f = dropped_z(stash)
    local buf = T.zeros(3)
    for _ = 1, 4 do f(T.ones(3), buf, false) end
    T.compiler.wait()
    f(T.ones(3), buf, true)
    buf:add_(1)  -- z was 3 * buf as the run left it: that state is gone
    S.errors(function() return stash.z:totable() end, "was modified in place since", "clone it")
    f(T.ones(3), buf, true)  -- recompiled: z is an output now
    S.eq(stash.z:totable(), { 21, 21, 21 })
  end)
  -- (y:contiguous() is y: its node computes nothing, so it is no read of y before the write)
  S.native_it("computes a dropped value after a write through contiguous() of an input", function()
    local stash = {}
    local f = T.compile(function(y, save)
      local v = y:contiguous():t():div_(4)
      local z = v:reciprocal():amax(2)
      if save then stash.z = z end
      return (z + 1):sum()
    end)
    for _ = 1, 4 do f(T.ones(2, 3), false) end
    collectgarbage()
    f(T.ones(2, 3), false)  -- after a collection: Lua did not reach z, so the graph drops it
    T.compiler.wait()
    local y = T.arange(1, 7):float():view(2, 3)
    f(y, true)
    S.close(stash.z, { 4, 2, 4 / 3 }, nil, nil, "the largest of each row of 1 / (y^T / 4)")
    S.eq(y:totable(), { { 0.25, 0.5, 0.75 }, { 1, 1.25, 1.5 } })
  end)
  S.native_it("draws a dropped random value again as its call drew it", function()
    local stash = {}
    local f = T.compile(function(x, save)
      local a = T.rand(3)       -- (a draw before z's: z's offsets follow it)
      local z = T.rand(3) + x
      if save then stash.z = z end
      return (z * 2 + a):sum()
    end)
    for _ = 1, 4 do f(T.ones(3), false) end
    T.compiler.wait()
    T.manual_seed(11)
    f(T.ones(3), true)
    local z = stash.z:totable()  -- (computed now)
    local next_draw = T.rand(2)
    T.manual_seed(11)
    T.rand(3)
    S.eq(z, (T.rand(3) + 1):totable())
    S.eq(next_draw:totable(), T.rand(2):totable(), "the generator where the call left it")
  end)
  -- (a pure value waits on its inputs: a write to one computes it first, and it counts as used)
  S.native_it("computes a pure value Lua holds before its input's write, then keeps it", function()
    T.compiler.reset()
    local stash = {}
    local f = T.compile(function(x, w, save)
      local h = x * w
      if save then stash.h = h end
      return (h + 1):sum()
    end)
    local w = T.ones(3)
    for _ = 1, 4 do f(T.ones(3), w, false) end
    T.compiler.wait()
    for i = 1, 3 do
      f(T.ones(3), w, true)
      w:add_(1)
      S.eq(stash.h:totable(), { i, i, i })
    end
    S.eq(T.compiler.stats().recompiles, 1, "h kept after its first use")
  end)
  S.native_it("raises a clear error for a dropped value whose call's input was written since", function()
    local stash = {}
    local f = T.compile(function(x, save)
      local z = T.rand(3) + x
      if save then stash.z = z end
      return (z * 2):sum()
    end)
    for _ = 1, 4 do f(T.ones(3), false) end
    T.compiler.wait()
    local x = T.ones(3)
    f(x, true)
    x:add_(1)  -- (not computed for the write: most such values are garbage not yet collected)
    S.errors(function() return stash.z:totable() end, "was not kept by its graph", "written in place")
  end)
end)

describe("int32 indices a compiled function makes", function()
  it("replay without reading the lazy index (every indexing op, automatic and dynamic sizes)", function()
    -- (the layouts of a replayed call come from infer rules, which converted the index by reading it)
    local cases = {
      function(x, i) return x:index_select(1, i:int()) end,
      function(x, i) return x:gather(2, i:int():view(1, 2):expand(x:size(1), 2)) end,
      function(x, i) return x:index_add(1, i:int(), T.ones(2, 2)) end,
      function(x, i) return x:scatter_add(2, i:int():view(1, 2):expand(x:size(1), 2), T.ones(x:size(1), 2)) end,
      function(x, i) return x[i:int()] end,
      function(x, i) return x:index({ i:int(), T.all }) end,
      function(x, i) return T.take_along_dim(x, i:int():view(1, 2):expand(x:size(1), 2), 2) end,
      function(x, i) return T.embedding(i:int(), x) end,
    }
    for n, fn in ipairs(cases) do
      for _, dynamic in ipairs { false, true } do
        local f = T.compile(fn, { dynamic = dynamic or nil })
        for k = 1, 5 do
          local x, i = T.arange((k + 2) * 2):float():view(k + 2, 2), T.tensor({ 2, 1 })
          S.close(f(x:clone(), i), fn(x:clone(), i), 0, 0, ("case %d, call %d, dynamic %s"):format(n, k, tostring(dynamic)))
        end
      end
    end
  end)
end)

describe("compiled functions in coroutines", function()
  it("a yield ends the call's capture: other code runs uncaptured, the rest of the call eagerly", function()
    local f = T.compile(function(x)
      local y = x * 2
      coroutine.yield(y)
      return y + 1
    end)
    local g = T.compile(function(x) return (x * 3 + 1):relu() end)
    for i = 1, 6 do
      local co = coroutine.create(f)
      local _, y = coroutine.resume(co, T.ones(3) * i)
      -- while f is suspended: the program's own data read, another compiled function, T.explain
      S.eq((T.ones(3) * 10 + i):sum():item(), 30 + 3 * i, "program")
      S.eq(g(T.ones(2) * i):totable(), { 3 * i + 1, 3 * i + 1 }, "g")
      S.eq(T.explain(function(x) return x * 3 end, T.ones(2)).graph_count, 1, "explain")
      local _, r = coroutine.resume(co)
      S.eq({ y:totable(), r:totable() }, { { 2 * i, 2 * i, 2 * i }, { 2 * i + 1, 2 * i + 1, 2 * i + 1 } }, "call " .. i)
      T.compiler.wait()
    end
    -- a suspended call never resumed leaves no capture behind
    coroutine.resume(coroutine.create(f), T.ones(3))
    S.eq(g(T.ones(2)):totable(), { 4, 4 }, "after an abandoned call")
    S.eq(T.explain(function(x) return x + 1 end, T.ones(2)).graph_count, 1, "explain after an abandoned call")
  end)

  it("a generator resumed inside a compiled call stays part of it; fullgraph refuses a yield out of it", function()
    local gen = coroutine.wrap(function() for i = 1, 4 do coroutine.yield(T.ones(2) * i) end end)
    local h = T.compile(function() local a = gen(); local b = gen(); return a + b end, { fullgraph = true })
    S.eq(h():totable(), { 3, 3 }, "first")
    S.eq(h():totable(), { 7, 7 }, "second")
    local f = T.compile(function(x) coroutine.yield(x * 2); return x end, { fullgraph = true })
    local ok, err = coroutine.resume(coroutine.create(f), T.ones(1))
    S.eq(ok, false, "fullgraph")
    S.truthy(tostring(err):find("fullgraph = true%): graph break at .*coroutine.yield suspends the compiled function"), err)
  end)

  it("reduce-overhead never replays a function that yields", function()
    local f = T.compile(function(x) local a = x + 1; coroutine.yield(a:sum()); return a * 2 end,
                        { mode = "reduce-overhead" })
    for i = 1, 8 do
      local co = coroutine.create(f)
      local _, s = coroutine.resume(co, T.ones(3) * i)
      S.eq({ coroutine.status(co), s:item() }, { "suspended", 3 * (i + 1) }, "yielded " .. i)
      local _, r = coroutine.resume(co)
      S.eq(r:totable(), { 2 * (i + 1), 2 * (i + 1), 2 * (i + 1) }, "returned " .. i)
      T.compiler.wait()
    end
  end)
end)

describe("operand numbers that vary", function()
  it("out of an integer dtype's range wrap as eager's (through int64), not saturate", function()
    local fn = function(x, n) return x + n end
    local f = T.compile(fn)
    local x = T.tensor({ 1, 2, -3 }):int()
    for _, n in ipairs({ 3, 5, 7, 9, 2 ^ 32 + 5, 2 ^ 31, -2 ^ 31 - 1, 2 ^ 40, 11 }) do
      S.eq(f(x, n):totable(), fn(x, n):totable(), "n = " .. ("%.0f"):format(n))
      T.compiler.wait()
    end
    S.eq(f(x, 2 ^ 32 + 5):totable(), { 6, 7, 2 }, "torch's wrap")
  end)
end)
