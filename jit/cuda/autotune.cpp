// mode = "max-autotune" on CUDA (jit/autotune.hpp runs the choice): a kernel's candidates
// (jit::cuda::candidates) compiled as one module through the kernel cache, run and timed by events
// on a side stream, on device copies of the slots a run's launch got.
#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>

#include "jit/autotune.hpp"
#include "jit/background.hpp"
#include "jit/cache_entry.hpp"
#include "jit/cuda/backend.hpp"
#include "jit/cuda/program.hpp"
#include "jit/kernel_cache.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/nvrtc.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/log.hpp"

namespace cr::jit::cuda {

namespace {

using cr::cuda::CUfunction;

int driver_version() {
  int v = 0;
  CR_CU(cuDriverGetVersion(&v), "autotuning's cache key");
  return v;
}

// The choice's key: the default kernel's text (its module's source), its size class, the device's
// name, the driver, NVRTC and this build.
std::string choice_key(const Plan& plan, size_t k, const Target& t, int index) {
  const std::string text = emit_candidates(plan, k, t, {KernelConfig{}}).source;
  return sha256_hex(cat("autotune cuda 1\n", text, "\nsize class ", size_class(plan.kernels[k]), "\n", cr::cuda::device_info(index).name,
                        " driver ", driver_version(), " nvrtc ", cr::cuda::nvrtc_version(), " build ", build_id()));
}

// The calling thread's current stream of a device is a pool stream while this lives: copies and
// allocations of the tuning job go there, never to the program's stream.
struct SideStream {
  const int index;
  const int64_t before, id;
  explicit SideStream(int index)
      : index(index), before(int64_t(index) * cr::cuda::kSlots + cr::cuda::current_slot(index)), id(cr::cuda::pool_stream(index)) {
    cr::cuda::set_current_stream(id);
  }
  ~SideStream() { cr::cuda::set_current_stream(before); }
};

// Kernel k of a CUDA program: jit::cuda::candidates, on the copies of its slots. Written slots
// get work copies, restored from the run's before each checked run.
class CudaCandidates : public Candidates {
 public:
  CudaCandidates(Program& p, size_t k, const LaunchCopies& in, const Target& t, const Options& o, const SideStream& side)
      : p_(p), k_(k), kern_(p.module().kernels[k]), in_(in), t_(t), o_(o), side_(side), configs_(candidates(kern_)) {
    if (in.slots.size() != kern_.params.size()) configs_.clear();  // (not copied: a CUDA graph was recorded)
    if (in.ready >= 0) cr::cuda::stream_wait_event(side.id, in.ready);
    for (size_t i = 0; i < in.slots.size() && !configs_.empty(); ++i) {
      const SlotCopy& s = in.slots[i];
      work_.push_back(kern_.params[i].written && s.device ? cr::cuda::device_alloc(s.bytes, side.index) : nullptr);
      ptrs_.push_back(work_.back() ? work_.back() : s.device ? s.device : const_cast<char*>(s.host.data()));
    }
  }
  ~CudaCandidates() override {
    cr::cuda::driver()->cuStreamSynchronize(stream());  // (before the copies go)
    for (int64_t e : events_)
      if (e >= 0) cr::cuda::event_destroy(e);
    for (size_t i = 0; i < work_.size(); ++i) cr::cuda::device_free(work_[i], in_.slots[i].bytes, side_.index);
  }
  size_t size() const override { return configs_.size(); }
  std::string shown(size_t i) const override { return config_name(configs_[i]); }

