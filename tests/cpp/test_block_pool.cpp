// The device caching allocator's block management (vm/cuda/block_pool.hpp) on a fake device:
// segment sizes per pool, best fit, split and merge, the oversize rule, out of memory -> give the
// cache back -> retry, stream and private pools, and a randomized run that checks no two live
// blocks overlap and that empty_cache gives every byte back.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "vm/cuda/block_pool.hpp"

using namespace cr::cuda;

namespace {

constexpr size_t MiB = size_t(1) << 20;

// A device of `capacity` bytes; segments never reuse an address, so a stale block shows.
struct FakeDevice final : SegmentSource {
  size_t capacity, used = 0;
  uint64_t next = uint64_t(1) << 40;
  std::map<uint64_t, size_t> mapped;
  int quiesced = 0, failed = 0;
  explicit FakeDevice(size_t cap = size_t(1) << 40) : capacity(cap) {}
  uint64_t map(size_t bytes) override {
    if (used + bytes > capacity) {
      ++failed;
      return 0;
    }
    const uint64_t p = next;
    next += bytes + 4096;
    mapped[p] = bytes;
    used += bytes;
    return p;
  }
  void unmap(uint64_t base, size_t bytes) override {
    auto it = mapped.find(base);
    REQUIRE(it != mapped.end());
    REQUIRE(it->second == bytes);
    mapped.erase(it);
    used -= bytes;
  }
  void quiesce() override { ++quiesced; }
};

}  // namespace

TEST_CASE("block pool: segment sizes of the small and large pools", "[block_pool]") {
  FakeDevice dev;
  BlockPool pool(dev);
  REQUIRE(BlockPool::round(1) == 512);
  REQUIRE(BlockPool::round(513) == 1024);
  const uint64_t a = pool.allocate(1000, 0);  // small: a 2 MiB segment, split
  REQUIRE(dev.mapped.at(a) == 2 * MiB);
  REQUIRE(pool.block_size(a) == 1024);
  const uint64_t b = pool.allocate(MiB, 0);  // still small: the same segment
  REQUIRE(b == a + 1024);
  const uint64_t c = pool.allocate(MiB + 1, 0);  // large: a 20 MiB segment
  REQUIRE(dev.mapped.at(c) == 20 * MiB);
  const uint64_t d = pool.allocate(11 * MiB + 1, 0);  // from the rest of c's segment
  REQUIRE(d == c + BlockPool::round(MiB + 1));
  const uint64_t f = pool.allocate(30 * MiB + 1, 0);  // 10 MiB or more: rounded to 2 MiB
  REQUIRE(dev.mapped.at(f) == 32 * MiB);
  const uint64_t e = pool.allocate(5 * MiB, 0);  // c's segment again, not the small one
  REQUIRE(e == d + BlockPool::round(11 * MiB + 1));
  REQUIRE(pool.stats().driver_allocs == 3);
  REQUIRE(pool.stats().reserved == 54 * MiB);
  REQUIRE(pool.stats().in_use == 1024 + MiB + BlockPool::round(MiB + 1) + BlockPool::round(11 * MiB + 1) +
                                     BlockPool::round(30 * MiB + 1) + 5 * MiB);
}

TEST_CASE("block pool: a larger free block is split, freed neighbours merge", "[block_pool]") {
  FakeDevice dev;
  BlockPool pool(dev);
  const uint64_t big = pool.allocate(96 * MiB, 0);
  REQUIRE(pool.free(big));
  const uint64_t a = pool.allocate(60 * MiB, 0);  // the freed 96 MiB block serves 60 MiB
  REQUIRE(a == big);
  const uint64_t b = pool.allocate(30 * MiB, 0);  // and its remaining 36 MiB serves 30
  REQUIRE(b == big + 60 * MiB);
  REQUIRE(pool.stats().driver_allocs == 1);
  REQUIRE(pool.stats().cache_hits == 2);
  // a 6 MiB block is left at the segment's end; a 7 MiB request does not fit it
  const uint64_t c = pool.allocate(7 * MiB, 0);
  REQUIRE(pool.stats().driver_allocs == 2);
  REQUIRE(pool.allocate(6 * MiB, 0) == big + 90 * MiB);  // the hole, whole (no 1 MiB rest)
  REQUIRE(pool.free(big + 90 * MiB));
  // freeing a then b merges them with the hole: one 96 MiB block again, the segment free
  REQUIRE(pool.free(a));
  REQUIRE(pool.release_cached() == 0);  // (b still holds the segment)
  REQUIRE(pool.free(b));
  REQUIRE(pool.allocate(96 * MiB, 0) == big);
  REQUIRE(pool.free(big));
  REQUIRE(pool.free(c));
  REQUIRE(pool.release_cached() == 96 * MiB + 20 * MiB);
  REQUIRE(dev.mapped.empty());
  REQUIRE(pool.stats().reserved == 0);
  REQUIRE(pool.stats().in_use == 0);
  REQUIRE(pool.stats().driver_frees == 2);
}

