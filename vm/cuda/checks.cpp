#include "vm/cuda/checks.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "vm/cuda/driver.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/error.hpp"

namespace cr::cuda {
namespace {

// (driver calls only: the words are read from inside copy_to_host, and outlive the allocator's
// statics at exit)
std::mutex g_mutex;
std::vector<std::shared_ptr<DeviceCheck>>* g_pending = new std::vector<std::shared_ptr<DeviceCheck>>;  // (never freed)
std::atomic<int> g_count{0};

CUdeviceptr dptr(void* p) { return reinterpret_cast<CUdeviceptr>(p); }

}  // namespace

DeviceCheck::DeviceCheck(int d, CheckSites s) : device(d), sites(std::move(s)) {
  use_device(device);
  CUdeviceptr p = 0;
  CR_CU(cuMemAlloc(&p, sizeof(int64_t) * kCheckWords), "a check word");
  word = reinterpret_cast<void*>(p);
  CR_CU(cuMemsetD8Async(p, 0, sizeof(int64_t) * kCheckWords, current_stream(device)), "a check word");
}

DeviceCheck::~DeviceCheck() {
  try {
    use_device(device);
    driver()->cuMemFree(dptr(word));
  } catch (const std::exception&) {  // the process is going down with its context
  }
}

void defer_check(const std::shared_ptr<DeviceCheck>& c, void* stream) {
  std::lock_guard<std::mutex> g(g_mutex);
  c->stream = stream;
  for (const auto& p : *g_pending)
    if (p == c) return;
  g_pending->push_back(c);
  g_count.store(int(g_pending->size()));
}

std::vector<std::shared_ptr<DeviceCheck>> move_deferred(void* captured, void* stream) {
  std::lock_guard<std::mutex> g(g_mutex);
  std::vector<std::shared_ptr<DeviceCheck>> found;
  for (const auto& c : *g_pending)
    if (c->stream == captured) {
      c->stream = stream;
      found.push_back(c);
    }
  return found;
}

void check_deferred(int index, void* synced, bool whole_device) {
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  std::vector<std::shared_ptr<DeviceCheck>> mine;
  {
    std::lock_guard<std::mutex> g(g_mutex);
    auto here = std::stable_partition(g_pending->begin(), g_pending->end(), [&](const auto& c) {
      return c->device != index || (!whole_device && c->stream != synced);
    });
    mine.assign(here, g_pending->end());
    g_pending->erase(here, g_pending->end());
    g_count.store(int(g_pending->size()));
  }
  const DeviceCheck* bad = nullptr;
  int64_t found[kCheckWords] = {0, 0, 0, 0};
  for (const auto& c : mine) {
    int64_t w[kCheckWords];
    use_device(c->device);
    const auto s = static_cast<CUstream>(c->stream);
    CR_CU(cuMemcpyDtoHAsync(w, dptr(c->word), sizeof w, s), "reading a check word");
    CR_CU(cuStreamSynchronize(s), "reading a check word");
    if (w[2] == 0) continue;
    CR_CU(cuMemsetD8Async(dptr(c->word), 0, sizeof w, s), "clearing a check word");
    if (!bad) {
      bad = c.get();
      std::copy(w, w + kCheckWords, found);
    }
  }
  if (bad) raise_check(found, bad->sites, ", found by a CUDA kernel that ran before this synchronisation");
}

}  // namespace cr::cuda
