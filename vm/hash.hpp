// A 128-bit FNV-style hash of bytes, as 32 hex digits: the keys of compiled kernels (the kernel
// cache, the build's table of CUBINs) and the checksums of cache entries. Not cryptographic: it
// detects damage, not tampering.
#pragma once
#include <string>

namespace cr {

std::string hash128(const std::string& s);

}  // namespace cr
