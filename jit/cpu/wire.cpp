// Kernels as bytes: fixed-size fields copied as they are (both ends are this build of crescent on
// this machine), strings and lists after their length.
#include "jit/cpu/wire.hpp"

#include <cstring>
#include <type_traits>

namespace cr::jit::cpu {

// A field added to these structures must be added below (then update the sizes here).
static_assert(sizeof(Affine) == 32 && sizeof(Expr) == 136 && sizeof(Store) == 48 && sizeof(Accumulate) == 8,
              "the loop IR changed: update jit/cpu/wire.cpp");
static_assert(sizeof(Kernel) == 336, "Kernel changed: update jit/cpu/wire.cpp");

namespace {

class Writer {
 public:
  std::string out;
  template <class T> void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod(uint32_t(s.size()));
    out += s;
  }
  template <class V> void list(const V& v) {
    pod(uint32_t(v.size()));
    for (const auto& x : v) pod(x);
  }
  void affine(const Affine& a) {
    pod(a.c);
    list(a.k);
  }
  void expr(const Expr& e) {
    pod(e.op), pod(e.dtype), pod(e.a), pod(e.b), pod(e.c), pod(e.value);
    pod(uint32_t(e.index.size()));
    for (const Affine& a : e.index) affine(a);
    pod(e.num), str(e.name);
    pod(e.acc), pod(e.count), pod(e.dim), pod(e.stride), pod(e.limit), pod(e.site);
  }
  void kernel(const Kernel& k) {
    str(k.name), list(k.sizes), pod(k.n_outer);
    pod(uint32_t(k.body.exprs.size()));
    for (const Expr& e : k.body.exprs) expr(e);
    pod(k.body.root);
    pod(uint32_t(k.stores.size()));
    for (const Store& s : k.stores) pod(s.buffer), affine(s.addr), pod(s.expr);
    list(k.accs);
    list(k.buffers), pod(k.check), pod(k.runtime), pod(k.draws), pod(k.numbers), list(k.values), pod(k.chunk);
    list(k.inner), list(k.depth), pod(k.max_depth);
  }
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <class T> void pod(T& v) {
    need(sizeof v);
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
  }
  uint32_t count() {
    uint32_t n = 0;
    pod(n);
    need(n);  // every element takes at least a byte: a damaged count fails here, not in resize()
    return n;
  }
  void str(std::string& s) {
    uint32_t n = count();
    s.assign(in_.data() + at_, n);
    at_ += n;
  }
  template <class V> void list(V& v) {
    v.clear();
    for (uint32_t i = 0, n = count(); i < n; ++i) {
      typename V::value_type x{};
      pod(x);
      v.push_back(x);
    }
  }
  void affine(Affine& a) {
    pod(a.c);
    list(a.k);
  }
  void expr(Expr& e) {
    pod(e.op), pod(e.dtype), pod(e.a), pod(e.b), pod(e.c), pod(e.value);
    e.index.resize(count());
    for (Affine& a : e.index) affine(a);
    pod(e.num), str(e.name);
    pod(e.acc), pod(e.count), pod(e.dim), pod(e.stride), pod(e.limit), pod(e.site);
  }
  void kernel(Kernel& k) {
    str(k.name), list(k.sizes), pod(k.n_outer);
    k.body.exprs.resize(count());
    for (Expr& e : k.body.exprs) expr(e);
    pod(k.body.root);
    k.stores.resize(count());
    for (Store& s : k.stores) pod(s.buffer), affine(s.addr), pod(s.expr);
    list(k.accs);
    list(k.buffers), pod(k.check), pod(k.runtime), pod(k.draws), pod(k.numbers), list(k.values), pod(k.chunk);
    list(k.inner), list(k.depth), pod(k.max_depth);
  }
  bool done() const { return at_ == in_.size(); }

 private:
  void need(size_t n) const {
    if (n > in_.size() - at_) throw Error("the compiler process got truncated kernels");
  }
  std::string_view in_;
  size_t at_ = 0;
};

}  // namespace

std::string encode_kernels(const Plan& plan) {
  Writer w;
  w.pod(uint32_t(plan.kernels.size()));
  for (size_t i = 0; i < plan.kernels.size(); ++i) w.kernel(plan.code(i));
  return std::move(w.out);
}

std::vector<Kernel> decode_kernels(std::string_view bytes) {
  Reader r(bytes);
  std::vector<Kernel> ks(r.count());
  for (Kernel& k : ks) r.kernel(k);
  if (!r.done()) throw Error("the compiler process got kernels followed by extra bytes");
  return ks;
}

std::string kernels_text(const Plan& plan) {
  std::string text;
  for (size_t i = 0; i < plan.kernels.size(); ++i) text += plan.code(i).str();
  return text;
}

}  // namespace cr::jit::cpu
