// Fused optimizer updates (stdlib/optim.lua): _fused_sgd and _fused_adam take the tensor lists of
// one parameter group and update every parameter and its state in place, in ONE threaded loop over
// all their elements (on a CUDA device: a launch per 48 parameters, vm/kernels/cuda/optim.cuh). Per element they follow PyTorch's single-tensor formulas
// (torch/optim/sgd.py, adam.py, adamw.py) in the same order of roundings, so float32 results equal
// torch 1.13's bit for bit; float16 / bfloat16 compute in float32. Built with -ffp-contract=off:
// fma appears exactly where ATen's vectorised add(alpha) and addcmul have one.
#include <algorithm>
#include <cmath>

#include "vm/kernels/cuda/optim.hpp"
#include "vm/ops/operands.hpp"
#include "vm/threads.hpp"

namespace cr {
namespace {

constexpr int kMaxState = 3;

// One parameter: its tensors as contiguous arrays, where it starts in the flat element range, and
// its own scalars (Adam's bias corrections depend on the parameter's step).
struct Slot {
  Tensor p, g, s[kMaxState];
  int64_t start = 0, n = 0;
  bool fresh = false;
  double step_size = 0, bc2_sqrt = 1;
};

struct Lists {
  Device device;
  std::vector<Slot> slots;
  std::vector<std::pair<Tensor, Tensor>> write_back;  // (tensor, its contiguous working copy)
  int64_t total = 0;
};

// A tensor the update reads (grads) or writes (params, state), as a contiguous array.
Tensor readable(const Tensor& t) { return t.is_contiguous() ? t : contiguous(t); }
Tensor working(Lists& l, const Tensor& t) {
  for (int d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1)
      fail(cat("cannot update an expanded tensor in place (", t.describe(), ", dim ", d + 1, " has stride 0)"));
  if (t.is_contiguous()) return t;
  Tensor w = contiguous(t);
  l.write_back.emplace_back(t, w);
  return w;
}

// Checks the lists of a call (params at 0, grads at 1, states at state_args: each empty when
// unused, else one per parameter, like the parameter) and lays them out.
Lists gather(const OpCall& c, std::initializer_list<int> state_args) {
  const std::vector<Tensor> params = c.tensors(0), grads = c.tensors(1);
  if (grads.size() != params.size())
    fail(cat("expected one gradient per parameter, got ", params.size(), " params and ", grads.size(), " grads"));
  std::vector<std::vector<Tensor>> states;
  for (int a : state_args) {
    states.push_back(c.tensors(a));
    if (!states.back().empty() && states.back().size() != params.size())
      fail(cat("argument ", a + 1, " (", c.arg_name(a), ") expected ", params.size(), " tensors (one per parameter) or none, got ",
               states.back().size()));
  }
  Lists l;
  if (!params.empty()) l.device = params[0].device();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (!is_floating(p.dtype())) fail(cat("param ", i + 1, " expected a floating tensor, got ", p.describe()));
    if (!(p.device() == params[0].device()))
      fail(cat("param ", i + 1, " expected param 1's device ", device_name(params[0].device()), ", got ",
               device_name(p.device()), " (one call updates the parameters of one device)"));
    auto same = [&](const Tensor& t, const char* what) {
      if (t.sizes() != p.sizes() || t.dtype() != p.dtype() || !(t.device() == p.device()))
        fail(cat(what, " ", i + 1, " expected the parameter's ", p.describe(), " on ", device_name(p.device()), ", got ",
                 t.describe(), " on ", device_name(t.device())));
    };
    same(grads[i], "grad");
    Slot s;
    s.p = working(l, p);
    s.g = readable(grads[i]);
    for (size_t k = 0; k < states.size(); ++k) {
      if (states[k].empty()) continue;
      same(states[k][i], c.arg_name(std::data(state_args)[k]));
      s.s[k] = working(l, states[k][i]);
    }
    s.start = l.total;
    s.n = p.numel();
    l.total += s.n;
    l.slots.push_back(std::move(s));
  }
  return l;
}

// Runs f(slot, begin, end) over every slot's part of [0, total) in one parallel loop.
template <class F> void for_all(Lists& l, F&& f) {
  const auto& slots = l.slots;
  parallel_for(l.total, kParallelGrain, [&](int64_t b, int64_t e) {
    auto it = std::upper_bound(slots.begin(), slots.end(), b, [](int64_t v, const Slot& s) { return v < s.start; });
    for (size_t k = size_t(it - slots.begin()) - 1; k < slots.size() && slots[k].start < e; ++k) {
      const Slot& s = slots[k];
      const int64_t i0 = std::max(b, s.start) - s.start, i1 = std::min(e, s.start + s.n) - s.start;
      if (i0 < i1) f(s, i0, i1);
    }
  });
  for (auto& [t, w] : l.write_back) copy_into(t, w);
}

// The CUDA side of for_all: the slots of each dtype in one fused_update (a launch per 48).
void on_device(Context& ctx, Lists& l, cuda::Update kind, const cuda::UpdateScalars& o) {
  for (int d = 0; d < kNumDTypes; ++d) {
    std::vector<cuda::UpdateSlot> mine;
    for (const Slot& s : l.slots) {
      if (int(s.p.dtype()) != d) continue;
      cuda::UpdateSlot u{s.p.data_bytes(), s.g.data_bytes(), {}, s.n, -s.step_size, s.bc2_sqrt};
      for (int k = 0; k < kMaxState; ++k) u.s[k] = s.s[k].defined() ? s.s[k].data_bytes() : nullptr;
      if (kind == cuda::Update::sgd) u.a = s.fresh;
      mine.push_back(u);
    }
    if (!mine.empty()) cuda::fused_update(ctx, kind, l.device.index, DType(d), mine, o);
  }
  for (auto& [t, w] : l.write_back) copy_into(t, w);
}

std::vector<int64_t> per_param(const OpCall& c, int i, size_t n) {
  std::vector<int64_t> v = c.ints(i);
  if (v.size() != n) fail(cat("argument ", i + 1, " (", c.arg_name(i), ") expected ", n, " integers (one per parameter), got ", v.size()));
  return v;
}

// ---- SGD: d = g (+ wd p); buf = d on the first step, else momentum buf + (1 - dampening) d;
// d = nesterov ? d + momentum buf : buf; p -= lr d
struct SgdOpts {
  double lr, momentum, dampening, wd;
  bool nesterov, maximize;
};

template <class E> void sgd_range(const Slot& s, int64_t i0, int64_t i1, const SgdOpts& o) {
  using C = compute_t<E>;
  E* p = s.p.data<E>();
  const E* g = s.g.data<E>();
  E* buf = o.momentum != 0 ? s.s[0].data<E>() : nullptr;
  const C wd = C(o.wd), mom = C(o.momentum), keep = C(1 - o.dampening), neg_lr = C(-o.lr);
  for (int64_t i = i0; i < i1; ++i) {
    C d = load(g[i]);
    if (o.maximize) d = -d;
    const C pv = load(p[i]);
    if (o.wd != 0) d = std::fma(pv, wd, d);
    if (buf) {
      const C b = s.fresh ? d : std::fma(d, keep, load(buf[i]) * mom);
      store(buf[i], b);
      d = o.nesterov ? std::fma(b, mom, d) : b;
    }
    store(p[i], std::fma(d, neg_lr, pv));
  }
}

void run_fused_sgd(OpCall& c) {
  const SgdOpts o{c.number(4), c.number_or(5, 0), c.number_or(6, 0), c.number_or(7, 0), c.boolean_or(8, false),
                  c.boolean_or(9, false)};
  Lists l = gather(c, {2});
  const std::vector<int64_t> fresh = per_param(c, 3, l.slots.size());
  for (size_t i = 0; i < l.slots.size(); ++i) {
    l.slots[i].fresh = fresh[i] != 0;
    if (o.momentum != 0 && !l.slots[i].s[0].defined()) fail("momentum != 0 expects a momentum buffer per parameter");
  }
  if (!l.device.is_cpu())
    return on_device(c.ctx, l, cuda::Update::sgd,
                     {o.lr, o.wd, 0, o.momentum, 0, 1 - o.dampening, 0, 0, o.nesterov, o.maximize, o.momentum != 0});
  for_all(l, [&](const Slot& s, int64_t i0, int64_t i1) {
    visit_floating(s.p.dtype(), [&](auto e) { sgd_range<decltype(e)>(s, i0, i1, o); });
  });
}

// ---- Adam / AdamW: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g; (amsgrad: vmax = max(vmax, v));
// p += -lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps); weight decay added to g (Adam) or
// p *= 1 - lr wd first (AdamW, decoupled)
struct AdamOpts {
  double lr, beta1, beta2, eps, wd;
  bool amsgrad, maximize, decoupled;
};

template <class C> C nan_max(C a, C b) { return (a != a || a > b) ? a : b; }  // torch.maximum keeps NaN

template <class E> void adam_range(const Slot& s, int64_t i0, int64_t i1, const AdamOpts& o) {
  using C = compute_t<E>;
  E* p = s.p.data<E>();
  const E* g = s.g.data<E>();
  E *m = s.s[0].data<E>(), *v = s.s[1].data<E>(), *vmax = o.amsgrad ? s.s[2].data<E>() : nullptr;
  const C wd = C(o.wd), decay = C(1 - o.lr * o.wd), b1 = C(o.beta1), b2 = C(o.beta2);
  const C keep1 = C(1 - o.beta1), keep2 = C(1 - o.beta2), eps = C(o.eps);
  const C step = C(-s.step_size), bc2 = C(s.bc2_sqrt);
  for (int64_t i = i0; i < i1; ++i) {
    C gv = load(g[i]);
    if (o.maximize) gv = -gv;
    C pv = load(p[i]);
    if (o.decoupled) pv = pv * decay;
    else if (o.wd != 0) gv = std::fma(pv, wd, gv);
    const C mv = std::fma(gv, keep1, load(m[i]) * b1);
    C vv = std::fma(keep2 * gv, gv, load(v[i]) * b2);
    store(m[i], mv);
    store(v[i], vv);
    if (vmax) {
      vv = nan_max(load(vmax[i]), vv);
      store(vmax[i], vv);
    }
    const C denom = std::sqrt(vv) / bc2 + eps;
    store(p[i], pv + step * mv / denom);
  }
}

void run_fused_adam(OpCall& c) {
  const AdamOpts o{c.number(6), c.number_or(7, 0.9), c.number_or(8, 0.999), c.number_or(9, 1e-8), c.number_or(10, 0),
                   c.boolean_or(11, false), c.boolean_or(12, false), c.boolean_or(13, false)};
  Lists l = gather(c, {2, 3, 4});
  // (one step count for all: a number, which a compiled step passes as a run argument)
  const std::vector<int64_t> steps = c.has(14) && c.ints(5).empty()
                                         ? std::vector<int64_t>(l.slots.size(), int64_t(c.number(14)))
                                         : per_param(c, 5, l.slots.size());
  for (size_t i = 0; i < l.slots.size(); ++i) {
    Slot& s = l.slots[i];
    if (!s.s[0].defined() || !s.s[1].defined() || (o.amsgrad && !s.s[2].defined()))
      fail("expected exp_avgs and exp_avg_sqs (and max_exp_avg_sqs with amsgrad) for every parameter");
    if (steps[i] < 1) fail(cat("steps expected counts >= 1, got ", steps[i]));
    const double t = double(steps[i]);
    s.step_size = o.lr / (1 - std::pow(o.beta1, t));
    s.bc2_sqrt = std::sqrt(1 - std::pow(o.beta2, t));
  }
  if (!l.device.is_cpu())
    return on_device(c.ctx, l, cuda::Update::adam,
                     {o.lr, o.wd, 1 - o.lr * o.wd, o.beta1, o.beta2, 1 - o.beta1, 1 - o.beta2, o.eps, o.amsgrad,
                      o.maximize, o.decoupled});
  for_all(l, [&](const Slot& s, int64_t i0, int64_t i1) {
    visit_floating(s.p.dtype(), [&](auto e) { adam_range<decltype(e)>(s, i0, i1, o); });
  });
}

OpDef writing(OpDef def, uint32_t writes) {
  def.writes = writes;
  def.grad.not_differentiable = true;
  return def;
}

}  // namespace

void register_optim(Registry& r) {
  const int32_t f = kNoMethod | kListOut | kDeviceAware | kExtern | kRunNumbers;
  r.add(writing(OpDef{"_fused_sgd",
                      "params:TL, grads:TL, momentum_buffers:TL, fresh:Is, "
                      "opts:{lr:N, momentum:N, dampening:N, weight_decay:N, nesterov:B, maximize:B}",
                      OpKind::Other, f, nullptr, run_fused_sgd},
                0b101));
  r.add(writing(OpDef{"_fused_adam",
                      "params:TL, grads:TL, exp_avgs:TL, exp_avg_sqs:TL, max_exp_avg_sqs:TL, steps:Is, "
                      "opts:{lr:N, beta1:N, beta2:N, eps:N, weight_decay:N, amsgrad:B, maximize:B, decoupled:B, "
                      "step:N?}",
                      OpKind::Other, f, nullptr, run_fused_adam},
                0b11101));
}

}  // namespace cr
