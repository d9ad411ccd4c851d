// The host block caches (vm/alloc.cpp): small blocks come from 2 MiB chunks, a batch at a time,
// and go back to the caches, so a heap that grows again reuses them instead of new pages.
#include <catch2/catch.hpp>

#include <vector>

#include "vm/alloc.hpp"

using namespace cr;

TEST_CASE("small host blocks are carved from chunks and reused, never freed to malloc", "[alloc]") {
  void* probe = host_alloc(300);
  const bool chunks = host_chunks_own(probe);
  host_free(probe, 300);
  if (!chunks) {
    REQUIRE(host_chunk_bytes() == 0);  // a sanitizer build: malloc's blocks, watched
    return;
  }
  // every class up to 64 KiB, headers (cr_tensor: 512 B) and small tensors' data included
  for (size_t n : {size_t(1), size_t(64), size_t(300), size_t(4096), size_t(65536)}) {
    void* p = host_alloc(n);
    REQUIRE(host_chunks_own(p));
    host_free(p, n);
  }
  void* big = host_alloc(size_t(128) << 10);
  REQUIRE_FALSE(host_chunks_own(big));
  host_free(big, size_t(128) << 10);
  // a burst larger than every cache's bound (as Lua's collector frees thousands of headers at
  // once): the blocks stay cached, and the same burst again maps no new chunk
  std::vector<void*> blocks;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 40000; ++i) blocks.push_back(host_alloc(300));
    for (void* p : blocks) REQUIRE(host_chunks_own(p));
    const size_t mapped = host_chunk_bytes();
    for (void* p : blocks) host_free(p, 300);
    blocks.clear();
    host_cache_clear();  // (keeps chunk blocks: they go back to the system only with their chunk)
    for (int i = 0; i < 40000; ++i) blocks.push_back(host_alloc(300));
    REQUIRE(host_chunk_bytes() == mapped);
    for (void* p : blocks) host_free(p, 300);
    blocks.clear();
  }
}
