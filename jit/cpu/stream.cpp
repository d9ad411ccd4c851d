// Non-temporal stores for generated CPU kernels (see helpers.hpp, and emit.cpp for when a store
// streams): 32-byte AVX streams (the runtime's -march is x86-64-v3), or SSE2's 16-byte ones. The
// write-combining buffers merge them into whole-line writes; fewer, wider stores matter where the
// kernel is compute-bound (a sine per element), not on bandwidth.
#include "jit/cpu/helpers.hpp"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace cr::jit {

void stream_block(void* dst, const void* src, int64_t nbytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
#if defined(__AVX__)
  // plain stores up to the first 32-byte boundary of dst, streams after it, plain for the tail
  int64_t head = int64_t((32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31);
  if (head > nbytes) head = nbytes;
  std::memcpy(d, s, size_t(head));
  d += head, s += head, nbytes -= head;
  for (; nbytes >= 64; d += 64, s += 64, nbytes -= 64) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32), b);
  }
#elif defined(__SSE2__)
  int64_t head = int64_t((16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
  if (head > nbytes) head = nbytes;
  std::memcpy(d, s, size_t(head));
  d += head, s += head, nbytes -= head;
  for (; nbytes >= 16; d += 16, s += 16, nbytes -= 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
#endif
  std::memcpy(d, s, size_t(nbytes));
}

void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();  // streaming stores are weakly ordered: drain them before the item counts as done
#endif
}

}  // namespace cr::jit
