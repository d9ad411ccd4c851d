// A compiled CPU graph: its kernels from the shared object, launched over the thread pool.
#include "jit/cpu/program.hpp"

#include <dlfcn.h>

#include "vm/kernels/loop.hpp"
#include "vm/threads.hpp"

namespace cr::jit::cpu {

SharedObject::~SharedObject() {
  if (handle) dlclose(handle);
}

Program::Program(Plan plan, FnTable fns, std::shared_ptr<SharedObject> so)
    : PlanProgram(std::move(plan), Device{}), fns_(std::move(fns)), so_(std::move(so)) {
  for (const Kernel& k : plan_.kernels) {
    void* f = dlsym(so_->handle, k.name.c_str());
    if (!f) throw Error(cat("compiled code lacks kernel ", k.name));
    kernels_.push_back(reinterpret_cast<KernelFn>(f));
  }
}

void Program::launch(size_t k, void** bufs) const {
  const Kernel& kern = plan_.kernels[k];
  const int64_t items = kern.work_items();
  if (items <= 0) return;
  int64_t per_item = 1;
  for (int64_t s : kern.sizes) per_item *= s;
  per_item = std::max<int64_t>(1, per_item / items);
  KernelFn fn = kernels_[k];
  void** f = const_cast<void**>(fns_.ptrs.data());
  const int64_t* P = plan_.params.empty() ? nullptr : plan_.params[k].data();
  parallel_for(items, std::max<int64_t>(1, kParallelGrain / per_item), [&](int64_t w0, int64_t w1) { fn(bufs, f, P, w0, w1); });
}

}  // namespace cr::jit::cpu
