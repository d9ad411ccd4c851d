// Attention for a few query rows (decoding: one new token per sequence): a block per query row.
// Its threads score the keys (a thread a key), the block takes the softmax over the scores in
// shared memory, then thread groups sum p v over slices of the keys. The
// flash kernels compute 64 or 128 rows a block, all but one wasted when decoding.
// Defined by the includer: T (the element type), BLOCK (threads).

__device__ __forceinline__ float block_reduce(float x, bool take_max, float* red) {
  for (int o = 16; o > 0; o >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = take_max ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // (red is reused by consecutive reductions)
  if (lane == 0) red[warp] = x;
  __syncthreads();
  x = red[0];
  for (int w = 1; w < BLOCK / 32; ++w) x = take_max ? fmaxf(x, red[w]) : x + red[w];
  return x;
}

extern "C" __global__ void __launch_bounds__(BLOCK) attention_decode(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out, int L, int S,
    int heads, int E, int Ev, long long qs0, long long qs1, long long qsr, long long ks0, long long ks1, long long ksr,
    long long vs0, long long vs1, long long vsr, float scale_log2, int causal, const void* __restrict__ mask,
    int mask_kind, long long ms0, long long ms1, long long msr, long long msc, float* __restrict__ lse) {
  extern __shared__ __align__(16) float smem[];
  float* p = smem;            // S scores, then probabilities
  float* qv = p + S;          // E: the query row
  float* red = qv + E;        // BLOCK / 32: reductions
  float* part = red + 32;     // groups x Ev: partial sums of p v
  const long long bh = blockIdx.x / L;
  const int row = int(blockIdx.x - bh * L);
  q = head_of(q, bh, heads, qs0, qs1) + row * qsr, k = head_of(k, bh, heads, ks0, ks1), v = head_of(v, bh, heads, vs0, vs1);
  mask = mask_of<T>(mask, mask_kind, bh, heads, ms0, ms1);
  for (int e = threadIdx.x; e < E; e += BLOCK) qv[e] = float(q[e]);
  __syncthreads();
  // a thread a key: its loads are independent (four partial sums), where a warp a key waited on
  // one load and five shuffles per key
  const int keys = causal ? min(S, row + 1) : S;
  for (int j = threadIdx.x; j < S; j += BLOCK) {
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    if (j < keys) {
      const T* kr = k + j * ksr;
      int e = 0;
      for (; e + 4 <= E; e += 4) {
        d0 = fmaf(qv[e], float(kr[e]), d0), d1 = fmaf(qv[e + 1], float(kr[e + 1]), d1);
        d2 = fmaf(qv[e + 2], float(kr[e + 2]), d2), d3 = fmaf(qv[e + 3], float(kr[e + 3]), d3);
      }
      for (; e < E; ++e) d0 = fmaf(qv[e], float(kr[e]), d0);
    }
    float s = ((d0 + d1) + (d2 + d3)) * scale_log2;  // (log2 domain: exp2 below)
    if (mask_kind) s += mask_term<T>(mask, mask_kind, msr, msc, row, j, L, S);
    p[j] = j < keys ? s : -__int_as_float(0x7f800000);
  }
  __syncthreads();
  float m = -__int_as_float(0x7f800000);
  for (int j = threadIdx.x; j < S; j += BLOCK) m = fmaxf(m, p[j]);
  m = block_reduce(m, true, red);
  float sum = 0.f;
  for (int j = threadIdx.x; j < S; j += BLOCK) {
    const float e = exp2f(p[j] - m);  // (a row that sees no key: -inf - -inf, NaN, as softmax)
    p[j] = e;
    sum += e;
  }
  sum = block_reduce(sum, false, red);
  if (lse && threadIdx.x == 0) lse[bh * L + row] = row_lse(m, sum);  // (for the backward)
  // groups of Ev threads (Ev <= BLOCK) each sum a slice of the keys
  const int groups = BLOCK / Ev, g = threadIdx.x / Ev, e = threadIdx.x - g * Ev;
  if (g < groups) {  // (four keys a step: four loads in flight)
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    int j = g;
    for (; j + 3 * groups < S; j += 4 * groups) {
      a0 = fmaf(p[j], float(v[j * vsr + e]), a0);
      a1 = fmaf(p[j + groups], float(v[(j + groups) * vsr + e]), a1);
      a2 = fmaf(p[j + 2 * groups], float(v[(j + 2 * groups) * vsr + e]), a2);
      a3 = fmaf(p[j + 3 * groups], float(v[(j + 3 * groups) * vsr + e]), a3);
    }
    for (; j < S; j += groups) a0 = fmaf(p[j], float(v[j * vsr + e]), a0);
    part[g * Ev + e] = (a0 + a1) + (a2 + a3);
  }
  __syncthreads();
  if (threadIdx.x < Ev) {
    float acc = 0.f;
    for (int h = 0; h < groups; ++h) acc += part[h * Ev + threadIdx.x];
    out[(bh * L + row) * (long long)Ev + threadIdx.x] = T(acc / sum);
  }
}
