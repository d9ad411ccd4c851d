// vm/cuda/nccl.hpp: NCCL through dlopen. Without a driver or NCCL every call raises why; with a
// GPU and NCCL (CRESCENT_NCCL_LIB where the system has none), a communicator of one rank is made,
// runs each collective on device memory and is destroyed. (Several ranks: tests/lua/test_distributed.lua.)
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "vm/cuda/memory.hpp"
#include "vm/cuda/nccl.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/error.hpp"

using namespace cr;

TEST_CASE("nccl: unavailable is an error saying why", "[nccl]") {
  std::string why;
  if (cuda::nccl_available(&why)) return;
  CHECK(!why.empty());
  try {
    cuda::nccl_unique_id();
    FAIL("nccl_unique_id did not raise");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("T.distributed needs NCCL: " + why) != std::string::npos);
  }
}

TEST_CASE("nccl: one rank's communicator runs every collective", "[nccl]") {
  std::string why;
  if (!cuda::nccl_available(&why)) {
    WARN("skipped: " << why);
    return;
  }
  CHECK(cuda::nccl_version() >= 21800);
  cuda::NcclComm* c = cuda::nccl_comm_init(cuda::nccl_unique_id(), 0, 1, 0, 30);
  const std::vector<float> host = {1, -2, 3.5f, 4};
  const size_t bytes = host.size() * sizeof(float);
  void* a = cuda::device_alloc(bytes, 0);
  void* b = cuda::device_alloc(bytes, 0);
  cuda::copy_to_device(a, host.data(), bytes, 0);
  const cuda::CUstream s = cuda::current_stream(0);
  cuda::nccl_collective(c, cuda::Coll::all_reduce, a, a, host.size(), DType::f32, cuda::RedOp::avg, 0, s);
  cuda::nccl_collective(c, cuda::Coll::broadcast, a, a, host.size(), DType::f32, cuda::RedOp::sum, 0, s);
  cuda::nccl_collective(c, cuda::Coll::all_gather, a, b, host.size(), DType::f32, cuda::RedOp::sum, 0, s);
  cuda::nccl_collective(c, cuda::Coll::reduce_scatter, b, a, host.size(), DType::f32, cuda::RedOp::max, 0, s);
  std::vector<float> got(host.size());
  cuda::copy_to_host(got.data(), a, bytes, 0);
  cuda::synchronize(0);
  CHECK(got == host);  // (one rank: every collective copies)
  CHECK_THROWS_WITH(cuda::nccl_collective(c, cuda::Coll::all_reduce, a, a, 4, DType::b8, cuda::RedOp::avg, 0, s),
                    Catch::Contains("not defined for bool"));
  cuda::nccl_comm_destroy(c, 30);
  cuda::device_free(a, bytes, 0);
  cuda::device_free(b, bytes, 0);
}
