// SHA-256 (FIPS 180-4): the keys of compiled kernels (the kernel cache, the build's table of
// CUBINs), the seal of cache entries and the check of kernels sent to a compiler process. The key
// decides which native code is loaded, so it is a vetted hash, not a hand-made one.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cr {

std::array<uint8_t, 32> sha256(const void* data, size_t size);
// the digest as 64 lowercase hex digits
std::string sha256_hex(const std::string& bytes);

}  // namespace cr