TEST_CASE("block pool: best fit takes the smallest free block that fits", "[block_pool]") {
  FakeDevice dev;
  BlockPool pool(dev);
  const uint64_t x = pool.allocate(12 * MiB, 0), y = pool.allocate(16 * MiB, 0), z = pool.allocate(14 * MiB, 0);
  for (uint64_t p : {x, y, z}) REQUIRE(pool.free(p));
  REQUIRE(pool.allocate(13 * MiB, 0) == z);
  REQUIRE(pool.block_size(z) == 14 * MiB);  // a 1 MiB rest is not split off a large block
  REQUIRE(pool.allocate(11 * MiB, 0) == x);
  REQUIRE(pool.allocate(MiB + 512, 0) == y);  // the 16 MiB block, split
  REQUIRE(pool.block_size(y) == MiB + 512);
  // small requests: the small pool only, lowest address among equal sizes
  const uint64_t s1 = pool.allocate(4096, 0), s2 = pool.allocate(4096, 0);
  REQUIRE(dev.mapped.at(s1) == 2 * MiB);
  REQUIRE(pool.free(s1));
  REQUIRE(pool.allocate(512, 0) == s1);
  REQUIRE(pool.free(s2));
  REQUIRE(pool.stats().driver_allocs == 4);
}

TEST_CASE("block pool: oversize blocks are not split nor given to small requests", "[block_pool]") {
  FakeDevice dev;
  BlockPool pool(dev, 40 * MiB);
  const uint64_t big = pool.allocate(64 * MiB, 0);
  REQUIRE(pool.free(big));
  const uint64_t small = pool.allocate(30 * MiB, 0);  // below max_split: not from the 64 MiB block
  REQUIRE(small != big);
  REQUIRE(pool.stats().driver_allocs == 2);
  REQUIRE(pool.allocate(50 * MiB, 0) == big);  // oversize, less than 20 MiB too big: whole
  REQUIRE(pool.block_size(big) == 64 * MiB);
  REQUIRE(pool.free(big));
  const uint64_t huge = pool.allocate(100 * MiB, 0);
  REQUIRE(pool.free(huge));
  const uint64_t mid = pool.allocate(60 * MiB, 0);  // 64 MiB fits; 100 MiB would be 40 too big
  REQUIRE(mid == big);
  const uint64_t mid2 = pool.allocate(60 * MiB, 0);  // only the 100 MiB block is left: too big
  REQUIRE(mid2 != huge);
  REQUIRE(pool.stats().driver_allocs == 4);
  // without a limit the same 100 MiB block is split
  FakeDevice dev2;
  BlockPool open(dev2);
  const uint64_t h = open.allocate(100 * MiB, 0);
  REQUIRE(open.free(h));
  REQUIRE(open.allocate(60 * MiB, 0) == h);
  REQUIRE(open.allocate(40 * MiB, 0) == h + 60 * MiB);
  REQUIRE(open.stats().driver_allocs == 1);
}

TEST_CASE("block pool: out of memory gives the cache back and tries again", "[block_pool]") {
  FakeDevice dev(64 * MiB);
  BlockPool pool(dev);
  const uint64_t a = pool.allocate(40 * MiB, 0);
  const uint64_t s = pool.allocate(100, 0);  // a small segment stays in use
  REQUIRE(pool.free(a));
  const uint64_t b = pool.allocate(50 * MiB, 0);  // 40 + 2 + 50 > 64: the 40 MiB segment goes
  REQUIRE(b != 0);
  REQUIRE(dev.failed == 1);
  REQUIRE(dev.quiesced == 1);
  REQUIRE(pool.stats().reserved == 52 * MiB);
  REQUIRE(pool.stats().driver_frees == 1);
  // nothing cached to give back: 0, and nothing changed
  REQUIRE(pool.allocate(30 * MiB, 0) == 0);
  REQUIRE(pool.stats().in_use == 50 * MiB + 512);
  REQUIRE(pool.stats().reserved == 52 * MiB);
  REQUIRE(pool.allocate(~size_t(0) - 100, 0) == 0);  // (no wrap-around to a small block)
  REQUIRE(pool.free(b));
  REQUIRE(pool.allocate(30 * MiB, 0) == b);  // now the free 50 MiB block serves it
  REQUIRE(pool.free(s));
  REQUIRE(pool.free(b));
  pool.release_cached();
  REQUIRE(dev.mapped.empty());
}

