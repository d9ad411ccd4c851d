#include "vm/denormal.hpp"

#include <atomic>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace cr {

namespace {
std::atomic<int> generation{0};  // even: off, odd: on; every change adds 1
thread_local int applied = 0;    // the generation this thread's state follows

#if defined(__x86_64__)
constexpr unsigned kFtzDaz = 0x8040;  // MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6)
void apply(bool on) { _mm_setcsr(on ? _mm_getcsr() | kFtzDaz : _mm_getcsr() & ~kFtzDaz); }
#endif
}  // namespace

bool set_flush_denormal(bool on) {
#if defined(__x86_64__)
  int g = generation.load();
  while (bool(g & 1) != on && !generation.compare_exchange_weak(g, g + 1)) {
  }
  applied = generation.load();
  apply(on);
  return true;
#else
  (void)on;
  return false;
#endif
}

void apply_flush_denormal() {
#if defined(__x86_64__)
  const int g = generation.load(std::memory_order_relaxed);
  if (g == applied) return;
  applied = g;
  apply(g & 1);
#endif
}

}  // namespace cr
