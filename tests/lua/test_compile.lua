-- Graph capture (API.md section 5): T.compile gives the results of eager execution on the cold
-- (recording), replayed and compiled paths - bit for bit with backend = "eager", within float32
-- rounding (reductions sum in another order) with native code; T.explain, T.compiler.stats and the
-- recompile / cache-limit accounting; errors as in eager mode; escaping values; modules; options.
-- The compiler's dumps and logs: test_compile_logs.lua; regressions: test_compile_edge_cases.lua.
local T = require "crescent"
local S = expect
local SRC = debug.getinfo(1, "S").short_src  -- "tests/lua/test_compile.lua"
local errs = S.error_checker("test_compile.lua")

-- ---- helpers ---------------------------------------------------------------------------------

local LINES = {}
for l in io.lines(debug.getinfo(1, "S").source:sub(2)) do LINES[#LINES + 1] = l end
local function at(name)  -- "file:line" of the line of this file that ends with `-- @name`
  for i, l in ipairs(LINES) do if l:find("%-%- @" .. name .. "$") then return SRC .. ":" .. i end end
  error("no line marked @" .. name)
end

local pack, snap = S.pack, S.snapshot

-- Equality of snapshots (spec.lua's first_difference: numbers bitwise, or within tol).
local function same(got, want, msg, tol)
  local p, a, b = S.first_difference(got, want, nil, tol)
  if p then error(string.format("%s at %s: %s vs %s", msg or "values differ", p, S.fmt(a), S.fmt(b)), 2) end
end

local function stat(k) return T.compiler.stats()[k] end
local function randn(call, ...) T.manual_seed(1000 + call); return T.randn(...) end

-- Runs fn on fresh args(call), snapshotting the results and the args after the call (mutations
-- of inputs are part of the result) and, with rng, the generator state after it.
local function run_snap(f, c, call)
  local args = pack(c.args(call))
  local rets = pack(f(unpack(args, 1, args.n)))
  local r = { rets = snap(rets), args = snap(args) }
  if c.rng then r.rng = T.rand(3):totable() end
  return r
end

-- A case runs eagerly and compiled, several times: cold (recording), replayed, compiled. Unless
-- its inputs change every call (c.varies), some graph must have been compiled.
local function check_case(c, opts, calls)
  local eager = c.make and c.make(false) or c.fn
  local cf = T.compile(c.make and c.make(true) or c.fn, opts)
  T.compiler.reset()
  for call = 1, calls do
    local want = run_snap(eager, c, call)
    local got = run_snap(cf, c, call)
    local native = not (opts and opts.backend == "eager")
    same(got, want, c.name .. ", call " .. call, native and { 1e-5, 1e-6 } or nil)
  end
  if not c.varies then S.truthy(stat("graphs_compiled") > 0, "no graph was compiled") end
end

-- ---- the corpus --------------------------------------------------------------------------------

local W, B = (function() T.manual_seed(77); return T.randn(5, 4), T.randn(5) end)()
local function x34(call) return randn(call, 3, 4) end
local function inner(x) return (x * 3):sin() + 1 end
local inner_c = T.compile(inner)
local function helper2(x) return x:sum():item() end
local function helper1(x) local s = helper2(x * 2); return x + s, s end

local corpus = {
  { name = "pointwise chain", args = x34, fn = function(x)
    return ((x * 2 + 1):exp():tanh() - x:sigmoid()):relu() * x:abs():sqrt() + x:neg():exp2()
  end },
  { name = "scalar chains are not reassociated", args = x34, fn = function(x)
    return (x * 3) * 7, (x + 0.1) + 0.2, x / 3 * 3, (x - 0.3) - 0.7, 2 ^ x, x ^ 2, x % 0.7
  end },
  { name = "mixed dtypes and comparisons",
    args = function(c) return x34(c), T.arange(4), T.arange(12):view(3, 4):int() end,
    fn = function(x, i, j)
      return x + i, i * 2, i:float() / 3, x:gt(0), T.where(x:gt(0), x, i:double()), x:half() * 2,
        x:to("bfloat16") + 1, j * 3 + i, j:eq(5), x:ne(x), j % 3
    end },
  { name = "reductions", args = x34, fn = function(x)
    local v, ix = x:max(2)
    return x:sum(2), x:mean(1, true), x:amax({ 1, 2 }), x:sum(), x:amin(2, true), x:prod(1), x:var(2),
      x:logsumexp(2), x:argmax(2), v, ix, x:std(1, true), x:norm(), x:cumsum(2), x:sum({ 1, 2 }, true)
  end },
  { name = "softmax and log_softmax", args = x34, fn = function(x)
    return x:softmax(2), x:log_softmax(1), T.softmax(x * 10, -1):sum(-1)
  end },
  { name = "views", args = x34, fn = function(x)
    return x:view(4, 3), x:reshape(2, 6), x:transpose(1, 2), x:permute(2, 1), x:t(), x:flatten(), x:view(12) + 0
  end },
  { name = "narrow, select, slice, index", args = x34, fn = function(x)
    return x:narrow(2, 2, 2), x:select(1, 3), x:slice(2, 1, 4, 2), x[2], x[1][3], x:narrow(1, 2, 2) * 2
  end },
  { name = "expand, unsqueeze, squeeze", args = x34, fn = function(x)
    return x:unsqueeze(1), x:sum(2, true):expand(3, 4), x:unsqueeze(3):squeeze(3), x:unsqueeze(2):squeeze(),
      x:sum(2, true):expand(3, 4) + x
  end },
  { name = "view-of-view chains", args = x34, fn = function(x)
    local a = x:transpose(1, 2):narrow(1, 2, 2):select(2, 1):unsqueeze(1)
    local b = x:view(2, 6):t():reshape(3, 4)
    return a, a * 2, b, x:t():contiguous():view(2, 6), x:permute(2, 1):reshape(12), x[2]:narrow(1, 2, 2)
  end },
  { name = "matmul and linear", args = function(c) return x34(c), randn(c + 50, 4, 5), randn(c + 60, 2, 4, 3) end,
    fn = function(a, b, c)
      return a:matmul(b), T.linear(a, W, B), T.linear(a, W), T.mm(a, b), a:matmul(b:select(2, 1)), c:matmul(a),
        T.bmm(c, c:transpose(2, 3))
    end },
  { name = "cat and stack", args = function(c) return x34(c), randn(c + 5, 3, 4) end, fn = function(x, y)
    return T.cat({ x, y }, 1), T.stack({ x, y }, 3), T.cat({ x, x * 2, y:t():t() }, 2), T.stack({ x, y })
  end },
  { name = "split and chunk (table outputs)", args = x34, fn = function(x)
    local parts, ch = x:split(2, 2), x:chunk(3, 1)
    return parts, ch, parts[1] + parts[2], #ch
  end },
  { name = "in-place ops on inputs",
    args = function(c) return x34(c), randn(c + 1, 3, 4), x34(c + 2), x34(c + 3), x34(c + 4) end,
    fn = function(x, y, z, w, v)
      x:add_(y); y:mul_(2); z:fill_(3)
      w:copy_(x); v:clamp_(-0.5, 0.5); x:sub_(v):div_(2)
      return x + 1, y:zero_()
    end },
  { name = "in-place through views", args = x34, fn = function(x)
    x:narrow(1, 2, 2):mul_(2); x:select(2, 1):fill_(0)
    x[3]:add_(1); x:t()[2]:clamp_(nil, 0.25)
    return x:sum(1)
  end },
  { name = "input passed twice, in place", args = function(c) local x = x34(c); return x, x end, fn = function(a, b)
    a:add_(1)
    local r = b * 2
    return r, b:mul_(3), a:sum()
  end },
  { name = "aliased inputs on some calls only", args = function(c)
    local x = x34(c)
    if c % 2 == 1 then return x, x:narrow(1, 1, 2) end
    return x, x:narrow(1, 1, 2):clone()
  end, fn = function(a, b) a:add_(1); return b * 1, a * 1 end },
  { name = "in-place on intermediates and their views", args = x34, fn = function(x)
    local y = x * 1
    y:add_(1):mul_(3)
    local z = y:t()
    z:sub_(1); z[1]:fill_(-1)
    return y, x
  end },
  { name = "x[i] = v", args = function(c) return x34(c), randn(c + 9, 4) end, fn = function(x, y)
    x[2] = 5; x[3] = y
    return x * 1
  end },
  { name = "item() in a loop", args = x34, fn = function(x)
    local s = 0
    for i = 1, 3 do s = s + (x * i):sum():item() end
    return x * s, s
  end },
  { name = "data-dependent branch", args = function(c) local x = x34(c):abs(); return c % 2 == 0 and x or -x end,
    fn = function(x)
      if x:sum():item() > 0 then return x * 2, "pos" else return -x + 1, "neg" end
    end },
  { name = "a list filled in a loop with breaks", args = x34, fn = function(x)
    local list = {}
    for i = 1, 3 do list[i] = x * i; x = x + list[i]:sum():item() end
    return list
  end },
  { name = "values used across a break", args = x34, fn = function(x)
    local y = x * 2
    local n = y:amax():item()
    local z = y / n
    return z - (z + y):amin():item(), n, y
  end },
  { name = "nested helper functions", args = x34, fn = function(x)
    local a, s = helper1(x)
    return a, helper1(a), s
  end },
  { name = "nested compiled function", args = x34, make = function(compiled)
    local g = compiled and inner_c or inner
    return function(x) return g(x) + g(x * 2):exp() end
  end },
  { name = "closure capturing weights", args = x34, fn = function(x) return T.linear(x, W, B):relu(), W:sum() end },
  { name = "closure with in-place state", args = x34, make = function()
    local w, count = T.zeros(4), 0
    return function(x) w:add_(x:mean(1)); count = count + 1; return w * 2, count end
  end },
  { name = "varargs", args = function(c) return x34(c), x34(c + 1), x34(c + 2) end, fn = function(...)
    local n = select("#", ...)
    local acc = ...
    for i = 2, n do acc = acc + select(i, ...) * i end
    return acc, n, ...
  end },
  { name = "nested table outputs", args = x34, fn = function(x)
    return { a = x + 1, list = { x * 2, 3, "s", true, false, { deep = x:sum() } }, n = 4.5 }
  end },
  { name = "multiple returns with nil", args = x34, fn = function(x) return x + 1, nil, 3, x * 2, nil end },
  { name = "table inputs", args = function(c) return { a = x34(c), b = { x34(c + 1), x34(c + 2) }, s = 2 } end,
    fn = function(t) return t.a + t.b[1], t.b[2] * t.s, t end },
  { name = "number, boolean and string arguments", args = function(c)
    return x34(c), c % 3 + 1, c % 2 == 0, c % 2 == 0 and "relu" or "tanh"
  end, varies = true, fn = function(x, k, flag, act)
    local y = flag and x * k or x + k
    y = act == "relu" and y:relu() or y:tanh()
    return y, k * 2, not flag, act .. "!"
  end },
  { name = "creation ops inside", args = x34, fn = function(x)
    return T.zeros(3, 4) + x, T.arange(1, 5):float() * x[1], T.ones(3, 4) * 2 + x, T.full({ 4 }, 7),
      T.eye(4):matmul(x:t()), T.linspace(0, 1, 4) + x, T.zeros_like(x), T.ones_like(x):sum(),
      T.tensor({ 1, 2, 3, 4 }) * x
  end },
  { name = "random ops after a seed set outside", args = x34, rng = true, fn = function(x)
    return x + T.randn(3, 4), T.rand(2), T.randint(0, 10, { 3 }), T.randn(3, 4) * x
  end },
  { name = "T.manual_seed inside", args = x34, rng = true, fn = function(x)
    T.manual_seed(5)
    local a = T.rand(4)
    T.manual_seed(5)
    return a, T.rand(4), x * T.randn(3, 4)
  end },
  { name = "common subexpressions", args = x34, fn = function(x)
    return (x + 1) * (x + 1) + (x + 1):exp(), x:sum(1) + x:sum(1)
  end },
  { name = "dead code", args = x34, fn = function(x)
    local unused, u2 = x:exp():sum(), (x * 100):softmax(1)
    return x + 1
  end },
  { name = "tostring inside", args = x34, fn = function(x)
    local s = tostring(x * 2); return s, x + #s
  end },
  { name = "totable and data_ptr inside", args = x34, fn = function(x)
    local t, p = (x + 1):totable(), (x * 2):data_ptr()
    return t, x * t[1][1], p ~= nil
  end },
  { name = "indexing ops",
    args = function(c) return x34(c), T.tensor({ 3, 1, 1 }), T.tensor({ { 1, 4 }, { 2, 2 }, { 4, 3 } }) end,
    fn = function(x, idx, idx2)
      return x:index_select(1, idx), x:gather(2, idx2), x:masked_fill(x:lt(0), 0), T.embedding(idx, x:t()),
        x:index_select(2, idx) * 2
    end },
  { name = "pcall around a failing op inside", args = x34, fn = function(x)
    local ok, err = pcall(function() return x + T.zeros(5) end)
    return ok, err, x * 2
  end },
  { name = "identity and repeated outputs", args = x34, fn = function(x) return x, x, x:view(12) end },
  { name = "empty and 0-d tensors", args = function(c) return T.zeros(0, 4), T.tensor(2.5), x34(c) end,
    fn = function(e, s, x) return e:sum(1), e * 2, s * x, x:sum() * s, s + 1, T.cat({ e, x }, 1) end },
  { name = "binary pointwise zoo", args = function(c) return x34(c), x34(c + 1):abs() + 0.5 end, fn = function(x, y)
    return T.clamp(x, -0.5, nil), x:lerp(y, 0.3), T.addcmul(x, x, y, 0.5), x:pow(2), T.atan2(x, y), x:fmod(0.4),
      x:remainder(0.4), T.maximum(x, y), T.minimum(x, y), x:logical_and(y:gt(1)), x:round(), x:sign(), x:gelu(),
      x:silu(), y:log(), y:rsqrt(), x:erf(), T.tril(x), T.triu(x, 1)
  end },
  { name = "bool and integer tensors", args = function(c) return x34(c), T.arange(12):view(3, 4):int() end,
    fn = function(x, i)
      local m = x:gt(0)
      return m:logical_and(x:lt(1)), m:all(), m:any(), m:sum(), i * 2 + 1, i:sum(), i % 3, i:float():mean(),
        m:logical_not()
    end },
  { name = "half precision", args = x34, fn = function(x)
    local h, b = x:half(), x:bfloat16()
    return (h * 2):exp(), h:sum(), (b + 1):sum(2), h:float() + x, b:softmax(2)
  end },
  { name = "non-contiguous inputs", args = function(c) return x34(c):t() end, fn = function(x)
    return x * 2, x:contiguous(), x:reshape(12), x:sum(1)
  end },
  { name = "no tensor results", args = x34, fn = function(x) local s = x:sum():item(); return s, s > 0 end },
  { name = "no results", args = x34, fn = function(x) x:add_(1) end },
  { name = "outputs stored in Lua between calls", args = x34, make = function()
    local prev
    return function(x) local r = x + (prev or 0); prev = r * 2; return r end
  end },
  { name = "an input read lazily, then written in place", args = x34, fn = function(x)
    local y, v, s = x * 2, x:view(12), x:sum(1)
    x:add_(1)
    return y, v, s, x * 2
  end },
  { name = "equal expressions around an in-place write are not merged", args = x34, fn = function(x)
    local a = x + 1
    x:mul_(2)
    local b, c = x + 1, x:t()
    x:sub_(1)
    return a, b, c * 1, x:t() * 1
  end },
  { name = "a folded constant written in place", args = x34, fn = function(x)
    local c, d = T.ones(3, 4) * 2, T.zeros(4) + 1
    c:add_(x); d:mul_(x[1])
    return c, d
  end },
  { name = "an in-place write to an input whose result is unused", args = x34, fn = function(x)
    x:narrow(1, 1, 2):mul_(0)
    x[3]:add_(5)
    return T.ones(1)
  end },
  { name = "an unused random op still advances the generator", args = x34, rng = true, fn = function(x)
    local _, unused = T.randn(3, 4), T.rand(5) * x:sum()
    return x + T.rand(3, 4)
  end },
  { name = "recursion through the compiled function", args = x34, make = function(compiled)
    local f
    f = function(x, n) if n == 0 then return x end return f(x * 2, n - 1) + 1 end
    if compiled then f = T.compile(f) end
    return function(x) return f(x, 3) end
  end },
}

for _, v in ipairs({ { "", nil, 6 }, { " (hot = 0, backend eager)", { hot = 0, backend = "eager" }, 3 },
  { " (mode reduce-overhead)", { mode = "reduce-overhead" }, 6 } }) do
  describe("T.compile matches eager execution" .. v[1], function()
    for _, c in ipairs(corpus) do it(c.name, function() check_case(c, v[2], v[3]) end) end
  end)
end

describe("compiled functions", function()
  it("have a corpus of at least 30 functions", function() S.truthy(#corpus >= 30, "only " .. #corpus .. " cases") end)
  it("runs the Lua body on every call", function()
    local n = 0
    local f = T.compile(function(x) n = n + 1; return x * 2 end)
    for i = 1, 5 do f(T.ones(2)); S.eq(n, i) end
  end)
  it("returns views of inputs that write through, cold and hot", function()
    local f = T.compile(function(x) return x:narrow(1, 2, 2), x[1] end)
    for call = 1, 5 do
      local x = T.zeros(4)
      local v, e = f(x)
      v:fill_(call); e:fill_(-1)
      same(x:totable(), { -1, call, call, 0 }, "call " .. call)
    end
  end)
  it("returns a fresh tensor for a folded constant on every call", function()
    local f = T.compile(function(x) return T.ones(3) * 2, x + 0 end)
    for call = 1, 5 do
      local c = f(T.ones(1))
      same(c:totable(), { 2, 2, 2 }, "call " .. call)
      c:add_(10)
    end
  end)
  it("keeps outputs that view each other as views", function()
    local f = T.compile(function(x) local y = x * 2; return y, y:narrow(1, 1, 1) end)
    for call = 1, 5 do
      local y, v = f(T.ones(3))
      v:fill_(call)
      same(y:totable(), { call, 2, 2 }, "call " .. call)
    end
  end)
  it("feeds the output of one call into the next", function()
    local f = T.compile(function(x) return (x * 2):sin() + x end)
    local g = function(x) return (x * 2):sin() + x end
    local x, y = T.linspace(0, 1, 5), T.linspace(0, 1, 5)
    for _ = 1, 6 do x, y = f(x), g(y) end
    same(snap(x), snap(y))
  end)
  it("hands back any mix of return values: numbers, nils, tables of tensors, more than three", function()
    -- compile.lua's hand_back has an unrolled path for up to three values and a general one
    local function body(x)
      local y = x + 1
      return y, 2, nil, { y * 2, t = { y:sum() } }, "s", x
    end
    local f = T.compile(body)
    for call = 1, 4 do
      local x = T.linspace(0, 1, 3)
      local got, want = S.pack(f(x)), S.pack(body(x))
      same(snap(got), snap(want), "call " .. call)
      S.eq(got.n, 6)
    end
    local g = T.compile(function(x) return nil, { x * 3 }, x:sum() end)
    for _ = 1, 4 do
      local a, b, c = g(T.ones(2))
      S.eq(a, nil); same(b[1]:totable(), { 3, 3 }); S.eq(c:item(), 2)
    end
  end)
end)

-- ---- explain ---------------------------------------------------------------------------------

local function one_break(x)
  local y = x * 2
  local s = y:sum():item() -- @one_break
  return y + s
end

describe("T.explain", function()
  it("counts graphs and breaks and names the break reason and line", function()
    local e = T.explain(one_break, T.ones(3))
    S.eq({ e.graph_count, e.graph_break_count, e.ops_per_graph }, { 2, 1, { 2, 1 } })
    S.eq(e.graph_ops, { { "mul", "sum" }, { "add" } })  -- each graph's ops, in call order
    S.truthy(e.summary:find("graph 1: 2 ops: mul sum\n", 1, true), e.summary)
    S.eq(e.break_reasons, { { reason = "item()", where = at("one_break") } })
    S.eq(tostring(e), e.summary)
    S.truthy(e.summary:find("item() at " .. at("one_break"), 1, true), e.summary)
  end)
  it("reports a function without breaks as one graph", function()
    local e = T.explain(function(x) return (x + 1) * 2 end, T.ones(3))
    S.eq({ e.graph_count, e.graph_break_count, e.break_reasons, e.ops_per_graph }, { 1, 0, {}, { 2 } })
  end)
  it("lists breaks in order, one per iteration of a loop", function()
    local e = T.explain(function(x)
      local s = 0
      for i = 1, 3 do s = s + (x * i):sum():item() end -- @loop_item
      local str = tostring(x + s) -- @loop_tostring
      local t = (x - 1):totable() -- @loop_totable
      return x * #str + t[1]
    end, T.ones(2))
    S.eq({ e.graph_count, e.graph_break_count }, { 6, 5 })
    local got = {}
    for i, b in ipairs(e.break_reasons) do got[i] = b.reason .. "@" .. b.where end
    local li = "item()@" .. at("loop_item")
    S.eq(got, { li, li, li, "tostring()@" .. at("loop_tostring"), "totable()@" .. at("loop_totable") })
  end)
  it("does not count a trailing segment without ops as a graph", function()
    local e = T.explain(function(x) return x:sum():item() end, T.ones(3))
    S.eq({ e.graph_count, e.graph_break_count }, { 1, 1 })
  end)
  it("locates a break inside a helper function at the helper's line", function()
    local function h(x)
      local v = (x + 1):sum():item() -- @helper_item
      return v
    end
    local e = T.explain(function(x) local a = h(x); return x * a end, T.ones(2))
    S.eq(e.break_reasons[1].where, at("helper_item"))
  end)
  it("accepts a compiled function and reports a data_ptr() break", function()
    local cf = T.compile(function(x) local _ = (x * 2):data_ptr(); return x + 1 end)
    local e = T.explain(cf, T.ones(2))
    S.eq({ e.graph_break_count, e.break_reasons[1].reason }, { 1, "data_ptr()" })
  end)
  it("refuses to run inside a compiled function", function()
    local cf = T.compile(function(x) return T.explain(one_break, x) end)
    S.errors(function() local _ = cf(T.ones(2)) end, "explain: cannot run inside a compiled function")
  end)
end)

-- ---- recompiles, the cache limit, hot ---------------------------------------------------------

local with_field = require "with_field"
local function with_limit(n, fn) with_field(T.config, "cache_size_limit", n, fn) end

describe("recompiles and the cache limit", function()
  S.native_it("counts one recompile per new shape (dynamic = false)", function()
    local f = T.compile(function(x) return x * 2 + 1 end, { dynamic = false })
    T.compiler.reset()
    for i, n in ipairs({ 2, 3, 4, 5 }) do
      for _ = 1, 3 do same(f(T.arange(n):float()):totable(), (T.arange(n):float() * 2 + 1):totable()) end
      S.eq(stat("recompiles"), i - 1, "after shape " .. n)
    end
    f(T.zeros(3))  -- a known shape: no recompile
    S.eq(stat("recompiles"), 3)
    S.eq(stat("eager_fallbacks"), 0)
  end)
  it("counts a recompile for a new dtype or new strides", function()
    local f = T.compile(function(x) return x + 1 end)
    T.compiler.reset()
    f(T.zeros(2, 3)); f(T.zeros(2, 3))
    S.eq(stat("recompiles"), 0)
    f(T.zeros(2, 3, { dtype = "float64" }))
    S.eq(stat("recompiles"), 1)
    same(snap(f(T.ones(3, 2):t())), snap(T.ones(3, 2):t() + 1))
    S.eq(stat("recompiles"), 2)
  end)
  it("recompiles for a new Lua scalar constant, not for a known one", function()
    local f = T.compile(function(x, k) return x * k end)
    local x = T.arange(3):float()
    T.compiler.reset()
    for _ = 1, 3 do same(f(x, 2):totable(), { 0, 2, 4 }) end
    S.eq(stat("recompiles"), 0)
    same(f(x, 3):totable(), { 0, 3, 6 })
    S.eq(stat("recompiles"), 1)
    same({ f(x, 2):totable(), f(x, 3):totable() }, { { 0, 2, 4 }, { 0, 3, 6 } })
    S.eq(stat("recompiles"), 1)
  end)
  it("makes a new variant for the other branch", function()
    local f = T.compile(function(x)
      if x:sum():item() > 0 then return x * 2 end
      return x - 1
    end)
    T.compiler.reset()
    for _ = 1, 3 do same(f(T.ones(2)):totable(), { 2, 2 }) end
    S.eq(stat("recompiles"), 0)
    same(f(-T.ones(2)):totable(), { -2, -2 })
    S.eq(stat("recompiles"), 1)
    same(f(T.ones(2)):totable(), { 2, 2 })
    S.eq(stat("recompiles"), 1)
    S.eq(stat("graph_breaks"), 5)
  end)
  it("does not recompile a function that catches an op error with pcall", function()
    local f = T.compile(function(x)
      local ok = pcall(function() return x + T.zeros(5) end)
      return x * 2, ok
    end)
    T.compiler.reset()
    for _ = 1, 5 do same(snap(pack(f(T.ones(2)))), snap(pack(T.ones(2) * 2, false))) end
    S.eq(stat("recompiles"), 0)
  end)
  S.native_it("falls back to eager past cache_size_limit, with correct results", function()
    with_limit(3, function()
      local f = T.compile(function(x) return (x + 1):sum(1) end, { dynamic = false })
      T.compiler.reset()
      for i, n in ipairs({ 2, 3, 4, 5, 6, 2, 5 }) do
        for _ = 1, 3 do
          local x = T.arange(n * 2):float():view(n, 2)
          same(snap(f(x)), snap((x + 1):sum(1)), "shape " .. n)
        end
        local s = T.compiler.stats()
        S.eq(s.eager_fallbacks, i >= 4 and 1 or 0, "fallbacks after shape " .. n)
        S.eq(s.recompiles, math.min(i - 1, 2), "recompiles after shape " .. n)
      end
    end)
  end)
end)

describe("the hot counter", function()
  local function calls_until_compiled(opts)
    local f = T.compile(function(x) return x:exp() * 2 end, opts)
    T.compiler.reset()
    local seen = {}
    for i = 1, 7 do
      same(f(T.ones(2)):totable(), (T.ones(2):exp() * 2):totable())
      seen[i] = stat("graphs_compiled")
    end
    return seen
  end
  it("compiles at the third call with hot = 2 (the default)", function()
    S.eq(calls_until_compiled(nil), { 0, 0, 1, 1, 1, 1, 1 })
  end)
  it("compiles at the second call with hot = 0, the sixth with hot = 5", function()
    S.eq(calls_until_compiled({ hot = 0 }), { 0, 1, 1, 1, 1, 1, 1 })
    S.eq(calls_until_compiled({ hot = 5 }), { 0, 0, 0, 0, 0, 1, 1 })
  end)
  it("compiles each segment of a function with a break", function()
    local f = T.compile(one_break)
    T.compiler.reset()
    local seen = {}
    for i = 1, 4 do
      same(f(T.ones(3)):totable(), { 8, 8, 8 })
      seen[i] = stat("graphs_compiled")
    end
    S.eq(seen, { 0, 0, 2, 2 })
    S.eq(stat("graph_breaks"), 4)
  end)
  it("starts over after T.compiler.reset()", function()
    local f = T.compile(function(x) return x + 1 end)
    for _ = 1, 4 do f(T.ones(2)) end
    T.compiler.reset()
    local st = T.compiler.stats()
    for _, k in ipairs({ "graphs_compiled", "recompiles", "graph_breaks", "eager_fallbacks" }) do S.eq(st[k], 0, k) end
    f(T.ones(2)); f(T.ones(2))
    S.eq(stat("graphs_compiled"), 0)
    same(f(T.ones(2)):totable(), { 2, 2 })
    S.eq(stat("graphs_compiled"), 1)
  end)
end)

-- ---- errors --------------------------------------------------------------------------------------

local function bad_add(x, y)
  local z = x * 2
  local r = z + y -- @bad_add
  return r
end

local function bad_index(x, idx)
  local y = x * 2
  local r = y:index_select(1, idx) -- @bad_index
  return r + 1
end

local function msg_of(f, ...)
  local ok, err = pcall(f, ...)
  if ok then error("expected an error", 2) end; return err
end

describe("errors inside compiled functions", function()
  it("raises a shape mismatch as eager does, cold and hot", function()
    local want = msg_of(bad_add, T.zeros(2), T.zeros(3))
    S.truthy(want:find(at("bad_add") .. ": add: ", 1, true), want)
    local cf = T.compile(bad_add)
    same(msg_of(cf, T.zeros(2), T.zeros(3)), want, "first call")
    for _ = 1, 4 do same(cf(T.ones(2), T.ones(2)):totable(), { 3, 3 }) end
    same(msg_of(cf, T.zeros(2), T.zeros(3)), want, "hot")
    same(cf(T.ones(2), T.ones(2)):totable(), { 3, 3 }, "after the error")
  end)
  it("raises a value-dependent error of a replayed op as eager does", function()
    local x, good, bad = T.ones(3), T.tensor({ 1, 3 }), T.tensor({ 1, 9 })
    local want = msg_of(bad_index, x, bad)
    S.truthy(want:find(at("bad_index") .. ": index_select: ", 1, true), want)
    local cf = T.compile(bad_index)
    for _ = 1, 4 do same(cf(x, good):totable(), { 3, 3 }) end
    same(msg_of(cf, x, bad), want, "hot")
    same(cf(x, good):totable(), { 3, 3 }, "after the error")
  end)
  it("propagates error() unchanged, strings and tables", function()
    local obj = { code = 42 }
    local function f(x, kind)
      local y = x + 1
      if kind == "s" then error("boom " .. y:sum():item()) end -- @lua_error
      if kind == "t" then error(obj) end
      return y
    end
    local cf = T.compile(f)
    for _ = 1, 4 do same(cf(T.ones(2), "ok"):totable(), { 2, 2 }) end
    same(msg_of(cf, T.ones(2), "s"), at("lua_error") .. ": boom 4")
    S.truthy(msg_of(cf, T.ones(2), "t") == obj, "the error object is not the one raised")
  end)
  it("keeps in-place side effects of ops before the error, cold and hot", function()
    local cf = T.compile(function(x, fail)
      x:mul_(2)
      local y = x + 1
      if fail then error("stop", 0) end
      return y
    end)
    for call = 1, 5 do
      local x = T.ones(2)
      local fail = call % 2 == 0
      if fail then
        same(msg_of(cf, x, true), "stop")
      else
        same(cf(x, false):totable(), { 3, 3 })
      end
      same(x:totable(), { 2, 2 }, "call " .. call)
    end
  end)
  it("raises the error of a nested compiled function", function()
    local g = T.compile(bad_add)
    local f = T.compile(function(x, y) local r = g(x, y); return r end)
    same(msg_of(f, T.zeros(2), T.zeros(3)), msg_of(bad_add, T.zeros(2), T.zeros(3)))
  end)
  it("fullgraph = true raises at the first break, naming it", function()
    local f = T.compile(function(x)
      local y = x * 2
      local s = y:sum():item() -- @fullgraph_item
      return y + s
    end, { fullgraph = true })
    local err = S.errors(function() local _ = f(T.ones(2)) end, "fullgraph", "graph break", "item%(%)")
    S.truthy(err:find(at("fullgraph_item"), 1, true), err)
    S.errors(function() local _ = f(T.ones(2)) end, "fullgraph", "graph break")
    local g = T.compile(function(x) return tostring(x + 1) end, { fullgraph = true })
    S.errors(function() local _ = g(T.ones(2)) end, "fullgraph", "tostring%(%)")
  end)
  it("fullgraph = true runs functions without breaks", function()
    local f = T.compile(function(x) return (x + 1):sum(1) end, { fullgraph = true })
    for _ = 1, 4 do same(f(T.ones(2, 2)):totable(), { 4, 4 }) end
  end)
end)

describe("compile options", function()
  it("rejects bad options and arguments", function()
    local f = function(x) return x end
    errs(function() local _ = T.compile(f, { bogus = 1 }) end, "compile", "unknown option 'bogus'")
    errs(function() local _ = T.compile(f, { mode = "fast" }) end, "compile", "mode", "fast")
    errs(function() local _ = T.compile(f, { backend = "tpu" }) end, "compile", "backend", "tpu")
    errs(function() local _ = T.compile(f, { dynamic = "yes" }) end, "compile", "dynamic", "yes")
    errs(function() local _ = T.compile(f, { hot = -1 }) end, "compile", "hot")
    errs(function() local _ = T.compile(f, { hot = 1.5 }) end, "compile", "hot")
    errs(function() local _ = T.compile(f, { fullgraph = "yes" }) end, "compile", "fullgraph")
    errs(function() local _ = T.compile(f, 3) end, "compile", "opts")
    errs(function() local _ = T.compile(42) end, "compile", "function")
    errs(function() local _ = T.compile({}) end, "compile", "function")
    errs(function() T.mark_dynamic(T.ones(2), 3) end, "mark_dynamic", "dim", "3")
    errs(function() T.mark_dynamic(T.ones(2), 1, { min = 5 }) end, "mark_dynamic", "outside")
  end)
  it("T.config checks each setting when it is assigned (issue 32)", function()
    local bad = {
      { "cache_size_limit", -1, "a non-negative integer", "got -1" }, { "cache_size_limit", 0 / 0, "a non-negative integer" },
      { "cache_size_limit", 1.5, "got 1.5" }, { "cache_size_limit", math.huge, "got inf" },
      { "cache_size_limit", "8", 'got "8"' }, { "cache_size_limit", true, "got true" },
      { "sync_compile", 1, "a boolean", "got 1" }, { "cache_dir", false, "a directory", "got false" },
      { "debug_dir", 3, "a directory (a string) or nil", "got 3" },
    }
    for _, b in ipairs(bad) do
      local before = T.config[b[1]]
      errs(function() T.config[b[1]] = b[2] end, "config", b[1] .. " expected", b[3], b[4])
      same(T.config[b[1]], before)
    end
    errs(function() T.config.cache_limit = 4 end, "config", 'unknown setting "cache_limit"', "cache_size_limit")
    local old = T.config.cache_size_limit
    T.config.cache_size_limit = 0  -- no variant: every site runs eagerly
    local f = T.compile(function(x) return x + 1 end)
    for _ = 1, 3 do same(f(T.ones(2)):totable(), { 2, 2 }) end
    T.config.cache_size_limit = old
    same(T.config.cache_size_limit, old)
  end)
  it("accepts the documented options", function()
    local f = T.compile(function(x) return x + 1 end,
      { backend = "auto", fullgraph = false, dynamic = false, mode = "default", hot = 1 })
    for _ = 1, 3 do same(f(T.ones(2)):totable(), { 2, 2 }) end
  end)
end)

-- ---- values that escape ----------------------------------------------------------------------

describe("values that escape a compiled function", function()
  it("reads a tensor stored in an outer table, every call", function()
    local store = {}
    local f = T.compile(function(x) local y = x * 2; store.y, store.s = y + 1, y:sum(); return x - 1 end)
    for call = 1, 6 do
      local x = randn(call, 4)
      same(snap(f(x)), snap(x - 1))
      same(snap(store.y), snap(x * 2 + 1), "y, call " .. call)
      same(snap(store.s), snap((x * 2):sum()), "s, call " .. call)
    end
  end)
  it("reads a stored value first used only after the function is hot", function()
    local store = {}
    local f = T.compile(function(x) store.y = x:exp() * 3; return x + 1 end)
    for call = 1, 4 do f(randn(call, 4)) end
    for call = 5, 6 do
      local x = randn(call, 4)
      f(x)
      same(snap(store.y), snap(x:exp() * 3), "call " .. call)
    end
  end)
  it("reads a lazy value after in-place writes to unrelated tensors and a later call", function()
    local store, other = {}, T.ones(4)
    local f = T.compile(function(x) store.y = (x + 1):sqrt(); return (x * 2):sum() end)
    for call = 1, 6 do
      local x = randn(call, 4):abs()
      local r = f(x)
      local y = store.y
      other:add_(1); r:fill_(0)
      f(randn(call + 100, 4):abs())
      other:mul_(2)
      same(snap(y), snap((x + 1):sqrt()), "call " .. call)
    end
  end)
  it("passes a lazy stored value to another compiled function", function()
    local store = {}
    local f = T.compile(function(x) store.y = x * 3; return x:sum() end)
    local g = T.compile(function(y) return y + 1 end)
    for call = 1, 5 do
      local x = randn(call, 3)
      f(x)
      same(snap(g(store.y)), snap(x * 3 + 1), "call " .. call)
    end
  end)
  it("reads a lazy value after its own input was modified in place", function()
    local store = {}
    local f = T.compile(function(x) store.y = x * 2; return x + 1 end)
    for call = 1, 4 do f(randn(call, 3)) end
    local x = randn(5, 3)
    local want = snap(x * 2)
    f(x)
    x:fill_(100)
    same(snap(store.y), want)
  end)
end)

-- ---- modules ---------------------------------------------------------------------------------------

describe("T.compile(module)", function()
  it("compiles a table's forward(self, x)", function()
    T.manual_seed(3)
    local m = { w = T.randn(4, 3), b = T.randn(3) }
    function m:forward(x) return (x:matmul(self.w) + self.b):relu(), self.name end
    m.name = "mlp"
    local cf = T.compile(m)
    for call = 1, 5 do
      local x = randn(call, 2, 4)
      local y, name = cf(x)
      same(snap(y), snap(m:forward(x)), "call " .. call)
      S.eq(name, "mlp")
    end
  end)
  it("sees parameters changed in place or replaced", function()
    local Lin = {}
    Lin.__index = Lin
    function Lin:forward(x) return T.linear(x, self.w) end
    local m = setmetatable({ w = T.ones(2, 3) }, Lin)
    local cf = T.compile(m)
    local x = T.arange(3):float()
    for _ = 1, 4 do same(cf(x):totable(), { 3, 3 }) end
    m.w:mul_(2)
    same(cf(x):totable(), { 6, 6 }, "after an in-place update")
    m.w = T.full({ 2, 3 }, -1, { dtype = "float32" })
    same(cf(x):totable(), { -3, -3 }, "after replacing the parameter")
  end)
end)
