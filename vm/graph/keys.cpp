// Keys: how an op call becomes a trace-tree key (layout in vm/guards/trace.hpp). A tensor the
// segment has seen is its value id; a new one becomes a graph input and its guards - dtype,
// device, sizes, strides, offset, aliasing with earlier inputs - go into the key, so matching a
// key is checking the guards.
#include <cstring>

#include "vm/graph/segment.hpp"

namespace cr::graph {

namespace {

uint64_t bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
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
  for (int i = 0; i < t->_ndim; ++i) k.push_back(uint64_t(t->_sizes[i]));
  for (int i = 0; i < t->_ndim; ++i) k.push_back(uint64_t(t->_strides[i]));
  k.push_back(uint64_t(alias + 1));
}

}  // namespace

void encode(Context& ctx, Segment& s, int op, const cr_value* args, int nargs) {
  guards::Key& k = s.key;
  k.clear();
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
      case kBool: k.push_back(bits(a.num)); break;
      case kInts: {
        k.push_back(uint64_t(a.n));
        const int64_t* p = static_cast<const int64_t*>(a.ptr);
        for (int j = 0; j < a.n; ++j) k.push_back(uint64_t(p[j]));
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
