// Storage and tensors. A tensor is the FFI-visible `cr_tensor` (sizes, strides and offset in
// elements over a refcounted Storage); `cr::Tensor` is the owning C++ handle around it.
#pragma once
#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "vm/dtype.hpp"
#include "vm/error.hpp"
#include "vm/abi.h"
#include "vm/small_vector.hpp"

namespace cr {

constexpr int kMaxDims = 16;
using Shape = SmallVector<int64_t, 8>;  // sizes, strides and other short integer lists

struct Device {
  int8_t type = 0;  // 0 = cpu, 1 = cuda
  int8_t index = 0;
  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == 0; }
};
std::string device_name(Device d);
Device parse_device(const std::string& s);  // throws on an unknown name

struct Context;

struct Storage {
  std::atomic<int32_t> refs{1};
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  void (*free_fn)(void* ctx, void* data) = nullptr;  // null: memory we allocated
  void* free_ctx = nullptr;
  std::atomic<uint32_t> version{0};  // bumped by every in-place op: lazy recomputation checks it
  std::atomic<int32_t> pending_reads{0};  // lazy values that would be recomputed from it
  Context* reader = nullptr;        // the VM whose lazy values read it last (or null)
};
Storage* storage_new(size_t nbytes, Device device);  // 64-byte aligned
Storage* storage_wrap(void* data, size_t nbytes, Device device, void (*free_fn)(void*, void*), void* ctx);
void storage_retain(Storage* s);
void storage_release(Storage* s);
// monotonic byte counts of host and of device allocations, for the Lua GC pressure heuristic;
// host blocks of at least cpu_large_block_bytes (vm/cpu_march.hpp) are counted apart
size_t bytes_allocated_total();
size_t large_bytes_allocated_total();
size_t device_bytes_allocated_total();

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "{2,3}"
Shape contiguous_strides(const Shape& s);
// Whether some two elements of the layout may share memory (PyTorch's _maybe_overlapping_memory).
bool maybe_overlapping(const Shape& sizes, const Shape& strides);

class Tensor {
 public:
  Tensor() = default;
  Tensor(cr_tensor* p, bool retain);  // retain=false adopts a reference
  Tensor(const Tensor& o);
  Tensor(Tensor&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  Tensor& operator=(Tensor o) noexcept { std::swap(p_, o.p_); return *this; }
  ~Tensor();

  static Tensor empty(const Shape& sizes, DType dtype, Device device = {});
  // A new tensor header over `base`'s storage.
  static Tensor view_of(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);
  static Tensor from_storage(Storage* s, const Shape& sizes, const Shape& strides, int64_t offset, DType dtype);
  // A lazy tensor: the header only; a captured graph gives it storage later (attach).
  static Tensor lazy(const Shape& sizes, const Shape& strides, int64_t offset, DType dtype, Device device);
  // Gives lazy tensor `lazy` the storage and layout of `value` (same sizes).
  static void attach(cr_tensor* lazy, const Tensor& value);
  // Takes back the storage a lazy tensor got from a run that then failed: its values may be
  // partial, and reading it raises instead ("has no value").
  static void unattach(cr_tensor* t);
  // Gives lazy tensor `lazy` new storage when it is a contiguous `sizes` / `dtype` tensor with
  // offset 0 (what Tensor::empty would make); false (nothing done) otherwise.
  static bool give_storage(cr_tensor* lazy, const Shape& sizes, DType dtype, Device device);

  bool defined() const { return p_ != nullptr; }
  bool is_lazy() const { return p_->_storage == nullptr; }
  cr_tensor* get() const { return p_; }
  cr_tensor* release() { cr_tensor* p = p_; p_ = nullptr; return p; }  // hand the reference out

  int dim() const { return p_->_ndim; }
  int64_t size(int d) const { return p_->_sizes[d]; }
  int64_t stride(int d) const { return p_->_strides[d]; }
  Shape sizes() const { return Shape(p_->_sizes, p_->_sizes + p_->_ndim); }
  Shape strides() const { return Shape(p_->_strides, p_->_strides + p_->_ndim); }
  int64_t offset() const { return p_->_offset; }
  int64_t numel() const;
  DType dtype() const { return DType(p_->_dtype); }
  Device device() const { return Device{p_->_dev_type, p_->_dev_index}; }
  size_t itemsize() const { return dtype_size(dtype()); }
  bool is_contiguous() const;
  Storage* storage() const { return static_cast<Storage*>(p_->_storage); }
  char* data_bytes() const { return static_cast<char*>(storage()->data) + offset() * int64_t(itemsize()); }
  template <class T> T* data() const { return reinterpret_cast<T*>(data_bytes()); }
  bool same(const Tensor& o) const { return p_ == o.p_; }
  std::string describe() const;  // "float32 tensor of shape {2,3}"

 private:
  cr_tensor* p_ = nullptr;
};

void tensor_retain(cr_tensor* t);
void tensor_release(cr_tensor* t);
int32_t tensor_refs(const cr_tensor* t);

}  // namespace cr
