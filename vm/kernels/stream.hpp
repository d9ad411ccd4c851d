// Non-temporal stores: dst written without reading its lines into the cache, for output nothing
// reads soon (a generated CPU kernel's large result; a bucketed scatter's blocks). 32-byte AVX
// streams (the runtime is x86-64-v3) or SSE2's 16-byte ones, merged into whole-line writes.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace cr {

inline void stream_block(void* dst, const void* src, int64_t nbytes) {
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

// Streaming stores are weakly ordered: a thread drains its own before another may read them
// (before a work item counts as done).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace cr
