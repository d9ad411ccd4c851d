-- attention's gradients on CUDA: the fused backward (T._attention saves the rows' logsumexp,
-- T._attention_backward recomputes p per tile: vm/ops/attention_backward.cpp,
-- vm/kernels/cuda/attention_bwd.cuh) against the registry-op composition on the device (the rule
-- with create_graph) and against float64 on the CPU, over sequence lengths 1, odd, 64, 200 and
-- 1024, heads, head sizes 32 / 64 / 128, causal (L above and below S), float and bool masks,
-- float32 / float16 / bfloat16: 16-bit head sizes 64 / 128 take the tensor-core kernels
-- (attention_bwd_tc.cuh), the rest the FMA ones (cuDNN's kernels switched off where a spec pins
-- crescent's: test_cuda_attention_cudnn.lua covers those). Every case needs a GPU and skips cleanly
-- without one.
local T = require "crescent"

local with_cudnn_sdp = require "with_cudnn_sdp"
local with_determinism = require "with_determinism"
local errs = expect.error_checker("test_cuda_attention_grad.lua")
local need_gpu = expect.need_gpu
expect.covers("_attention", "_attention_backward")

-- max |got - want| over max(1, max |want|)
local function rel_err(got, want)
  got, want = got:cpu():double(), want:cpu():double()
  if got:numel() == 0 then return 0 end
  return (got - want):abs():max():item() / math.max(1, want:abs():max():item())
end

local function leaves(dev, dt, ...)
  local r = {}
  for i, x in ipairs({ ... }) do
    x = x:to(dt)
    r[i] = (dev == "cuda" and x:cuda() or x):detach():requires_grad_()
  end
  return r
end

-- The q / k / v gradients of sum(attention(q, k, v) * w); compose: through create_graph (the rule's
-- composition of registry ops), else a plain backward (the fused kernels on CUDA).
local function grads(f, qkv, w, mask, scale, causal, compose)
  local o = f(qkv[1], qkv[2], qkv[3], scale, causal, mask)
  local g = T.autograd.grad((o * w):sum(), qkv, { create_graph = compose or false })
  return { g[1]:detach(), g[2]:detach(), g[3]:detach() }
end
local function lse_attention(...) return (T._attention(...)) end

local TOL = { float32 = 2e-4, float16 = 1.5e-2, bfloat16 = 6e-2 }

describe("CUDA attention backward", function()
  it("the fused backward matches the composition and float64 on the CPU", function()
    need_gpu()
    with_cudnn_sdp(false, function()
      T.manual_seed(34)
      -- {batch, heads, L, S, E, Ev, causal, mask}: mask "float" {L, S} / {B, 1, L, S}, "bool" {1, S}
      local cases = {
        { 1, 1, 1, 1, 32, 32, false }, { 2, 2, 1, 9, 64, 64, false }, { 1, 2, 1, 1, 128, 128, true },
        { 2, 3, 37, 53, 64, 64, false }, { 1, 2, 37, 37, 32, 32, true }, { 2, 2, 64, 64, 64, 64, true },
        { 1, 2, 200, 200, 128, 128, true }, { 1, 2, 200, 130, 32, 32, false, "float" },
        { 2, 2, 64, 64, 64, 64, false, "float4" }, { 2, 1, 64, 80, 64, 64, false, "bool" },
        { 1, 2, 50, 70, 32, 64, false }, { 1, 1, 1024, 1024, 64, 64, true }, { 1, 1, 1024, 1024, 128, 128, false },
        { 2, 3, 70, 100, 128, 128, true }, { 1, 2, 130, 90, 64, 64, true }, { 1, 3, 100, 77, 128, 128, false, "bool" },
        { 2, 2, 90, 130, 128, 128, false, "float" },
      }
      for _, dt in ipairs({ "float32", "float16", "bfloat16" }) do
        for _, c in ipairs(cases) do
          local B, H, L, S, E, Ev, causal, mk = unpack(c)
          local what = dt .. " {" .. table.concat({ B, H, L, S, E, Ev }, ", ") .. "} " .. tostring(causal) .. " "
            .. tostring(mk)
          local q, k, v = T.randn(B, H, L, E), T.randn(B, H, S, E), T.randn(B, H, S, Ev)
          local w = T.randn(B, H, L, Ev)
          local mask
          if mk == "float" then mask = T.randn(L, S)
          elseif mk == "float4" then mask = T.randn(B, 1, L, S)
          elseif mk == "bool" then mask = T.cat({ T.ones(1, 1, { dtype = "bool" }), T.rand(1, S - 1):lt(0.6) }, 2) end
          local scale = 0.9 / math.sqrt(E)
          local m_dev = mask and (mask.dtype == "bool" and mask:cuda() or mask:to(dt):cuda())
          local m_ref = mask and (mask.dtype == "bool" and mask or mask:to(dt):double())
          local dev = leaves("cuda", dt, q, k, v)
          local fused = grads(lse_attention, dev, w:to(dt):cuda(), m_dev, scale, causal)
          local composed = grads(lse_attention, dev, w:to(dt):cuda(), m_dev, scale, causal, true)
          local ref = grads(T.attention, leaves("cpu", "float64", q:to(dt), k:to(dt), v:to(dt)), w:to(dt):double(),
                            m_ref, scale, causal)
          for i = 1, 3 do
            expect.eq({ fused[i].dtype, fused[i].device }, { dt, "cuda:0" }, what)
            local e1, e2 = rel_err(fused[i], ref[i]), rel_err(fused[i], composed[i])
            if e1 > TOL[dt] or e2 > TOL[dt] then
              error(("%s: gradient %d off by %.3g (float64) / %.3g (composition)"):format(what, i, e1, e2))
            end
          end
        end
      end
    end)
  end)

  it("a plain backward runs _attention_backward from the saved logsumexp, deterministically", function()
    need_gpu()
    with_determinism(true, function()
      T.manual_seed(5)
      for _, dt in ipairs({ "float32", "float16", "bfloat16" }) do
        local qkv = leaves("cuda", dt, T.randn(2, 4, 77, 64), T.randn(2, 4, 91, 64), T.randn(2, 4, 91, 64))
        local go = T.randn(2, 4, 77, 64):to(dt):cuda()
        local o, lse = T._attention(qkv[1], qkv[2], qkv[3], 0.125, true)
        expect.eq({ lse.dtype, lse.shape }, { "float32", { 2, 4, 77 } }, dt)
        -- the forward's logsumexp is that of the scores
        local s = T.matmul(qkv[1]:detach():double(), qkv[2]:detach():double():transpose(-2, -1)) * 0.125
        s = s:masked_fill(T.ones(77, 91, { dtype = "bool", device = "cuda" }):triu(1), -math.huge)
        expect.close(lse:cpu():double(), s:logsumexp(-1):cpu(), 1e-4, 1e-4)
        o:backward(go)
        local want = { T._attention_backward(go, qkv[1]:detach(), qkv[2]:detach(), qkv[3]:detach(), o:detach(), lse, 0.125, true) }
        for i = 1, 3 do
          expect.eq(qkv[i].grad:cpu():double():totable(), want[i]:cpu():double():totable(), dt .. " gradient " .. i)
          qkv[i].grad = nil
        end
        T._attention(qkv[1], qkv[2], qkv[3], 0.125, true):backward(go)
        for i = 1, 3 do expect.eq(qkv[i].grad:cpu():double():totable(), want[i]:cpu():double():totable(), dt .. " again " .. i) end
      end
    end)
  end)

  -- 16-bit head size 64 and float32 take one pass with dq summed by float atomics; deterministic
  -- mode the two ordered passes: the same dk and dv bit for bit, dq within the float32 sums' rounding
  it("the one-pass backward (dq by atomics) agrees with the ordered two passes", function()
    need_gpu()
    with_cudnn_sdp(false, function()
      T.manual_seed(7)
      for _, c in ipairs({ { 2, 3, 1024, 1024, true }, { 1, 2, 77, 91, true }, { 2, 2, 130, 70, false } }) do
        local B, H, L, S, causal = unpack(c)
        for _, dt in ipairs({ "float32", "float16", "bfloat16" }) do
          local what = dt .. " {" .. table.concat({ B, H, L, S }, ", ") .. "} " .. tostring(causal)
          local function dev(n) return T.randn(B, H, n, 64):to(dt):cuda() end
          local q, k, v = dev(L), dev(S), dev(S)
          local go = T.randn(B, H, L, 64):to(dt):cuda()
          local o, lse = T._attention(q, k, v, 0.125, causal)
          local one = { T._attention_backward(go, q, k, v, o, lse, 0.125, causal) }
          local two
          with_determinism(true, function() two = { T._attention_backward(go, q, k, v, o, lse, 0.125, causal) } end)
          for i = 2, 3 do
            expect.eq(one[i]:cpu():double():totable(), two[i]:cpu():double():totable(), what .. " gradient " .. i)
          end
          local e = rel_err(one[1], two[1])
          local tol = ({ float32 = 1e-5, float16 = 2e-3, bfloat16 = 1.6e-2 })[dt]
          if e > tol then error(("%s: dq off by %.3g"):format(what, e)) end
        end
      end
    end)
  end)

  it("F.scaled_dot_product_attention and T.attention reach the fused backward", function()
    need_gpu()
    T.manual_seed(8)
    local q, k, v = T.randn(2, 3, 40, 64):half(), T.randn(2, 3, 40, 64):half(), T.randn(2, 3, 40, 64):half()
    local go = T.randn(2, 3, 40, 64):half():cuda()
    local ref = leaves("cpu", "float64", q, k, v)
    T.attention(ref[1], ref[2], ref[3], nil, true):backward(go:cpu():double())
    for _, f in ipairs({ function(a, b, c) return T.F.scaled_dot_product_attention(a, b, c, { causal = true }) end,
                         function(a, b, c) return T.attention(a, b, c, nil, true) end }) do
      local dev = leaves("cuda", "float16", q, k, v)
      local o = f(dev[1], dev[2], dev[3])
      expect.truthy(tostring(o.grad_fn):lower():match("attention"), "grad_fn " .. tostring(o.grad_fn))
      o:backward(go)
      for i = 1, 3 do expect.close(dev[i].grad:cpu():double(), ref[i].grad, 2e-2, 2e-2) end
    end
  end)

  it("operands that start off 16 bytes take the FMA kernels and match", function()
    need_gpu()
    with_cudnn_sdp(false, function()
      T.manual_seed(3)
      for _, dt in ipairs({ "float16", "bfloat16" }) do
        local n = 2 * 50 * 64
        local q = T.randn(n + 1):to(dt):cuda():narrow(1, 2, n):view(1, 2, 50, 64)  -- (2 bytes past an allocation)
        local function dev() return T.randn(1, 2, 50, 64):to(dt):cuda() end
        local k, v, go = dev(), dev(), dev()
        local qa = q:clone()
        local o, lse = T._attention(qa, k, v, 0.125, true)
        local got = { T._attention_backward(go, q, k, v, o, lse, 0.125, true) }
        local want = { T._attention_backward(go, qa, k, v, o, lse, 0.125, true) }
        for i = 1, 3 do expect.close(got[i]:cpu():double(), want[i]:cpu():double(), TOL[dt], TOL[dt]) end
      end
    end)
  end)

  it("_attention_backward checks its inputs and is CUDA only", function()
    need_gpu()
    local q = T.randn(1, 4, 8):cuda()
    local o, lse = T._attention(q, q, q)
    errs(function() T._attention_backward(o:cpu(), q:cpu(), q:cpu(), q:cpu(), o:cpu(), lse:cpu()) end,
      "_attention_backward", "not implemented on the CPU")
    errs(function() T._attention_backward(o, q, q, q, o, lse:double()) end, "_attention_backward", "lse expected dtype float32")
    errs(function() T._attention_backward(o:narrow(2, 1, 2), q, q, q, o, lse) end, "_attention_backward",
      "grad_out expected dtype float32 and shape")
    errs(function() T._attention_backward(o, q:double(), q, q, o, lse) end, "_attention_backward",
      "query expected float32, float16 or bfloat16")
  end)
end)
