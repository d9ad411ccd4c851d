-- int8 weight-only quantisation (stdlib/nn_quant.lua, vm/ops/quant.cpp): the packing, the CPU
-- product against a float64 reference of the dequantised weight, nn.quantize_int8 on modules; on
-- CUDA (skipped without a GPU) the device kernels (GEMV up to 4 rows, dequantise + cuBLAS above)
-- against the reference and the CPU op, and the op inside a CUDA graph. The int8 GPT-2:
-- test_gpt2.lua.
local T = require "crescent"
local bit = require "bit"
local dumps = require "graph_dumps"

expect.covers("_int8_quantize", "_int8_weight_mm")

-- The int8 values of packed rows q (int32 {n, kp / 4}) as a Lua table {n}{kp}.
local function unpack_rows(q)
  local rows = {}
  for i, words in ipairs(q:totable()) do
    local r = {}
    for _, w in ipairs(words) do
      for j = 0, 3 do
        local b = bit.band(bit.rshift(w, 8 * j), 255)
        r[#r + 1] = b >= 128 and b - 256 or b
      end
    end
    rows[i] = r
  end
  return rows
end

-- The dequantised weight {n, k} in float64, from the unpacked bytes.
local function dequantised(q, scales, k)
  local rows, s = unpack_rows(q), scales:double():totable()
  local w = {}
  for i, r in ipairs(rows) do
    w[i] = {}
    for j = 1, k do w[i][j] = r[j] * s[i] end
  end
  return T.tensor(w, { dtype = "float64" })
end

-- |got - want| <= tol * bound elementwise (bound: the sum of |terms| of each output), with the
-- worst element named.
local function within(got, want, bound, tol, what)
  local excess = ((got:double() - want):abs() - bound * tol):flatten()
  local worst, at = excess:max(1)
  if worst:item() > 0 then
    error(string.format("%s: element %d off by %.3g more than %g x its bound (got %.8g, want %.8g)", what, at:item(),
      worst:item(), tol, got:double():flatten()[at:item()]:item(), want:flatten()[at:item()]:item()), 2)
  end
end

-- the reference of _int8_weight_mm in float64 and its bound (w: the dequantised weight, when made)
local function reference(x, q, s, b, k, w)
  w = w or dequantised(q, s, k)
  local xd = x:double()
  local want = T.matmul(xd, w:t())
  local bound = T.matmul(xd:abs(), w:abs():t())
  if b then want, bound = want + b:double(), bound + b:double():abs() end
  return want, bound
end

local TOL = { float32 = 1e-5, float64 = 1e-12, float16 = 2 ^ -10, bfloat16 = 2 ^ -7 }

describe("int8 weight-only quantisation", function()
  it("packs symmetric per-row int8 values: scale = max|row| / 127, round half to even, zero padding", function()
    T.manual_seed(1)
    local w = T.randn(5, 37)
    w[2]:zero_()
    w[3][1], w[3][4], w[3][5], w[3][6] = 127, 2.5, 3.5, -2.5  -- scale 1: ties round to even
    local q, s = T._int8_quantize(w)
    expect.eq(q.shape, { 5, 12 })  -- 37 padded to 48 bytes
    expect.eq(q.dtype, "int32")
    expect.close(s, w:abs():amax(2) / 127, 0, 0)
    local want = T.where(s:view(-1, 1):gt(0), (w / s:view(-1, 1)):round(), 0):totable()
    for i, r in ipairs(unpack_rows(q)) do
      for j = 1, 48 do expect.eq(r[j], j <= 37 and want[i][j] or 0, ("row %d col %d"):format(i, j)) end
    end
    expect.eq({ unpack_rows(q)[3][4], unpack_rows(q)[3][5], unpack_rows(q)[3][6] }, { 2, 4, -2 })
    expect.errors(function() T._int8_quantize(T.randn(3)) end, "_int8_quantize: weight expected a 2%-D floating tensor")
    local bad = T.randn(2, 4)
    bad[2][3] = 0 / 0
    expect.errors(function() T._int8_quantize(bad) end, "weight expected finite values, got %-?nan in row 2")
  end)

  it("multiplies as a float64 reference of the dequantised weight, every dtype and row count", function()
    T.manual_seed(2)
    for _, dt in ipairs { "float32", "float64", "float16", "bfloat16" } do
      for _, shape in ipairs { { 1, 40 }, { 3, 40 }, { 2, 9, 40 }, { 70, 40 }, { 4, 0 } } do
        local k = shape[#shape]
        local q, s = T._int8_quantize(T.randn(23, k))
        local b = T.randn(23):to(dt)
        local x = T.randn(shape):to(dt)
        for _, bias in ipairs { b, false } do
          local got = T._int8_weight_mm(x, q, s, bias or nil)
          local out = {}
          for i = 1, #shape - 1 do out[i] = shape[i] end
          out[#out + 1] = 23
          expect.eq(got.shape, out)
          expect.eq(got.dtype, dt)
          local want, bound = reference(x, q, s, bias or nil, k)
          within(got, want, bound, TOL[dt], ("%s {%s} bias %s"):format(dt, table.concat(shape, ","), tostring(bias ~= false)))
        end
      end
    end
    -- scales of another floating dtype (a model converted with :to("bfloat16")), a strided input
    local q, s = T._int8_quantize(T.randn(8, 16))
    local x = T.randn(16, 3):t()
    local want, bound = reference(x, q, s:bfloat16(), nil, 16)
    within(T._int8_weight_mm(x, q, s:bfloat16()), want, bound, TOL.float32, "bfloat16 scales")
  end)

  it("applies its activation argument to the product, as the op after it", function()
    T.manual_seed(7)
    for _, dt in ipairs { "float32", "float64", "bfloat16" } do
      for _, shape in ipairs { { 1, 40 }, { 70, 40 } } do
        local q, s = T._int8_quantize(T.randn(23, 40))
        local x, b = T.randn(shape):to(dt), T.randn(23):to(dt)
        local y = T._int8_weight_mm(x, q, s, b)
        expect.eq(T._int8_weight_mm(x, q, s, b, "relu"):totable(), T.relu(y):totable())
        expect.eq(T._int8_weight_mm(x, q, s, nil, "gelu_tanh"):totable(),
          T.gelu(T._int8_weight_mm(x, q, s), { approximate = "tanh" }):totable())
        expect.eq(T._int8_weight_mm(x, q, s, b, "none"):totable(), y:totable())
      end
    end
  end)

  it("takes the activation after it into its compiled graph", function()
    T.manual_seed(8)
    local lin = T.nn.quantize_int8(T.nn.Linear(32, 48))
    local x = T.randn(3, 32)
    local fn = function(a) return T.gelu(lin(a), { approximate = "tanh" }) * 2 end
    local texts, got = dumps.capture(function()
      local f = T.compile(fn)
      for _ = 1, 4 do f(x) end
      T.compiler.wait()
      return f(x)
    end)
    local opt = dumps.optimised(table.concat(texts, "\n")) or ""
    local fused = opt:find('_int8_weight_mm(%0, %1, %2, %3, "gelu_tanh")', 1, true)
    expect.truthy(fused and not opt:find("= gelu(", 1, true), opt)
    expect.eq(got:totable(), fn(x):totable())
  end)

  it("names the op, the expectation and what was given on misuse; has no gradient", function()
    local q, s = T._int8_quantize(T.randn(4, 20))
    local x = T.randn(2, 20)
    expect.errors(function() T._int8_weight_mm(x, q:narrow(2, 1, 4), s) end,
      "_int8_weight_mm: weight expected the int8 values packed in int32 {out_features, 8} %(in_features 20 padded to 32")
    expect.errors(function() T._int8_weight_mm(x, q, s:narrow(1, 1, 3)) end, "_int8_weight_mm: scales expected a floating tensor {4}")
    expect.errors(function() T._int8_weight_mm(x, q, s, T.zeros(4, { dtype = "float64" })) end,
      "_int8_weight_mm: bias expected input's dtype float32 and shape {4}")
    expect.errors(function() T._int8_weight_mm(x:long(), q, s) end, "_int8_weight_mm: input expected a floating tensor")
    expect.errors(function() T._int8_weight_mm(x, q, s, nil, "gelu") end, '_int8_weight_mm: activation expected "none"')
    local xg = T.randn(2, 20, { requires_grad = true })
    local y = T._int8_weight_mm(xg, q, s):sum()
    expect.errors(function() y:backward() end, "_int8_weight_mm: derivative not implemented")
  end)

  it("quantize_int8 replaces every nn.Linear by an Int8Linear of its weights", function()
    T.manual_seed(3)
    local nn = T.nn
    local m = nn.Sequential(nn.Linear(24, 32), nn.GELU(), nn.Linear(32, 8, { bias = false }))
    local x = T.randn(5, 24)
    local want = m(x):detach()
    local q = nn.quantize_int8(m)
    expect.truthy(q == m, "converted in place")
    expect.eq(tostring(m[1]), "Int8Linear(in_features=24, out_features=32, bias=True, int8)")
    expect.eq(#m:parameters(), 0)
    local sd = m:state_dict()
    expect.eq(sd["0.weight"].dtype, "int32")
    expect.eq(sd["0.scales"].shape, { 32 })
    expect.eq(sd["2.bias"], nil)
    -- the quantisation error: each weight within scale / 2 of its float value
    expect.close(m(x), want, 0.02, 0.02)
    local lin = nn.Linear(4, 3)
    expect.eq(nn.quantize_int8(lin).__name, "Int8Linear")
    expect.errors(function() nn.quantize_int8(3) end, "quantize_int8: argument 1 %(module%) expected an nn.Module, got number")
  end)
end)

describe("int8 weight-only products on CUDA", function()
  it("the device kernels give the CPU op's values: rows 1, 3, 4, 5, 16 (GEMV), 64 (dequantise + cuBLAS)", function()
    expect.need_gpu()
    T.manual_seed(4)
    local h = T.cuda.stats().host_ops
    for _, k in ipairs { 100, 768 } do
      local q, s = T._int8_quantize(T.randn(300, k))
      local b = T.randn(300)
      local dq, ds = q:cuda(), s:cuda()
      for _, dt in ipairs { "float32", "bfloat16", "float16" } do
        for _, m in ipairs { 1, 3, 4, 5, 16, 64 } do
          local x = T.randn(m, k):to(dt)
          for _, bias in ipairs { b:to(dt), false } do
            local what = ("k %d %s rows %d bias %s"):format(k, dt, m, tostring(bias ~= false))
            local want, bound = reference(x, q, s, bias or nil, k)
            local got = T._int8_weight_mm(x:cuda(), dq, ds, bias and bias:cuda() or nil)
            expect.eq(got.dtype, dt, what)
            -- 16-bit results round once (1 unit in the last place); above 16 rows the weight is
            -- rounded to the activation dtype before cuBLAS
            within(got:cpu(), want, bound, m > 16 and 2 * TOL[dt] or TOL[dt], what)
            within(T._int8_weight_mm(x, q, s, bias or nil), want, bound, TOL[dt], what .. " (CPU)")
          end
        end
      end
    end
    expect.eq(T.cuda.stats().host_ops, h, "host ops (the products ran on the device)")
  end)

  it("applies the activation argument in the GEMV's epilogue and after cuBLAS", function()
    expect.need_gpu()
    T.manual_seed(9)
    local q, s = T._int8_quantize(T.randn(300, 2100))
    local b = T.randn(300)
    local dq, ds, db, w = q:cuda(), s:cuda(), b:cuda(), dequantised(q, s, 2100)
    for _, m in ipairs { 1, 8, 16, 40 } do  -- (8, 16: k split over a cluster's blocks; 40: cuBLASLt)
      local x = T.randn(m, 2100)
      local want, bound = reference(x, q, s, b, 2100, w)
      for act, f in pairs { relu = T.relu, gelu_tanh = function(t) return T.gelu(t, { approximate = "tanh" }) end } do
        -- (each activation's slope is at most 1.13: the product's bound grows by that much)
        within(T._int8_weight_mm(x:cuda(), dq, ds, db, act):cpu(), f(want), bound * 1.13,
          m > 16 and 2 * TOL.float32 or TOL.float32, ("rows %d %s"):format(m, act))
      end
    end
  end)

  it("gives the reference's values for every row count 1..16 (the GEMV), odd n and k, with and without bias", function()
    expect.need_gpu()
    T.manual_seed(6)
    -- k 37: one chunk per row; 769, 2100 over 301 rows: k split across a block's warps (few row
    -- groups); 3100: 4 rows need two tiles of x; 5000: 16 rows need two in the most shared memory
    -- a block may have (227 KiB on an H100)
    for _, k in ipairs { 37, 769, 2100, 3100, 5000 } do
      local q, s = T._int8_quantize(T.randn(301, k))
      local b = T.randn(301)
      local dq, ds, w = q:cuda(), s:cuda(), dequantised(q, s, k)
      for m = 1, 16 do
        for _, dt in ipairs((m == 1 or m == 5 or m == 16) and { "float32", "float64", "bfloat16", "float16" } or { "float32" }) do
          local x = T.randn(m, k):to(dt)
          for _, bias in ipairs { b:to(dt), false } do
            local what = ("k %d %s rows %d bias %s"):format(k, dt, m, tostring(bias ~= false))
            local want, bound = reference(x, q, s, bias or nil, k, w)
            within(T._int8_weight_mm(x:cuda(), dq, ds, bias and bias:cuda() or nil):cpu(), want, bound, TOL[dt], what)
          end
        end
      end
    end
  end)

  it("runs inside a compiled function replayed as one CUDA graph (reduce-overhead)", function()
    expect.need_gpu()
    T.manual_seed(5)
    local lin = T.nn.quantize_int8(T.nn.Linear(64, 96)):to("cuda")
    local f = T.compile(function(x) return T.gelu(lin(x)) * 2 end, { mode = "reduce-overhead" })
    local r0 = T.compiler.stats().cudagraph_replays
    for i = 1, 6 do
      local x = T.randn(2, 64):cuda()
      expect.close(T.no_grad(f, x):cpu(), (T.gelu(lin(x)) * 2):cpu(), 1e-5, 1e-5, "call " .. i)
      T.compiler.wait()
    end
    expect.truthy(T.compiler.stats().cudagraph_replays > r0, "a CUDA graph replays the int8 product")
  end)
end)
