// Keys: how an op call becomes a trace-tree key (layout in vm/guards/trace.hpp). A tensor the
// segment has seen is its value id; a new one becomes a graph input and its guards - dtype,
// device, sizes, strides, offset, aliasing with earlier inputs - go into the key, so matching a
// key is checking the guards.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "vm/autograd/grad_mode.hpp"
#include "vm/autograd/meta.hpp"
#include "vm/graph/segment.hpp"
#include "vm/ops/operands.hpp"

namespace cr::graph {

namespace {

uint64_t bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

// The dims of new input t (value `vid`) whose sizes are symbolic: none when the function always
// specialises (dynamic = false), all with dynamic = true; else those T.mark_dynamic marked and
// those the site made symbolic after they changed.
uint32_t symbolic_dims(const Segment& s, const cr_tensor* t, int32_t vid) {
  if (s.mode == 0 || t->_ndim == 0) return 0;
  const uint32_t all = t->_ndim >= 32 ? ~uint32_t(0) : (uint32_t(1) << t->_ndim) - 1;
  if (s.mode == 1) return all;
  uint32_t m = t->_dynamic;
  if (auto it = s.site->dynamic_dims.find(vid); it != s.site->dynamic_dims.end()) m |= it->second;
  return m & all;
}

// A tensor argument: its vid if the segment knows it, else it becomes an input and the key
// carries its guards.
void encode_tensor(Context& ctx, Segment& s, cr_tensor* t) {
  if (t->_gen == s.gen) {
    s.key.push_back(uint64_t(t->_vid));
    return;
  }
  if (!t->_storage || t->_lazy) ensure_real(ctx, t);  // a value of an earlier segment
  int32_t vid = s.next_vid++;
  t->_gen = s.gen;
  t->_vid = vid;
  s.set(vid, Tensor(t, true));
  s.is_input[size_t(vid)] = 1;
  int32_t alias = -1;
  for (int32_t v = 0; v < vid && alias < 0; ++v)
    if (s.is_input[size_t(v)] && s.vals[size_t(v)].storage() == t->_storage) alias = v;
  s.alias[size_t(vid)] = alias;
  guards::Key& k = s.key;
  k.push_back(guards::kNewTensor | uint64_t(vid));
  // (inputs also guard requires_grad under grad mode: a training segment differentiates by it,
  // and an inference one records a call on a tensor requiring grad eagerly, with eager autograd)
  const bool grad = autograd::grad_enabled && autograd::requires_grad(t);
  k.push_back(uint64_t(uint8_t(t->_dtype)) | uint64_t(uint8_t(t->_dev_type)) << 8 |
              uint64_t(uint8_t(t->_dev_index)) << 16 | uint64_t(t->_ndim) << 24 | uint64_t(grad) << 48);
  k.push_back(uint64_t(t->_offset));
  // symbolic sizes match any size; a contiguous layout then matches any contiguous layout, and
  // once the strides changed with them (a view of a longer row), any layout without overlap
  const uint32_t sym = symbolic_dims(s, t, vid);
  bool any = false, contiguous = false;
  if (sym) {
    const Tensor view(t, true);
    any = s.site->dynamic_strides.count(vid) && !maybe_overlapping(view.sizes(), view.strides());
    contiguous = view.is_contiguous();
  }
  s.spans.push_back(Segment::Span{vid, k.size(), t->_ndim});
  for (int i = 0; i < t->_ndim; ++i) k.push_back(sym >> i & 1 ? guards::kSymbolicSize : uint64_t(t->_sizes[i]));
  for (int i = 0; i < t->_ndim; ++i)
    k.push_back(any ? guards::kSymbolicSize : contiguous ? guards::kContiguousStride : uint64_t(t->_strides[i]));
  k.push_back(uint64_t(alias + 1));
  s.symbolic[size_t(vid)] = sym;
  s.dynamic = s.dynamic || sym != 0;
  for (const Segment::DataSized& d : s.data_sized)  // (dim 0: the count of every data-dependent op's results)
    if (d.t == t && d.storage == t->_storage && (sym & 1)) s.unbacked[size_t(vid)] = d.k + 1;
}

// Ops whose integral numbers may come from sizes (narrow lengths, split sizes, arange's end): with
// symbolic sizes, their keys leave those out.
bool takes_shape_numbers(const OpDef& def) {
  return def.kind == OpKind::View || def.kind == OpKind::Join || def.kind == OpKind::Creation;
}

// Numbers that may vary between calls without a new trace: the operands of pointwise ops (x * s,
// where(m, x, 0.5), clamp's bounds) and the number after them that scales the second (add's
// alpha, addcmul's value), which decide nothing but values - not shapes, not dtypes beyond their
// class, not code (the lowering reads them from the run, jit/lower.cpp operand), and every number
// of a kRunNumbers extern. Not those whose integer forms check values (fmod, remainder) or whose
// value picks code (pow).
int operand_count(const OpDef& def) { return def.kind == OpKind::Binary ? 2 : def.kind == OpKind::Ternary ? 3 : 0; }

bool may_vary(const OpDef& def, int i) {
  if (def.flags & kRunNumbers) return true;
  return i <= operand_count(def) && operand_count(def) > 0 && !(def.flags & (kValueErrors | kCodeNumbers));
}

uint64_t varying_slot(const Segment& s, int arg) { return uint64_t(s.ops) << 8 | uint64_t(arg); }

// Whether argument i of a shape op leaves the key: the segment's sizes are symbolic, or the site
// learnt that this integer changes (it makes the segment dynamic: its graph then takes the call's
// integers per instance, as the sizes' own).
bool symbolic_integer(Segment& s, int i) {
  if (s.mode == 0) return false;
  if (!s.dynamic && s.mode == -1 && !s.site->size_numbers.count(varying_slot(s, i))) return false;
  s.dynamic = true;
  return true;
}

// A training segment's call under grad mode: its numbers are baked into the traced backward
// graph, so they never vary (under T.no_grad - an optimizer update - they may: an lr schedule).
bool differentiated(const Segment& s) { return s.train && autograd::grad_enabled; }

// Whether number argument i varies: from the start with dynamic = true, and a kRunNumbers
// extern's (an optimizer's step count changes every call); after it changed once with automatic
// dynamic (the site remembers it, keys.cpp learn_dynamic); never with false.
bool varies(const Segment& s, const OpDef& def, int i) {
  if (!may_vary(def, i) || s.mode == 0 || differentiated(s)) return false;
  return s.mode == 1 || (def.flags & kRunNumbers) || s.site->varying_numbers.count(varying_slot(s, i));
}

// Whether a varying number's class (integral or not) leaves the op's result type alone: when
// another operand of the result type is floating - a tensor, or a fractional number that does not
// vary - a number of either class does not promote it (x * 2 and x * 2.5 are both float for a
// float x; an int tensor's are not). where's condition is not such an operand.
bool class_free(const Segment& s, const OpDef& def, const cr_value* args, int nargs, int i) {
  for (int j = (def.flags & kConditionArg) ? 1 : 0; j < operand_count(def) && j < nargs; ++j) {
    if (j == i) continue;
    if (args[j].tag == kTensor && is_floating(DType(static_cast<const cr_tensor*>(args[j].ptr)->_dtype))) return true;
    if (args[j].tag == kNumber && !varies(s, def, j) && !scalar_is_integral(args[j].num)) return true;
  }
  return false;
}

// The dtypes of check_scalar_fits whose range holds v, as a mask: a number out of its op's range
// changes the key, and recording the call raises as eager does (the kernels take numbers unchecked).
int fit_mask(double v) {
  int mask = 0, bit = 0;
  for (DType d : {DType::i32, DType::i64, DType::f16, DType::f32, DType::bf16}) mask |= int(scalar_fits(v, d)) << bit++;
  static_assert(guards::kFitMasks == 1 << 5);
  return mask;
}

// Number argument i: its bits, or once it varies "any number" - of its class where the result
// type depends on it; a varying one joins the call's numbers.
void encode_number(Segment& s, const OpDef& def, const cr_value* args, int nargs, int i) {
  const cr_value& a = args[i];
  if (may_vary(def, i)) s.number_spans.push_back(Segment::NumberSpan{s.key.size(), i});
  if (!varies(s, def, i)) {
    s.key.push_back(bits(a.num));
    return;
  }
  s.arg_number[size_t(i)] = int32_t(s.numbers.size());
  s.numbers.push_back(a.num);
  using guards::Varying;
  const Varying kind = class_free(s, def, args, nargs, i) ? Varying::Number
                       : scalar_is_integral(a.num)        ? Varying::Integer
                                                          : Varying::Fraction;
  s.key.push_back(guards::varying_word(kind, fit_mask(a.num)));
}

}  // namespace

void vary_numbers(Graph& g, std::vector<double>& numbers) {
  for (Node& n : g.nodes) {
    if (n.kind != NodeKind::Op || n.outs.empty() || !is_floating(g.values[size_t(n.outs[0])].meta.dtype)) continue;
    for (size_t i = 0; i < n.args.size(); ++i) {
      Arg& a = n.args[i];
      if (a.tag != kNumber || a.varying >= 0 || !may_vary(n.def(), int(i))) continue;
      a.varying = int32_t(numbers.size());
      numbers.push_back(a.num);
    }
  }
}

bool has_wildcard_args(const OpDef& def, const cr_value* args, int nargs) {
  for (int i = 0; i < nargs; ++i)
    if (args[i].tag == kInts || (args[i].tag == kNumber && takes_shape_numbers(def))) return true;
  return false;
}

void encode(Context& ctx, Segment& s, int op, const cr_value* args, int nargs) {
  guards::Key& k = s.key;
  k.clear();
  s.spans.clear();
  s.number_spans.clear();
  s.size_spans.clear();
  s.numbers_before = s.numbers.size();
  s.arg_number.assign(size_t(nargs), -1);
  const OpDef& def = Registry::get().ops()[size_t(op)];
  const bool shape_args = takes_shape_numbers(def);
  k.push_back(uint64_t(op));
  // a training segment's calls guard grad mode (an op under T.no_grad is not differentiated)
  k.push_back(uint64_t(nargs) | uint64_t(s.train && autograd::grad_enabled) << 32);
  for (int i = 0; i < nargs; ++i) {
    const cr_value& a = args[i];
    k.push_back(uint64_t(a.tag));
    switch (a.tag) {
      case kTensor: encode_tensor(ctx, s, static_cast<cr_tensor*>(a.ptr)); break;
      case kTensors: {
        k.push_back(uint64_t(a.n));
        for (int j = 0; j < a.n; ++j) encode_tensor(ctx, s, static_cast<cr_tensor* const*>(a.ptr)[j]);
        break;
      }
      case kNumber:
        // with symbolic sizes, the integers of views, joins and creation ops (narrow lengths,
        // split sizes, arange's end) may come from sizes: any value matches (the shape rules and
        // the graph's instance take this call's values); one that changed once makes it so
        if (!shape_args || a.num != double(int64_t(a.num))) {
          encode_number(s, def, args, nargs, i);
        } else if (symbolic_integer(s, i)) {
          k.push_back(guards::kSymbolicSize);
        } else {
          s.size_spans.push_back(Segment::SizeSpan{k.size(), 1, i});
          encode_number(s, def, args, nargs, i);
        }
        break;
      case kBool: k.push_back(bits(a.num)); break;
      case kInts: {  // sizes, dims, permutations: with symbolic sizes, any values match (as above)
        k.push_back(uint64_t(a.n));
        const int64_t* p = static_cast<const int64_t*>(a.ptr);
        const bool sym = s.dynamic || (def.kind == OpKind::Creation && symbolic_integer(s, i));
        if (!sym && def.kind == OpKind::Creation) s.size_spans.push_back(Segment::SizeSpan{k.size(), size_t(a.n), i});
        for (int j = 0; j < a.n; ++j) k.push_back(sym ? guards::kSymbolicSize : uint64_t(p[j]));
        break;
      }
      case kDoubles: {
        k.push_back(uint64_t(a.n));
        k.push_back(bits(a.num));
        const double* p = static_cast<const double*>(a.ptr);
        for (int j = 0; j < a.n; ++j) k.push_back(bits(p[j]));
        break;
      }
      case kString: {
        size_t n = std::strlen(a.str);
        k.push_back(n);
        for (size_t j = 0; j < n; j += 8) {
          uint64_t w = 0;
          std::memcpy(&w, a.str + j, std::min<size_t>(8, n - j));
          k.push_back(w);
        }
        break;
      }
      default: break;
    }
  }
}

namespace {

// What differs between `was` and `now` (same op, same layout of the key) when it is only sizes
// of new tensors (their strides may differ with them) and numbers that may vary: the dims by vid
// and the number arguments; false when something else differs too.
struct Changes {
  std::map<int32_t, uint32_t> dims;
  std::set<int32_t> strides;  // inputs whose strides changed
  std::vector<int> numbers;
  std::vector<int> sizes;  // arguments of a shape op whose integers changed (Segment::size_spans)
  std::string what;
  void note(const std::string& w) { what += cat(what.empty() ? "" : ", ", w); }
};

}  // namespace

int input_ordinal(const Segment& s, int32_t vid) {
  int n = 0;
  for (int32_t v = 0; v <= vid && size_t(v) < s.is_input.size(); ++v) n += s.is_input[size_t(v)] ? 1 : 0;
  return n;
}

namespace {

// Whether a tensor's strides changed without changing its layout's kind: both given (neither
// matched as contiguous) and the dims in the same order of stride, as a view of a longer row.
bool same_order(const guards::Key& was, const guards::Key& now, const Segment::Span& sp) {
  const size_t at = sp.at + size_t(sp.ndim);
  std::vector<int> a(size_t(sp.ndim)), b(size_t(sp.ndim));
  for (int d = 0; d < sp.ndim; ++d) {
    const uint64_t w = was[at + size_t(d)], n = now[at + size_t(d)];
    if (w >= guards::kContiguousStride || n >= guards::kContiguousStride) return false;
    a[size_t(d)] = b[size_t(d)] = d;
  }
  auto by = [&](const guards::Key& k) {
    return [&, k = &k](int x, int y) {
      return std::pair{(*k)[at + size_t(x)], x} > std::pair{(*k)[at + size_t(y)], y};
    };
  };
  std::sort(a.begin(), a.end(), by(was));
  std::sort(b.begin(), b.end(), by(now));
  return a == b;
}

bool changes_between(const guards::Key& was, const guards::Key& now, const Segment& s, Changes& c) {
  if (was.size() != now.size()) return false;
  // >= 0: the span of a size (even) or stride (odd); <= -2: number span -2 - role
  std::vector<int32_t> role(now.size(), -1);
  for (size_t j = 0; j < s.spans.size(); ++j)
    for (int d = 0; d < s.spans[j].ndim; ++d) {
      role[s.spans[j].at + size_t(d)] = int32_t(2 * j);
      role[s.spans[j].at + size_t(s.spans[j].ndim + d)] = int32_t(2 * j + 1);
    }
  for (size_t j = 0; j < s.number_spans.size(); ++j) role[s.number_spans[j].at] = -2 - int32_t(j);
  std::vector<int> size_arg(now.size(), -1);
  for (const Segment::SizeSpan& sp : s.size_spans)
    for (size_t j = 0; j < sp.n; ++j) size_arg[sp.at + j] = sp.arg;
  auto shown = [](uint64_t w, bool number) {
    if (w == guards::kSymbolicSize) return std::string("symbolic");
    if (number && guards::is_varying_word(w))
      return std::string("varying");
    if (!number) return std::to_string(w);
    double d;
    std::memcpy(&d, &w, 8);
    return cat(d);
  };
  for (size_t i = 0; i < now.size(); ++i) {
    if (was[i] == now[i]) continue;
    if (size_arg[i] >= 0) {
      if (c.sizes.empty() || c.sizes.back() != size_arg[i]) {
        c.sizes.push_back(size_arg[i]);
        c.note(cat("argument ", size_arg[i] + 1, " (an integer of a shape)"));
      }
      continue;
    }
    if (role[i] == -1) return false;
    if (role[i] <= -2) {
      const int arg = s.number_spans[size_t(-2 - role[i])].arg;
      c.numbers.push_back(arg);
      c.note(cat("argument ", arg + 1, ": ", shown(was[i], true), " -> ", shown(now[i], true)));
      continue;
    }
    const Segment::Span& sp = s.spans[size_t(role[i] / 2)];
    if (role[i] % 2) {  // (a contiguous layout's follow its sizes)
      if (same_order(was, now, sp) && c.strides.insert(sp.vid).second)
        c.note(cat("input ", input_ordinal(s, sp.vid), "'s strides"));
      continue;
    }
    if (now[i] == guards::kSymbolicSize) continue;  // (a symbolic size: nothing to learn)
    const int d = int(i - sp.at);
    c.dims[sp.vid] |= uint32_t(1) << d;
    c.note(cat("input ", input_ordinal(s, sp.vid), " dim ", d + 1, ": ", shown(was[i], false), " -> ", shown(now[i], false)));
  }
  // strides are learnt with sizes: those of an input whose sizes are or become symbolic
  std::erase_if(c.strides, [&](int32_t vid) { return !s.symbolic[size_t(vid)] && !c.dims.count(vid); });
  return !c.dims.empty() || !c.numbers.empty() || !c.sizes.empty() || !c.strides.empty();
}

}  // namespace

std::string learn_dynamic(Context& ctx, Segment& s, int op, const cr_value* args, int nargs, int32_t first_new) {
  // replaying: the events at this position; recording after a change was learnt: the event of
  // the earlier path at this position (the shadow), so that one recompile learns every change
  const guards::TraceNode* at = s.recording ? s.shadow : s.pos;
  s.shadow = nullptr;
  if (!at || s.mode != -1) return "";
  Changes c;
  for (const auto& child : at->children) {
    if (child->key.empty() || int(child->key[0]) != op) continue;
    c = Changes{};
    s.shadow = child.get();
    if (changes_between(child->key, s.key, s, c) || s.recording) break;
  }
  // (a size in a training segment may change: each instance of the graph traces its backward)
  if ((c.dims.empty() && c.numbers.empty() && c.sizes.empty() && c.strides.empty()) ||
      (differentiated(s) && !c.numbers.empty())) {
    if (!s.recording) s.shadow = nullptr;
    return "";
  }
  for (auto [vid, mask] : c.dims) s.site->dynamic_dims[vid] |= mask;
  for (int arg : c.numbers) s.site->varying_numbers.insert(varying_slot(s, arg));
  for (int arg : c.sizes) s.site->size_numbers.insert(varying_slot(s, arg));
  s.site->dynamic_strides.insert(c.strides.begin(), c.strides.end());
  s.numbers.resize(s.numbers_before);
  for (int32_t v = first_new; v < s.next_vid; ++v) {  // the call's new tensors, encoded again
    s.vals[size_t(v)].get()->_gen = 0;
    s.vals[size_t(v)] = Tensor();
    s.is_input[size_t(v)] = 0;
    s.symbolic[size_t(v)] = 0;
  }
  s.next_vid = first_new;
  encode(ctx, s, op, args, nargs);
  return c.what;
}

// The recorded form of the arguments (every tensor has a vid once encoded).
std::vector<Arg> to_args(const Segment& s, const cr_value* args, int nargs) {
  std::vector<Arg> r(static_cast<size_t>(nargs));
  for (int i = 0; i < nargs; ++i) {
    const cr_value& a = args[i];
    Arg& g = r[size_t(i)];
    g.tag = a.tag;
    g.num = a.num;
    if (a.tag == kNumber && size_t(i) < s.arg_number.size()) g.varying = s.arg_number[size_t(i)];
    switch (a.tag) {
      case kTensor: g.value = static_cast<cr_tensor*>(a.ptr)->_vid; g.num = 0; break;
      case kTensors:
        for (int j = 0; j < a.n; ++j) g.values.push_back(static_cast<cr_tensor* const*>(a.ptr)[j]->_vid);
        g.num = 0;
        break;
      case kInts: g.ints.assign(static_cast<const int64_t*>(a.ptr), static_cast<const int64_t*>(a.ptr) + a.n); break;
      case kDoubles: g.doubles.assign(static_cast<const double*>(a.ptr), static_cast<const double*>(a.ptr) + a.n); break;
      case kString: g.str = a.str; break;
      default: break;
    }
  }
  return r;
}

// The tensor arguments of a call, in order.
std::vector<cr_tensor*> tensor_args(const cr_value* args, int nargs) {
  std::vector<cr_tensor*> r;
  for (int i = 0; i < nargs; ++i) {
    if (args[i].tag == kTensor) r.push_back(static_cast<cr_tensor*>(args[i].ptr));
    if (args[i].tag == kTensors)
      for (int j = 0; j < args[i].n; ++j) r.push_back(static_cast<cr_tensor* const*>(args[i].ptr)[j]);
  }
  return r;
}


}  // namespace cr::graph