TEST_CASE("block pool: blocks are reused only by their stream's pool", "[block_pool]") {
  FakeDevice dev;
  BlockPool pool(dev);
  const uint64_t a = pool.allocate(8 * MiB, 1);
  REQUIRE(pool.free(a));
  const uint64_t b = pool.allocate(8 * MiB, 0);
  REQUIRE(b != a);
  bool found = false;
  REQUIRE(pool.pool_of(a + 5, &found) == 1);
  REQUIRE(found);
  REQUIRE(pool.pool_of(b, &found) == 0);
  pool.pool_of(12345, &found);
  REQUIRE_FALSE(found);
  REQUIRE(pool.allocate(8 * MiB, 1) == a);
  REQUIRE_FALSE(pool.free(a + 512));  // not a block's start
  REQUIRE_FALSE(pool.free(777));
  REQUIRE(pool.free(a));
  REQUIRE_FALSE(pool.free(a));  // twice
}

TEST_CASE("block pool: private pools keep their segments until dropped", "[block_pool]") {
  FakeDevice dev;
  BlockPool pool(dev);
  const int g = pool.new_private();
  REQUIRE(g < 0);
  const uint64_t a = pool.allocate(3 * MiB, g), b = pool.allocate(2000, g);
  REQUIRE(pool.pool_reserved(g) == 22 * MiB);
  REQUIRE(pool.free(a));
  const uint64_t other = pool.allocate(3 * MiB, 0);  // not for the shared pools
  REQUIRE(other != a);
  REQUIRE(pool.free(other));
  REQUIRE(pool.release_cached() == 20 * MiB);  // nor given back while the pool lives
  REQUIRE(pool.allocate(3 * MiB, g) == a);
  REQUIRE(pool.free(a));
  pool.drop_private(g);  // a's segment joins pool 0 now, b's when b is freed
  bool found = false;
  REQUIRE(pool.pool_of(b, &found) == 0);
  REQUIRE(pool.pool_reserved(0) == 22 * MiB);
  REQUIRE(pool.allocate(3 * MiB, 0) == a);
  REQUIRE(pool.free(a));
  REQUIRE(pool.free(b));
  pool.release_cached();
  REQUIRE(dev.mapped.empty());
  REQUIRE(pool.stats().reserved == 0);
}

TEST_CASE("block pool: peaks of memory in use and reserved", "[block_pool]") {
  FakeDevice dev;
  BlockPool pool(dev);
  const uint64_t a = pool.allocate(30 * MiB, 0);
  REQUIRE(pool.free(a));
  REQUIRE(pool.stats().peak_in_use == 30 * MiB);
  REQUIRE(pool.stats().peak_reserved == 30 * MiB);
  pool.reset_peak();
  REQUIRE(pool.stats().peak_in_use == 0);
  REQUIRE(pool.stats().peak_reserved == 30 * MiB);
  pool.release_cached();
  pool.reset_peak();
  REQUIRE(pool.stats().peak_reserved == 0);
}

TEST_CASE("block pool: random allocations never overlap and all memory comes back", "[block_pool]") {
  std::mt19937_64 rng(20261129);
  for (size_t max_split : {BlockPool::kNoLimit, 48 * MiB}) {
    FakeDevice dev(size_t(768) * MiB);
    BlockPool pool(dev, max_split);
    const int priv = pool.new_private();
    const int pools[] = {0, 1, 2, priv};
    std::map<uint64_t, size_t> live;  // start -> bytes asked
    std::uniform_real_distribution<double> log_size(0.0, 26.0);  // 1 B .. 64 MiB
    for (int step = 0; step < 20000; ++step) {
      if (live.empty() || rng() % 100 < 55) {
        const size_t n = size_t(std::exp2(log_size(rng))) + 1;
        const uint64_t p = pool.allocate(n, pools[rng() % 4]);
        if (!p) continue;  // (out of memory even after emptying the cache: the fake device is full)
        REQUIRE(pool.block_size(p) >= n);
        auto next = live.lower_bound(p);
        if (next != live.end()) REQUIRE(p + pool.block_size(p) <= next->first);
        if (next != live.begin()) REQUIRE(std::prev(next)->first + pool.block_size(std::prev(next)->first) <= p);
        auto seg = dev.mapped.upper_bound(p);
        REQUIRE(seg != dev.mapped.begin());
        --seg;
        REQUIRE(p + pool.block_size(p) <= seg->first + seg->second);
        live[p] = n;
      } else {
        auto it = live.begin();
        std::advance(it, std::ptrdiff_t(rng() % live.size()));
        REQUIRE(pool.free(it->first));
        live.erase(it);
      }
      if (step % 1000 == 0) {
        size_t in_use = 0;
        for (auto& [p, n] : live) in_use += pool.block_size(p);
        REQUIRE(pool.stats().in_use == in_use);
        REQUIRE(pool.stats().reserved == dev.used);
      }
    }
    REQUIRE(dev.failed > 0);  // (the out-of-memory path ran)
    for (auto& [p, n] : live) REQUIRE(pool.free(p));
    pool.drop_private(priv);
    pool.release_cached();
    REQUIRE(dev.mapped.empty());
    REQUIRE(pool.stats().in_use == 0);
    REQUIRE(pool.stats().reserved == 0);
  }
}
