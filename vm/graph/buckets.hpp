// DDP's gradient buckets inside compiled backward graphs (issue 40). DistributedDataParallel
// (stdlib/ddp.lua) registers its buckets: the leaves of each, in its order. The backward graph
// of a compiled segment whose node alone feeds every leaf of a bucket, into a .grad still empty,
// reduces that bucket itself: _dist_bucket_start right after the last of its gradients is made,
// so NCCL runs it on the communication stream while the rest of the backward computes, and
// _dist_bucket_wait at the end, where the reduced gradients leave the graph for .grad as views
// of the bucket's buffer. Other buckets (no_sync, accumulation, a bucket split across segments)
// stay with DDP's hooks.
#pragma once
#include <cstdint>
#include <vector>

#include "vm/autograd/node.hpp"
#include "vm/graph/joint_trace.hpp"

namespace cr::graph {

// DistributedDataParallel's side: its buckets' leaves (kept by DDP's module; compared, never
// read), whether it reduces (no_sync), and whether a leaf's gradient of the backward that just
// ran was reduced in a graph (the mark is cleared).
int32_t buckets_register(const std::vector<std::vector<cr_tensor*>>& leaves);
void buckets_set_sync(int32_t id, bool sync);
bool buckets_take_reduced(int32_t id, cr_tensor* leaf);
void buckets_release(int32_t id);

// Per bucket a backward can reduce, the positions of its leaves in a node's inputs (DDP's order).
using BucketPlan = std::vector<std::vector<int32_t>>;
// Called from a node's Backward::apply (autograd::sole_accumulation holds there).
BucketPlan plan_buckets(const std::vector<autograd::Input>& inputs);
// Adds plan's reductions to a traced backward graph (t.grad_out: by input position); returns the
// buckets it placed (those whose every gradient the graph makes).
BucketPlan place_buckets(Traced& t, const BucketPlan& plan);
// After such a graph ran: its leaves' gradients are reduced (buckets_take_reduced).
void mark_reduced(const std::vector<autograd::Input>& inputs, const BucketPlan& placed);

}  // namespace cr::graph
