// The device caching allocator on a GPU (vm/cuda/memory.hpp over vm/cuda/block_pool.hpp; the
// block management itself: test_block_pool.cpp): a freed block split for smaller requests whose
// halves hold their own data, empty_cache giving segments back, record_stream keeping a block in
// use until the other stream's work has passed, private pools. Skipped without a GPU.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>

#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/streams.hpp"

using namespace cr;

namespace {
constexpr size_t MiB = size_t(1) << 20;
bool have_gpu() {
  if (cuda::device_count() > 0) return true;
  WARN("skipped: no CUDA device");
  return false;
}
}  // namespace

TEST_CASE("cuda memory: a freed block serves smaller requests, split; empty_cache gives it back", "[cuda_memory]") {
  if (!have_gpu()) return;
  cuda::synchronize(0);
  cuda::empty_cache();
  const cuda::MemoryStats s0 = cuda::memory_stats(0);
  // (1 GiB: larger than any free block another test may have left in a segment in use)
  const size_t big_n = 1024 * MiB, a_n = 640 * MiB, b_n = 320 * MiB;
  void* big = cuda::device_alloc(big_n, 0);
  REQUIRE(cuda::memory_stats(0).driver_allocs == s0.driver_allocs + 1);
  cuda::device_free(big, big_n, 0);
  char* a = static_cast<char*>(cuda::device_alloc(a_n, 0));
  char* b = static_cast<char*>(cuda::device_alloc(b_n, 0));
  REQUIRE(static_cast<void*>(a) == big);
  REQUIRE(b == a + a_n);
  REQUIRE(cuda::memory_stats(0).driver_allocs == s0.driver_allocs + 1);
  REQUIRE(cuda::memory_stats(0).in_use == s0.in_use + a_n + b_n);
  // the parts are separate memory: each keeps its own pattern up to the boundary
  cuda::fill_pattern(a, a_n / 4, 4, 0x11111111u, 0);
  cuda::fill_pattern(b, b_n / 4, 4, 0x22222222u, 0);
  uint32_t edge[2] = {0, 0};
  cuda::copy_to_host(edge, a + a_n - 4, 8, 0);
  REQUIRE(edge[0] == 0x11111111u);
  REQUIRE(edge[1] == 0x22222222u);
  cuda::device_free(a, a_n, 0);
  cuda::device_free(b, b_n, 0);
  REQUIRE(cuda::memory_stats(0).peak_in_use >= s0.in_use + a_n + b_n);
  cuda::empty_cache();  // a, b and the rest merged into one free segment: given back
  REQUIRE(cuda::memory_stats(0).reserved == s0.reserved);
  REQUIRE(cuda::memory_stats(0).in_use == s0.in_use);
  REQUIRE_THROWS_WITH(cuda::device_free(a + 512, 1, 0), Catch::Contains("is no block of cuda:0"));
}

TEST_CASE("cuda memory: a block recorded on another stream stays in use until that work passed", "[cuda_memory]") {
  if (!have_gpu()) return;
  // the side stream first gets milliseconds of fills to run: the event the free records after
  // them cannot have passed when the stats are read (an idle stream's event passes at once)
  const int64_t side = cuda::pool_stream(0);
  cuda::set_current_stream(side);
  void* busy = cuda::device_alloc(256 * MiB, 0);
  for (int i = 0; i < 40; ++i) cuda::fill_pattern(busy, 256 * MiB, 1, uint32_t(i), 0);
  cuda::set_current_stream(0);
  const size_t before = cuda::memory_stats(0).in_use;
  void* p = cuda::device_alloc(4 * MiB, 0);
  cuda::record_stream(p, 0, side);
  cuda::device_free(p, 4 * MiB, 0);
  REQUIRE(cuda::memory_stats(0).in_use == before + 4 * MiB);  // (pending: its event is queued)
  cuda::synchronize(0);
  void* q = cuda::device_alloc(1, 0);  // collects the pending blocks whose events passed
  REQUIRE(cuda::memory_stats(0).in_use == before + 512);
  cuda::device_free(q, 1, 0);
  cuda::device_free(busy, 256 * MiB, 0);
}

TEST_CASE("cuda memory: a private pool's blocks stay with it until it is dropped", "[cuda_memory]") {
  if (!have_gpu()) return;
  cuda::synchronize(0);
  cuda::empty_cache();
  const size_t reserved = cuda::memory_stats(0).reserved;
  std::shared_ptr<cuda::Pool> pool = cuda::pool_new(0);
  cuda::pool_enter(pool.get());
  void* p = cuda::device_alloc(3 * MiB, 0);
  cuda::pool_enter(nullptr);
  REQUIRE(cuda::pool_owns(*pool, p));
  REQUIRE(cuda::pool_reserved(*pool) == 20 * MiB);
  cuda::device_free(p, 3 * MiB, 0);
  void* q = cuda::device_alloc(3 * MiB, 0);  // outside the pool: not its block
  REQUIRE(q != p);
  REQUIRE_FALSE(cuda::pool_owns(*pool, q));
  cuda::device_free(q, 3 * MiB, 0);
  cuda::empty_cache();  // keeps the pool's segment
  REQUIRE(cuda::memory_stats(0).reserved == reserved + 20 * MiB);
  pool.reset();
  cuda::empty_cache();
  REQUIRE(cuda::memory_stats(0).reserved == reserved);
}
