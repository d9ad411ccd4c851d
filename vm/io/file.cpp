#include "vm/io/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "vm/kernels/loop.hpp"

namespace cr::io {

const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

void Source::read(uint64_t offset, void* dst, size_t n) const {
  if (offset > size_ || n > size_ - offset) fail(cat("internal error: read of bytes [", offset, ", +", n, ") past ", size_));
  if (n) read_at(offset, dst, n);
}

std::string Source::read(uint64_t offset, size_t n) const {
  std::string s(n, '\0');
  read(offset, s.data(), n);
  return s;
}

void MemorySource::read_at(uint64_t offset, void* dst, size_t n) const { std::memcpy(dst, bytes_.data() + offset, n); }

FileSource::FileSource(const std::string& op, const std::string& path, bool follow_links) : op_(op), path_(path) {
  auto bad = [&](const std::string& problem) { fail(cat(op, ": ", path, ": ", problem)); };
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (follow_links ? 0 : O_NOFOLLOW));
  if (fd_ < 0) bad(cat("cannot open (", errno == ELOOP && !follow_links ? "a symbolic link" : std::strerror(errno), ")"));
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    bad(cat("cannot open (", std::strerror(err), ")"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    bad(cat("not a regular file (", file_kind(st.st_mode), ")"));
  }
  size_ = uint64_t(st.st_size);
}

FileSource::~FileSource() { ::close(fd_); }

void FileSource::read_at(uint64_t offset, void* dst, size_t n) const {
  char* p = static_cast<char*>(dst);
  while (n) {
    ssize_t got = ::pread(fd_, p, std::min(n, size_t(1) << 30), off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(cat(op_, ": ", path_, ": read error (", std::strerror(errno), ")"));
    if (got == 0) fail(cat(op_, ": ", path_, ": read error (the file shrank below ", size_, " bytes while it was read)"));
    p += got;
    offset += uint64_t(got);
    n -= size_t(got);
  }
}

bool checked_numel(const Shape& shape, int64_t* numel, std::string* problem) {
  constexpr int64_t kMax = int64_t(1) << 46;  // Tensor::empty's limit
  if (shape.size() > size_t(kMaxDims)) {
    *problem = cat("has ", shape.size(), " dims (at most ", kMaxDims, " are supported)");
    return false;
  }
  int64_t n = 1, extent = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      *problem = cat("has a negative dim in shape ", shape_str(shape));
      return false;
    }
    if (d > kMax || (d && extent > kMax / d)) {
      *problem = cat("has shape ", shape_str(shape), ", too large (more than 2^46 elements)");
      return false;
    }
    if (d) extent *= d;
    n *= d;  // cannot overflow: n <= extent <= 2^46
  }
  *numel = n;
  return true;
}

Tensor tensor_from_source(const Shape& shape, DType dtype, const Source& src, uint64_t offset, std::string* problem) {
  Tensor t = Tensor::empty(shape, dtype);
  size_t n = size_t(t.numel()) * t.itemsize();
  src.read(offset, t.data_bytes(), n);
  if (dtype == DType::b8) {
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(t.data_bytes());
    for (size_t i = 0; i < n; ++i) {
      if (bytes[i] > 1) {
        *problem = cat("bool element ", i, " holds the byte ", int(bytes[i]), " (expected 0 or 1)");
        return Tensor();
      }
    }
  }
  return t;
}

}  // namespace cr::io
