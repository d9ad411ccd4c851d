-- Specs of the reduction ops (vm/ops/reductions.cpp, the engine in vm/kernels/reduce.hpp) and of
-- the ops along one dim (vm/ops/scans.cpp): values against PyTorch 1.13 on random shapes, dims as
-- numbers / tables / negatives, keepdim, every dtype, non-contiguous and zero-size inputs; float32
-- accuracy against float64 sums computed here; the split-range paths of the engine; NaN and
-- empty-reduction rules; misuse.
local T = require "crescent"
local R = require "torch_ref"
local unpack = unpack or table.unpack

expect.covers("sum", "mean", "prod", "amax", "amin", "aminmax", "max", "min", "argmax", "argmin", "var", "std",
  "logsumexp", "norm", "all", "any", "cumsum", "softmax", "log_softmax")

-- ---- helpers ------------------------------------------------------------------------------------
local errs, HERE = expect.error_checker("test_reductions.lua")  -- errors carry the caller's line in this file
local DTYPES, FLOATS = expect.DTYPES, expect.FLOATS
local INT, FLOAT = expect.INT, expect.FLOAT
local nan, inf = 0 / 0, math.huge
local vals = R.flat_values

T.manual_seed(20240615)

local function gen(shape, dtype, lo, hi)
  if dtype == "bool" then return T.rand(shape):lt(0.6) end
  if INT[dtype] then return T.randint(lo, hi + 1, shape, { dtype = dtype }) end
  return (T.rand(shape, { dtype = "float64" }) * (hi - lo) + lo):to(dtype)
end
-- the same values in a layout that is not contiguous: last two dims transposed in memory
local function noncontig(x)
  local n = x:dim()
  local y = x:transpose(n - 1, n):contiguous():transpose(n - 1, n)
  assert(not y:is_contiguous())
  return y
end

