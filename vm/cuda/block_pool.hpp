// The block management of the device caching allocator (vm/cuda/memory.hpp), PyTorch's
// CUDACachingAllocator design without a driver call of its own, so it is unit-tested on the host
// (tests/cpp/test_block_pool.cpp):
// - memory comes from the device in segments: 2 MiB for requests up to 1 MiB (the small pool),
//   20 MiB for requests up to 10 MiB, the request rounded to 2 MiB above (the large pool);
// - requests are rounded to 512 B and served best-fit (smallest free block, then lowest
//   address) from the free blocks of their pool; a larger block is split, and a freed block
//   merges with its free neighbours in its segment, so a freed 96 MiB block serves a 60 MiB one;
// - blocks of max_split bytes or more ("oversize") are never split, and an oversize request
//   takes no free block 20 MiB or more larger than itself (the default max_split: no limit);
// - when the device is out of memory, the fully free segments are given back and the
//   allocation tried once more;
// - pools are keyed by an int: a stream slot (>= 0: blocks freed on one stream are only reused by
//   that stream) or a private pool (< 0, CUDA graphs), whose segments are never given back while
//   it lives and which join pool 0 when it is dropped.
// Not thread-safe: the caller holds its lock (memory.cpp's).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

namespace cr::cuda {

// Whole segments from the device.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  virtual uint64_t map(size_t bytes) = 0;  // 0: out of memory (other failures throw)
  virtual void unmap(uint64_t base, size_t bytes) = 0;
  // Called before cached segments are given back: the device's queued work may still use them.
  // It may free blocks (pending ones whose streams are now done).
  virtual void quiesce() = 0;
};

// Bytes are block sizes (the rounded request) in use, and segment sizes held from the device.
struct MemoryStats {
  int64_t driver_allocs = 0, driver_frees = 0, cache_hits = 0;
  size_t in_use = 0, reserved = 0;
  size_t peak_in_use = 0, peak_reserved = 0;  // since the start or reset_peak()
};

class BlockPool {
 public:
  static constexpr size_t kMinBlock = 512, kSmallSize = size_t(1) << 20, kSmallSegment = size_t(2) << 20,
                          kLargeSegment = size_t(20) << 20, kMinLargeAlloc = size_t(10) << 20,
                          kRoundLarge = size_t(2) << 20, kNoLimit = ~size_t(0), kMaxRequest = size_t(1) << 60;

  explicit BlockPool(SegmentSource& source, size_t max_split = kNoLimit);
  ~BlockPool();  // forgets the segments (the device context goes with the process)
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least nbytes (> 0) from pool `pool`; 0 when the device has no memory left,
  // even after the cached segments were given back.
  uint64_t allocate(size_t nbytes, int pool);
  // Frees a block allocate() returned; false (and nothing changes) for any other address.
  bool free(uint64_t p);
  size_t release_cached();  // gives the fully free segments back (not a live private pool's); bytes

  int new_private();  // a private pool's key (< 0)
  void drop_private(int pool);  // its segments join pool 0
  // The pool of the segment holding address p; `found` false when no segment does.
  int pool_of(uint64_t p, bool* found) const;
  size_t block_size(uint64_t p) const;  // of a block in use; 0 for any other address
  size_t pool_reserved(int pool) const;
  const MemoryStats& stats() const { return stats_; }
  void reset_peak();
  size_t segment_size(size_t rounded) const;  // the segment a request of that many bytes maps
  static size_t round(size_t nbytes) { return nbytes <= kMinBlock ? kMinBlock : (nbytes + kMinBlock - 1) / kMinBlock * kMinBlock; }

 private:
  struct Segment;
  struct Block {
    uint64_t ptr = 0;
    size_t size = 0;
    Segment* seg = nullptr;
    Block *prev = nullptr, *next = nullptr;  // neighbours in the segment
    bool allocated = false;
  };
  struct Segment {
    uint64_t base = 0;
    size_t size = 0;
    int pool = 0;
    bool small = false;
  };
  struct BySize {  // best fit: the smallest block, then the lowest address
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using FreeSet = std::set<Block*, BySize>;
  struct Pool {
    FreeSet small, large;
    size_t reserved = 0;
  };

  FreeSet& free_set(Block* b) { return b->seg->small ? pools_[b->seg->pool].small : pools_[b->seg->pool].large; }
  Block* best_fit(FreeSet& set, size_t size);
  Block* new_segment(size_t size, int pool, bool small);
  bool should_split(const Block* b, size_t size) const;
  void merge(Block* dst, Block* src);
  void note_use(long long in_use_delta, long long reserved_delta);

  SegmentSource& source_;
  size_t max_split_;
  std::map<int, Pool> pools_;
  std::map<uint64_t, std::unique_ptr<Segment>> segments_;  // by base
  std::unordered_map<uint64_t, Block*> live_;
  MemoryStats stats_;
  int next_private_ = -1;
};

}  // namespace cr::cuda
