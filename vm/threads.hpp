// The CPU thread pool of the eager kernels: parallel_for over [0, n) in contiguous chunks.
// Threads: CRESCENT_NUM_THREADS, default all cores. Nested calls and calls made while another
// VM's thread holds the pool run serially, so kernels never deadlock.
#pragma once
#include <cstdint>
#include <functional>

namespace cr {

int num_threads();
// Calls fn(begin, end) on disjoint chunks; runs inline when n < grain or the pool is busy.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace cr
