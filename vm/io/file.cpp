#include "vm/io/file.hpp"

#include <cerrno>
#include <cstring>

#include <sys/stat.h>

#include "vm/kernels/loop.hpp"

namespace cr::io {

std::string read_file(const std::string& op, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail(cat(op, ": ", path, ": cannot open (", std::strerror(errno), ")"));
  std::string data;
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) data.reserve(size_t(st.st_size));  // a hint only
  char buf[1 << 16];
  while (true) {
    size_t n = std::fread(buf, 1, sizeof buf, f);
    data.append(buf, n);
    if (n < sizeof buf) break;
  }
  bool bad = std::ferror(f);
  int err = errno;
  std::fclose(f);
  if (bad) fail(cat(op, ": ", path, ": read error (", std::strerror(err), ")"));
  return data;
}

FileWriter::FileWriter(const std::string& op, const std::string& path) : op_(op), path_(path) {
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) fail(cat(op, ": ", path, ": cannot open for writing (", std::strerror(errno), ")"));
}

FileWriter::~FileWriter() {
  if (!f_) return;
  std::fclose(f_);
  std::remove(path_.c_str());  // not committed: an error left the file incomplete
}

void FileWriter::error(const std::string& what) {
  int err = errno;
  std::fclose(f_);
  f_ = nullptr;
  std::remove(path_.c_str());
  fail(cat(op_, ": ", path_, ": ", what, " (", std::strerror(err), ")"));
}

void FileWriter::write(const void* data, size_t n) {
  if (n && std::fwrite(data, 1, n, f_) != n) error("write error");
}

void FileWriter::write_tensor(const Tensor& t) {
  Tensor c = contiguous(t);
  write(c.data_bytes(), size_t(c.numel()) * c.itemsize());
}

void FileWriter::commit() {
  FILE* f = f_;
  f_ = nullptr;
  if (std::fflush(f) != 0 || std::ferror(f)) {
    f_ = f;
    error("write error");
  }
  if (std::fclose(f) != 0) fail(cat(op_, ": ", path_, ": write error (", std::strerror(errno), ")"));
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

Tensor tensor_from_bytes(const Shape& shape, DType dtype, const char* bytes, std::string* problem) {
  Tensor t = Tensor::empty(shape, dtype);
  size_t n = size_t(t.numel()) * t.itemsize();
  if (dtype == DType::b8) {
    for (size_t i = 0; i < n; ++i) {
      if (uint8_t(bytes[i]) > 1) {
        *problem = cat("bool element ", i, " holds the byte ", int(uint8_t(bytes[i])), " (expected 0 or 1)");
        return Tensor();
      }
    }
  }
  if (n) std::memcpy(t.data_bytes(), bytes, n);
  return t;
}

}  // namespace cr::io
