// CRESCENT_CPU_MARCH, read in one place: the -march level a user forces on both the eager
// kernels' runtime dispatch (vm/kernels/wide.hpp: AVX-512 twins) and the generated code
// (jit/cpu/target.hpp).
#pragma once
#include <string_view>

namespace cr {

// The forced level ("x86-64-v3"; a "-march=" prefix is dropped); empty when unset or "native".
std::string_view cpu_march_override();
// The widest vectors a level allows in bytes (x86-64 and -v2: 16, -v3: 32, -v4: 64); 0 for any
// other name (a CPU name such as "skylake-avx512" says nothing we check here).
int march_vector_bytes(std::string_view level);

}  // namespace cr
