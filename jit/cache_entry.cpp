#include "jit/cache_entry.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <utility>

#include "vm/error.hpp"
#include "vm/io/file.hpp"

namespace cr::jit {

namespace {

// "crescent-kernel-cache-2 <key: 64 hex> <size: 16 hex> <sha-256: 64 hex>\n"; the ELF loader ignores
// bytes after the last thing its headers point at, so the sealed file still loads as it is.
constexpr char kMagic[] = "crescent-kernel-cache-2 ";
constexpr size_t kMagicLen = sizeof kMagic - 1;
constexpr size_t kKeyLen = 64;
constexpr size_t kTrailerLen = kMagicLen + kKeyLen + 1 + 16 + 1 + 64 + 1;

std::string trailer(const std::string& key, const std::string& body) {
  char size[17];
  std::snprintf(size, sizeof size, "%016llx", static_cast<unsigned long long>(body.size()));
  return cat(kMagic, key, " ", size, " ", sha256_hex(body), "\n");
}

// A regular file only, not through a symbolic link, opened without blocking: a FIFO, a device or
// a link to /dev/zero in the cache directory is a miss, not a hang or an endless read.
bool read_all(const std::string& path, std::string* out, std::string* why = nullptr) {
  try {
    io::FileSource src("cache entry", path, /*follow_links=*/false);
    *out = src.read(0, size_t(src.size()));
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

bool write_all(int fd, const std::string& bytes) {
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

}  // namespace

std::string read_file(const std::string& path) {
  std::string bytes;
  return read_all(path, &bytes) ? bytes : std::string();
}

bool publish_file(const std::string& path, const std::string& bytes) {
  std::string tmp;
  int fd = io::create_temp(path, 0666, &tmp);
  if (fd < 0) return false;
  bool ok = write_all(fd, bytes);
  ok = ::close(fd) == 0 && ok && std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

std::string sealed(const std::string& body, const std::string& key) { return body + trailer(key, body); }

void seal_entry(const std::string& path, const std::string& key) {
  std::string body;
  if (!read_all(path, &body)) throw Error(cat("cannot read the compiled kernels ", path));
  std::ofstream f(path, std::ios::binary | std::ios::app);
  f << trailer(key, body);
  f.close();
  if (!f) throw Error(cat("cannot write the compiled kernels ", path));
}

bool check_entry(const std::string& path, const std::string& key, std::string* why, std::string* body_out) {
  std::string bytes, problem;
  if (!read_all(path, &bytes, &problem)) {
    *why = cat("cannot be read (", problem, ")");
    return false;
  }
  if (bytes.size() < kTrailerLen || bytes.compare(bytes.size() - kTrailerLen, kMagicLen, kMagic) != 0) {
    *why = cat("has no cache trailer (", bytes.size(), " bytes: truncated or not a cache entry)");
    return false;
  }
  std::string body = bytes.substr(0, bytes.size() - kTrailerLen);
  std::string expect = trailer(key, body), found = bytes.substr(body.size());
  if (found == expect) {
    if (body_out) *body_out = std::move(body);
    return true;
  }
  bool other_key = found.compare(kMagicLen, kKeyLen, key) != 0;
  *why = other_key ? cat("is the entry of another key (", found.substr(kMagicLen, kKeyLen), ")")
                   : "does not match its checksum (damaged)";
  return false;
}

}  // namespace cr::jit
