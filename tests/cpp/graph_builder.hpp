// Hand-built graphs for the C++ tests: Builder records ops as the trace recorder does (each op
// also runs eagerly on sample values, which give every value its metadata).
#pragma once
#include <catch2/catch.hpp>
#include <cstdlib>
#include <random>
#include <string>

#include "vm/cuda/nvrtc.hpp"
#include "vm/graph/graph.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::testing {

using graph::Arg;
using graph::Graph;
using graph::Node;
using graph::NodeKind;
using graph::meta_of;

// A float32 tensor of uniform values in [-2, 2), and a contiguous copy of a tensor.
inline Tensor uniform(const Shape& s, uint32_t seed) {
  Tensor t = Tensor::empty(s, DType::f32);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(gen);
  return t;
}
// An int64 (or int32) tensor of positions in 1..n (the indices of gathers: 1-based).
inline Tensor positions(const Shape& s, int64_t n, uint32_t seed, DType d = DType::i64) {
  Tensor t = Tensor::empty(s, DType::i64);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> u(1, n);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = u(gen);
  return cast(t, d);
}
// Whether a backend probe (jit::cpu_backend_available, cuda::nvrtc_available) succeeds; when not,
// warns with `skipped` and the probe's reason, and the caller skips its test.
// NVRTC for the CUDA compile checks; CRESCENT_TEST_NVRTC=0 turns them off (scripts/test.sh's
// sanitizer run: NVRTC's own allocations under ASan double their time and test no code of ours,
// and the Release run compiles every one).
inline bool nvrtc_for_tests(std::string* why) {
  if (const char* e = std::getenv("CRESCENT_TEST_NVRTC"); e && std::string(e) == "0") {
    if (why) *why = "CRESCENT_TEST_NVRTC=0 (the Release run of scripts/test.sh compiles them)";
    return false;
  }
  return cr::cuda::nvrtc_available(why);
}
inline bool available(bool (*probe)(std::string*), const char* skipped) {
  std::string why;
  if (probe(&why)) return true;
  WARN(skipped << ": " << why);
  return false;
}
inline Tensor copy_of(const Tensor& t) {
  Tensor r = Tensor::empty(t.sizes(), t.dtype());
  copy_into(r, t);
  return r;
}

inline Arg T(int32_t v) { Arg a; a.tag = kTensor; a.value = v; return a; }
inline Arg N(double x) { Arg a; a.tag = kNumber; a.num = x; return a; }
inline Arg I(std::vector<int64_t> xs) { Arg a; a.tag = kInts; a.ints = std::move(xs); return a; }
inline Arg TL(std::vector<int32_t> vs) { Arg a; a.tag = kTensors; a.values = std::move(vs); return a; }
inline Arg S(std::string s) { Arg a; a.tag = kString; a.str = std::move(s); return a; }
inline Arg Bool(bool x) { Arg a; a.tag = kBool; a.num = x; return a; }

// Builds a graph as the recorder does: every op also runs eagerly on sample values while it is
// added, so each output gets the meta eager execution gave it, `views` when it shares the storage
// of a tensor argument, and in-place ops get a new value id with the meta of their argument 0.
struct Builder {
  Context& ctx;
  Graph g;
  std::vector<Tensor> sample;  // by value id

  int32_t value(Tensor t, int32_t views) {  // by value: `t` may live in `sample`
    int32_t v = g.add_value(int32_t(g.nodes.size() - 1), meta_of(t));
    g.values[size_t(v)].views = views;
    g.nodes.back().outs.push_back(v);
    sample.resize(g.values.size());
    sample[size_t(v)] = t;
    return v;
  }
  int32_t input(const Tensor& t) {
    Node n;
    n.kind = NodeKind::Input;
    n.input_index = int32_t(g.inputs.size());
    g.nodes.push_back(std::move(n));
    int32_t v = value(t, -1);
    g.inputs.push_back(v);
    return v;
  }
  std::vector<int32_t> ops(const std::string& name, std::vector<Arg> args, const std::string& where = "") {
    Node n;
    n.op = Registry::get().index_of(name);
    REQUIRE(n.op >= 0);
    n.args = std::move(args);
    n.where = where;
    std::vector<cr_value> cv;
    std::vector<std::vector<cr_tensor*>> lists(n.args.size());
    for (size_t i = 0; i < n.args.size(); ++i) {
      const Arg& a = n.args[i];
      cr_value v{a.tag, 0, a.num, nullptr, nullptr};
      if (a.tag == kTensor) v.ptr = sample[size_t(a.value)].get();
      if (a.tag == kTensors) {
        for (int32_t t : a.values) lists[i].push_back(sample[size_t(t)].get());
        v.n = int32_t(a.values.size()), v.ptr = lists[i].data();
      }
      if (a.tag == kInts) v.n = int32_t(a.ints.size()), v.ptr = const_cast<int64_t*>(a.ints.data());
      if (a.tag == kString) v.str = a.str.c_str();
      cv.push_back(v);
    }
    std::vector<Tensor> outs = dispatch(ctx, n.op, cv.data(), int(cv.size()));
    g.nodes.push_back(std::move(n));
    const Node& nd = g.nodes.back();
    if (nd.inplace()) return {value(sample[size_t(nd.args[0].value)], nd.args[0].value)};
    std::vector<int32_t> ids;
    for (const Tensor& o : outs) {
      int32_t views = -1;
      for (const Arg& a : nd.args)
        if (views < 0 && a.tag == kTensor && sample[size_t(a.value)].storage() == o.storage()) views = a.value;
      ids.push_back(value(o, views));
    }
    return ids;
  }
  int32_t op(const std::string& name, std::vector<Arg> args, const std::string& where = "") {
    return ops(name, std::move(args), where)[0];
  }
};

}  // namespace cr::testing
