// Bytes of CPU tensor storage in use and the most there were since the last reset (storage_new
// and storage_release keep them, vm/tensor.cpp): peak-memory tests and benches on the CPU, as
// T.cuda.stats().in_use is on a device. Wrapped host memory (from_blob) is not counted.
#pragma once
#include <cstddef>

namespace cr {
size_t host_storage_in_use();
size_t host_storage_peak();
void host_storage_reset_peak();  // the peak becomes the bytes in use now
}  // namespace cr
