// The CPU thread pool of the eager kernels: parallel_for over [0, n) in contiguous chunks.
// Threads: T.set_num_threads, CRESCENT_NUM_THREADS (a bad value raises), default all cores. Nested calls and calls made while another
// VM's thread holds the pool run serially, so kernels never deadlock.
#pragma once
#include <cstdint>
#include <functional>

namespace cr {

int num_threads();
// Replaces the pool with one of n threads (1 to 256; throws cr::Error otherwise). OpenBLAS follows:
// it runs single-threaded on blocks of a product that this pool shares out (vm/ops/linalg.cpp).
void set_num_threads(int n);
// Calls fn(begin, end) on disjoint chunks; runs inline when n < grain or the pool is busy.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace cr
