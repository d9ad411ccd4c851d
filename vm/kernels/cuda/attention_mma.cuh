// Tensor-core fragments both 16-bit attention kernels share (attention.cuh, attention_bwd_tc.cuh),
// compiled after attention_common.cuh and the launcher's T, MMA_T ("f16" / "bf16"), D and WARPS.
// Tiles are [row][PITCH] 16-bit elements (8 of padding: ldmatrix's eight 16-byte rows hit distinct
// banks). Layouts: PTX ISA, "Matrix fragments for mma.m16n8k16".
#define PITCH (D + 8)
__device__ __forceinline__ void copy16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void ldsm4(uint32_t r[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm4t(uint32_t r[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_T "." MMA_T ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack(float lo, float hi) {  // two floats as a 16-bit pair, lo first
  uint32_t r;
  asm("cvt.rn." MMA_T "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Shared-memory offsets (elements) of a lane's ldmatrix.x4 row for the tiles stored [row][PITCH]:
//   a_at   the A fragment of rows r0 + 0..15, cols c0 + 0..15 (ldsm4)
//   b_at   B fragments of two n-tiles whose n runs along the rows r0 + 0..15, k along the
//          cols c0 + 0..15 (ldsm4: b[0], b[1] n-tile r0.., b[2], b[3] n-tile r0 + 8..)
//   bt_at  B fragments whose k runs along the rows r0 + 0..15, n along the cols c0 + 0..15
//          (ldsm4t: b[0], b[1] n-tile c0.., b[2], b[3] n-tile c0 + 8..)
__device__ __forceinline__ int a_at(int r0, int c0, int lane) { return (r0 + (lane & 15)) * PITCH + c0 + 8 * (lane >> 4); }
__device__ __forceinline__ int b_at(int r0, int c0, int lane) {
  return (r0 + (lane & 7) + 8 * (lane >> 4)) * PITCH + c0 + 8 * ((lane >> 3) & 1);
}
__device__ __forceinline__ int bt_at(int r0, int c0, int lane) {
  return (r0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * PITCH + c0 + 8 * (lane >> 4);
}
// The float32 C fragments of n-tiles 2kk, 2kk + 1 as the 16-bit A fragment of k-step kk (the C
// layout of two n-tiles is the A layout of one k-step).
__device__ __forceinline__ void c_to_a(uint32_t a[4], const float (*c)[4], int kk) {
  a[0] = pack(c[2 * kk][0], c[2 * kk][1]), a[1] = pack(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack(c[2 * kk + 1][0], c[2 * kk + 1][1]), a[3] = pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}
// c[N / 8][4] (rows 16 x N) += a (16 x 16) times the B fragments of N columns at bt_at(0, 0) of
// `b` (k along its rows): o += p v, dv += p^T dout, dk += ds^T q, dq += ds k.
template <int N> __device__ __forceinline__ void mma_bt(float (*c)[4], const uint32_t a[4], uint32_t b, int k0, int lane) {
#pragma unroll
  for (int np = 0; np < N / 16; ++np) {
    uint32_t f[4];
    ldsm4t(f, b + 2 * bt_at(k0, 16 * np, lane));
    mma(c[2 * np], a, f[0], f[1]);
    mma(c[2 * np + 1], a, f[2], f[3]);
  }
}
// c[N / 8][4] += a (16 x 16, k-step kk) times the B fragments of N rows of `b` (n along its rows,
// k along its cols 16 kk..): s = q k^T, dp = dout v^T.
template <int N> __device__ __forceinline__ void mma_b(float (*c)[4], const uint32_t a[4], uint32_t b, int kk, int lane) {
#pragma unroll
  for (int np = 0; np < N / 16; ++np) {
    uint32_t f[4];
    ldsm4(f, b + 2 * b_at(16 * np, 16 * kk, lane));
    mma(c[2 * np], a, f[0], f[1]);
    mma(c[2 * np + 1], a, f[2], f[3]);
  }
}

// Copies rows [row0, row0 + N) of two {rows, D} operands (row strides as, bs) into tiles at
// shared addresses ad, bd by cp.async and commits them as one group; rows at or past `end` are
// zero-filled.
template <int N> __device__ __forceinline__ void load_rows(uint32_t ad, uint32_t bd, const T* a, const T* b, long long as,
                                                           long long bs, int row0, int end) {
  constexpr int kChunks = N * (D / 8), kThreads = 32 * WARPS;
#pragma unroll
  for (int j = 0; j < (kChunks + kThreads - 1) / kThreads; ++j) {
    const int c = threadIdx.x + j * kThreads;
    if (kChunks % kThreads != 0 && c >= kChunks) break;
    const int r = c / (D / 8), col = (c % (D / 8)) * 8, row = row0 + r;
    const int bytes = row < end ? 16 : 0;
    const long long at = row < end ? row : 0;
    const uint32_t off = 2 * (r * PITCH + col);
    copy16(ad + off, a + at * as + col, bytes);
    copy16(bd + off, b + at * bs + col, bytes);
  }
  asm volatile("cp.async.commit_group;");
}
