// File access shared by the tensor readers and writers. Errors name the operation and the path
// ("load: model.safetensors: cannot open (No such file or directory)").
#pragma once
#include <sys/types.h>

#include <cstdio>
#include <string>

#include "vm/tensor.hpp"

namespace cr::io {

// "a directory", "a FIFO", ... for messages about a file of mode `mode`.
const char* file_kind(mode_t mode);

// The bytes a reader parses, read piece by piece so that a tensor's bytes go straight into its
// storage: a file (FileSource) or a string in memory (MemorySource, for the fuzz targets).
class Source {
 public:
  virtual ~Source() = default;
  uint64_t size() const { return size_; }
  // n bytes at `offset` into dst; a range past size() is an internal error (callers check it).
  void read(uint64_t offset, void* dst, size_t n) const;
  std::string read(uint64_t offset, size_t n) const;

 protected:
  virtual void read_at(uint64_t offset, void* dst, size_t n) const = 0;
  uint64_t size_ = 0;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(const std::string& bytes) : bytes_(bytes) { size_ = bytes.size(); }

 private:
  void read_at(uint64_t offset, void* dst, size_t n) const override;
  const std::string& bytes_;
};

// A regular file, opened without blocking (a FIFO would wait for a writer) and refused when it is
// anything else (/dev/zero never ends); its size is the one fstat gives. With follow_links false
// a symbolic link is refused too (the kernel cache's entries).
class FileSource final : public Source {
 public:
  FileSource(const std::string& op, const std::string& path, bool follow_links = true);
  ~FileSource();
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

 private:
  void read_at(uint64_t offset, void* dst, size_t n) const override;
  std::string op_, path_;
  int fd_ = -1;
};

// A new file `<dir of target>/.<name>.tmp-<pid>-<n>` opened for writing (O_EXCL, mode & ~umask);
// -1 with errno set when it cannot be created.
int create_temp(const std::string& target, mode_t mode, std::string* tmp_path);

// Writes a file so that a failure or a crash never costs the previous one. A regular file, a new
// path or a symbolic link to either is written under a temporary name in the target's directory,
// fsync'ed and renamed over the target on commit() (a link stays a link; the file's permission
// bits are kept); a character device (/dev/null) is written in place; any other destination is
// refused. Only the temporary file is ever removed.
class FileWriter {
 public:
  FileWriter(const std::string& op, const std::string& path);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  void write(const void* data, size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  // The bytes of t in row-major order (a non-contiguous t is copied to a contiguous one first).
  void write_tensor(const Tensor& t);
  void commit();

 private:
  [[noreturn]] void error(const std::string& what, int err);
  void discard();
  std::string op_, path_, target_, tmp_;  // tmp_ is empty when a device is written in place
  FILE* f_ = nullptr;
};

// Little-endian integer reads from a byte string (the caller checks the bounds).
inline uint64_t read_le(const char* p, int nbytes) {
  uint64_t v = 0;
  for (int i = nbytes - 1; i >= 0; --i) v = v << 8 | uint8_t(p[i]);
  return v;
}
inline std::string le_bytes(uint64_t v, int nbytes) {
  std::string s(size_t(nbytes), '\0');
  for (int i = 0; i < nbytes; ++i) s[size_t(i)] = char(v >> (8 * i));
  return s;
}

// numel of `shape` when every dim is non-negative and the element count (counting zero dims
// as 1, since strides are computed that way) stays below 2^46; the problem otherwise.
bool checked_numel(const Shape& shape, int64_t* numel, std::string* problem);

// A new tensor of `shape` read from `src` at `offset` (numel * itemsize bytes, already checked to
// lie in the source). bool data must hold only 0 and 1; the index of the first other byte is
// reported.
Tensor tensor_from_source(const Shape& shape, DType dtype, const Source& src, uint64_t offset, std::string* problem);

}  // namespace cr::io
