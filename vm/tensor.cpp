#include "vm/tensor.hpp"
#include "vm/devices.hpp"
#include "vm/cuda/driver.hpp"

#include "vm/alloc.hpp"
#include "vm/autograd/grad_mode.hpp"
#include "vm/autograd/meta.hpp"
#include "vm/cpu_march.hpp"
#include "vm/hooks.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "vm/host_memory.hpp"

namespace cr {

static std::atomic<size_t> g_bytes_allocated{0}, g_large_bytes_allocated{0}, g_device_bytes_allocated{0};

size_t bytes_allocated_total() { return g_bytes_allocated.load(std::memory_order_relaxed); }
size_t large_bytes_allocated_total() { return g_large_bytes_allocated.load(std::memory_order_relaxed); }
size_t device_bytes_allocated_total() { return g_device_bytes_allocated.load(std::memory_order_relaxed); }

static std::atomic<size_t> g_host_in_use{0}, g_host_peak{0};
size_t host_storage_in_use() { return g_host_in_use.load(std::memory_order_relaxed); }
size_t host_storage_peak() { return g_host_peak.load(std::memory_order_relaxed); }
void host_storage_reset_peak() { g_host_peak.store(g_host_in_use.load(std::memory_order_relaxed), std::memory_order_relaxed); }
static void host_storage_add(size_t n) {
  const size_t now = g_host_in_use.fetch_add(n, std::memory_order_relaxed) + n;
  size_t peak = g_host_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_host_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

std::string device_name(Device d) { return d.type == 0 ? "cpu" : "cuda:" + std::to_string(d.index); }

// As torch.device: "cpu", "cpu:0", "cuda" or "cuda:N" (N without a sign or leading zeros), and a
// CUDA index must name a device of this machine: the driver never sees another one.
Device parse_device(const std::string& s) {
  const size_t colon = s.find(':');
  const std::string type = s.substr(0, colon), index = colon == std::string::npos ? "" : s.substr(colon + 1);
  const bool digits = !index.empty() && index.find_first_not_of("0123456789") == std::string::npos &&
                      (index[0] != '0' || index.size() == 1);
  if ((type != "cpu" && type != "cuda") || (colon != std::string::npos && !digits))
    fail(cat("expected a device \"cpu\", \"cuda\" or \"cuda:N\", got \"", s, "\""));
  if (type == "cpu") {
    if (!index.empty() && index != "0") fail(cat("device \"", s, "\": the CPU is \"cpu\" or \"cpu:0\""));
    return Device{0, 0};
  }
  // more digits than an int64 holds name no device either
  const int64_t n = index.empty() ? 0 : index.size() > 18 ? INT64_MAX : std::stoll(index);
  if (std::string problem = cuda::device_problem(n); !problem.empty()) fail(cat("device \"", s, "\": ", problem));
  return Device{1, int8_t(n)};
}

// Headers come from the same size-class cache as small data blocks.
template <class T> T* new_pooled() {
  void* p = host_alloc(sizeof(T));
  if (!p) throw std::bad_alloc();
  return new (p) T();
}
template <class T> void delete_pooled(T* p) {
  p->~T();
  host_free(p, sizeof(T));
}

Storage* storage_new(size_t nbytes, Device device) {
  void* data = device.is_cpu() ? host_alloc(nbytes) : device_alloc(nbytes, device);
  if (!data && device.is_cpu()) fail(cat("out of memory allocating ", nbytes, " bytes"));
  Storage* s = new_pooled<Storage>();
  s->data = data;
  s->nbytes = nbytes;
  s->device = device;
  std::atomic<size_t>& count = !device.is_cpu()                                     ? g_device_bytes_allocated
                               : int64_t(nbytes) >= cpu_large_block_bytes() ? g_large_bytes_allocated
                                                                             : g_bytes_allocated;
  count.fetch_add(nbytes, std::memory_order_relaxed);
  if (device.is_cpu()) host_storage_add(nbytes);
  return s;
}

Storage* storage_wrap(void* data, size_t nbytes, Device device, void (*free_fn)(void*, void*), void* ctx) {
  Storage* s = new_pooled<Storage>();
  s->data = data;
  s->nbytes = nbytes;
  s->device = device;
  s->free_fn = free_fn;
  s->free_ctx = ctx;
  return s;
}

void storage_retain(Storage* s) { s->refs.fetch_add(1, std::memory_order_relaxed); }

void storage_release(Storage* s) {
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (s->free_fn) s->free_fn(s->free_ctx, s->data);
  else if (s->device.is_cpu()) {
    g_host_in_use.fetch_sub(s->nbytes, std::memory_order_relaxed);
    host_free(s->data, s->nbytes);
  }
  else device_free(s->data, s->nbytes, s->device);
  delete_pooled(s);
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "{";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  r += '}';
  return r;
}

bool maybe_overlapping(const Shape& sizes, const Shape& strides) {
  std::vector<size_t> order(sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t reach = 0;
  for (size_t i : order) {
    if (strides[i] <= reach) return true;
    reach += strides[i] * (sizes[i] - 1);
  }
  return false;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i] ? s[i] : 1;
  }
  return st;
}

static std::atomic_ref<int32_t> refs_of(cr_tensor* t) { return std::atomic_ref<int32_t>(t->_refs); }

void tensor_retain(cr_tensor* t) { refs_of(t).fetch_add(1, std::memory_order_relaxed); }

int32_t tensor_refs(const cr_tensor* t) { return refs_of(const_cast<cr_tensor*>(t)).load(std::memory_order_relaxed); }

void tensor_release(cr_tensor* t) {
  if (!t || refs_of(t).fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (t->_lazy) hooks().release_lazy(t);
  if (t->_autograd) autograd::drop_meta(t);
  if (t->_storage) storage_release(static_cast<Storage*>(t->_storage));
  delete_pooled(t);
}

Tensor::Tensor(cr_tensor* p, bool retain) : p_(p) {
  if (p_ && retain) tensor_retain(p_);
}
Tensor::Tensor(const Tensor& o) : p_(o.p_) {
  if (p_) tensor_retain(p_);
}
Tensor::~Tensor() { tensor_release(p_); }

// Also the product of the non-zero sizes (the largest contiguous stride) must fit in int64, even
// when a zero size leaves no elements: numel() and the strides are computed from it ({0, 2^46,
// 2^31} and an empty as_strided of sizes {2^46, 2^46, 0} were found by the fuzz_ops target).
// Returns the number of elements.
static int64_t check_shape(const Shape& sizes) {
  if (sizes.size() > size_t(kMaxDims))
    fail(cat("tensors have at most ", kMaxDims, " dimensions, got ", sizes.size()));
  int64_t extent = 1;
  bool zero = false;
  for (int64_t s : sizes) {
    if (s < 0) fail(cat("sizes must be non-negative, got ", shape_str(sizes)));
    zero = zero || s == 0;
    if (s && __builtin_mul_overflow(extent, s, &extent)) fail(cat("tensor of shape ", shape_str(sizes), " is too large"));
  }
  return zero ? 0 : extent;
}

Tensor Tensor::from_storage(Storage* s, const Shape& sizes, const Shape& strides, int64_t offset, DType dtype) {
  check_shape(sizes);
  cr_tensor* t = new_pooled<cr_tensor>();
  t->_refs = 1;
  t->_dtype = int8_t(dtype);
  t->_dev_type = s->device.type;
  t->_dev_index = s->device.index;
  t->_ndim = int32_t(sizes.size());
  t->_offset = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    t->_sizes[i] = sizes[i];
    t->_strides[i] = strides[i];
  }
  t->_storage = s;  // adopts the caller's reference
  return Tensor(t, false);
}

Tensor Tensor::lazy(const Shape& sizes, const Shape& strides, int64_t offset, DType dtype, Device device) {
  cr_tensor* t = new_pooled<cr_tensor>();
  t->_refs = 1;
  t->_dtype = int8_t(dtype);
  t->_dev_type = device.type;
  t->_dev_index = device.index;
  t->_ndim = int32_t(sizes.size());
  t->_offset = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    t->_sizes[i] = sizes[i];
    t->_strides[i] = strides[i];
  }
  return Tensor(t, false);
}

