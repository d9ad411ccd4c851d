// Entries of the on-disk kernel cache, of every backend (a CPU shared object, a CUBIN): the
// compiled bytes followed by a trailer that seals them - a magic, the cache key, the size and the
// SHA-256 of the bytes before the trailer. An entry is checked before it is loaded: dlopen() and
// the CUDA driver trust the ELF they are given (a truncated object maps pages past the end of the
// file, garbage may crash the loader, an object of another kernel loads and computes the wrong
// thing). A file that fails the check is discarded and the kernels are compiled again.
#pragma once
#include <string>

#include "vm/sha256.hpp"

namespace cr::jit {

using cr::sha256_hex;  // (vm/sha256.hpp: cache keys and entry checksums)

// The bytes of the file at `path` ("" when it cannot be read, or is not a regular file: a FIFO, a
// device or a symbolic link in the cache is a miss, never a hang or an endless read).
std::string read_file(const std::string& path);

// Writes `bytes` to `path` under a new temporary name (io::create_temp) and renames it into
// place, so a reader - another process sharing the cache - sees the whole file or none. False
// when it could not (the temporary file is removed).
bool publish_file(const std::string& path, const std::string& bytes);

// `body` sealed for `key`: the bytes of its disk entry.
std::string sealed(const std::string& body, const std::string& key);
// Appends the trailer for `key` to the compiled object at `path`; throws cr::Error on failure.
void seal_entry(const std::string& path, const std::string& key);

// Whether the file at `path` is a whole sealed entry for `key` (a regular file, not a link); if
// not, `why` says what is wrong. `body`, when given, receives the bytes before the trailer.
bool check_entry(const std::string& path, const std::string& key, std::string* why, std::string* body = nullptr);

}  // namespace cr::jit
