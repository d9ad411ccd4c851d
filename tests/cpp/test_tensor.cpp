// Core tensor, dtype and registry tests.
#include <catch2/catch.hpp>

#include "vm/context.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/host_memory.hpp"
#include "vm/kernels/loop.hpp"
#include "vm/registry.hpp"

using namespace cr;

TEST_CASE("half and bfloat16 round-trip and round to nearest even") {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.33325195f})
    REQUIRE(half_to_float(float_to_half(f)) == f);
  REQUIRE(half_to_float(float_to_half(1e6f)) == INFINITY);
  REQUIRE(std::isnan(half_to_float(float_to_half(NAN))));
  REQUIRE(half_to_float(float_to_half(1.0f + 1.0f / 4096)) == 1.0f);  // tie -> even
  REQUIRE(bf16_to_float(float_to_bf16(1.0f)) == 1.0f);
  REQUIRE(bf16_to_float(float_to_bf16(3.0f)) == 3.0f);
  // every half value survives a float round trip
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = half_to_float(uint16_t(h));
    if (!std::isnan(f)) REQUIRE(float_to_half(f) == uint16_t(h));
  }
}

TEST_CASE("type promotion follows PyTorch") {
  REQUIRE(promote(DType::i32, DType::f16) == DType::f16);
  REQUIRE(promote(DType::f16, DType::bf16) == DType::f32);
  REQUIRE(promote(DType::i32, DType::i64) == DType::i64);
  REQUIRE(promote(DType::b8, DType::i32) == DType::i32);
  REQUIRE(promote(DType::f32, DType::f64) == DType::f64);
}

// issue 32: an index is range-checked before it is narrowed to Device::index (255 once became
// the driver's "no current device" sentinel -1, and 256 device 0), and the driver never sees -1
TEST_CASE("device names parse as torch.device's and name the devices there are") {
  using Catch::Matchers::Contains;
  REQUIRE(parse_device("cpu") == Device{0, 0});
  REQUIRE(parse_device("cpu:0") == Device{0, 0});
  for (const char* bad : {"cuda:", "cuda:-1", "cuda:1x", "cuda: 1", "cuda:01", "CUDA", "cpu:", "cpu0", ""})
    REQUIRE_THROWS_WITH(parse_device(bad), Contains("expected a device \"cpu\", \"cuda\" or \"cuda:N\""));
  REQUIRE_THROWS_WITH(parse_device("cpu:3"), Contains("the CPU is \"cpu\" or \"cpu:0\""));
  const int n = cuda::device_count();
  const std::string why = n == 0 ? "CUDA is not available" : "this machine has " + std::to_string(n) + " CUDA device";
  for (std::string s : {"cuda:255", "cuda:256", "cuda:99999999999", "cuda:123456789012345678901234"})
    REQUIRE_THROWS_WITH(parse_device(s), Contains("device \"" + s + "\": " + why));
  REQUIRE_THROWS_WITH(parse_device("cuda:" + std::to_string(n)), Contains(why));
  for (int index : {-1, -2, n, 255})
    REQUIRE_THROWS_WITH(cuda::use_device(index), Contains(why));
}

TEST_CASE("storage is 64-byte aligned and views share it") {
  Tensor t = Tensor::empty({3, 5}, DType::f32);
  REQUIRE(reinterpret_cast<uintptr_t>(t.data_bytes()) % 64 == 0);
  fill(t, 2.0);
  Tensor v = Tensor::view_of(t, {5}, {1}, 5);
  fill(v, 7.0);
  REQUIRE(t.data<float>()[4] == 2.0f);
  REQUIRE(t.data<float>()[5] == 7.0f);
  REQUIRE(t.data<float>()[9] == 7.0f);
  REQUIRE(t.data<float>()[10] == 2.0f);
}

TEST_CASE("copy_into converts dtypes through strided views") {
  Tensor a = Tensor::empty({2, 3}, DType::f64);
  for (int i = 0; i < 6; ++i) a.data<double>()[i] = i + 0.25;
  Tensor at = Tensor::view_of(a, {3, 2}, {1, 3}, 0);  // transpose
  Tensor b = Tensor::empty({3, 2}, DType::i32);
  copy_into(b, at);
  REQUIRE(b.data<int32_t>()[0] == 0);
  REQUIRE(b.data<int32_t>()[1] == 3);
  REQUIRE(b.data<int32_t>()[2] == 1);
  REQUIRE(b.data<int32_t>()[5] == 5);
}

TEST_CASE("broadcasting errors name both shapes") {
  REQUIRE(broadcast_shapes({2, 1, 4}, {3, 1}) == Shape{2, 3, 4});
  REQUIRE_THROWS_WITH(broadcast_shapes({2, 3}, {4}), "shapes {2,3} and {4} cannot be broadcast");
}

TEST_CASE("every registry op has a schema and an eager kernel") {
  for (const OpDef& d : Registry::get().ops()) {
    INFO(d.name);
    REQUIRE(d.schema != nullptr);
    REQUIRE(d.run != nullptr);
  }
}

TEST_CASE("phantom dispatch gives layouts without memory, and raises for an op it cannot derive") {
  Context ctx;
  auto call = [&](const char* op, std::vector<cr_value> args) {
    const int idx = Registry::get().index_of(op);
    REQUIRE(idx >= 0);
    return dispatch(ctx, idx, args.data(), int(args.size()));
  };
  auto tensor = [](const Tensor& t) { return cr_value{kTensor, 0, 0, t.get(), nullptr}; };
  const Tensor x = Tensor::empty({4, 6}, DType::f32), w = Tensor::empty({6, 3}, DType::f32);
  const size_t before = host_storage_in_use();
  PhantomScope phantom;
  const Tensor y = call("matmul", {tensor(x), tensor(w)}).at(0);  // (an infer rule)
  CHECK(y.sizes() == Shape{4, 3});
  CHECK(y.storage()->data == nullptr);
  const Tensor t = call("transpose", {tensor(y), cr_value{kNumber, 0, 1, nullptr, nullptr},
                                      cr_value{kNumber, 0, 2, nullptr, nullptr}}).at(0);  // (a view)
  CHECK(t.storage() == y.storage());
  CHECK(t.strides() == Shape{1, 3});
  int64_t flat[1] = {12};
  const Tensor r = call("reshape", {tensor(t), cr_value{kInts, 1, 0, flat, nullptr}}).at(0);  // (a copying one)
  CHECK(r.storage() != y.storage());
  CHECK(r.is_contiguous());
  CHECK(call("float", {tensor(x)}).at(0).get() == x.get());  // (a conversion that returns its input)
  CHECK(host_storage_in_use() == before);
  const Tensor mask = Tensor::empty({4, 6}, DType::b8);
  CHECK_THROWS_WITH(call("masked_select", {tensor(x), tensor(mask)}), Catch::Contains("phantom trace cannot run it"));
}
