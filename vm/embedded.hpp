// Text files compiled into the binary: cmake/embed.cmake writes a table of them at build time.
// Two tables: the Lua standard library with the FFI declarations (vm/lua/stdlib.hpp), and the
// CUDA C of the hand-written device kernels (vm/kernels/cuda/sources.hpp).
#pragma once

namespace cr {

struct EmbeddedFile {
  const char* name;    // module name ("crescent.tensor") or file name ("ffi_api.h", "abi.h", "scan.cuh")
  const char* source;
};

// The text named `name` in table[0..n), or null.
const char* find_embedded(const EmbeddedFile* table, int n, const char* name);

}  // namespace cr
