// The Lua standard library (stdlib/*.lua) and the FFI declarations (vm/lua/ffi_api.h), embedded in
// the binary at build time so the executable and embedding hosts need no files at run time.
#pragma once
#include "vm/embedded.hpp"

namespace cr {
extern const EmbeddedFile kEmbedded[];
extern const int kEmbeddedCount;
const char* embedded(const char* name);  // null when absent
}  // namespace cr
