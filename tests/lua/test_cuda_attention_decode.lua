-- Attention for a few query rows over a long key axis on CUDA: the split-K kernel
-- (vm/kernels/cuda/attention_decode.cuh) against float64 on the CPU and against the composition
-- of ops on the device, over 1 to 8 query rows and 1 to 2048 keys, the masks a decode step makes
-- (a bool prefix per row), random bool and added masks, a row that sees no key, causal, float32 /
-- float16 / bfloat16, head sizes up to 128, views as GPT-2's heads; and captured in a CUDA graph
-- with the position as a device scalar; _attention_cache, a static KV cache's write and the
-- attention over it as one kernel, against index_copy_ then attention (on the CPU too), and the
-- compiled rewrite that makes it. Every CUDA case needs a GPU and skips cleanly without one.
local T = require "crescent"

local need_gpu = expect.need_gpu
expect.covers("_attention_cache")

local TOL = { float32 = 1e-4, float16 = 4e-3, bfloat16 = 3e-2 }

-- softmax(q k^T * scale + mask) v by the registry's ops (on q's device, in q's dtype)
local function compose(q, k, v, scale, causal, mask)
  local L, S = q:size(-2), k:size(-2)
  local s = T.matmul(q, k:transpose(-2, -1)) * scale
  if causal then
    s = s:masked_fill(T.ones(L, S, { dtype = "bool", device = q.device }):triu(1), -math.huge)
  elseif mask ~= nil and mask.dtype == "bool" then
    s = s:masked_fill(mask:logical_not(), -math.huge)
  elseif mask ~= nil then
    s = s + mask
  end
  return T.matmul(s:softmax(-1), v)
end

-- got (CUDA) against want within tol (absolute and relative), NaN where want is NaN
local function same(got, want, tol, what)
  local ok, err = pcall(expect.close, got:cpu():double(), want:cpu():double(), tol, tol)
  if not ok then error(what .. ": " .. tostring(err), 2) end
end

-- A decode step's mask {L, S}: row i sees keys 0 .. p0 + i (slots <= pos)
local function prefix_mask(L, S, p0)
  return T.arange(S):view(1, -1):le((T.arange(L) + p0):view(-1, 1))
end

-- {E, Ev} per key count: head sizes of GPT-2 / LLaMA, odd ones, v apart from q
local HEADS = { [1] = { 8, 1 }, [7] = { 20, 48 }, [64] = { 128, 128 }, [300] = { 64, 64 }, [1024] = { 32, 16 },
                [2048] = { 128, 128 } }

