// mode = "max-autotune" on the CPU (jit/autotune.hpp): candidates, their check and timing on
// copies of a run's buffers, the choice cache.
#include "jit/autotune.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "jit/background.hpp"
#include "jit/cache_entry.hpp"
#include "jit/kernel_cache.hpp"
#include "vm/fixed.hpp"
#include "vm/log.hpp"

namespace cr::jit {

namespace {

constexpr int64_t kBlocks[] = {kBlock, 256, 1024, 2048};  // the default first
constexpr int kRuns = 3;                                  // timed runs of a candidate: the best counts
// A loaded machine makes single timings noisy: the fastest candidate must beat the default again
// in kConfirmRuns alternating runs, by kMargin, or the default stays.
constexpr int kConfirmRuns = 5;
constexpr double kMargin = 0.95;

std::mutex stats_mutex;
AutotuneStats totals;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string shown(const CpuConfig& c) {
  return cat("block ", c.block, " threads ", c.threads == 0 ? std::string("auto") : std::to_string(c.threads));
}

// The choice's key: the kernel's text, the function table, the compiler, the threads, this build
// and, for a template (which serves every size), the power of 2 of its elements now.
std::string choice_key(const Plan& plan, const cpu::FnTable& fns, size_t k, int threads) {
  std::string text = cat("autotune 1\n", plan.code(k).str(kBlock), "\nfns:");
  for (const std::string& n : fns.names) text += cat(n, ",");
  if (!plan.templates.empty()) {
    uint64_t n = 1;
    for (int64_t s : plan.kernels[k].sizes) n *= uint64_t(s);
    text += cat("\nsize class ", std::bit_width(n));
  }
  return sha256_hex(cat(text, "\n", cpu::compiler_id(), " threads ", threads, " build ", build_id()));
}

bool read_choice(const std::string& file, CpuConfig* c) {
  const std::string text = read_file(file);
  long long block = 0;
  int threads = -1;
  if (std::sscanf(text.c_str(), "block %lld threads %d", &block, &threads) != 2) return false;
  for (int64_t b : kBlocks)
    if (b == block && threads >= 0) {
      *c = CpuConfig{b, threads};
      return true;
    }
  return false;
}

// Reduced values may round differently with another blocking; everything else is bit for bit.
// A sum that cancels keeps the rounding of its terms: the bound is relative to the buffer's
// largest value too (`scale` of it).
template <class T>
double value_at(const std::vector<char>& a, size_t i) {
  T x;
  std::memcpy(&x, &a[i], sizeof x);
  return double(load(x));
}
template <class T>
bool close(const std::vector<char>& a, const std::vector<char>& b, double rel, double scale) {
  double top = 0;
  for (size_t i = 0; i + sizeof(T) <= a.size(); i += sizeof(T))
    if (std::isfinite(value_at<T>(a, i))) top = std::max(top, std::fabs(value_at<T>(a, i)));
  for (size_t i = 0; i + sizeof(T) <= a.size(); i += sizeof(T)) {
    const double u = value_at<T>(a, i), v = value_at<T>(b, i);
    if ((std::isnan(u) && std::isnan(v)) || u == v) continue;
    if (!(std::fabs(u - v) <= rel * std::max(std::fabs(u), std::fabs(v)) + scale * top)) return false;
  }
  return true;
}
// `single`: the values were computed from float32 (or narrower) inputs, as float64 sums of
// float32 blocks are: they round as float32 does.
bool same_values(DType dt, bool reduced, bool single, const std::vector<char>& a, const std::vector<char>& b) {
  if (a.size() != b.size()) return false;
  if (!reduced || std::memcmp(a.data(), b.data(), a.size()) == 0) return std::memcmp(a.data(), b.data(), a.size()) == 0;
  switch (dt) {
    case DType::f32: return close<float>(a, b, 1e-4, 1e-5);
    case DType::f64: return single ? close<double>(a, b, 1e-4, 1e-5) : close<double>(a, b, 1e-10, 1e-13);
    case DType::f16: return close<Half>(a, b, 1e-2, 1e-3);
    case DType::bf16: return close<BFloat16>(a, b, 2e-2, 1e-2);
    default: return false;
  }
}

// A kernel's copied buffers, restored from the run's copies before each checked run.
struct Work {
  const cpu::KernelInputs& pristine;
  cpu::KernelInputs bytes;
  std::vector<void*> ptrs;
  explicit Work(const cpu::KernelInputs& in) : pristine(in), bytes(in) {
    for (std::vector<char>& b : bytes) ptrs.push_back(b.data());
  }
  void restore() {
    for (size_t i = 0; i < bytes.size(); ++i) std::memcpy(bytes[i].data(), pristine[i].data(), bytes[i].size());
  }
};

class Tuning {
 public:
  Tuning(std::string name, std::shared_ptr<cpu::Program> p, const Options& o)
      : name_(std::move(name)), p_(std::move(p)), plan_(p_->plan()), o_(o), t0_(now_ms()) {}

