// The T.distributed entries of the cr_api table (vm/lua/ffi_api.h cr_dist_api): the default
// process group (vm/collectives.hpp: an NCCL communicator, or the simulated CPU group), eager
// collectives on it. The rendezvous, list forms and work handles are stdlib/distributed.lua's.
#include "vm/lua/dist_api.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "vm/collectives.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/error.hpp"
#include "vm/graph/buckets.hpp"
#include "vm/graph/recorder.hpp"
#include "vm/sim_group.hpp"

namespace cr {
namespace {

template <class F> int32_t guarded(cr_ctx* c, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    Context::of(c).error = e.what();
    return -1;
  }
}

const char* dist_unavailable() {
  static std::string why;
  return cuda::nccl_available(&why) ? nullptr : why.c_str();
}

int32_t dist_unique_id(cr_ctx* c, char* out) {
  return guarded(c, [&] {
    const cuda::NcclId id = cuda::nccl_unique_id();
    std::memcpy(out, id.data(), id.size());
    return 0;
  });
}

dist::Group& fresh_group(int32_t rank, int32_t world, double timeout_s) {
  dist::Group& g = dist::group();
  if (g.active()) fail("init_process_group: the default process group is already initialized");
  g.rank = rank, g.world = world, g.timeout_s = timeout_s;
  return g;
}

int32_t dist_init(cr_ctx* c, const char* id, int32_t rank, int32_t world, int32_t device, double timeout_s) {
  return guarded(c, [&] {
    dist::Group& g = fresh_group(rank, world, timeout_s);
    if (std::string p = cuda::device_problem(device); !p.empty())
      fail(cat("init_process_group: rank ", rank, " uses cuda:", device, " (LOCAL_RANK), but ", p));
    cuda::NcclId nid;
    std::memcpy(nid.data(), id, nid.size());
    g.comm = cuda::nccl_comm_init(nid, rank, world, device, timeout_s);
    g.device = device;
    return 0;
  });
}

int32_t dist_init_simulated(cr_ctx* c, const char* dir, const char* run, int32_t rank, int32_t world, double timeout_s) {
  return guarded(c, [&] {
    fresh_group(rank, world, timeout_s).sim = std::make_shared<dist::SimGroup>(dir, run, rank, world, timeout_s);
    return 0;
  });
}

int32_t dist_destroy(cr_ctx* c, int32_t abort, double timeout_s) {
  return guarded(c, [&] {
    dist::Group& g = dist::group();
    cuda::NcclComm* comm = g.comm;
    g = dist::Group{};
    if (!comm) return 0;
    if (abort) cuda::nccl_comm_abort(comm);
    else cuda::nccl_comm_destroy(comm, timeout_s);
    return 0;
  });
}

// t, real (not a lazy value of a capture); `write`: the collective writes it
Tensor real(cr_ctx* c, cr_tensor* p, bool write) {
  Context& ctx = Context::of(c);
  graph::ensure_real(ctx, p);
  Tensor t(p, true);
  if (write) {
    graph::before_write(ctx, t.storage());
    t.storage()->version.fetch_add(1);
  }
  return t;
}

int32_t dist_collective(cr_ctx* c, int32_t coll, cr_tensor* send, cr_tensor* recv, int32_t op, int32_t root,
                        int64_t stream) {
  return guarded(c, [&] {
    if (coll < 0 || coll > 3) fail(cat("dist_collective: no collective ", coll));
    const auto k = cuda::Coll(coll);
    const char* name = k == cuda::Coll::all_gather ? "all_gather_into_tensor"
                       : k == cuda::Coll::reduce_scatter ? "reduce_scatter_tensor" : dist::coll_name(k);
    try {
      const Tensor s = real(c, send, false), r = real(c, recv, true);
      dist::collective(name, k, s, r, cuda::RedOp(op), root, stream);
    } catch (const Error& e) {
      throw Error(cat(name, ": ", e.what()));
    }
    return 0;
  });
}

int32_t dist_wait(cr_ctx* c, const char* what, int64_t stream) {
  return guarded(c, [&] {
    dist::Group& g = dist::group();
    if (!g.comm) return 0;  // (the simulated group's collectives are done when they return)
    const cuda::CUstream st = stream < 0 ? cuda::current_stream(g.device) : cuda::stream_of(stream);
    cuda::nccl_wait(g.comm, st, what, g.rank, g.timeout_s);
    return 0;
  });
}

int32_t buckets_register(cr_ctx* c, cr_tensor* const* leaves, const int32_t* sizes, int32_t n) {
  return guarded(c, [&] {
    std::vector<std::vector<cr_tensor*>> buckets(size_t(std::max(n, 0)));
    for (int32_t b = 0, at = 0; b < n; at += sizes[b], ++b) buckets[size_t(b)].assign(leaves + at, leaves + at + sizes[b]);
    return graph::buckets_register(buckets);
  });
}

void buckets_set_sync(int32_t id, int32_t sync) { graph::buckets_set_sync(id, sync != 0); }
int32_t buckets_take_reduced(int32_t id, cr_tensor* leaf) { return graph::buckets_take_reduced(id, leaf) ? 1 : 0; }
void buckets_release(int32_t id) { graph::buckets_release(id); }

}  // namespace

const cr_dist_api* dist_api_table() {
  static const cr_dist_api api = {dist_unavailable, dist_unique_id, dist_init, dist_init_simulated, dist_collective,
                                  dist_wait, dist_destroy, buckets_register, buckets_set_sync,
                                  buckets_take_reduced, buckets_release};
  return &api;
}

}  // namespace cr