describe("CUDA attention for a few query rows (split-K)", function()
  it("matches float64 and the composition over 1..8 rows, 1..2048 keys, masks and dtypes", function()
    need_gpu()
    T.manual_seed(38)
    local host_ops = T.cuda.stats().host_ops
    for _, S in ipairs({ 1, 7, 64, 300, 1024, 2048 }) do
      local E, Ev = unpack(HEADS[S])
      for L = 1, 8 do
        local B, H = L % 2 + 1, 3
        local q, k, v = T.randn(B, H, L, E), T.randn(B, H, S, E), T.randn(B, H, S, Ev)
        local keep = T.zeros(L, S, { dtype = "bool" })
        keep:select(2, 1):fill_(true)  -- (every random row keeps its first key)
        local masks = {
          { "none" }, { "causal", nil, true }, { "prefix", prefix_mask(L, S, math.max(0, math.floor(S / 2) - L)) },
          { "prefix {1, S}", prefix_mask(1, S, S - 1) }, { "random bool", T.rand(B, 1, L, S):gt(0.5):logical_or(keep) },
          { "added", T.randn(H, L, S) },
        }
        if L >= 2 then  -- a row that sees no key: NaN, as softmax (and the CPU kernel)
          local m = prefix_mask(L, S, S)
          m:select(1, 2):fill_(false)
          masks[#masks + 1] = { "masked row", m }
        end
        for _, dt in ipairs({ "float32", "float16", "bfloat16" }) do
          local dq, dk, dv = q:to(dt):cuda(), k:to(dt):cuda(), v:to(dt):cuda()
          for _, c in ipairs(masks) do
            local name, m, causal = c[1], c[2], c[3] or false
            local what = ("%s L %d S %d E %d/%d %s"):format(dt, L, S, E, Ev, name)
            local dm = m and (m.dtype == "bool" and m:cuda() or m:to(dt):cuda())
            local rm = m and (m.dtype == "bool" and m or m:to(dt):double())
            local got = T.attention(dq, dk, dv, 0.3, causal, dm)
            expect.eq({ got.device, got.dtype, got.shape }, { "cuda:0", dt, { B, H, L, Ev } }, what)
            same(got, T.attention(q:to(dt):double(), k:to(dt):double(), v:to(dt):double(), 0.3, causal, rm), TOL[dt],
                 what .. " vs float64")
            -- (the composition rounds the scores and p to dt: twice the tolerance; 16-bit scores of
            -- 2048 keys at this scale move p by a few per cent: four times)
            same(got, compose(dq, dk, dv, 0.3, causal, dm), (dt == "float32" and 2 or 4) * TOL[dt], what .. " vs the composition")
            -- the same bits again (the splits are merged in order)
            same(T.attention(dq, dk, dv, 0.3, causal, dm), got, 0, what .. " twice")
          end
        end
      end
    end
    expect.eq(T.cuda.stats().host_ops, host_ops, "no host round trip")
  end)

  it("writes the rows' logsumexp for the backward, and F.scaled_dot_product_attention reaches the kernel", function()
    need_gpu()
    T.manual_seed(39)
    for _, c in ipairs({ { 1, 12, 1, 384, 64 }, { 2, 2, 5, 1000, 128 }, { 1, 1, 8, 3, 32 }, { 16, 12, 1, 384, 64 } }) do
      local B, H, L, S, E = unpack(c)
      local q, k, v = T.randn(B, H, L, E), T.randn(B, H, S, E), T.randn(B, H, S, E)
      local mask = prefix_mask(L, S, math.floor(S / 3))
      local s = (T.matmul(q:double(), k:double():transpose(-2, -1)) * 0.125):masked_fill(mask:logical_not(), -math.huge)
      for _, dt in ipairs({ "float32", "bfloat16" }) do
        local what = dt .. " {" .. table.concat(c, ", ") .. "}"
        local dq, dk, dv = q:to(dt):cuda(), k:to(dt):cuda(), v:to(dt):cuda()
        local o, lse = T._attention(dq, dk, dv, 0.125, false, mask:cuda())
        expect.eq({ lse.dtype, lse.shape }, { "float32", { B, H, L } }, what)
        if dt == "float32" then expect.close(lse:cpu():double(), s:logsumexp(-1), 1e-4, 1e-4, what .. " lse") end
        expect.eq(o:cpu():totable(), T.attention(dq, dk, dv, 0.125, false, mask:cuda()):cpu():totable(), what)
        expect.eq(T.F.scaled_dot_product_attention(dq, dk, dv, { mask = mask:cuda(), scale = 0.125 }):cpu():totable(),
                  o:cpu():totable(), what .. " sdpa")
      end
    end
  end)

  it("reads GPT-2's head views in place and a key expanded over heads", function()
    need_gpu()
    T.manual_seed(40)
    local B, L, H, E, S = 2, 1, 12, 64, 384
    -- q from c_attn's output {B, L, 3D} split and viewed as {B, H, L, E}; the static cache {B, H, S, E}
    local qkv = T.randn(B, L, 3 * H * E)
    local q = qkv:narrow(3, 1, H * E):reshape(B, L, H, E):transpose(2, 3)
    local k, v = T.randn(B, 1, S, E):expand(B, H, S, E), T.randn(B, H, S, E)
    local mask = prefix_mask(L, S, 200)
    local dq = qkv:cuda():narrow(3, 1, H * E):reshape(B, L, H, E):transpose(2, 3)
    local got = T.attention(dq, k:cuda(), v:cuda(), 0.125, false, mask:cuda())
    same(got, T.attention(q:double(), k:double(), v:double(), 0.125, false, mask), TOL.float32, "views")
  end)

  it("replays from a CUDA graph with the position as a device scalar (one graph for every position)", function()
    need_gpu()
    T.manual_seed(41)
    local B, H, S, E = 1, 12, 384, 64
    local q, k, v = T.randn(B, H, 1, E):cuda(), T.randn(B, H, S, E):cuda(), T.randn(B, H, S, E):cuda()
    local slots, pos = T.arange(S):cuda(), T.zeros(1, { dtype = "int64" }):cuda()
    local function step()
      return T.F.scaled_dot_product_attention(q, k, v, { mask = slots:view(1, -1):le(pos:view(-1, 1)) })
    end
    step()  -- (the kernels compiled and loaded before the capture)
    local g = T.cuda.CUDAGraph()
    local y = T.cuda.graph(g, step)
    for _, p in ipairs({ 0, 1, 100, 383, 7 }) do
      local nq = T.randn(B, H, 1, E)
      q:copy_(nq)
      pos:fill_(p)
      g:replay()
      local m = T.arange(S):le(p):view(1, -1)
      same(y, T.attention(nq:double(), k:cpu():double(), v:cpu():double(), 1 / 8, false, m), TOL.float32, "position " .. p)
    end
  end)
end)

-- A GPT-2 layer's static cache {2, B, H, S, E} and c_attn's output {B, 1, 3 H E} of one token:
-- q, the cache's k and v views, and index_put_'s operands for writing the token's k and v at
-- slot `at` (1-based) as G's index_copy_ does: self = the cache with its slot dim first, values =
-- the new k and v laid out alike.
local function cache_step(B, H, S, E, at, dtype, device)
  local on = { dtype = dtype, device = device }
  local kv, c = T.randn(2, B, H, S, E, on), T.randn(B, 1, 3 * H * E, on)
  local q = c:narrow(3, 1, H * E):reshape(B, 1, H, E):transpose(2, 3)
  local new = c:narrow(3, H * E + 1, 2 * H * E):reshape(B, 1, 2, H, E):permute(3, 1, 4, 2, 5)
  local mask = T.arange(S, { device = device }):view(1, -1):le(at - 1)
  return { kv = kv, q = q, self = kv:permute(4, 1, 2, 3, 5), values = new:permute(4, 1, 2, 3, 5),
           index = T.full({ 1 }, at, { dtype = "int64", device = device }), mask = mask, c = c }
end

-- the two ops _attention_cache stands for, on copies
local function cache_reference(s, scale)
  local kv = s.kv:clone()
  kv:permute(4, 1, 2, 3, 5):index_put_({ s.index }, s.values)
  return T.attention(s.q, kv:select(1, 1), kv:select(1, 2), scale, false, s.mask), kv
end

describe("_attention_cache: a static KV cache's write and the attention over it", function()
  it("equals index_put_ then attention on the CPU, and raises index_put_'s errors", function()
    T.manual_seed(42)
    local s = cache_step(2, 3, 10, 8, 4, "float64", "cpu")
    local want, want_kv = cache_reference(s, 0.3)
    local got = T._attention_cache(s.self, { s.index }, s.values, s.q, s.kv:select(1, 1), s.kv:select(1, 2), 0.3, false,
      s.mask)
    expect.close(got, want, 1e-12, 1e-12)
    expect.eq(s.kv:totable(), want_kv:totable())
    s.index:fill_(11)
    expect.errors(function()
      T._attention_cache(s.self, { s.index }, s.values, s.q, s.kv:select(1, 1), s.kv:select(1, 2), 0.3, false, s.mask)
    end, "out of range")
  end)

  it("runs as one kernel on CUDA: the slot written, the rows attended, every dtype", function()
    need_gpu()
    T.manual_seed(43)
    for _, dt in ipairs({ "float32", "float16", "bfloat16" }) do
      local cases = { { 1, 12, 384, 64, 129 }, { 2, 3, 100, 64, 1 }, { 3, 2, 1000, 128, 1000 }, { 1, 4, 7, 20, 5 } }
      for _, case in ipairs(cases) do
        local B, H, S, E, at = unpack(case)
        local s = cache_step(B, H, S, E, at, dt, "cuda")
        local host = cache_step(B, H, S, E, at, "float64", "cpu")
        for _, k in ipairs({ "kv", "c" }) do host[k]:copy_(s[k]:cpu():double()) end
        local want, want_kv = cache_reference(host, 1 / math.sqrt(E))
        local before = T.cuda.stats().kernel_launches
        local got = T._attention_cache(s.self, { s.index }, s.values, s.q, s.kv:select(1, 1), s.kv:select(1, 2), nil,
          false, s.mask)
        local launches = T.cuda.stats().kernel_launches - before
        local what = ("%s B %d H %d S %d E %d slot %d"):format(dt, B, H, S, E, at)
        expect.eq(launches, 1, what .. ": kernels")
        same(got, want, TOL[dt], what)
        expect.eq(s.kv:cpu():double():totable(), want_kv:totable(), what .. ": the cache")
      end
    end
  end)

  it("raises a slot outside the cache at the next synchronisation, and writes nothing", function()
    need_gpu()
    local s = cache_step(1, 2, 16, 64, 17, "float32", "cuda")
    local before = s.kv:cpu()
    expect.errors(function()
      T._attention_cache(s.self, { s.index }, s.values, s.q, s.kv:select(1, 1), s.kv:select(1, 2), nil, false, s.mask)
      T.cuda.synchronize()
    end, "index_put_: .*out of range.*dim 1 of size 16")
    expect.eq(s.kv:cpu():totable(), before:totable())
  end)

  it("runs the two ops where the kernel does not take the call (two query rows, a foreign layout)", function()
    need_gpu()
    T.manual_seed(44)
    local s = cache_step(1, 2, 30, 64, 3, "float32", "cuda")
    local q2 = T.randn(1, 2, 2, 64):cuda()
    local mask2 = T.arange(30):cuda():view(1, -1):le(2)
    local kv = s.kv:clone()
    kv:permute(4, 1, 2, 3, 5):index_put_({ s.index }, s.values)
    local want = T.attention(q2, kv:select(1, 1), kv:select(1, 2), nil, false, mask2)
    local got = T._attention_cache(s.self, { s.index }, s.values, q2, s.kv:select(1, 1), s.kv:select(1, 2), nil, false,
      mask2)
    same(got, want:double(), TOL.float32, "two rows")
    expect.eq(s.kv:cpu():totable(), kv:cpu():totable())
    -- k from another tensor than the written cache: the write and the attention apart
    local other = T.randn(1, 2, 30, 64):cuda()
    local kv2 = s.kv:clone()
    kv2:permute(4, 1, 2, 3, 5):index_put_({ s.index }, s.values)
    got = T._attention_cache(s.self, { s.index }, s.values, s.q, other, s.kv:select(1, 2), nil, false, s.mask)
    same(got, T.attention(s.q, other, kv2:select(1, 2), nil, false, s.mask):double(), TOL.float32, "k apart")
  end)
end)