  void kernel(size_t k, const cpu::KernelInputs& in) {
    const Kernel& kern = plan_.kernels[k];
    const bool disk = !o_.cache_dir.empty() && o_.cache_dir != "0";
    const std::string file = disk ? cat(o_.cache_dir, "/", choice_key(plan_, p_->fns(), k, o_.threads), ".tune") : "";
    CpuConfig c;
    if (disk && read_choice(file, &c)) {
      if (!install(k, c)) return;
      ++tally_.cached;
      log(cat(name_, " ", kern.name, ": ", shown(c), " (from the cache)"));
      return;
    }
    if (in.size() != kern.buffers.size()) return;
    std::string line;
    const bool complete = try_all(k, in, &c, &line);
    ++tally_.kernels;
    if (!install(k, c)) return;
    log(cat(name_, " ", kern.name, ":", line, " winner ", shown(c)));
    if (disk && complete) publish_file(file, cat("block ", c.block, " threads ", c.threads, "\n"));  // (read_choice)
  }

  void finish() {
    tally_.ms = now_ms() - t0_;
    std::lock_guard<std::mutex> lock(stats_mutex);
    ++totals.graphs;
    totals.kernels += tally_.kernels;
    totals.candidates += tally_.candidates;
    totals.cached += tally_.cached;
    totals.rejected += tally_.rejected;
    totals.ms += tally_.ms;
    log(cat(name_, ": ", tally_.kernels, " kernels tuned (", tally_.candidates, " candidates timed, ", tally_.rejected,
            " rejected), ", tally_.cached, " from the cache, in ", fixed(tally_.ms), " ms"));
  }

 private:
  // Runs, checks and times every candidate of kernel k (the default first: its outputs are the
  // reference) until the budget is spent; *best gets the fastest. False when some were left.
  bool try_all(size_t k, const cpu::KernelInputs& in, CpuConfig* best, std::string* line) {
    const Kernel& kern = plan_.kernels[k];
    if (!kernels(kBlock)) return false;  // (the default's, loaded already: in memory)
    Work w(in);
    cpu::KernelInputs reference;
    double best_ms = std::numeric_limits<double>::infinity();
    for (const CpuConfig& c : cpu_candidates(*p_, k, o_.threads)) {
      if (!reference.empty() && now_ms() - t0_ > o_.autotune_budget_ms) {
        *line += " (the budget is spent)";
        return false;
      }
      const std::shared_ptr<cpu::SharedObject>& so = kernels(c.block);
      if (!so) continue;
      const cpu::KernelFn fn = cpu::kernel_fn(*so, kern);
      w.restore();
      run(k, fn, c.threads, w);
      if (reference.empty()) {
        reference = w.bytes;
      } else if (!same_outputs(kern, reference, w.bytes)) {
        ++tally_.rejected;
        *line += cat(" ", shown(c), ": rejected (outputs differ from the default's);");
        continue;
      }
      double ms = std::numeric_limits<double>::infinity();
      for (int r = 0; r < kRuns; ++r) ms = std::min(ms, timed(k, fn, c.threads, w));
      ++tally_.candidates;
      *line += cat(" ", shown(c), ": ", fixed(ms * 1000), " us;");
      if (ms < best_ms) {
        best_ms = ms;
        *best = c;
      }
    }
    if (!(*best == CpuConfig{}) && !confirmed(k, *best, w)) {
      *line += cat(" ", shown(*best), " not confirmed against the default;");
      *best = CpuConfig{};
    }
    return true;
  }

