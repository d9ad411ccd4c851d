// Tensors on CUDA devices, as the eager path sees them. Memory and copies come from jit/cuda
// (the driver, loaded at run time); values move between host and device through staging copies
// of the bytes a view spans. Ops without a CUDA kernel of their own run on host copies of their
// CUDA operands and move their results back (run_on_host): every registry op gives correct
// results on CUDA tensors, at the price of two transfers, and T.cuda.stats().host_ops counts
// these calls so that a slow path is never silent.
#pragma once
#include <vector>

#include "vm/registry.hpp"

namespace cr {

// Whether an op call involves a CUDA device: a CUDA tensor among args, or its device option.
bool any_cuda(const OpDef& def, const cr_value* args, int nargs);
// A CPU tensor holding t's values (t itself when it is on the CPU); sizes and strides kept.
Tensor host_copy(const Tensor& t);
// dst = src (broadcast, converted) where either is on a CUDA device.
void copy_across(const Tensor& dst, const Tensor& src);
void fill_across(const Tensor& dst, double v);  // dst on a CUDA device
Tensor to_device(const Tensor& t, Device d);    // a contiguous copy of t on d

// Runs op `def` on host copies of the CUDA tensors among args; outputs go to the devices the
// op's metadata names (or, for ops that make their own outputs, the first CUDA input's device;
// in-place ops write back into their CUDA operand).
std::vector<Tensor> run_on_host(Context& ctx, const OpDef& def, const cr_value* args, int nargs);
int64_t host_op_count();

void* device_alloc(size_t nbytes, Device d);  // null for nbytes == 0
void device_free(void* p, size_t nbytes, Device d);
size_t device_garbage_budget();  // cuda::garbage_budget, or 64 MiB where CUDA is not used
size_t device_driver_bytes();    // cuda::driver_bytes_total (0 where CUDA is not used)

}  // namespace cr
