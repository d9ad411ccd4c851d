// What the runtime knows of the host CPU beyond its instruction set, read in one place:
// - CRESCENT_CPU_MARCH, the -march level a user forces on both the eager kernels' runtime dispatch
//   (vm/kernels/wide.hpp: AVX-512 twins) and the generated code (jit/cpu/target.hpp);
// - the size of its largest cache, which decides where an output stops fitting in the caches
//   (streaming stores in generated code, jit/cpu/target.hpp; the collector's rule for such
//   outputs, vm/lua/api.cpp).
#pragma once
#include <cstdint>
#include <string_view>

namespace cr {

// The forced level ("x86-64-v3"; a "-march=" prefix is dropped); empty when unset or "native".
std::string_view cpu_march_override();
// The widest vectors a level allows in bytes (x86-64 and -v2: 16, -v3: 32, -v4: 64); 0 for any
// other name (a CPU name such as "skylake-avx512" says nothing we check here).
int march_vector_bytes(std::string_view level);

// The CPU's AVX-512 (F, VL, BW, DQ, CD: what the AVX-512 twins use) and its AVX2 with FMA, as
// libgcc's cpuid cache sees them (absent where the OS does not save their registers).
bool cpu_has_avx512();
bool cpu_has_avx2_fma();

// The size of the largest cache level Linux lists for CPU 0 (/sys/devices/system/cpu/cpu0/cache,
// "32768K"), or 0 where it lists none. sysfs rather than sysconf(_SC_LEVEL3_CACHE_SIZE): glibc's
// figure on an AMD EPYC guest with a 32 MiB L3 was 320 MiB.
int64_t cpu_cache_bytes();
// Half of that (16 MiB where unknown): outputs at least this large are written past the caches.
int64_t cpu_large_block_bytes();

}  // namespace cr