  bool confirmed(size_t k, const CpuConfig& c, Work& w) {
    const cpu::KernelFn fns[2] = {cpu::kernel_fn(*kernels(kBlock), plan_.kernels[k]), cpu::kernel_fn(*kernels(c.block), plan_.kernels[k])};
    double ms[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
    for (int r = 0; r < kConfirmRuns; ++r)
      for (int i = 0; i < 2; ++i) ms[i] = std::min(ms[i], timed(k, fns[i], i ? c.threads : 0, w));
    return ms[1] < kMargin * ms[0];
  }

  double timed(size_t k, cpu::KernelFn fn, int threads, Work& w) {
    const double t = now_ms();
    run(k, fn, threads, w);
    return now_ms() - t;
  }

  void run(size_t k, cpu::KernelFn fn, int threads, Work& w) {
    const int64_t* P = plan_.params.empty() ? nullptr : plan_.params[k].data();
    cpu::run_kernel(plan_.kernels[k], fn, const_cast<void**>(p_->fns().ptrs.data()), P, w.ptrs.data(), threads);
  }

  bool same_outputs(const Kernel& kern, const cpu::KernelInputs& want, const cpu::KernelInputs& got) const {
    const bool single = std::any_of(kern.body.exprs.begin(), kern.body.exprs.end(), [](const Expr& e) {
      return e.op == EOp::Load && (e.dtype == DType::f32 || e.dtype == DType::f16 || e.dtype == DType::bf16);
    });
    for (const Store& s : kern.stores) {
      const DType dt = plan_.buffers[size_t(kern.buffers[size_t(s.buffer)])].dtype;
      if (!same_values(dt, !kern.accs.empty(), single, want[size_t(s.buffer)], got[size_t(s.buffer)])) return false;
    }
    return true;
  }

  // The plan compiled with `block` (the kernel cache's, or compiled now); null when it fails.
  const std::shared_ptr<cpu::SharedObject>& kernels(int64_t block) {
    auto it = sos_.find(block);
    if (it != sos_.end()) return it->second;
    std::shared_ptr<cpu::SharedObject>& so = sos_[block];
    try {
      so = cpu_kernels(plan_, p_->fns(), block, o_);
    } catch (const std::exception& e) {
      log(cat(name_, ": the kernels with block ", block, " did not compile (", e.what(), ")"));
    }
    return so;
  }

  bool install(size_t k, const CpuConfig& c) {
    if (c == CpuConfig{}) return true;
    const std::shared_ptr<cpu::SharedObject>& so = kernels(c.block);
    if (!so) return false;
    p_->install(k, so, cpu::kernel_fn(*so, plan_.kernels[k]), c.threads);
    return true;
  }

  void log(const std::string& text) const {
    if (o_.log_autotune) log_line("autotune", text);
  }

  std::string name_;
  std::shared_ptr<cpu::Program> p_;
  const Plan& plan_;
  Options o_;
  double t0_;
  std::map<int64_t, std::shared_ptr<cpu::SharedObject>> sos_;  // by block
  AutotuneStats tally_;
};

}  // namespace

std::vector<CpuConfig> cpu_candidates(const cpu::Program& p, size_t k, int threads) {
  const Kernel& kern = p.plan().kernels[k];
  std::vector<int> splits{0};
  // the heuristic runs one thread or all: the other is the candidate
  if (threads > 1) splits.push_back(kern.work_items() <= cpu::default_grain(kern) ? threads : 1);
  std::vector<CpuConfig> out;
  for (int64_t b : kBlocks)
    for (int s : splits) out.push_back(CpuConfig{b, s});
  return out;
}

void autotune_cpu(const std::shared_ptr<graph::Graph>& g, const std::shared_ptr<cpu::Program>& p, const Options& o) {
  std::weak_ptr<graph::Graph> wg = g;
  std::weak_ptr<cpu::Program> wp = p;  // (the program holds this callback)
  p->capture_inputs([wg, wp, o](std::vector<cpu::KernelInputs> in) {
    auto inputs = std::make_shared<const std::vector<cpu::KernelInputs>>(std::move(in));
    // a slot of its own: a queue that drops the job marks that slot, not the graph's
    submit_background({wg, std::make_shared<graph::NativeSlot>(), o.owner, [wp, inputs, o](const std::shared_ptr<graph::Graph>& live) {
                         std::shared_ptr<cpu::Program> p = wp.lock();
                         if (!p) return;
                         Tuning t(live->name, p, o);
                         for (size_t k = 0; k < inputs->size(); ++k) t.kernel(k, (*inputs)[k]);
                         t.finish();
                       }});
  });
}

void autotune_cuda_untuned() {
  static std::once_flag once;
  std::call_once(once, [] {
    log_line("autotune", "CUDA graphs are not tuned yet: they run the heuristic's launch configurations");
  });
}

void autotune_program(const std::shared_ptr<graph::Graph>& g, const std::shared_ptr<const graph::Executable>& exe, const Options& o) {
  if (!o.device.is_cpu()) return autotune_cuda_untuned();
  autotune_cpu(g, std::const_pointer_cast<cpu::Program>(std::static_pointer_cast<const cpu::Program>(exe)), o);
}

AutotuneStats autotune_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  return totals;
}

}  // namespace cr::jit
