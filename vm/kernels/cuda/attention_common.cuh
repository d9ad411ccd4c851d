// Device code both attention kernels share: compiled after the prelude, before attention.cuh or
// attention_simt.cuh (attention.cpp and attention_simt.cpp build the modules).
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  uint32_t a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
// component c of a float vector (the float32 kernels read shared tiles as float4 / float2)
__device__ __forceinline__ float lane_of(const float4& v, int c) {
  return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}
__device__ __forceinline__ float lane_of(const float2& v, int c) { return c == 0 ? v.x : v.y; }
__device__ __forceinline__ float lane_of(float v, int) { return v; }
// 2^x with one MUFU instruction (exp2f adds a denormal path: the kernels were issue-bound on it);
// results below 2^-126 flush to 0, under a float32 weight's resolution next to the row's 1.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// The mask term of score (row, key) in log2 units, added to the scaled score: kind 1, a value of
// q's dtype M; kind 2, bool (false: -inf). Rows past L and keys past S read nothing (their scores
// are never stored, or become -inf). (Key pairs loaded as one word, and row pointers kept per
// thread, were tried: no faster.)
template <class M> __device__ __forceinline__ float mask_term(const void* mask, int kind, long long msr, long long msc,
                                                            int row, int key, int L, int S) {
  if (row >= L || key >= S) return 0.f;
  const long long at = row * msr + key * msc;
  if (kind == 2) return static_cast<const unsigned char*>(mask)[at] ? 0.f : -__int_as_float(0x7f800000);
  return float(static_cast<const M*>(mask)[at]) * 1.4426950408889634f;
}
__device__ __forceinline__ long long head_offset(long long bh, int heads, long long s0, long long s1) {
  const long long b0 = bh / heads;
  return b0 * s0 + (bh - b0 * heads) * s1;
}
template <class P> __device__ __forceinline__ const P* head_of(const P* p, long long bh, int heads, long long s0, long long s1) {
  return p + head_offset(bh, heads, s0, s1);
}
// the mask moved to (batch, head) bh, for mask elements of type M (kind 1) or bool (kind 2)
template <class M> __device__ __forceinline__ const void* mask_of(const void* mask, int kind, long long bh, int heads,
                                                                  long long s0, long long s1) {
  if (kind == 1) return static_cast<const M*>(mask) + head_offset(bh, heads, s0, s1);
  if (kind == 2) return static_cast<const unsigned char*>(mask) + head_offset(bh, heads, s0, s1);
  return mask;
}
// A row's logsumexp of the scaled, masked scores (natural log), from its max m (log2 units) and
// its sum l of exp2(score - m): what the backward (attention_bwd.cuh) recomputes p from.
__device__ __forceinline__ float row_lse(float m, float l) { return (m + log2f(l)) * 0.6931471805599453f; }
