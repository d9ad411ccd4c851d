// A compiled CPU graph: its kernels from the shared object, launched over the thread pool.
#include "jit/cpu/program.hpp"

#include <dlfcn.h>

#include "vm/checks.hpp"
#include "vm/kernels/loop.hpp"
#include "vm/threads.hpp"

namespace cr::jit::cpu {

SharedObject::~SharedObject() {
  if (handle) dlclose(handle);
}

KernelFn kernel_fn(const SharedObject& so, const Kernel& k) {
  void* f = dlsym(so.handle, k.name.c_str());
  if (!f) throw Error(cat("compiled code lacks kernel ", k.name));
  return reinterpret_cast<KernelFn>(f);
}

int64_t default_grain(const Kernel& kern) {
  const int64_t items = std::max<int64_t>(1, kern.work_items());
  int64_t per_item = 1;
  for (int64_t s : kern.sizes) per_item *= s;
  per_item = std::max<int64_t>(1, per_item / items);
  return std::max<int64_t>(1, kParallelGrain / per_item);
}

void run_kernel(const Kernel& kern, KernelFn fn, void** fns, const int64_t* P, void** bufs, int threads) {
  const int64_t items = kern.work_items();
  if (items <= 0) return;
  const int64_t grain = threads == 0 ? default_grain(kern) : threads == 1 ? items : 1;
  parallel_for(items, grain, [&](int64_t w0, int64_t w1) { fn(bufs, fns, P, w0, w1); });
}

Program::Program(Plan plan, FnTable fns, std::shared_ptr<SharedObject> so)
    : PlanProgram(std::move(plan), Device{}), fns_(std::move(fns)), sos_{std::move(so)},
      kernels_(new std::atomic<KernelFn>[plan_.kernels.size()]), threads_(new std::atomic<int>[plan_.kernels.size()]) {
  for (size_t k = 0; k < plan_.kernels.size(); ++k) {
    kernels_[k] = kernel_fn(*sos_[0], plan_.kernels[k]);
    threads_[k] = 0;
  }
}

void Program::install(size_t k, std::shared_ptr<SharedObject> so, KernelFn fn, int threads) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sos_.push_back(std::move(so));
  }
  kernels_[k] = fn;
  threads_[k] = threads;
}

void Program::capture_inputs(std::function<void(std::vector<KernelInputs>)> take) { capture_.arm(plan_.kernels.size(), std::move(take)); }

void Program::launch(size_t k, void** bufs) const {
  if (capture_.on())
    capture_.add(k, [&] {
      KernelInputs in;
      const Kernel& kern = plan_.kernels[k];
      for (size_t i = 0; i < kern.buffers.size(); ++i) {
        const char* p = static_cast<const char*>(bufs[i]);
        in.emplace_back(p, p + slot_bytes(plan_.buffers[size_t(kern.buffers[i])]));
      }
      return in;
    });
  const int64_t* P = plan_.params.empty() ? nullptr : plan_.params[k].data();
  run_kernel(plan_.kernels[k], kernels_[k], const_cast<void**>(fns_.ptrs.data()), P, bufs, threads_[k]);
}

}  // namespace cr::jit::cpu
