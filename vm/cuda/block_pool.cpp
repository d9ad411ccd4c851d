#include "vm/cuda/block_pool.hpp"

#include <algorithm>

namespace cr::cuda {

BlockPool::BlockPool(SegmentSource& source, size_t max_split) : source_(source), max_split_(max_split) {}

BlockPool::~BlockPool() {
  for (auto& [key, pool] : pools_)
    for (FreeSet* set : {&pool.small, &pool.large})
      for (Block* b : *set) delete b;
  for (auto& [p, b] : live_) delete b;
}

size_t BlockPool::segment_size(size_t size) const {
  if (size <= kSmallSize) return kSmallSegment;
  if (size < kMinLargeAlloc) return kLargeSegment;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void BlockPool::note_use(long long in_use_delta, long long reserved_delta) {
  stats_.in_use = size_t((long long)stats_.in_use + in_use_delta);
  stats_.reserved = size_t((long long)stats_.reserved + reserved_delta);
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
}

void BlockPool::reset_peak() {
  stats_.peak_in_use = stats_.in_use;
  stats_.peak_reserved = stats_.reserved;
}

// PyTorch's get_free_block: the smallest free block that fits, unless it is oversize for a
// request below max_split, or 20 MiB (a large segment) or more too big for an oversize request.
BlockPool::Block* BlockPool::best_fit(FreeSet& set, size_t size) {
  Block key;
  key.size = size;
  auto it = set.lower_bound(&key);
  if (it == set.end()) return nullptr;
  Block* b = *it;
  if (size < max_split_ && b->size >= max_split_) return nullptr;
  if (size >= max_split_ && b->size >= size + kLargeSegment) return nullptr;
  set.erase(it);
  return b;
}

bool BlockPool::should_split(const Block* b, size_t size) const {
  const size_t rest = b->size - size;
  if (b->seg->small) return rest >= kMinBlock;
  return size < max_split_ && rest > kSmallSize;
}

BlockPool::Block* BlockPool::new_segment(size_t size, int pool, bool small) {
  const size_t bytes = segment_size(size);
  uint64_t base = source_.map(bytes);
  if (!base) {
    release_cached();
    base = source_.map(bytes);
    if (!base) return nullptr;
  }
  auto seg = std::make_unique<Segment>();
  seg->base = base;
  seg->size = bytes;
  seg->pool = pool;
  seg->small = small;
  auto* b = new Block;
  b->ptr = base;
  b->size = bytes;
  b->seg = seg.get();
  segments_[base] = std::move(seg);
  pools_[pool].reserved += bytes;
  ++stats_.driver_allocs;
  note_use(0, (long long)bytes);
  return b;
}

uint64_t BlockPool::allocate(size_t nbytes, int pool) {
  if (nbytes > kMaxRequest) return 0;  // (no device has it; the roundings below would wrap)
  const size_t size = round(nbytes);
  const bool small = size <= kSmallSize;
  Pool& p = pools_[pool];
  Block* b = best_fit(small ? p.small : p.large, size);
  if (b) ++stats_.cache_hits;
  else if (!(b = new_segment(size, pool, small))) return 0;
  if (should_split(b, size)) {
    auto* rest = new Block;
    rest->ptr = b->ptr + size;
    rest->size = b->size - size;
    rest->seg = b->seg;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    free_set(rest).insert(rest);
  }
  b->allocated = true;
  live_[b->ptr] = b;
  note_use((long long)b->size, 0);
  return b->ptr;
}

// dst absorbs its free neighbour src, which leaves its pool's free set.
void BlockPool::merge(Block* dst, Block* src) {
  free_set(src).erase(src);
  if (dst->prev == src) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  dst->size += src->size;
  delete src;
}

bool BlockPool::free(uint64_t p) {
  auto it = live_.find(p);
  if (it == live_.end()) return false;
  Block* b = it->second;
  live_.erase(it);
  b->allocated = false;
  note_use(-(long long)b->size, 0);
  if (b->prev && !b->prev->allocated) merge(b, b->prev);
  if (b->next && !b->next->allocated) merge(b, b->next);
  free_set(b).insert(b);
  return true;
}

size_t BlockPool::release_cached() {
  source_.quiesce();
  size_t released = 0;
  for (auto& [key, pool] : pools_) {
    if (key < 0) continue;  // (a live private pool: a graph replays into its addresses)
    for (FreeSet* set : {&pool.small, &pool.large}) {
      for (auto it = set->begin(); it != set->end();) {
        Block* b = *it;
        if (b->prev || b->next) {
          ++it;
          continue;
        }
        const size_t bytes = b->size;  // (a free block without neighbours is its whole segment)
        source_.unmap(b->ptr, bytes);
        segments_.erase(b->ptr);
        it = set->erase(it);
        delete b;
        pool.reserved -= bytes;
        released += bytes;
        ++stats_.driver_frees;
        note_use(0, -(long long)bytes);
      }
    }
  }
  return released;
}

int BlockPool::new_private() {
  const int key = next_private_--;
  pools_[key];
  return key;
}

void BlockPool::drop_private(int key) {
  auto it = pools_.find(key);
  if (it == pools_.end()) return;
  Pool& to = pools_[0];
  for (auto& [base, seg] : segments_)
    if (seg->pool == key) seg->pool = 0;
  to.small.insert(it->second.small.begin(), it->second.small.end());
  to.large.insert(it->second.large.begin(), it->second.large.end());
  to.reserved += it->second.reserved;
  pools_.erase(it);
}

int BlockPool::pool_of(uint64_t p, bool* found) const {
  auto it = segments_.upper_bound(p);
  *found = it != segments_.begin() && p < std::prev(it)->second->base + std::prev(it)->second->size;
  return *found ? std::prev(it)->second->pool : 0;
}

size_t BlockPool::block_size(uint64_t p) const {
  auto it = live_.find(p);
  return it == live_.end() ? 0 : it->second->size;
}

size_t BlockPool::pool_reserved(int key) const {
  auto it = pools_.find(key);
  return it == pools_.end() ? 0 : it->second.reserved;
}

}  // namespace cr::cuda
