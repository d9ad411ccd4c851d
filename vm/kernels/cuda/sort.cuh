// Compiled after the prelude and the launcher's typedefs T (elements) and C (the type keys are
// compared in) (library.cpp source_of).
//
// sort / topk over lines of {outer, n, inner} (element i of line (o, j) at (o * n + i) * inner + j).
// sort_lines: a block per chunk of a line sorts it in shared memory - keys C and 0-based int32
// positions, padded to pow2 with slots that order last - by a bitonic network, in the CPU's total
// order (NaN above every number, equal values by position), and writes its first `keep` to line
// slots chunk * keep + t of an output {outer, out_len, inner}. A line longer than a block's chunk
// is cut: for topk each chunk keeps its first k, and the kept candidates (with their positions, xi)
// are ordered again until one chunk holds them; a whole sort of such lines is radix.cuh's.
#define PAD 0x7fffffff
__device__ __forceinline__ bool ahead(C a, long long ia, C b, long long ib, int desc) {
  if (ia == PAD || ib == PAD) return ib == PAD && ia != PAD;
  const bool na = a != a, nb = b != b;
  if (na || nb) {
    if (na && nb) return ia < ib;
    return desc ? na : nb;
  }
  if (a != b) return desc ? a > b : a < b;
  return ia < ib;
}

extern "C" __global__ void sort_lines(const T* __restrict__ x, const long long* __restrict__ xi, T* __restrict__ y,
                                      long long* __restrict__ yi, long long n, long long inner, long long chunk,
                                      long long chunks, long long keep, long long out_len, int pow2, int desc, int one) {
  cr::grid_wait();
  extern __shared__ __align__(16) unsigned char smem[];
  C* key = reinterpret_cast<C*>(smem);
  int* pos = reinterpret_cast<int*>(smem + sizeof(C) * pow2);
  const long long b = blockIdx.x, line = b / chunks, c = b - line * chunks;
  const long long o = line / inner, j = line - o * inner;
  const long long in_base = o * n * inner + j, out_base = o * out_len * inner + j, first = c * chunk;
  const long long m = chunk < n - first ? chunk : n - first;
  for (int t = threadIdx.x; t < pow2; t += blockDim.x) {
    if (t < m) {
      const long long at = in_base + (first + t) * inner;
      key[t] = C(x[at]);
      pos[t] = xi ? int(xi[at]) : int(first + t);
    } else pos[t] = PAD;
  }
  __syncthreads();
  for (int k = 2; k <= pow2; k <<= 1) {
    for (int s = k >> 1; s > 0; s >>= 1) {
      for (int t = threadIdx.x; t < pow2 / 2; t += blockDim.x) {
        const int i = (t / s) * 2 * s + (t % s), l = i + s;
        if (ahead(key[l], pos[l], key[i], pos[i], desc) == ((i & k) == 0)) {
          const C kt = key[i];
          key[i] = key[l];
          key[l] = kt;
          const int pt = pos[i];
          pos[i] = pos[l];
          pos[l] = pt;
        }
      }
      __syncthreads();  // (warp-only syncs between stages whose pairs stay in a warp's 64 slots measured alike)
    }
  }
  const long long kept = keep < m ? keep : m;
  for (int t = threadIdx.x; t < kept; t += blockDim.x) {
    const long long at = out_base + (c * keep + t) * inner;
    y[at] = T(key[t]);
    yi[at] = (long long)pos[t] + one;
  }
}
