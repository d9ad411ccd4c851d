// mode = "max-autotune" (jit/autotune.hpp): the choice loop both devices share (check, timing,
// confirmation, budget, the choice cache), and the CPU's candidates on copies of a run's buffers.
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
#include "jit/cpu/stream_probe.hpp"
#include "jit/cpu/stream_rule.hpp"
#include "jit/cpu/target.hpp"
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

std::string shown(const CpuConfig& c) {
  const std::string streams = c.stream_from == 0             ? ""
                              : c.stream_from >= cpu::kNeverStream ? " plain stores"
                                                                 : " streamed stores";
  return cat("block ", c.block, " threads ", c.threads == 0 ? std::string("auto") : std::to_string(c.threads), streams);
}

// The choice's key: the kernel's text, the function table, the compiler, the threads, this build
// and, for a template (which serves every size), the power of 2 of its elements now.
std::string choice_key(const Plan& plan, const cpu::FnTable& fns, size_t k, int threads) {
  std::string text = cat("autotune 2\n", plan.code(k).str(kBlock), "\nfns:");
  for (const std::string& n : fns.names) text += cat(n, ",");
  if (!plan.templates.empty()) text += cat("\nsize class ", size_class(plan.kernels[k]));
  return sha256_hex(cat(text, "\n", cpu::compiler_id(), " threads ", threads, " build ", build_id()));
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

bool same_outputs(const Plan& plan, const Kernel& kern, const KernelBytes& want, const KernelBytes& got) {
  const bool single = std::any_of(kern.body.exprs.begin(), kern.body.exprs.end(), [](const Expr& e) {
    return e.op == EOp::Load && (e.dtype == DType::f32 || e.dtype == DType::f16 || e.dtype == DType::bf16);
  });
  for (const Store& s : kern.stores) {
    const DType dt = plan.buffers[size_t(kern.buffers[size_t(s.buffer)])].dtype;
    if (!same_values(dt, !kern.accs.empty(), single, want[size_t(s.buffer)], got[size_t(s.buffer)])) return false;
  }
  return true;
}

void log(const Options& o, const std::string& text) {
  if (o.log_autotune) log_line("autotune", text);
}

// Runs, checks and times every candidate (the default first: its outputs are the reference)
// until the budget is spent; returns the fastest, *complete false when some were left.
size_t try_all(const Plan& plan, const Kernel& kern, Candidates& c, const Options& o, double t0, AutotuneStats& tally,
               std::string* line, bool* complete) {
  *complete = false;
  if (!c.ready(0)) return 0;
  KernelBytes reference;
  double best_ms = std::numeric_limits<double>::infinity();
  size_t best = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (i > 0 && autotune_now_ms() - t0 > o.autotune_budget_ms) {
      *line += " (the budget is spent)";
      return best;
    }
    if (!c.ready(i)) continue;
    KernelBytes got = c.outputs(i);
    if (i == 0) {
      reference = std::move(got);
    } else if (!same_outputs(plan, kern, reference, got)) {
      ++tally.rejected;
      *line += cat(" ", c.shown(i), ": rejected (outputs differ from the default's);");
      continue;
    }
    double ms = std::numeric_limits<double>::infinity();
    for (int r = 0; r < kRuns; ++r) ms = std::min(ms, c.time_ms(i));
    ++tally.candidates;
    *line += cat(" ", c.shown(i), ": ", fixed(ms * 1000), " us;");
    if (ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  *complete = true;
  return best;
}

// The fastest must beat the default again in alternating runs.
bool confirmed(Candidates& c, size_t best) {
  double ms[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  for (int r = 0; r < kConfirmRuns; ++r)
    for (int i = 0; i < 2; ++i) ms[i] = std::min(ms[i], c.time_ms(i ? best : 0));
  return ms[1] < kMargin * ms[0];
}

// The candidate a choice file names (its first line is the candidate's shown()), or -1.
int64_t read_choice(const std::string& file, const Candidates& c) {
  std::string text = read_file(file);
  if (text.empty()) return -1;
  text = text.substr(0, text.find('\n'));
  for (size_t i = 0; i < c.size(); ++i)
    if (c.shown(i) == text) return int64_t(i);
  return -1;
}

// The plan of a CPU program compiled with each block tried (the kernel cache's, or compiled now).
class CpuTuning {
 public:
  CpuTuning(std::shared_ptr<cpu::Program> p, const Options& o) : p(std::move(p)), o(o) {}
  // null (logged) when they do not compile
  const std::shared_ptr<cpu::SharedObject>& kernels(const CpuConfig& c) {
    const std::pair<int64_t, int64_t> shape{c.block, c.stream_from};
    auto it = sos_.find(shape);
    if (it != sos_.end()) return it->second;
    std::shared_ptr<cpu::SharedObject>& so = sos_[shape];
    try {
      so = cpu_kernels(p->plan(), p->fns(), cpu::CodeShape{c.block, c.stream_from}, o);
    } catch (const std::exception& e) {
      const std::string config = shown(CpuConfig{c.block, 0, c.stream_from});
      log(o, cat("the kernels with ", config, " did not compile (", e.what(), ")"));
    }
    return so;
  }
  const std::shared_ptr<cpu::Program> p;
  const Options o;

 private:
  std::map<std::pair<int64_t, int64_t>, std::shared_ptr<cpu::SharedObject>> sos_;  // by block, stream_from
};

// Kernel k of a CPU program: its block sizes x thread splits, run on copies of its buffers.
class CpuCandidates : public Candidates {
 public:
  CpuCandidates(CpuTuning& t, size_t k, const cpu::KernelInputs& in)
      : t_(t), k_(k), kern_(t.p->plan().kernels[k]), configs_(cpu_candidates(*t.p, k, t.o.threads)), pristine_(in), bytes_(in) {
    for (std::vector<char>& b : bytes_) ptrs_.push_back(b.data());
  }
  size_t size() const override { return in_range() ? configs_.size() : 0; }
  std::string shown(size_t i) const override { return ::cr::jit::shown(configs_[i]); }
  bool ready(size_t i) override { return t_.kernels(configs_[i]) != nullptr; }
  KernelBytes outputs(size_t i) override {
    for (size_t b = 0; b < bytes_.size(); ++b) std::memcpy(bytes_[b].data(), pristine_[b].data(), bytes_[b].size());
    run(i);
    return bytes_;
  }
  double time_ms(size_t i) override {
    const double t = autotune_now_ms();
    run(i);
    return autotune_now_ms() - t;
  }
  bool install(size_t i) override {
    const std::shared_ptr<cpu::SharedObject>& so = t_.kernels(configs_[i]);
    if (!so) return false;
    t_.p->install(k_, so, cpu::kernel_fn(*so, kern_), configs_[i].threads);
    return true;
  }

 private:
  bool in_range() const { return pristine_.size() == kern_.buffers.size(); }
  void run(size_t i) {
    const Plan& plan = t_.p->plan();
    const int64_t* P = plan.params.empty() ? nullptr : plan.params[k_].data();
    const cpu::KernelFn fn = cpu::kernel_fn(*t_.kernels(configs_[i]), kern_);
    cpu::run_kernel(kern_, fn, const_cast<void**>(t_.p->fns().ptrs.data()), P, ptrs_.data(), configs_[i].threads);
  }
  CpuTuning& t_;
  const size_t k_;
  const Kernel& kern_;
  const std::vector<CpuConfig> configs_;
  const cpu::KernelInputs& pristine_;
  cpu::KernelInputs bytes_;
  std::vector<void*> ptrs_;
};

}  // namespace

int size_class(const Kernel& k) {
  uint64_t n = 1;
  for (int64_t s : k.sizes) n *= uint64_t(s);
  return std::bit_width(n);
}

std::vector<CpuConfig> cpu_candidates(const cpu::Program& p, size_t k, int threads) {
  const Kernel& kern = p.plan().kernels[k];
  std::vector<int> splits{0};
  // the heuristic runs one thread or all: the other is the candidate
  if (threads > 1) splits.push_back(kern.work_items() <= cpu::default_grain(kern) ? threads : 1);
  std::vector<CpuConfig> out;
  for (int64_t b : kBlocks)
    for (int s : splits) out.push_back(CpuConfig{b, s});
  // a kernel with stores that may stream: the other choice too (the default block's)
  if (cpu::any_streamed(kern, 1)) {
    const int64_t other = cpu::any_streamed(kern, cpu::stream_store_bytes()) ? cpu::kNeverStream : 1;
    for (int s : splits) out.push_back(CpuConfig{kBlock, s, other});
  }
  return out;
}

void autotune_cpu(const std::shared_ptr<graph::Graph>& g, const std::shared_ptr<cpu::Program>& p, const Options& o) {
  std::weak_ptr<graph::Graph> wg = g;
  std::weak_ptr<cpu::Program> wp = p;  // (the program holds this callback)
  p->capture_inputs([wg, wp, o](std::vector<cpu::KernelInputs> in) {
    auto inputs = std::make_shared<const std::vector<cpu::KernelInputs>>(std::move(in));
    // a slot of its own: a queue that drops the job marks that slot, not the graph's
    submit_background({wg, std::make_shared<graph::NativeSlot>(), o.owner, /* deferrable */ true,
                       [wp, inputs, o](const std::shared_ptr<graph::Graph>& live) {
                         std::shared_ptr<cpu::Program> p = wp.lock();
                         if (!p) return;
                         const double t0 = autotune_now_ms();
                         AutotuneStats tally;
                         CpuTuning t(p, o);
                         for (size_t k = 0; k < inputs->size(); ++k) {
                           CpuCandidates c(t, k, (*inputs)[k]);
                           tune_kernel(live->name, p->plan(), k, c, choice_key(p->plan(), p->fns(), k, o.threads), o, t0, tally);
                         }
                         finish_tuning(live->name, tally, t0, o);
                       }});
  });
}

void tune_kernel(const std::string& name, const Plan& plan, size_t k, Candidates& c, const std::string& key, const Options& o,
                 double t0, AutotuneStats& tally) {
  if (c.size() < 2) return;  // (nothing to choose: a template's, or a launch not copied)
  const Kernel& kern = plan.kernels[k];
  const bool disk = !o.cache_dir.empty() && o.cache_dir != "0";
  const std::string file = disk ? cat(o.cache_dir, "/", key, ".tune") : "";
  if (const int64_t i = disk ? read_choice(file, c) : -1; i >= 0) {
    if (i > 0 && (!c.ready(size_t(i)) || !c.install(size_t(i)))) return;
    ++tally.cached;
    log(o, cat(name, " ", kern.name, ": ", c.shown(size_t(i)), " (from the cache)"));
    return;
  }
  std::string line;
  bool complete = false;
  size_t best = try_all(plan, kern, c, o, t0, tally, &line, &complete);
  ++tally.kernels;
  if (best > 0 && !confirmed(c, best)) {
    line += cat(" ", c.shown(best), " not confirmed against the default;");
    best = 0;
  }
  if (best > 0 && !c.install(best)) return;
  log(o, cat(name, " ", kern.name, ":", line, " winner ", c.shown(best)));
  if (disk && complete) publish_file(file, c.shown(best) + "\n");  // (read_choice)
}

void finish_tuning(const std::string& name, AutotuneStats tally, double t0, const Options& o) {
  tally.ms = autotune_now_ms() - t0;
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    ++totals.graphs;
    totals.kernels += tally.kernels;
    totals.candidates += tally.candidates;
    totals.cached += tally.cached;
    totals.rejected += tally.rejected;
    totals.ms += tally.ms;
  }
  log(o, cat(name, ": ", tally.kernels, " kernels tuned (", tally.candidates, " candidates timed, ", tally.rejected,
             " rejected), ", tally.cached, " from the cache, in ", fixed(tally.ms), " ms"));
}

double autotune_now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void autotune_program(const std::shared_ptr<graph::Graph>& g, const std::shared_ptr<const graph::Executable>& exe, const Options& o) {
  if (!o.device.is_cpu()) return autotune_cuda(g, exe, o);
  autotune_cpu(g, std::const_pointer_cast<cpu::Program>(std::static_pointer_cast<const cpu::Program>(exe)), o);
}

AutotuneStats autotune_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  return totals;
}

}  // namespace cr::jit
