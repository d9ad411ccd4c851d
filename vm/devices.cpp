#include "vm/devices.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "vm/config.hpp"
#include "vm/context.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/hooks.hpp"
#include "vm/kernels/loop.hpp"

namespace cr {
namespace {

std::atomic<int64_t> g_host_ops{0};

// Work on CUDA tensors done on host copies: counted (T.cuda.stats().host_ops) and, with
// CRESCENT_LOGS=host_ops, logged.
void note_host_op(bool log, const std::string& what) {
  g_host_ops.fetch_add(1, std::memory_order_relaxed);
  if (log) log_line("host_ops", what);
}

Device device_of(cr_tensor* t) { return Device{t->_dev_type, t->_dev_index}; }

// The CUDA device argument i names (a tensor on one, a tensor list holding one, or the op's
// {device = "cuda"} option - OpDef::device_arg); the CPU otherwise. Reads the handles directly:
// this runs for every op call.
Device cuda_of(const OpDef& def, const cr_value* args, int i) {
  const cr_value& v = args[i];
  if (v.tag == kTensor) return device_of(static_cast<cr_tensor*>(v.ptr));
  if (v.tag == kTensors)
    for (int j = 0; j < v.n; ++j) {
      Device d = device_of(static_cast<cr_tensor* const*>(v.ptr)[j]);
      if (!d.is_cpu()) return d;
    }
  if (v.tag == kString && i == def.device_arg && v.str && std::strncmp(v.str, "cuda", 4) == 0) return parse_device(v.str);
  return Device{};
}

// The elements [first, last] of its storage that a view can address (strides are >= 0).
struct Span {
  int64_t first = 0, count = 0;
};
Span span_of(const Tensor& t) {
  if (t.numel() == 0) return {t.offset(), 0};
  int64_t last = t.offset();
  for (int d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {t.offset(), last - t.offset() + 1};
}
char* span_ptr(const Tensor& t, const Span& s) {
  return static_cast<char*>(t.storage()->data) + s.first * int64_t(t.itemsize());
}

}  // namespace

bool any_cuda(const OpDef& def, const cr_value* args, int nargs) {
  for (int i = 0; i < nargs; ++i)
    if (!cuda_of(def, args, i).is_cpu()) return true;
  return false;
}

Tensor host_copy(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  const Span s = span_of(t);
  const size_t bytes = size_t(s.count) * t.itemsize();
  Storage* h = storage_new(bytes, Device{});
  Tensor host = Tensor::from_storage(h, t.sizes(), t.strides(), 0, t.dtype());
  cuda::copy_to_host(h->data, span_ptr(t, s), bytes, t.device().index);
  return host;
}

void copy_across(const Tensor& dst, const Tensor& src) {
  const Device dd = dst.device(), sd = src.device();
  if (dd == sd && !dd.is_cpu() && dst.dtype() == src.dtype() && dst.sizes() == src.sizes() && dst.is_contiguous() &&
      src.is_contiguous()) {
    cuda::copy_on_device(dst.data_bytes(), src.data_bytes(), size_t(dst.numel()) * dst.itemsize(), dd.index);
    return;
  }
  if (dd == sd && !dd.is_cpu() && (dst.numel() == 0 || hooks().cuda_copy(dst, src))) return;
  if (dd == sd && !dd.is_cpu()) {  // (no Context here: the log follows the environment)
    note_host_op(env_logs().host_ops, cat("copy of ", src.describe(), " into ", dst.describe(), ": no CUDA kernel, ran on host copies"));
  }
  Tensor s = host_copy(src);
  if (dd.is_cpu()) return copy_into(dst, s);
  // a contiguous destination is written whole; any other view is read first (its gaps keep
  // their values) and written back
  const bool whole = dst.is_contiguous();
  Tensor h = whole ? Tensor::empty(dst.sizes(), dst.dtype()) : host_copy(dst);
  copy_into(h, s);
  const Span sp = span_of(dst);
  cuda::copy_to_device(span_ptr(dst, sp), h.storage()->data, size_t(sp.count) * dst.itemsize(), dd.index);
}

// The bytes of v in dtype d when a memset can write them: every byte equal (zero, bool) or a
// 2-, 4- or 8-byte element; else false.
bool memset_pattern(DType d, double v, int* width, uint64_t* pattern) {
  Tensor one = Tensor::empty({}, d);
  fill(one, v);
  const size_t n = one.itemsize();
  const unsigned char* b = static_cast<const unsigned char*>(one.storage()->data);
  bool same = true;
  for (size_t i = 1; i < n; ++i) same = same && b[i] == b[0];
  if (same) {
    *width = 1;
    *pattern = b[0];
    return true;
  }
  if (n != 2 && n != 4 && n != 8) return false;
  *pattern = 0;
  std::memcpy(pattern, b, n);  // (little-endian: the first bytes are the low ones)
  *width = int(n);
  return true;
}

void fill_across(const Tensor& dst, double v) {
  int width = 0;
  uint64_t pattern = 0;
  if (dst.numel() == 0) return;
  if (memset_pattern(dst.dtype(), v, &width, &pattern)) {
    const int index = dst.device().index;
    if (dst.is_contiguous()) {
      const size_t bytes = size_t(dst.numel()) * dst.itemsize();
      return cuda::fill_pattern(dst.data_bytes(), bytes / size_t(width), width, pattern, index);
    }
    // a view: one element set by a memset, broadcast into it by the device's copy kernel (no host
    // copy, so a CUDA graph can record it); an overlapping view takes the host path below
    Tensor one = Tensor::empty({}, dst.dtype(), dst.device());
    cuda::fill_pattern(one.data_bytes(), size_t(dst.itemsize()) / size_t(width), width, pattern, index);
    if (hooks().cuda_copy(dst, one)) return;
  }
  note_host_op(env_logs().host_ops, cat("fill of ", dst.describe(), ": no CUDA kernel, ran on host copies"));
  Tensor h = dst.is_contiguous() ? Tensor::empty(dst.sizes(), dst.dtype()) : host_copy(dst);
  fill(h, v);
  const Span sp = span_of(dst);
  cuda::copy_to_device(span_ptr(dst, sp), h.storage()->data, size_t(sp.count) * dst.itemsize(), dst.device().index);
}

// PyTorch's rule: the tensors of one op share a device, except 0-d CPU tensors (scalars).
void check_same_device(const cr_value* args, int nargs) {
  Device seen{};
  bool cpu_tensor = false;
  for (int i = 0; i < nargs; ++i) {
    auto check = [&](cr_tensor* p) {
      Tensor t(p, true);
      if (t.device().is_cpu()) cpu_tensor = cpu_tensor || t.dim() > 0;
      else if (seen.is_cpu()) seen = t.device();
      else if (!(seen == t.device()))
        fail(cat("expected all tensors on one device, got ", device_name(seen), " and ", device_name(t.device())));
    };
    if (args[i].tag == kTensor) check(static_cast<cr_tensor*>(args[i].ptr));
    if (args[i].tag == kTensors)
      for (int j = 0; j < args[i].n; ++j) check(static_cast<cr_tensor* const*>(args[i].ptr)[j]);
  }
  if (cpu_tensor && !seen.is_cpu())
    fail(cat("expected all tensors on one device, got cpu and ", device_name(seen), " (move them with x:to(\"",
             device_name(seen), "\") or x:cpu())"));
}

std::vector<Tensor> run_on_host(Context& ctx, const OpDef& def, const cr_value* args, int nargs) {
  check_same_device(args, nargs);
  if (ctx.logs.host_ops) {  // the operands, to see which case the kernels miss
    std::string what;
    for (int i = 0; i < nargs; ++i)
      if (args[i].tag == kTensor) what += cat(what.empty() ? " (" : ", ", Tensor(static_cast<cr_tensor*>(args[i].ptr), true).describe());
    note_host_op(true, cat(def.name, ": no CUDA kernel for these operands", what, what.empty() ? "" : ")", ", ran on host copies"));
  } else {
    note_host_op(false, "");
  }
  std::vector<cr_value> hargs(args, args + nargs);
  std::vector<Tensor> keep;
  std::vector<std::vector<cr_tensor*>> lists(static_cast<size_t>(nargs));
  Device dev{};
  for (int i = 0; i < nargs; ++i) {
    Device d = cuda_of(def, args, i);
    if (dev.is_cpu()) dev = d;
    if (args[i].tag == kTensor) {
      keep.push_back(host_copy(Tensor(static_cast<cr_tensor*>(args[i].ptr), true)));
      hargs[size_t(i)].ptr = keep.back().get();
    } else if (args[i].tag == kTensors) {
      for (int j = 0; j < args[i].n; ++j) {
        keep.push_back(host_copy(Tensor(static_cast<cr_tensor* const*>(args[i].ptr)[j], true)));
        lists[size_t(i)].push_back(keep.back().get());
      }
      hargs[size_t(i)].ptr = lists[size_t(i)].data();
    }
  }
  OpCall c{ctx, def, hargs.data(), nargs, {}, {}};
  std::vector<Device> want;
  if (def.infer) {
    c.metas = def.infer(c);
    for (const Meta& m : c.metas) {
      want.push_back(m.device);
      c.outs.push_back(Tensor::empty(m.sizes, m.dtype, Device{}));
    }
  }
  def.run(c);
  if (def.flags & kReturnsSelf) {
    Tensor self(static_cast<cr_tensor*>(args[0].ptr), true);
    copy_across(self, keep.front());
    return {self};
  }
  // the metadata names a device only for creation ops ({device = "cuda"}); the others computed
  // on host copies, and their results go to their inputs' device
  for (size_t i = 0; i < c.outs.size(); ++i) {
    const Device target = i < want.size() && !want[i].is_cpu() ? want[i] : dev;
    if (!target.is_cpu()) c.outs[i] = to_device(c.outs[i], target);
  }
  return std::move(c.outs);
}

Tensor to_device(const Tensor& t, Device d) {
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), d);
  copy_across(out, t);
  return out;
}

int64_t host_op_count() { return g_host_ops.load(std::memory_order_relaxed); }

// (a zero-size tensor needs no memory, but a device that exists: as torch, T.zeros(0):cuda()
// raises where CUDA is not available)
void* device_alloc(size_t nbytes, Device d) {
  if (nbytes) return cuda::device_alloc(nbytes, d.index);
  cuda::use_device(d.index);
  return nullptr;
}
void device_free(void* p, size_t nbytes, Device d) { cuda::device_free(p, nbytes, d.index); }
size_t device_garbage_budget() {
  return device_bytes_allocated_total() ? cuda::garbage_budget() : size_t(64) << 20;
}
size_t device_driver_bytes() { return cuda::driver_bytes_total(); }

}  // namespace cr
