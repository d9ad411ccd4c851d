// Embedding crescent in a C++ program (API.md section 8): create a VM, define Lua functions,
// hand it a host buffer without copying, call, read the results, and catch a Lua error with its
// traceback.
#include <crescent/crescent.hpp>

#include <cstdio>
#include <vector>

static const char* kModel = R"lua(
local T = crescent

-- y = relu(x @ w + b), a tiny dense layer
function layer(x, w, b)
  return T.relu(T.matmul(x, w) + b)
end

-- scales a host buffer in place: the host sees the change
function scale_(x, s)
  x:mul_(s)
end

function bad_shapes(x)
  return x + T.ones(7)
end
)lua";

int main() {
  crescent::VM vm;
  vm.run_string(kModel, "=model.lua");

  // host buffers, wrapped without copying
  std::vector<float> x = {1, 2, 3, 4, 5, 6};           // 2 x 3
  std::vector<float> w = {1, 0, 0, 1, 1, -1};          // 3 x 2
  float b[2] = {0.5f, 0.5f};
  auto tx = crescent::Tensor::from_blob(x.data(), {2, 3});
  auto tw = crescent::Tensor::from_blob(w.data(), {3, 2});
  auto tb = crescent::Tensor::from_blob(b, {2});

  crescent::Tensor y = vm.call_tensor("layer", tx, tw, tb);
  std::printf("layer: sizes {%lld, %lld}, dtype %s\n", (long long)y.size(0), (long long)y.size(1),
              crescent::dtype_name(y.dtype()));
  std::printf("%s\n", y.to_string().c_str());
  std::vector<float> v = y.to_vector<float>();
  std::printf("values:");
  for (float f : v) std::printf(" %g", f);
  std::printf("\n");

  // zero-copy: Lua writes into the host's memory
  vm.call("scale_", tx, 10);
  std::printf("scaled in place: x[0] = %g, x[5] = %g\n", x[0], x[5]);

  // several results of mixed types
  vm.run_string("function stats(t) return t:sum():item(), t:mean():item(), 'ok' end", "=stats.lua");
  std::vector<crescent::Value> r = vm.call("stats", tx);
  std::printf("stats: sum %g, mean %g, %s\n", r[0].as_number(), r[1].as_number(), r[2].as_string().c_str());

  // errors carry the Lua location and traceback
  try {
    vm.call("bad_shapes", tx);
  } catch (const crescent::Error& e) {
    std::printf("error: %s\n", e.message().c_str());
    std::printf("%s\n", e.traceback().c_str());
  }
  return (v.size() == 4 && v[0] == 4.5f && v[1] == 0.0f && x[0] == 10.0f) ? 0 : 1;
}
