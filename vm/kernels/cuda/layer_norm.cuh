// Compiled after the prelude and the launcher's typedefs T (elements of x, y, weight, bias and the
// gradients) and A (their arithmetic and the dtype of mean / rstd: float, or double for float64)
// (layer_norm.cpp).
//
// layer_norm over rows of n contiguous elements (vm/ops/norm.cpp): a block of kBlock threads per
// row for the forward and for grad_input, two-pass (mean, then the squared deviations from it,
// the row re-read from L1); grad_weight / grad_bias are column sums over the rows in two stages
// (per chunk of rows, then over the chunks in order) so that every run adds in the same order.
#define kBlock 128
#define kCols 32
#define kColRows 8

__forceinline__ A weight_at(const T* w, long long j) { return w ? A(w[j]) : A(1); }

extern "C" __global__ void layer_norm_fwd(const T* x, const T* w, const T* b, T* y, A* mean, A* rstd, long long n,
                                          double eps) {
  cr::grid_wait();
  __shared__ A smem[kBlock / 32];
  const long long row = blockIdx.x;
  const T* xr = x + row * n;
  T* yr = y + row * n;
  A s = 0;
  for (long long j = threadIdx.x; j < n; j += kBlock) s += A(xr[j]);
  const A mu = cr::block_reduce<kBlock>(s, cr::Sum{}, smem) / A(n);
  A v = 0;
  for (long long j = threadIdx.x; j < n; j += kBlock) {
    const A d = A(xr[j]) - mu;
    v += d * d;
  }
  const A rs = A(1) / std::sqrt(cr::block_reduce<kBlock>(v, cr::Sum{}, smem) / A(n) + A(eps));
  for (long long j = threadIdx.x; j < n; j += kBlock) {
    A h = (A(xr[j]) - mu) * rs * weight_at(w, j);
    if (b) h += A(b[j]);
    yr[j] = T(h);
  }
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// grad_input of one row: rstd * (g - mean(g) - xhat * mean(g * xhat)), g = grad_out * weight.
extern "C" __global__ void layer_norm_bwd_input(const T* go, const T* x, const A* mean, const A* rstd, const T* w,
                                                T* gx, long long n) {
  cr::grid_wait();
  __shared__ A smem[kBlock / 32];
  const long long row = blockIdx.x;
  const T *gr = go + row * n, *xr = x + row * n;
  const A mu = mean[row], rs = rstd[row];
  A sg = 0, sgx = 0;
  for (long long j = threadIdx.x; j < n; j += kBlock) {
    const A g = A(gr[j]) * weight_at(w, j);
    sg += g;
    sgx += g * (A(xr[j]) - mu) * rs;
  }
  sg = cr::block_reduce<kBlock>(sg, cr::Sum{}, smem) / A(n);
  sgx = cr::block_reduce<kBlock>(sgx, cr::Sum{}, smem) / A(n);
  for (long long j = threadIdx.x; j < n; j += kBlock) {
    const A xh = (A(xr[j]) - mu) * rs;
    gx[row * n + j] = T(rs * (A(gr[j]) * weight_at(w, j) - sg - xh * sgx));
  }
}

// Rows of n <= 32 * kWarpItems elements, n a multiple of kVec (16 bytes), every pointer aligned
// (layer_norm.cpp checks): a warp a row, kept in registers and moved as 16-byte vectors (the
// block-per-row kernels above read a 768-float row at half the copy bandwidth).
#define kWarpItems 32
#define kVec (16 / int(sizeof(T)))
#define kWarpGroups (kWarpItems / kVec)

// The lane's groups of the row (group i: elements (lane + 32 i) kVec ...) into v, as A.
__device__ __forceinline__ void load_row(const T* r, A* v, long long n, int lane) {
#pragma unroll
  for (int i = 0; i < kWarpGroups; ++i) {
    const long long e = (lane + 32LL * i) * kVec;
    if (e < n) {
      const cr::vec<T, kVec> t = cr::loadv<kVec>(r + e);
#pragma unroll
      for (int u = 0; u < kVec; ++u) v[i * kVec + u] = A(t.v[u]);
    }
  }
}

extern "C" __global__ void layer_norm_fwd_warp(const T* x, const T* w, const T* b, T* y, A* mean, A* rstd,
                                               long long rows, long long n, double eps) {
  cr::grid_wait();
  const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  A v[kWarpItems];
  load_row(x + row * n, v, n, lane);
  A s = 0;
#pragma unroll
  for (int i = 0; i < kWarpGroups; ++i)
    if ((lane + 32LL * i) * kVec < n)
#pragma unroll
      for (int u = 0; u < kVec; ++u) s += v[i * kVec + u];
  const A mu = cr::warp_reduce(s, cr::Sum{}) / A(n);
  A q = 0;
#pragma unroll
  for (int i = 0; i < kWarpGroups; ++i)
    if ((lane + 32LL * i) * kVec < n)
#pragma unroll
      for (int u = 0; u < kVec; ++u) q += (v[i * kVec + u] - mu) * (v[i * kVec + u] - mu);
  const A rs = A(1) / std::sqrt(cr::warp_reduce(q, cr::Sum{}) / A(n) + A(eps));
#pragma unroll
  for (int i = 0; i < kWarpGroups; ++i) {
    const long long e = (lane + 32LL * i) * kVec;
    if (e >= n) continue;
    cr::vec<T, kVec> o, wv, bv;
    if (w) wv = cr::loadv<kVec>(w + e);
    if (b) bv = cr::loadv<kVec>(b + e);
#pragma unroll
    for (int u = 0; u < kVec; ++u) {
      A h = (v[i * kVec + u] - mu) * rs * (w ? A(wv.v[u]) : A(1));
      if (b) h += A(bv.v[u]);
      o.v[u] = T(h);
    }
    cr::storev(y + row * n + e, o);
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

extern "C" __global__ void layer_norm_bwd_input_warp(const T* go, const T* x, const A* mean, const A* rstd, const T* w,
                                                     T* gx, long long rows, long long n) {
  cr::grid_wait();
  const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  A g[kWarpItems], xh[kWarpItems];
  load_row(go + row * n, g, n, lane);
  load_row(x + row * n, xh, n, lane);
  const A mu = mean[row], rs = rstd[row];
  A sg = 0, sgx = 0;
#pragma unroll
  for (int i = 0; i < kWarpGroups; ++i) {
    const long long e = (lane + 32LL * i) * kVec;
    if (e >= n) continue;
    cr::vec<T, kVec> wv;
    if (w) wv = cr::loadv<kVec>(w + e);
#pragma unroll
    for (int u = 0; u < kVec; ++u) {
      const int k = i * kVec + u;
      g[k] *= w ? A(wv.v[u]) : A(1);
      xh[k] = (xh[k] - mu) * rs;
      sg += g[k];
      sgx += g[k] * xh[k];
    }
  }
  sg = cr::warp_reduce(sg, cr::Sum{}) / A(n);
  sgx = cr::warp_reduce(sgx, cr::Sum{}) / A(n);
#pragma unroll
  for (int i = 0; i < kWarpGroups; ++i) {
    const long long e = (lane + 32LL * i) * kVec;
    if (e >= n) continue;
    cr::vec<T, kVec> o;
#pragma unroll
    for (int u = 0; u < kVec; ++u) o.v[u] = T(rs * (g[i * kVec + u] - sg - xh[i * kVec + u] * sgx));
    cr::storev(gx + row * n + e, o);
  }
}

// Stage 1: block (column block c, row chunk k) of kCols x kColRows threads sums grad_out * xhat and
// grad_out over the chunk's rows for its kCols columns: partial[k][col], partial[chunks + k][col].
extern "C" __global__ void layer_norm_bwd_cols(const T* go, const T* x, const A* mean, const A* rstd, A* partial,
                                               long long rows, long long n, long long chunk, int chunks) {
  cr::grid_wait();
  __shared__ A sw[kColRows][kCols + 1], sb[kColRows][kCols + 1];
  const long long col_blocks = (n + kCols - 1) / kCols;
  const long long c = blockIdx.x % col_blocks, k = blockIdx.x / col_blocks;
  const long long col = c * kCols + threadIdx.x % kCols;
  const int ty = threadIdx.x / kCols;
  const long long r1 = (k + 1) * chunk < rows ? (k + 1) * chunk : rows;
  A aw = 0, ab = 0;
  if (col < n)
    for (long long r = k * chunk + ty; r < r1; r += kColRows) {
      const A g = A(go[r * n + col]);
      aw += g * (A(x[r * n + col]) - mean[r]) * rstd[r];
      ab += g;
    }
  sw[ty][threadIdx.x % kCols] = aw;
  sb[ty][threadIdx.x % kCols] = ab;
  __syncthreads();
  if (ty == 0 && col < n) {
    for (int t = 1; t < kColRows; ++t) {
      aw += sw[t][threadIdx.x];
      ab += sb[t][threadIdx.x];
    }
    partial[k * n + col] = aw;
    partial[(chunks + k) * n + col] = ab;
  }
}

// Stage 2: a warp per column adds the chunks' partials, lane l those of chunks l, l + 32, ..., then
// the lanes' sums by xor-shuffles: the same order every run (gw / gb null: not asked).
extern "C" __global__ void layer_norm_bwd_fold(const A* partial, T* gw, T* gb, long long n, int chunks) {
  cr::grid_wait();
  const long long col = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (col >= n) return;
  A aw = 0, ab = 0;
  for (int k = lane; k < chunks; k += 32) {
    aw += partial[k * n + col];
    ab += partial[(chunks + k) * n + col];
  }
  aw = cr::warp_reduce(aw, cr::Sum{});
  ab = cr::warp_reduce(ab, cr::Sum{});
  if (lane != 0) return;
  if (gw) gw[col] = T(aw);
  if (gb) gb[col] = T(ab);
}
