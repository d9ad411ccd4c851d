-- Attention through cuDNN's fused kernels (vm/cuda/cudnn_sdpa.hpp, PyTorch's default on sm_90):
-- float16 / bfloat16 forward (with and without the rows' logsumexp) and backward against float64
-- on the CPU and against crescent's own kernels (T.backends.cuda.enable_cudnn_sdp(false)), over
-- odd lengths, causal with fewer and more rows than keys, head sizes 32 / 64 / 128 and strided
-- head views; that each call is one cuDNN call and no kernel of ours (T.cuda.stats), the switches,
-- what still runs crescent's kernels (masks), and a CUDA graph replay. Needs a GPU of sm_90 or
-- later and cuDNN 9.15 or later; skips cleanly elsewhere.
local T = require "crescent"
local work = require "cuda_work"

local with_cudnn = require "with_cudnn_sdp"
local with_determinism = require "with_determinism"
local with_field = require "with_field"
expect.covers("_attention", "_attention_backward")

local TOL = { float16 = 1.5e-2, bfloat16 = 6e-2 }

local function need_cudnn_attention()
  expect.need_gpu()
  if not T.backends.cuda.can_use_cudnn_attention() then
    expect.skip("cuDNN's attention needs sm_90 and cuDNN 9.15 or later (cuDNN " ..
      tostring(T.backends.cudnn.version()) .. ")")
  end
end



local function rel_err(got, want)
  got, want = got:cpu():double(), want:cpu():double()
  return (got - want):abs():max():item() / math.max(1, want:abs():max():item())
end
local function near(got, want, tol, what)
  local e = rel_err(got, want)
  if e > tol then error(("%s: off by %.3g"):format(what, e), 2) end
end

-- float64 on the CPU: the output, the rows' logsumexp and the gradients of sum(out * go)
local function reference(q, k, v, go, scale, causal)
  local r = {}
  for i, x in ipairs({ q, k, v }) do r[i] = x:cpu():double():detach():requires_grad_() end
  local L, S = q:size(-2), k:size(-2)
  local s = T.matmul(r[1], r[2]:transpose(-2, -1)) * scale
  if causal then s = s:masked_fill(T.ones(L, S, { dtype = "bool" }):triu(1), -math.huge) end
  local o = T.matmul(s:softmax(-1), r[3])
  local g = T.autograd.grad((o * go:cpu():double()):sum(), r)
  return o:detach(), s:detach():logsumexp(-1), g
end

describe("attention through cuDNN", function()
  it("forward and backward match float64 and crescent's kernels, one cuDNN call each", function()
    need_cudnn_attention()
    T.manual_seed(61)
    -- {B, H, L, S, E, causal}
    local cases = {
      { 2, 3, 37, 53, 64, false }, { 1, 2, 64, 64, 64, true }, { 2, 2, 200, 200, 128, true },
      { 1, 4, 1024, 1024, 64, true }, { 2, 3, 70, 100, 128, true }, { 1, 2, 130, 90, 64, true },
      { 2, 2, 33, 47, 32, false }, { 1, 1, 9, 300, 64, false },
    }
    for _, dt in ipairs({ "float16", "bfloat16" }) do
      for _, c in ipairs(cases) do
        local B, H, L, S, E, causal = unpack(c)
        local what = dt .. " {" .. table.concat({ B, H, L, S, E }, ", ") .. "} " .. tostring(causal)
        local function dev(n) return T.randn(B, H, n, E):to(dt):cuda() end
        local q, k, v = dev(L), dev(S), dev(S)
        local go = T.randn(B, H, L, E):to(dt):cuda()
        local scale = 0.9 / math.sqrt(E)
        local o_ref, lse_ref, g_ref = reference(q, k, v, go, scale, causal)
        local kernels, calls, o, lse = work(function() return T._attention(q, k, v, scale, causal) end)
        expect.eq({ kernels, calls }, { 0, 1 }, what .. ": forward's kernels of ours and cuDNN calls")
        near(o, o_ref, TOL[dt], what .. " out")
        near(lse, lse_ref, 1e-3, what .. " logsumexp")
        local bk, bc, dq, dk, dv = work(function() return T._attention_backward(go, q, k, v, o, lse, scale, causal) end)
        expect.eq({ bk, bc }, { 0, 1 }, what .. ": backward's kernels of ours and cuDNN calls")
        local g = { dq, dk, dv }
        with_cudnn(false, function()
          local o2, lse2 = T._attention(q, k, v, scale, causal)
          near(o, o2, TOL[dt], what .. " out against crescent's kernel")
          near(lse, lse2, 1e-3, what .. " logsumexp against crescent's kernel")
          local g2 = { T._attention_backward(go, q, k, v, o2, lse2, scale, causal) }
          for i = 1, 3 do
            near(g[i], g_ref[i], TOL[dt], what .. " gradient " .. i)
            near(g[i], g2[i], TOL[dt], what .. " gradient " .. i .. " against crescent's kernels")
          end
        end)
      end
    end
  end)

  it("reads strided head views in place, copies misaligned ones, and infers without the logsumexp", function()
    need_cudnn_attention()
    T.manual_seed(62)
    local B, L, H, E = 2, 96, 4, 64
    for _, dt in ipairs({ "float16", "bfloat16" }) do
      -- q, k, v as GPT-2's heads: one {B, L, 3, H, E} projection, viewed {B, H, L, E}
      local qkv = T.randn(B, L, 3, H, E):to(dt):cuda()
      local function head(i) return qkv:select(3, i):transpose(2, 3) end
      local q, k, v = head(1), head(2), head(3)
      local kernels, calls, o = work(function() return T.attention(q, k, v, nil, true) end)
      expect.eq({ kernels, calls }, { 0, 1 }, dt .. ": views read in place")
      local o_ref = reference(q, k, v, T.zeros(B, H, L, E), 1 / 8, true)
      near(o, o_ref, TOL[dt], dt .. " strided out")
      near(o, T.attention(q:contiguous(), k:contiguous(), v:contiguous(), nil, true), TOL[dt], dt .. " against dense")
      -- a q whose rows start 10 bytes off 16 is copied first; the copy lives until cuDNN's call is queued
      local qm = T.randn(B, H, L, E + 8):to(dt):cuda():narrow(4, 6, E)
      local om = T.attention(qm, k, v, nil, true)
      near(om, reference(qm, k, v, T.zeros(B, H, L, E), 1 / 8, true), TOL[dt], dt .. " misaligned q")
    end
  end)

  it("switches: enable_cudnn_sdp, T.backends.cudnn.enabled, masks, determinism and benchmark mode", function()
    need_cudnn_attention()
    local q = T.randn(1, 2, 40, 64):half():cuda()
    expect.eq(T.backends.cuda.cudnn_sdp_enabled(), true)
    with_cudnn(false, function()
      expect.eq(T.backends.cuda.cudnn_sdp_enabled(), false)
      local kernels, calls = work(function() return T.attention(q, q, q) end)
      expect.eq({ kernels > 0, calls }, { true, 0 }, "enable_cudnn_sdp(false): crescent's kernel")
    end)
    local kernels, calls
    with_field(T.backends.cudnn, "enabled", false, function()
      kernels, calls = work(function() return T.attention(q, q, q) end)
    end)
    expect.eq({ kernels > 0, calls }, { true, 0 }, "T.backends.cudnn.enabled = false: crescent's kernel")
    -- a mask is not part of cuDNN's graph here: crescent's kernel
    local m = T.ones(40, 40, { dtype = "bool" }):tril():cuda()
    kernels, calls = work(function() return T.attention(q, q, q, nil, false, m) end)
    expect.eq({ kernels > 0, calls }, { true, 0 }, "a mask: crescent's kernel")
    -- benchmark mode times cuDNN's engine configs for a new shape and keeps the fastest
    local qb = T.randn(2, 3, 72, 64):bfloat16():cuda()
    with_field(T.backends.cudnn, "benchmark", true, function()
      local kb, cb, ob = work(function() return T.attention(qb, qb, qb, 0.3, true) end)
      expect.eq({ kb, cb >= 1 }, { 0, true }, "benchmark mode: cuDNN")
      near(ob, reference(qb, qb, qb, T.zeros(2, 3, 72, 64), 0.3, true), TOL.bfloat16, "benchmark mode out")
    end)
    local errs = expect.error_checker("test_cuda_attention_cudnn.lua")
    errs(function() T.backends.cuda.enable_cudnn_sdp(1) end, "T.backends.cuda.enable_cudnn_sdp", "expected a boolean")
    -- deterministic: crescent's ordered backward (cuDNN sums dq by atomics), the same bits twice
    with_determinism(true, function()
      local function dev() return T.randn(1, 2, 40, 64):half():cuda() end
      local k, v, go = dev(), dev(), dev()
      local o, lse = T._attention(q, k, v, 0.125, true)
      local function bwd() return T._attention_backward(go, q, k, v, o, lse, 0.125, true) end
      local kernels, calls, a1, a2, a3 = work(bwd)
      expect.eq({ kernels > 0, calls }, { true, 0 }, "deterministic backward: crescent's kernels")
      local a = { a1, a2, a3 }
      local b = { T._attention_backward(go, q, k, v, o, lse, 0.125, true) }
      for i = 1, 3 do expect.eq(a[i]:cpu():double():totable(), b[i]:cpu():double():totable(), "gradient " .. i) end
    end)
  end)

  it("replays from a CUDA graph, forward and backward", function()
    need_cudnn_attention()
    T.manual_seed(63)
    local B, H, L, E = 2, 3, 128, 64
    local function dev() return T.randn(B, H, L, E):half():cuda() end
    local q, k, v = dev(), dev(), dev()
    local go = T.randn(B, H, L, E):half():cuda()
    local function step()
      local o, lse = T._attention(q, k, v, 0.125, true)
      return o, T._attention_backward(go, q, k, v, o, lse, 0.125, true)
    end
    step()  -- (plans built before the capture)
    local g = T.cuda.CUDAGraph()
    local o, dq, dk, dv = T.cuda.graph(g, step)
    for round = 1, 2 do
      for _, x in ipairs({ q, k, v, go }) do x:copy_(T.randn(B, H, L, E):half()) end
      g:replay()
      local o_ref, _, g_ref = reference(q, k, v, go, 0.125, true)
      near(o, o_ref, TOL.float16, "replay " .. round .. " out")
      for i, d in ipairs({ dq, dk, dv }) do near(d, g_ref[i], TOL.float16, "replay " .. round .. " gradient " .. i) end
    end
  end)
end)