-- python spelling of a Lua dim (1-based / negative) and of a list of dims
local function pydim(d) return d > 0 and d - 1 or d end
local function pydims(ds)
  if type(ds) == "number" then return tostring(pydim(ds)) end
  local p = {}
  for i, d in ipairs(ds) do p[i] = tostring(pydim(d)) end
  return "(" .. table.concat(p, ",") .. (#p == 1 and ",)" or ")")
end
-- torch ops that take one dim only (prod, all, any in 1.13): reduce the dims one at a time,
-- highest first, so the remaining dims keep their numbers
local function chain(x, method, ds, keepdim)
  local n = x:dim()
  local list = type(ds) == "number" and { ds } or ds
  local pos = {}
  for i, d in ipairs(list) do pos[i] = d > 0 and d - 1 or d + n end
  table.sort(pos, function(a, b) return a > b end)
  local e = "a"
  for _, d in ipairs(pos) do e = e .. string.format(".%s(%d%s)", method, d, keepdim and ", keepdim=True" or "") end
  return e
end

-- Reference cases: all added to one batch (one python process), checked per group below.
local SUITE = R.suite()
local function case(...) SUITE:case(...) end

-- layouts and dim choices every reduction runs over
local LAYOUTS = {
  { "2-d", { 5, 7 } }, { "3-d", { 3, 4, 6 } }, { "non-contiguous", { 4, 6 } }, { "zero-size", { 0, 5 } },
  { "0-d", {} }, { "1-d", { 9 } },
}
local function dim_choices(nd)
  if nd == 0 then return { { nil }, { 1 }, { -1, true } } end
  local c = { { nil }, { 1 }, { -1 }, { 1, true } }
  if nd >= 2 then
    c[#c + 1] = { nd, false }
    c[#c + 1] = { { 1, -1 } }
    c[#c + 1] = { { -1, 1 }, true }
  end
  if nd >= 3 then c[#c + 1] = { { 2 } } end
  return c
end
local function dstr(ds, keep)
  local s = ds == nil and "all" or type(ds) == "number" and tostring(ds) or "{" .. table.concat(ds, ",") .. "}"
  return s .. (keep and " keepdim" or "")
end
local function input(lay, dt, lo, hi)
  local x = gen(lay[2], dt, lo, hi)
  if lay[1] == "non-contiguous" then x = noncontig(x) end
  return x
end

-- ---- sum, mean, amax, amin, var, std, logsumexp, norm (torch takes dim tuples) -----------------------
-- op, dtypes, torch expression builder (a = input, d = python dims or nil, k = keepdim)
local function tuple_op(name) return function(d, k) return d and string.format("torch.%s(a, %s, keepdim=%s)", name, d, k and "True" or "False") or string.format("torch.%s(a)", name) end end
local TUPLE_OPS = {
  { "sum", DTYPES, tuple_op("sum") },
  { "mean", DTYPES, tuple_op("mean") },
  { "amax", DTYPES, function(d, k) return string.format("torch.amax(a, %s, keepdim=%s)", d or "()", k and "True" or "False") end },
  { "amin", DTYPES, function(d, k) return string.format("torch.amin(a, %s, keepdim=%s)", d or "()", k and "True" or "False") end },
  { "var", DTYPES, tuple_op("var") },
  { "std", DTYPES, tuple_op("std") },
  { "norm", DTYPES, function(d, k) return d and string.format("torch.norm(a, 2, %s, %s)", d, k and "True" or "False") or "torch.norm(a)" end },
  { "logsumexp", DTYPES, function(d, k) return string.format("torch.logsumexp(a, %s, keepdim=%s)", d or "tuple(range(a.dim()))", k and "True" or "False") end },
}
for _, o in ipairs(TUPLE_OPS) do
  local op, dts, texpr = o[1], o[2], o[3]
  for _, dt in ipairs(dts) do
    for _, lay in ipairs(LAYOUTS) do
      local x = input(lay, dt, -4, 4)
      for _, dc in ipairs(dim_choices(#lay[2])) do
        local ds, keep = dc[1], dc[2]
        -- amax / amin / logsumexp over everything of a zero-size tensor: tested separately
        local key = string.format("%s %s %s dims %s", op, dt, lay[1], dstr(ds, keep))
        local e = texpr(ds and pydims(ds), keep)
        if op == "logsumexp" and lay[1] == "0-d" then e = "torch.logsumexp(a.reshape(1), 0)" end
        -- float16 / bfloat16 accumulate in float here; torch 1.13 sometimes accumulates in the
        -- low precision (multi-dim bfloat16 sums): the reference is the float64 result, rounded
        if dt == "float16" or dt == "bfloat16" then e = string.format("(lambda a: %s)(a.double()).to(torch.%s)", e, dt) end
        case(op, key, e, { a = x }, function() return T[op](x, ds, keep) end,
          (dt == "float16" or dt == "bfloat16") and 2e-2 or nil)
      end
    end
  end
end

-- ---- prod, all, any: torch 1.13 reduces one dim at a time -----------------------------------------
for _, op in ipairs({ "prod", "all", "any" }) do
  for _, dt in ipairs(DTYPES) do
    for _, lay in ipairs(LAYOUTS) do
      local x = input(lay, dt, op == "prod" and -2 or -1, 2)
      if op == "prod" and FLOAT[dt] then x = input(lay, dt, 0.5, 1.5) end
      for _, dc in ipairs(dim_choices(#lay[2])) do
        local ds, keep = dc[1], dc[2]
        local key = string.format("%s %s %s dims %s", op, dt, lay[1], dstr(ds, keep))
        local e
        if ds == nil then e = string.format("torch.%s(a)", op)
        elseif #lay[2] == 0 then e = string.format("torch.%s(a, 0)", op)
        else e = chain(x, op, ds, keep) end
        case(op, key, e, { a = x }, function() return T[op](x, ds, keep) end,
          (dt == "float16" or dt == "bfloat16") and 2e-2 or nil)
      end
    end
  end
end

-- ---- aminmax: both results, over everything or along a dim (torch's keyword-only dim) ---------------
for _, dt in ipairs(DTYPES) do
  for _, lay in ipairs(LAYOUTS) do
    if lay[1] ~= "zero-size" then
      local x = input(lay, dt, -3, 3)
      local nd = #lay[2]
      -- (torch 1.13 gives a 0-d input's keepdim results shape {1}, its max / amax keep {}: not copied)
      local choices = nd == 0 and { { nil }, { 1 } } or { { nil }, { nil, true }, { 1 }, { -1 }, { 1, true } }
      for _, dc in ipairs(choices) do
        local d, keep = dc[1], dc[2]
        local py = string.format("torch.aminmax(a%s, keepdim=%s)", d and ", dim=" .. pydim(d) or "",
          keep and "True" or "False")
        for i, part in ipairs({ "min", "max" }) do
          case("aminmax", string.format("aminmax %s %s dim %s %s", dt, lay[1], dstr(d, keep), part), py .. "." .. part,
            { a = x }, function() return (select(i, T.aminmax(x, { dim = d, keepdim = keep }))) end)
        end
      end
    end
  end
end

-- ---- max, min (values + 1-based indices), argmax, argmin --------------------------------------------
for _, op in ipairs({ "max", "min", "argmax", "argmin" }) do
  for _, dt in ipairs(DTYPES) do
    -- torch 1.13 has no bool argmax / argmin; crescent has (see the deliberate differences)
    local skip = dt == "bool" and (op == "argmax" or op == "argmin")
    -- small integer ranges make ties: the first position must win, as in torch
    for _, lay in ipairs(LAYOUTS) do
      if lay[1] ~= "zero-size" and not skip then
        local x = input(lay, dt, -3, 3)
        local nd = #lay[2]
        local choices = nd == 0 and { { 1 }, { -1, true } } or { { 1 }, { -1 }, { 1, true } }
        for _, dc in ipairs(choices) do
          local d, keep = dc[1], dc[2]
          local key = string.format("%s %s %s dim %s", op, dt, lay[1], dstr(d, keep))
          local k = keep and "True" or "False"
          if op == "max" or op == "min" then
            case(op, key .. " values", string.format("torch.%s(a, %d, %s)[0]", op, pydim(d), k), { a = x },
              function() return (T[op](x, d, keep)) end)
            case(op, key .. " indices", string.format("torch.%s(a, %d, %s)[1] + 1", op, pydim(d), k), { a = x },
              function() local _, i = T[op](x, d, keep); return i end)
          else
            case(op, key, string.format("torch.%s(a, %d, %s) + 1", op, pydim(d), k), { a = x },
              function() return T[op](x, d, keep) end)
          end
        end
        -- no dim: the extreme value / a position in the flattened tensor
        if op == "max" or op == "min" then
          case(op, op .. " " .. dt .. " " .. lay[1] .. " all", string.format("torch.%s(a)", op), { a = x },
            function() return T[op](x) end)
        else
          case(op, op .. " " .. dt .. " " .. lay[1] .. " all", string.format("torch.%s(a) + 1", op), { a = x },
            function() return T[op](x) end)
        end
      end
    end
  end
end

-- ---- norm orders, var / std corrections ---------------------------------------------------------------
for _, dt in ipairs(FLOATS) do
  local x = gen({ 4, 6 }, dt, -3, 3)
  for _, p in ipairs({ 0, 1, 2, 3, 0.5, inf, -inf }) do
    local pl = p == inf and "inf" or p == -inf and "-inf" or tostring(p)
    for _, ds in ipairs({ false, 2, { 1, 2 } }) do
      local key = string.format("norm %s p=%s dims %s", dt, pl, ds and dstr(ds) or "all")
      local e = ds and string.format("torch.norm(a, %s, %s)", pl, pydims(ds)) or string.format("torch.norm(a, %s)", pl)
      case("norm orders", key, e, { a = x }, function() return x:norm(ds or nil, nil, { p = p }) end,
        FLOAT[dt] and dt ~= "float32" and dt ~= "float64" and 2e-2 or 1e-5)
    end
  end
  for _, op in ipairs({ "var", "std" }) do
    for _, corr in ipairs({ 0, 1 }) do
      local key = string.format("%s %s correction %d", op, dt, corr)
      case("var / std corrections", key, string.format("torch.%s(a, 0, unbiased=%s)", op, corr == 1 and "True" or "False"),
        { a = x }, function() return x[op](x, 1, false, { correction = corr }) end, dt:find("16") and 2e-2 or nil)
      case("var / std corrections", key .. " unbiased", string.format("torch.%s(a, unbiased=%s)", op, corr == 1 and "True" or "False"),
        { a = x }, function() return x[op](x, { unbiased = corr == 1 }) end, dt:find("16") and 2e-2 or nil)
    end
  end
end

-- ---- cumsum, softmax, log_softmax ---------------------------------------------------------------------
for _, op in ipairs({ "cumsum", "softmax", "log_softmax" }) do
  for _, dt in ipairs(DTYPES) do
    for _, lay in ipairs(LAYOUTS) do
      local x = input(lay, dt, -4, 4)
      local nd = #lay[2]
      -- torch 1.13 runs no kernel on an empty integer softmax; crescent checks the dtype anyway
      local skip = op ~= "cumsum" and not FLOAT[dt] and lay[1] == "zero-size"
      for _, d in ipairs(skip and {} or nd <= 1 and { 1, -1 } or { 1, -1, nd }) do
        local key = string.format("%s %s %s dim %d", op, dt, lay[1], d)
        local tex = op == "cumsum" and "torch.cumsum(a, %d)" or "torch.%s(a, %d)"
        local e = op == "cumsum" and string.format(tex, pydim(d)) or string.format(tex, op, pydim(d))
        case(op, key, e, { a = x }, function() return T[op](x, d) end, dt:find("16") and 2e-2 or nil)
      end
    end
  end
  -- the dtype option converts first
  local xi = gen({ 3, 5 }, "int32", -3, 3)
  case(op, op .. " int32 {dtype = float64}", string.format("torch.%s(a, 1, dtype=torch.float64)", op), { a = xi },
    function() return T[op](xi, 2, { dtype = "float64" }) end)
end
-- the reduced dim in the middle, and a dim longer than one tile of columns
for _, op in ipairs({ "softmax", "log_softmax", "cumsum" }) do
  local x = gen({ 3, 7, 300 }, "float32", -6, 6)
  for _, d in ipairs({ 1, 2, 3 }) do
    case(op, op .. " float32 {3,7,300} dim " .. d, string.format("torch.%s(a, %d)", op, d - 1), { a = x },
      function() return T[op](x, d) end, 1e-5, 1e-6)
  end
end
for _, op in ipairs({ "sum", "mean", "amax", "var", "logsumexp" }) do  -- more than one tile of columns
  local x = gen({ 5, 600 }, "float32", -3, 3)
  case(op, op .. " float32 {5,600} dim 1", string.format("torch.%s(a, 0)", op), { a = x }, function() return T[op](x, 1) end)
end
-- sum / mean / prod with {dtype =}
local xi = gen({ 4, 3 }, "int32", -3, 3)
case("sum", "sum int32 {dtype = int32}", "torch.sum(a, dtype=torch.int32)", { a = xi }, function() return xi:sum({ dtype = "int32" }) end)
case("sum", "sum int32 dim 1 {dtype = float64}", "torch.sum(a, 0, dtype=torch.float64)", { a = xi }, function() return xi:sum(1, { dtype = "float64" }) end)
case("mean", "mean int32 {dtype = float32}", "torch.mean(a, dtype=torch.float32)", { a = xi }, function() return xi:mean({ dtype = "float32" }) end)
case("prod", "prod int32 dim 2 {dtype = float64}", "torch.prod(a, 1, dtype=torch.float64)", { a = xi }, function() return xi:prod(2, false, { dtype = "float64" }) end)

-- special values
local SPECIAL = { { 1, nan, 3, -2 }, { -inf, -inf, -inf, -inf }, { inf, 1, -inf, 2 }, { 0, -0.0, 5, 5 } }
for _, dt in ipairs({ "float32", "float64" }) do
  local x = T.tensor(SPECIAL, { dtype = dt })
  for _, op in ipairs({ "sum", "amax", "amin", "logsumexp", "softmax", "log_softmax", "cumsum" }) do
    case("special values", op .. " " .. dt, string.format("torch.%s(a, 1)", op), { a = x }, function() return T[op](x, 2) end)
  end
  for _, op in ipairs({ "max", "min", "argmax", "argmin" }) do
    local sel = (op == "max" or op == "min") and "[1]" or ""
    case("special values", op .. " " .. dt .. " positions", string.format("torch.%s(a, 1)%s + 1", op, sel), { a = x },
      function() local v, i = T[op](x, 2); return i or v end)
  end
end

-- 4-d inputs: several reduced dims that are not neighbours, contiguous and permuted in memory
do
  local x = gen({ 4, 5, 6, 7 }, "float32", -3, 3)
  local xp = x:permute(3, 1, 4, 2):contiguous():permute(2, 4, 1, 3)  -- same values, scrambled strides
  for _, lay in ipairs({ { "contiguous", x }, { "permuted", xp } }) do
    for _, ds in ipairs({ { 1, 3 }, { 2, 4 }, { 1, 2, 4 }, { 4, 2 } }) do
      for _, op in ipairs({ "sum", "mean", "amax", "var", "logsumexp", "norm" }) do
        local key = string.format("%s 4-d %s dims %s", op, lay[1], dstr(ds))
        local e = op == "norm" and string.format("torch.norm(a, 2, %s)", pydims(ds)) or string.format("torch.%s(a, %s)", op, pydims(ds))
        case("4-d", key, e, { a = lay[2] }, function() return T[op](lay[2], ds) end)
      end
    end
    local key = string.format("prod 4-d %s dims {2,4} keepdim", lay[1])
    case("4-d", key, chain(x, "prod", { 2, 4 }, true), { a = lay[2] }, function() return lay[2]:prod({ 2, 4 }, true) end, 1e-5, 1e-6)
    for _, d in ipairs({ 1, 2, 3, 4 }) do
      for _, op in ipairs({ "argmax", "argmin", "cumsum", "softmax" }) do
        local add = (op == "argmax" or op == "argmin") and " + 1" or ""
        case("4-d", string.format("%s 4-d %s dim %d", op, lay[1], d), string.format("torch.%s(a, %d)%s", op, d - 1, add),
          { a = lay[2] }, function() return T[op](lay[2], d) end)
      end
    end
  end
end

-- ---- run the references and check every group -------------------------------------------------------
SUITE:check("torch references")

-- ---- explicit specs (no torch needed) -------------------------------------------------------------
-- float64 references computed here: Neumaier's compensated sum of the exact input values
local function ksum(t, f)
  local s, c = 0, 0
  for i = 1, #t do
    local v = f and f(t[i]) or t[i]
    local u = s + v
    if math.abs(s) >= math.abs(v) then c = c + ((s - u) + v) else c = c + ((v - u) + s) end
    s = u
  end
  return s + c
end
local function rel(a, b) return math.abs(a - b) / math.max(math.abs(b), 1e-300) end
local function within(a, b, rtol, what)
  if not (rel(a, b) <= rtol) then error(string.format("%s: got %.12g, expected %.12g (rel %.3g > %g)", what, a, b, rel(a, b), rtol), 2) end
end

describe("float32 accuracy against float64 references", function()
  local N = 1000000
  local u = T.rand(N)                      -- all positive: the worst case for naive float sums
  local uv = vals(u)
  local g = T.randn(N) * 3 + 1000          -- a large mean: the worst case for naive variances
  local gv = vals(g)

  it("sum and mean of 1e6 values", function()
    within(u:sum():item(), ksum(uv), 1e-6, "sum")
    within(u:mean():item(), ksum(uv) / N, 1e-6, "mean")
    within(g:sum():item(), ksum(gv), 1e-6, "sum (offset)")
  end)
  it("var and std of 1e6 values with a large mean", function()
    local m = ksum(gv) / N
    local m2 = ksum(gv, function(v) return (v - m) ^ 2 end)
    within(g:var():item(), m2 / (N - 1), 1e-5, "var")
    within(g:std({ correction = 0 }):item(), math.sqrt(m2 / N), 1e-5, "std")
  end)
  it("min / max / amin / amax of zeros that are all -0 are -0, eager and compiled (as torch)", function()
    local f = T.compile(function(a) return a:min(), a:amax(), a:amin(2), (a:max(1)) end, { hot = 0 })
    for _, dt in ipairs({ "float32", "float64" }) do
      for _, n in ipairs({ 1, 2, 3, 40 }) do
        local z = T.zeros(3, n, { dtype = dt }):mul(-1)
        for _, r in ipairs({ { z:min(), z:amax(), z:amin(2), (z:max(1)) }, { f(z) }, { f(z) } }) do
          for i, v in ipairs(r) do expect.eq(1 / v:view(-1)[1]:item(), -math.huge, ("%s %d result %d"):format(dt, n, i)) end
        end
      end
    end
  end)
  it("var and std of constant rows are exactly 0, never NaN (found by the compile fuzzer)", function()
    for _, seed in ipairs({ 98780, 1, 2, 3 }) do
      T.manual_seed(seed)
      local rows = T.randn({ 1, 4 }):expand({ 3, 4 }):transpose(1, 2)  -- 4 rows of 3 equal values
      for _, r in ipairs({ rows, rows:contiguous(), T.randn(7, 1):expand(7, 600) * 3.7 }) do
        expect.eq(r:var(2):abs():max():item(), 0, "var of constant rows")
        expect.eq(r:std(2, true):abs():max():item(), 0, "std of constant rows")
      end
    end
  end)
  it("norm and logsumexp of 1e6 values", function()
    within(u:norm():item(), math.sqrt(ksum(uv, function(v) return v * v end)), 1e-6, "norm")
    within(u:norm(nil, nil, { p = 1 }):item(), ksum(uv), 1e-6, "norm p=1")
    within(u:logsumexp():item(), math.log(ksum(uv, math.exp)), 1e-6, "logsumexp")
  end)
  it("column sums over 250000 rows (the outer reduction split into chunks)", function()
    local x = u:view(250000, 4)
    local got = vals(x:sum(1))
    for j = 1, 4 do
      local col = {}
      for i = 1, 250000 do col[i] = uv[(i - 1) * 4 + j] end
      within(got[j], ksum(col), 1e-6, "column " .. j)
    end
    local gotv = vals(x:var(1))
    local col = {}
    for i = 1, 250000 do col[i] = uv[(i - 1) * 4 + 2] end
    local m = ksum(col) / #col
    within(gotv[2], ksum(col, function(v) return (v - m) ^ 2 end) / (#col - 1), 1e-5, "column var")
  end)
  it("row sums, and sums of a transposed input", function()
    local x = u:view(1000, 1000)
    local rows = vals(x:sum(2))
    local r = {}
    for k = 1, 1000 do r[k] = uv[500 * 1000 + k] end
    within(rows[501], ksum(r), 1e-6, "row 501")
    expect.close(x:t():sum(1), x:sum(2), 1e-6)
    expect.close(x:t():sum(2), x:sum(1), 1e-6)
    expect.close(x:t():mean({ 1, 2 }), x:mean(), 1e-6)
  end)
  it("cumsum of 1e6 values accumulates in double", function()
    local c = u:cumsum(1)
    within(c[N]:item(), ksum(uv), 1e-6, "last")
    local half = {}
    for k = 1, N / 2 do half[k] = uv[k] end
    within(c[N / 2]:item(), ksum(half), 1e-6, "middle")
  end)
  it("float16 / bfloat16 accumulate in float32", function()
    -- a float16 running sum stops at 2048 (2049 is not a float16); bfloat16 stops at 256
    expect.eq(T.ones(3000, { dtype = "float16" }):sum():item(), 3000)
    expect.eq(T.ones(1000, { dtype = "bfloat16" }):sum():item(), 1000)
    expect.eq(T.ones(3000, { dtype = "float16" }):mean():item(), 1)
    expect.eq(T.ones({ 3000, 2 }, { dtype = "float16" }):sum(1):totable(), { 3000, 3000 })
    expect.eq(T.ones(3000, { dtype = "float16" }):cumsum(1)[3000]:item(), 3000)
  end)
end)

describe("long reduced ranges split across tasks", function()
  it("argmax / max find the first of equal extremes in different chunks", function()
    local x = T.zeros(1000000)
    x[777778] = 5
    x[900000] = 5
    x[3] = 4
    expect.eq(x:argmax():item(), 777778)
    local v, i = x:max(1)
    expect.eq({ v:item(), i:item() }, { 5, 777778 })
    expect.eq((-x):argmin():item(), 777778)
    local c = x:view(250000, 4)
    local cv, ci = c:max(1)
    expect.eq(ci:totable(), { 1, 194445, 1, 225000 })  -- flat 777778 is row 194445, column 2
    expect.eq(cv:totable(), { 0, 5, 4, 5 })
  end)
  it("the first NaN wins, wherever it is", function()
    local x = T.zeros(1000000)
    x[900000] = nan
    x[600001] = nan
    x[5] = 7
    expect.eq(x:argmax():item(), 600001)
    expect.eq(x:argmin():item(), 600001)
    expect.truthy(x:amax():item() ~= x:amax():item())
    expect.truthy(x:amin():item() ~= x:amin():item())
    local _, i = x:view(1000, 1000):max(1)
    expect.eq(i[1000]:item(), 900)
    expect.eq(i[1]:item(), 601)
  end)
  it("aminmax finds both extremes of long ranges in one pass; a NaN makes both NaN", function()
    local x = T.arange(1, 1000001, { dtype = "int64" }):remainder(999983) - 7
    local lo, hi = x:aminmax()
    expect.eq({ lo:item(), hi:item() }, { -7, 999975 })
    local f = x:double():view(1000, 1000)
    local rl, rh = f:aminmax({ dim = 2 })
    expect.eq(rl:totable(), f:amin(2):totable())
    expect.eq(rh:totable(), f:amax(2):totable())
    local cl, ch = f:aminmax({ dim = 1, keepdim = true })
    expect.eq(cl:totable(), f:amin(1, true):totable())
    expect.eq(ch:totable(), f:amax(1, true):totable())
    local y = T.randn(1000000)
    y[654321] = nan
    local nl, nh = y:aminmax()
    expect.truthy(nl:item() ~= nl:item() and nh:item() ~= nh:item())
    errs(function() local r = T.zeros(0):aminmax(); return r end, "aminmax", "no elements")
    errs(function() local r = T.zeros(3):aminmax(1); return r end, "aminmax", "expected a table")
  end)
  it("all / any decide on a single element", function()
    local x = T.ones(1000000, { dtype = "bool" })
    expect.eq(x:all():item(), true)
    x[654321] = false
    expect.eq(x:all():item(), false)
    expect.eq(x:logical_not():any():item(), true)
    expect.eq(T.zeros(1000000):any():item(), false)
    expect.eq(x:view(1000, 1000):all(1):sum():item(), 999)
  end)
  it("expanded (stride 0) and strided inputs", function()
    local e = T.arange(1, 6, { dtype = "float32" }):view(1, 5):expand(1000, 5)
    expect.eq(e:sum(1):totable(), { 1000, 2000, 3000, 4000, 5000 })
    expect.eq(e:sum():item(), 15000)
    expect.eq(e:amax(2):sum():item(), 5000)
    local x = T.arange(0, 40, { dtype = "float32" }):view(4, 10)
    local s = x:slice(2, 1, 10, 3)  -- columns 1, 4, 7, 10: innermost stride 3
    expect.eq(s:sum(2):totable(), { 18, 58, 98, 138 })
    expect.eq(s:argmax(2):totable(), { 4, 4, 4, 4 })
    expect.eq(s:cumsum(2)[1]:totable(), { 0, 3, 9, 18 })
    expect.close(s:softmax(2), s:contiguous():softmax(2))
  end)
end)

describe("reduction semantics", function()
  it("sums over the outer dim add the rows in order, whatever the width", function()
    T.manual_seed(3)
    for _, s in ipairs({ { 300, 70 }, { 1000, 33 }, { 4, 200, 65 } }) do  -- (no chunked merges)
      -- (float64 values of many magnitudes: another order rounds differently)
      local x = T.randn(s, { dtype = "float64" }) * T.pow(10, T.randint(-12, 13, s):double())
      local want = T.zeros(x[1].shape, { dtype = "float64" })
      for r = 1, s[1] do want:add_(x[r]) end
      expect.eq(x:sum(1):eq(want):all():item(), true, table.concat(s, "x"))
    end
  end)
  it("extremes, products, moments and all / any over the outer dim fold the rows in order", function()
    T.manual_seed(4)
    for _, s in ipairs({ { 300, 70 }, { 97, 33 }, { 4, 50, 65 } }) do  -- (blocks of 32 columns and a tail)
      local x = T.randn(s, { dtype = "float64" }) * T.pow(10, T.randint(-6, 7, s):double())
      x:view(-1)[2] = 0 / 0  -- (a NaN in one column)
      local width = x[1]:numel()
      local flat = x:reshape(s[1], width)
      local mx, mn, pr, any = flat[1]:clone(), flat[1]:clone(), flat[1]:clone(), flat[1]:ne(0)
      local n, mean, m2 = 1, flat[1]:clone(), T.zeros(width, { dtype = "float64" })  -- (Welford's update)
      for r = 2, s[1] do
        local v = flat[r]
        mx = T.where(mx:ne(mx) + v:ne(v), mx + v, T.maximum(mx, v))
        mn = T.where(mn:ne(mn) + v:ne(v), mn + v, T.minimum(mn, v))
        pr, any = pr * v, any + v:ne(0)
        n = n + 1
        local d = v - mean
        mean = mean + d / n
        m2 = m2 + d * (v - mean)
      end
      local shape, name = x[1].shape, table.concat(s, "x")
      local function same(a, b)  -- (NaN where b is NaN)
        b = b:view(shape)
        return a:eq(b):logical_or(a:ne(a):logical_and(b:ne(b))):all():item()
      end
      expect.eq(same(x:amax(1), mx), true, "amax " .. name)
      expect.eq(same(x:amin(1), mn), true, "amin " .. name)
      expect.eq(same(x:prod(1), pr), true, "prod " .. name)
      local var, want = x:var(1), (m2 / (n - 1)):view(shape)  -- (the kernel's multiply-adds may fuse: not bit for bit)
      local close = (var - want):abs():le(want:abs() * 1e-12)
      expect.eq(close:logical_or(want:ne(want):logical_and(var:ne(var))):all():item(), true, "var " .. name)
      expect.eq(x:ne(0):any(1):eq(any:view(shape)):all():item(), true, "any " .. name)
    end
  end)
  it("integer sums and cumsums wrap around 2^64 as PyTorch's, eager and compiled", function()
    local x = T.tensor({ 2 ^ 62, 2 ^ 62, 2 ^ 62, -1 }, { dtype = "int64" })
    local wrapped = -2 ^ 62 - 1  -- 3 * 2^62 - 1 modulo 2^64, as int64
    expect.eq(x:sum():item(), wrapped)
    expect.eq(x:view(2, 2):sum(1):totable(), { -2 ^ 63, 2 ^ 62 - 1 })
    expect.eq(x:cumsum(1):totable(), { 2 ^ 62, 2 ^ 63 * -1, -2 ^ 62, wrapped })
    local f = T.compile(function(a) return a:sum(), a:cumsum(1) end, { backend = "cpu" })
    for _ = 1, 3 do
      local s, c = f(x)
      expect.eq(s:item(), wrapped)
      expect.eq(c:totable()[4], wrapped)
    end
  end)
  local x = T.tensor({ { 1, 5, 2 }, { 7, 0, 7 } }, { dtype = "float32" })
  it("keepdim keeps size-1 dims; no dim reduces everything", function()
    expect.eq(x:sum(1, true).shape, { 1, 3 })
    expect.eq(x:sum({ 1, 2 }, true).shape, { 1, 1 })
    expect.eq(x:sum(nil, true).shape, { 1, 1 })
    expect.eq(x:sum().shape, {})
    expect.eq(x:sum({}).shape, {})
    expect.eq(x:amax({}):item(), 7)
    expect.eq(x:argmax(nil, true).shape, { 1, 1 })
    expect.eq(x:argmax(nil, true):item(), 4)
    expect.eq(T.sum(x, -1):totable(), { 8, 14 })
  end)
  it("max / min with a dim return values and 1-based int64 indices; ties give the first", function()
    local v, i = x:max(2)
    expect.eq(v:totable(), { 5, 7 })
    expect.eq(i:totable(), { 2, 1 })
    expect.eq(i.dtype, "int64")
    v, i = T.min(x, 1, true)
    expect.eq(v:totable(), { { 1, 0, 2 } })
    expect.eq(i:totable(), { { 1, 2, 1 } })
    expect.eq(select("#", x:max()), 1)
    expect.eq(x:max():item(), 7)
    expect.eq(x:min().shape, {})
    expect.eq(x:argmax():item(), 4)  -- position in the flattened tensor, first of the ties
    expect.eq(x:argmin(1):totable(), { 1, 2, 1 })
  end)
  it("dtypes: sums of integers and bools are int64, extremes keep the dtype, all/any give bool", function()
    local b = T.tensor({ true, false, true })
    expect.eq(b:sum().dtype, "int64")
    expect.eq(b:sum():item(), 2)
    expect.eq(b:prod().dtype, "int64")
    expect.eq(b:cumsum(1):totable(), { 1, 1, 2 })
    expect.eq(T.tensor({ 1, 2 }, { dtype = "int32" }):sum().dtype, "int64")
    expect.eq(T.tensor({ 1, 2 }, { dtype = "int32" }):amax().dtype, "int32")
    expect.eq(b:amax().dtype, "bool")
    expect.eq(x:all().dtype, "bool")
    expect.eq(T.tensor({ 1, 2 }):logsumexp().dtype, "float32")
    expect.eq(x:half():sum().dtype, "float16")
    expect.eq(x:bfloat16():var().dtype, "bfloat16")
  end)
  it("empty reductions give the identity (sum 0, prod 1, all true) or NaN (mean, var)", function()
    local e = T.zeros(0, 3)
    expect.eq(e:sum(1):totable(), { 0, 0, 0 })
    expect.eq(e:prod(1):totable(), { 1, 1, 1 })
    expect.truthy(e:mean():item() ~= e:mean():item())
    expect.truthy(e:var(1)[1]:item() ~= e:var(1)[1]:item())
    expect.eq(e:logsumexp(1):totable(), { -inf, -inf, -inf })
    expect.eq(e:norm(1):totable(), { 0, 0, 0 })
    expect.eq(e:norm(1, false, { p = math.huge }):totable(), { 0, 0, 0 })
    expect.eq(e:all():item(), true)
    expect.eq(e:any():item(), false)
    expect.eq(e:sum(2).shape, { 0 })
    expect.eq(e:amax(2).shape, { 0 })
    expect.eq(e:argmax(2).shape, { 0 })
    expect.eq(e:cumsum(1).shape, { 0, 3 })
    expect.eq(e:softmax(1).shape, { 0, 3 })
    expect.eq(T.zeros(0, { dtype = "int32" }):sum().dtype, "int64")
  end)
  it("a 0-d tensor reduces with dim 1, -1 or none", function()
    local s = T.tensor(2.5)
    expect.eq(s:sum(1):item(), 2.5)
    expect.eq(s:sum(-1, true).shape, {})
    expect.eq(s:mean({ 1 }):item(), 2.5)
    local v, i = s:max(1)
    expect.eq({ v:item(), i:item() }, { 2.5, 1 })
    expect.eq(s:argmin():item(), 1)
    expect.eq(s:cumsum(1):item(), 2.5)
    expect.eq(s:softmax(-1):item(), 1)
    expect.eq(s:log_softmax(1):item(), 0)
    expect.truthy(s:var():item() ~= s:var():item())  -- one value, correction 1: 0 / 0
    expect.eq(s:var({ correction = 0 }):item(), 0)
  end)
  it("softmax is stable for large inputs and exact for -inf entries", function()
    local a = T.tensor({ { 1000, 1001, 1002 }, { -1000, -1001, -1002 } }, { dtype = "float32" })
    local b = T.tensor({ { 0, 1, 2 }, { 0, -1, -2 } }, { dtype = "float32" })
    expect.close(a:softmax(2), b:softmax(2))
    expect.close(a:log_softmax(2), b:log_softmax(2))
    expect.close(a:logsumexp(2), b:logsumexp(2) + T.tensor({ 1000, -1000 }), 1e-6)
    local m = T.tensor({ 1, -inf, 3, -inf }, { dtype = "float32" })
    local sm = m:softmax(1):totable()
    expect.eq({ sm[2], sm[4] }, { 0, 0 })
    expect.close(T.tensor({ sm[1], sm[3] }), T.tensor({ 1, 3 }, { dtype = "float32" }):softmax(1))
    expect.eq(m:log_softmax(1)[2]:item(), -inf)
    local r = T.randn(64, 333):softmax(2):sum(2)
    expect.close(r, T.ones(64), 1e-5)
    local c = T.randn(333, 64):softmax(1):sum(1)
    expect.close(c, T.ones(64), 1e-5)
  end)
  it("NaN propagates through every floating reduction", function()
    local n = T.tensor({ 1, nan, 3 })
    for _, op in ipairs({ "sum", "mean", "prod", "amax", "amin", "var", "std", "logsumexp", "norm" }) do
      local v = T[op](n):item()
      if v == v then error(op .. " of a NaN gives " .. v) end
    end
    expect.eq(n:all():item(), true)  -- NaN is non-zero
    expect.eq(n:argmax():item(), 2)
    local v, i = n:min(1)
    expect.truthy(v:item() ~= v:item())
    expect.eq(i:item(), 2)
  end)
  it("functions and methods", function()
    for _, op in ipairs({ "sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std",
                          "logsumexp", "norm", "all", "any" }) do
      expect.truthy(T[op] and x[op], op)
      expect.close((T[op](x)), (x[op](x)))
    end
    for _, op in ipairs({ "cumsum", "softmax", "log_softmax" }) do expect.close(T[op](x, 2), x[op](x, 2)) end
  end)
end)

describe("argument errors of reductions", function()
  local x = T.randn(3, 4)
  local xi = T.tensor({ 1, 2, 3 })
  it("dims out of range or repeated", function()
    errs(function() local _ = x:sum(3) end, "sum", "dim 3 is out of range for a 2-d tensor")
    errs(function() local _ = x:mean({ 1, -3 }) end, "mean", "dim -3 is out of range")
    errs(function() local _ = x:argmax(0) end, "argmax", "dim 0 is out of range")
    errs(function() local _ = x:max(5) end, "max", "dim 5 is out of range")
    errs(function() local _ = x:cumsum(-3) end, "cumsum", "out of range")
    errs(function() local _ = x:softmax(3) end, "softmax", "out of range")
    errs(function() local _ = T.tensor(1):sum(2) end, "sum", "dim 2 is out of range for a 0-d tensor")
    errs(function() local _ = x:sum({ 1, -2 }) end, "sum", "appears more than once")
    errs(function() local _ = x:amax({ 2, 2 }) end, "amax", "appears more than once")
    errs(function() local _ = x:sum(1.5) end, "sum", "expected an integer, got 1.5")
  end)
  it("floating-only reductions reject integer inputs (as torch)", function()
    errs(function() local _ = xi:mean() end, "mean", "expected a floating tensor, got an int64 tensor")
    errs(function() local _ = xi:var() end, "var", "expected a floating tensor")
    errs(function() local _ = xi:std(1) end, "std", "expected a floating tensor")
    errs(function() local _ = xi:norm() end, "norm", "expected a floating tensor")
    errs(function() local _ = xi:softmax(1) end, "softmax", "expected a floating tensor")
    errs(function() local _ = xi:log_softmax(1) end, "log_softmax", "expected a floating tensor")
    errs(function() local _ = xi:mean({ dtype = "int32" }) end, "mean", "expected a floating tensor, got an int32")
    errs(function() local _ = xi:softmax(1, { dtype = "int32" }) end, "softmax", "expected a floating dtype")
  end)
  it("extremes of an empty range are errors", function()
    local e = T.zeros(0, 3)
    errs(function() local _ = e:amax() end, "amax", "has no elements")
    errs(function() local _ = e:amin(1) end, "amin", "dim 1 of float32 tensor of shape {0,3} because it has size 0")
    errs(function() local _ = e:max() end, "max", "has no elements")
    errs(function() local _ = e:min(1) end, "min", "size 0")
    errs(function() local _ = e:argmax() end, "argmax", "has no elements")
    errs(function() local _ = e:argmin(1) end, "argmin", "size 0")
    errs(function() local _ = e:norm(1, false, { p = -math.huge }) end, "norm", "-inf norm of an empty")
  end)
  it("wrong argument types and options", function()
    errs(function() local _ = T.sum(5) end, "sum", "argument 1 (self) expected a tensor, got number")
    errs(function() local _ = x:sum("1") end, "sum", "argument 2 (dim)")
    errs(function() local _ = x:sum(1, 1) end, "sum", "argument 3 (keepdim) expected a boolean, got number")
    errs(function() local _ = x:max("a") end, "max", "argument 2 (dim) expected an integer")
    errs(function() local _ = x:max(x, 1) end, "max", "the elementwise form takes two tensors")
    errs(function() local _ = x:softmax() end, "softmax", "argument 2 (dim) expected an integer, got nil")
    errs(function() local _ = x:cumsum() end, "cumsum", "dim")
    errs(function() local _ = x:var({ foo = 1 }) end, "var", "unknown option 'foo'")
    errs(function() local _ = x:var({ correction = 1, unbiased = true }) end, "var", "either correction or unbiased")
    errs(function() local _ = x:std(nil, nil, { correction = true }) end, "std", "correction expected a number, got boolean")
    errs(function() local _ = x:sum({ dtype = "float8" }) end, "sum", "dtype expected one of")
    errs(function() local _ = x:norm(nil, nil, { p = 0 / 0 }) end, "norm", "p expected a number, got nan")
    errs(function() local _ = x:norm(nil, nil, { p = "fr" }) end, "norm", "p) expected a number or \"fro\"")
  end)
end)

describe("deliberate differences from torch 1.13", function()
  it("argmax / argmin take bool tensors (torch has no bool kernel): the first true / false", function()
    local b = T.tensor({ { false, true, true }, { false, false, false } })
    expect.eq(b:argmax(2):totable(), { 2, 1 })
    expect.eq(b:argmin(2):totable(), { 1, 1 })
    expect.eq(b:argmax():item(), 2)
  end)
  it("softmax of an empty integer tensor raises like any integer softmax (torch returns it)", function()
    errs(function() local _ = T.zeros(0, 3, { dtype = "int64" }):softmax(1) end, "softmax", "expected a floating tensor")
  end)
  it("logsumexp, prod, all and any take no dim or several dims (torch 1.13: one dim)", function()
    local x = T.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float32" })
    expect.close(x:logsumexp(), T.tensor(math.log(math.exp(1) + math.exp(2) + math.exp(3) + math.exp(4))))
    expect.eq(x:prod({ 1, 2 }):item(), 24)
    expect.eq(x:gt(0):all({ 1, 2 }):item(), true)
    expect.eq(x:gt(3):any({ -1, 1 }, true):totable(), { { true } })
  end)
  it("multi-dim bfloat16 sums are rounded once from a float sum (torch 1.13 rounds partial sums)", function()
    local x = T.full({ 4, 64, 8 }, 1.0078125, { dtype = "bfloat16" })  -- 1 + 2^-7
    expect.eq(x:sum({ 2, 3 }):float():totable(), { 516, 516, 516, 516 })
  end)
end)
