// Keys: how an op call becomes a trace-tree key (layout in vm/guards/trace.hpp). A tensor the
// segment has seen is its value id; a new one becomes a graph input and its guards - dtype,
// device, sizes, strides, offset, aliasing with earlier inputs - go into the key, so matching a
// key is checking the guards.
#include <cstring>
#include <map>

#include "vm/graph/segment.hpp"

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
  k.push_back(uint64_t(uint8_t(t->_dtype)) | uint64_t(uint8_t(t->_dev_type)) << 8 |
              uint64_t(uint8_t(t->_dev_index)) << 16 | uint64_t(t->_ndim) << 24);
  k.push_back(uint64_t(t->_offset));
  // symbolic sizes match any size; a contiguous layout then matches any contiguous layout
  const uint32_t sym = symbolic_dims(s, t, vid);
  const bool contiguous = sym && Tensor(t, true).is_contiguous();
  s.spans.push_back(Segment::Span{vid, k.size(), t->_ndim});
  for (int i = 0; i < t->_ndim; ++i) k.push_back(sym >> i & 1 ? guards::kSymbolicSize : uint64_t(t->_sizes[i]));
  for (int i = 0; i < t->_ndim; ++i) k.push_back(contiguous ? guards::kContiguousStride : uint64_t(t->_strides[i]));
  k.push_back(uint64_t(alias + 1));
  s.symbolic[size_t(vid)] = sym;
  s.dynamic = s.dynamic || sym != 0;
}

// Ops whose integral numbers may come from sizes (narrow lengths, split sizes): with symbolic
// sizes, their keys leave those out.
bool takes_shape_numbers(const OpDef& def) { return def.kind == OpKind::View || def.kind == OpKind::Join; }

}  // namespace

bool has_wildcard_args(const OpDef& def, const cr_value* args, int nargs) {
  for (int i = 0; i < nargs; ++i)
    if (args[i].tag == kInts || (args[i].tag == kNumber && takes_shape_numbers(def))) return true;
  return false;
}

void encode(Context& ctx, Segment& s, int op, const cr_value* args, int nargs) {
  guards::Key& k = s.key;
  k.clear();
  s.spans.clear();
  const bool shape_args = takes_shape_numbers(Registry::get().ops()[size_t(op)]);
  k.push_back(uint64_t(op));
  k.push_back(uint64_t(nargs));
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
        // with symbolic sizes, the integers of views and joins (narrow lengths, split sizes) may
        // come from sizes: any value matches (the shape rules and the graph's instance take
        // this call's values)
        k.push_back(s.dynamic && shape_args && a.num == double(int64_t(a.num)) ? guards::kSymbolicSize : bits(a.num));
        break;
      case kBool: k.push_back(bits(a.num)); break;
      case kInts: {  // sizes, dims, permutations: with symbolic sizes, any values match (as above)
        k.push_back(uint64_t(a.n));
        const int64_t* p = static_cast<const int64_t*>(a.ptr);
        for (int j = 0; j < a.n; ++j) k.push_back(s.dynamic ? guards::kSymbolicSize : uint64_t(p[j]));
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

// The dims whose sizes differ between `was` and `now` (same op, same layout of the key), by
// vid; false when something else differs too. Strides may differ with the sizes.
bool size_changes(const guards::Key& was, const guards::Key& now, const std::vector<Segment::Span>& spans,
                  std::map<int32_t, uint32_t>& dims, std::string& what) {
  if (was.size() != now.size()) return false;
  std::vector<int32_t> role(now.size(), -1);  // >= 0: the span of a size (even) or stride (odd)
  for (size_t j = 0; j < spans.size(); ++j)
    for (int d = 0; d < spans[j].ndim; ++d) {
      role[spans[j].at + size_t(d)] = int32_t(2 * j);
      role[spans[j].at + size_t(spans[j].ndim + d)] = int32_t(2 * j + 1);
    }
  for (size_t i = 0; i < now.size(); ++i) {
    if (was[i] == now[i]) continue;
    if (role[i] < 0) return false;
    if (role[i] % 2) continue;
    const Segment::Span& sp = spans[size_t(role[i] / 2)];
    const int d = int(i - sp.at);
    dims[sp.vid] |= uint32_t(1) << d;
    what += cat(what.empty() ? "" : ", ", "dim ", d, " of input %", sp.vid, ": ",
                was[i] == guards::kSymbolicSize ? std::string("symbolic") : std::to_string(was[i]), " -> ", now[i]);
  }
  return !dims.empty();
}

}  // namespace

std::string learn_dynamic(Context& ctx, Segment& s, int op, const cr_value* args, int nargs, int32_t first_new) {
  if (s.mode != -1 || s.spans.empty()) return "";
  std::map<int32_t, uint32_t> dims;
  std::string what;
  for (const auto& c : s.pos->children) {
    if (c->key.empty() || int(c->key[0]) != op) continue;
    dims.clear();
    what.clear();
    if (size_changes(c->key, s.key, s.spans, dims, what)) break;
  }
  if (dims.empty()) return "";
  for (auto [vid, mask] : dims) s.site->dynamic_dims[vid] |= mask;
  for (int32_t v = first_new; v < s.next_vid; ++v) {  // the call's new tensors, encoded again
    s.vals[size_t(v)].get()->_gen = 0;
    s.vals[size_t(v)] = Tensor();
    s.is_input[size_t(v)] = 0;
    s.symbolic[size_t(v)] = 0;
  }
  s.next_vid = first_new;
  encode(ctx, s, op, args, nargs);
  return what;
}

// The recorded form of the arguments (every tensor has a vid once encoded).
std::vector<Arg> to_args(const cr_value* args, int nargs) {
  std::vector<Arg> r(static_cast<size_t>(nargs));
  for (int i = 0; i < nargs; ++i) {
    const cr_value& a = args[i];
    Arg& g = r[size_t(i)];
    g.tag = a.tag;
    g.num = a.num;
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