  // Emits and compiles the candidates' module (NVRTC, through the kernel cache): no driver
  // calls, so the kernels of a graph compile on several threads at once.
  void compile() {
    if (configs_.size() < 2 || !cubin_.empty() || failed_) return;
    try {
      m_ = emit_candidates(p_.plan(), k_, t_, configs_);
      cubin_ = cuda_cubin(m_.source, cat(kern_.name, "_candidates"), m_.arch, o_.cache_dir);
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }

  bool ready(size_t) override {
    if (!fns_.empty() || failed_) return !failed_;
    compile();
    try {
      if (failed_) return false;
      loaded_ = cr::cuda::load_module(cubin_key(m_.source, m_.arch), cubin_, side_.index);
      for (const CudaKernel& c : m_.kernels) {
        CUfunction f = nullptr;
        CR_CU(cuModuleGetFunction(&f, loaded_->mod, c.name.c_str()), c.name);
        fns_.push_back(f);
      }
    } catch (const std::exception& e) {
      fail(e.what());
    }
    return !failed_;
  }

  KernelBytes outputs(size_t i) override {
    restore();
    launch(i);
    KernelBytes out(ptrs_.size());
    for (size_t s = 0; s < ptrs_.size(); ++s)
      if (work_[s]) {
        out[s].resize(in_.slots[s].bytes);
        CR_CU(cuMemcpyDtoHAsync(out[s].data(), reinterpret_cast<cr::cuda::CUdeviceptr>(work_[s]), out[s].size(), stream()), kern_.name);
      }
    // (the driver's own wait: copy_to_host would also take the stream's pending check words)
    CR_CU(cuStreamSynchronize(stream()), kern_.name);
    return out;
  }

  double time_ms(size_t i) override {
    restore();  // (kernels that read what they write see the run's values)
    if (events_[0] < 0)
      for (int64_t& e : events_) e = cr::cuda::event_create(side_.index, true);
    cr::cuda::event_record(events_[0], side_.id);
    launch(i);
    cr::cuda::event_record(events_[1], side_.id);
    cr::cuda::event_synchronize(events_[1]);
    return cr::cuda::event_elapsed_ms(events_[0], events_[1]);
  }

  bool install(size_t i) override {
    const CudaKernel& c = m_.kernels[i];
    p_.install(k_, loaded_, Launch{fns_[i], c.grid, c.block, c.shared_bytes});
    return true;
  }

 private:
  void fail(const std::string& why) {
    failed_ = true;
    if (o_.log_autotune) log_line("autotune", cat(kern_.name, ": the candidates did not compile (", why, ")"));
  }
  cr::cuda::CUstream stream() const { return cr::cuda::stream_of(side_.id); }
  void restore() {
    for (size_t s = 0; s < work_.size(); ++s)
      if (work_[s]) cr::cuda::copy_on_device(work_[s], in_.slots[s].device, in_.slots[s].bytes, side_.index);
  }
  // Arguments as Program::launch passes them: device pointers by address, run values by value.
  void launch(size_t i) {
    const CudaKernel& c = m_.kernels[i];
    if (c.grid <= 0) return;
    std::vector<void*> args(ptrs_.size());
    for (size_t s = 0; s < args.size(); ++s) args[s] = kern_.params[s].words ? ptrs_[s] : &ptrs_[s];
    CR_CU(cuLaunchKernel(static_cast<CUfunction>(fns_[i]), unsigned(c.grid), 1, 1, unsigned(c.block), 1, 1, unsigned(c.shared_bytes),
                         stream(), args.data(), nullptr),
          c.name);
  }

  Program& p_;
  const size_t k_;
  const CudaKernel& kern_;
  const LaunchCopies& in_;
  const Target& t_;
  const Options& o_;
  const SideStream& side_;
  std::vector<KernelConfig> configs_;
  std::vector<void*> work_, ptrs_;  // per slot: the work copy (written slots) / the argument
  CudaModule m_;
  std::string cubin_;
  std::shared_ptr<cr::cuda::LoadedModule> loaded_;
  std::vector<void*> fns_;  // per candidate
  bool failed_ = false;
  int64_t events_[2] = {-1, -1};
};

// Runs compile() of every kernel's candidates on up to kCompileThreads threads.
constexpr unsigned kCompileThreads = 8;
void compile_all(std::vector<std::unique_ptr<CudaCandidates>>& cs) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < cs.size();) cs[i]->compile();
  };
  std::vector<std::thread> threads;
  const unsigned n = std::min<unsigned>({kCompileThreads, std::max(1u, std::thread::hardware_concurrency()), unsigned(cs.size())});
  for (unsigned t = 1; t < n; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
}

void tune(const std::string& name, Program& p, const std::vector<std::shared_ptr<LaunchCopies>>& in, const Options& o) {
  const double t0 = autotune_now_ms();
  AutotuneStats tally;
  const int index = p.device_index();
  cr::cuda::use_device(index);
  const SideStream side(index);
  const Target t = target_of(index);
  std::vector<std::unique_ptr<CudaCandidates>> cs;
  std::vector<std::string> keys;
  for (size_t k = 0; k < in.size(); ++k) {
    cs.push_back(std::make_unique<CudaCandidates>(p, k, *in[k], t, o, side));
    keys.push_back(cs[k]->size() > 1 ? choice_key(p.plan(), k, t, index) : "");
  }
  compile_all(cs);  // (a second process finds the modules in the kernel cache)
  for (size_t k = 0; k < cs.size(); ++k) tune_kernel(name, p.plan(), k, *cs[k], keys[k], o, t0, tally);
  finish_tuning(name, tally, t0, o);
}

}  // namespace

}  // namespace cr::jit::cuda

namespace cr::jit {

void autotune_cuda(const std::shared_ptr<graph::Graph>& g, const std::shared_ptr<const graph::Executable>& exe, const Options& o) {
  auto p = std::const_pointer_cast<cuda::Program>(std::dynamic_pointer_cast<const cuda::Program>(exe));
  if (!p) return;
  std::weak_ptr<graph::Graph> wg = g;
  std::weak_ptr<cuda::Program> wp = p;  // (the program holds this callback)
  p->capture_inputs([wg, wp, o](std::vector<std::shared_ptr<cuda::LaunchCopies>> in) {
    auto inputs = std::make_shared<const std::vector<std::shared_ptr<cuda::LaunchCopies>>>(std::move(in));
    submit_background({wg, std::make_shared<graph::NativeSlot>(), o.owner, /* deferrable */ true,
                       [wp, inputs, o](const std::shared_ptr<graph::Graph>& live) {
                         std::shared_ptr<cuda::Program> p = wp.lock();
                         if (!p) return;
                         try {
                           cuda::tune(live->name, *p, *inputs, o);
                         } catch (const std::exception& e) {  // (the default kernels keep running)
                           log_line("autotune", cat(live->name, ": tuning stopped: ", e.what()));
                         }
                       }});
  });
}

}  // namespace cr::jit