void Tensor::attach(cr_tensor* lazy, const Tensor& value) {
  if (lazy->_ndim != value.dim() || !std::equal(lazy->_sizes, lazy->_sizes + lazy->_ndim, value.get()->_sizes))
    fail(cat("internal: a captured graph computed ", value.describe(), " for a lazy tensor of another shape"));
  storage_retain(value.storage());
  if (lazy->_storage) storage_release(static_cast<Storage*>(lazy->_storage));
  lazy->_storage = value.storage();
  lazy->_offset = value.offset();
  lazy->_dtype = int8_t(value.dtype());
  for (int i = 0; i < value.dim(); ++i) lazy->_strides[i] = value.stride(i);
}

void Tensor::unattach(cr_tensor* t) {
  auto* s = static_cast<Storage*>(t->_storage);
  t->_storage = nullptr;
  if (s) storage_release(s);
}

bool Tensor::give_storage(cr_tensor* t, const Shape& sizes, DType dtype, Device device) {
  if (t->_storage || t->_dtype != int8_t(dtype) || t->_offset != 0 || t->_ndim != int32_t(sizes.size()) ||
      t->_dev_type != device.type || t->_dev_index != device.index)
    return false;
  int64_t expect = 1;
  for (int i = t->_ndim - 1; i >= 0; --i) {
    if (t->_sizes[i] != sizes[size_t(i)]) return false;
    if (t->_strides[i] != expect) return false;
    expect *= sizes[size_t(i)] ? sizes[size_t(i)] : 1;
  }
  t->_storage = storage_new(size_t(shape_numel(sizes)) * dtype_size(dtype), device);
  return true;
}

Tensor Tensor::empty(const Shape& sizes, DType dtype, Device device) {
  int64_t n = check_shape(sizes);
  if (n > (int64_t(1) << 46)) fail(cat("tensor of shape ", shape_str(sizes), " is too large"));
  Storage* s = storage_new(size_t(n) * dtype_size(dtype), device);
  return from_storage(s, sizes, contiguous_strides(sizes), 0, dtype);
}

Tensor Tensor::view_of(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  check_shape(sizes);  // before taking the reference from_storage adopts
  storage_retain(base.storage());
  Tensor t = from_storage(base.storage(), sizes, strides, offset, base.dtype());
  t.get()->_flags = base.get()->_flags & autograd::kInferenceTensor;  // a view of an inference tensor is one
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < p_->_ndim; ++i) n *= p_->_sizes[i];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (size(i) == 1) continue;
    if (size(i) == 0) return true;
    if (stride(i) != expect) return false;
    expect *= size(i);
  }
  return true;
}

std::string Tensor::describe() const {
  return cat(dtype_name(dtype()), " tensor of shape ", shape_str(sizes()));
}

}  // namespace cr
