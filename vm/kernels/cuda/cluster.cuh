// Thread-block clusters (sm_90): blocks of one cluster read each other's shared memory, so the
// partials of a split reduction merge without a workspace or a second kernel. Compiled after the
// prelude by the modules that split over clusters (attention_decode.cuh, gemv.cuh).
#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster; orders the shared-memory writes before it with the
// reads after it, across the cluster.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// *p in the shared memory of the cluster's block `rank` (p: this block's copy of the variable).
__device__ __forceinline__ float cluster_load(const float* p, unsigned rank) {
  unsigned long long local, remote;
  asm volatile("cvta.to.shared.u64 %0, %1;" : "=l"(local) : "l"(p));
  asm volatile("mapa.shared::cluster.u64 %0, %1, %2;" : "=l"(remote) : "l"(local), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "l"(remote) : "memory");
  return v;
}
#endif
