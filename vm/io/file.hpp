// File access shared by the tensor readers and writers. Errors name the operation and the path
// ("load: model.safetensors: cannot open (No such file or directory)").
#pragma once
#include <cstdio>
#include <string>

#include "vm/tensor.hpp"

namespace cr::io {

// The whole file, read until EOF (whatever size the file claims).
std::string read_file(const std::string& op, const std::string& path);

// Writes a file; on any error (or when destroyed before commit()) the partial file is removed.
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
  [[noreturn]] void error(const std::string& what);
  std::string op_, path_;
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

// A new tensor of `shape` filled from `bytes` (numel * itemsize of them, already checked).
// bool data must hold only 0 and 1; the index of the first other byte is reported.
Tensor tensor_from_bytes(const Shape& shape, DType dtype, const char* bytes, std::string* problem);

}  // namespace cr::io
