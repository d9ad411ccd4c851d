#include "vm/sim_group.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "vm/collectives.hpp"
#include "vm/error.hpp"

namespace cr::dist {
namespace {

using cuda::Coll;
using cuda::RedOp;
using Clock = std::chrono::steady_clock;

template <class T> T combine(T a, T b, RedOp op) {
  switch (op) {
    case RedOp::sum: case RedOp::avg: return T(a + b);
    case RedOp::prod: return T(a * b);
    case RedOp::max: return std::max(a, b);
    case RedOp::min: return std::min(a, b);
  }
  return a;
}

// out[i] = the reduction of parts[0][at + i], parts[1][at + i], ... in rank order
template <class T> void reduce(const std::vector<std::string>& parts, int64_t at, int64_t n, RedOp op, void* out) {
  T* o = static_cast<T*>(out);
  const int world = int(parts.size());
  for (int64_t i = 0; i < n; ++i) {
    T acc = reinterpret_cast<const T*>(parts[0].data())[at + i];
    for (int q = 1; q < world; ++q) acc = combine(acc, reinterpret_cast<const T*>(parts[size_t(q)].data())[at + i], op);
    if constexpr (std::is_floating_point_v<T>)
      if (op == RedOp::avg) acc /= T(world);
    o[i] = acc;
  }
}

void reduce_as(DType d, const std::vector<std::string>& parts, int64_t at, int64_t n, RedOp op, void* out) {
  switch (d) {
    case DType::f32: return reduce<float>(parts, at, n, op, out);
    case DType::f64: return reduce<double>(parts, at, n, op, out);
    case DType::i32: return reduce<int32_t>(parts, at, n, op, out);
    case DType::i64: return reduce<int64_t>(parts, at, n, op, out);
    case DType::b8: return reduce<uint8_t>(parts, at, n, op == RedOp::sum ? RedOp::max : op == RedOp::prod ? RedOp::min : op, out);
    default: fail(cat("the simulated process group cannot reduce ", dtype_name(d), " tensors"));
  }
}

void check_reduction(DType d, RedOp op) {
  if (op == RedOp::avg && (d == DType::b8 || d == DType::i32 || d == DType::i64))
    fail(cat("op \"avg\" needs a floating tensor in the simulated process group, got ", dtype_name(d)));
  if (d == DType::f16 || d == DType::bf16)
    fail(cat("the simulated process group does not reduce ", dtype_name(d), " tensors (float32, float64, int32, int64, bool)"));
}

}  // namespace

SimGroup::SimGroup(std::string dir, std::string run, int rank, int world, double timeout_s)
    : dir_(std::move(dir)), run_(std::move(run)), rank_(rank), world_(world), timeout_s_(timeout_s) {}

std::string SimGroup::path(int64_t seq, int rank) const { return cat(dir_, "/sim-", run_, "-", seq, "-", rank); }

std::string SimGroup::describe(const Header& h) const {
  return cat(coll_name(Coll(h.coll)), " of ", h.numel, " ", dtype_name(DType(h.dtype)), " elements",
             Coll(h.coll) == Coll::broadcast ? cat(" from rank ", h.root) : "");
}

void SimGroup::post(const Header& h, const Tensor& send) const {
  const std::string final_path = path(h.seq, rank_), tmp = final_path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(cat("simulated process group: cannot write ", tmp));
  const size_t bytes = size_t(send.numel()) * send.itemsize();
  const bool ok = std::fwrite(&h, sizeof h, 1, f) == 1 && (bytes == 0 || std::fwrite(send.data_bytes(), bytes, 1, f) == 1);
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), final_path.c_str()) != 0)
    fail(cat("simulated process group: cannot write ", final_path));
}

// Rank q's contribution to the collective `mine` describes (its data bytes), checked to be the same collective.
std::string SimGroup::await(const char* name, const Header& mine, int q) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  std::FILE* f = nullptr;
  for (int polls = 0; !(f = std::fopen(path(mine.seq, q).c_str(), "rb")); ++polls) {
    if (Clock::now() > deadline) {
      aborted_ = cat("a timeout in ", name);
      fail(cat("rank ", rank_, " timed out after ", timeout_s_, " s waiting for rank ", q, " to join collective #",
               mine.seq, " (CRESCENT_DIST_TIMEOUT; the process group is aborted)"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(polls < 100 ? 100 : 2000));
  }
  Header h;
  std::string data;
  bool ok = std::fread(&h, sizeof h, 1, f) == 1 && std::memcmp(h.magic, mine.magic, sizeof h.magic) == 0;
  const bool same = ok && h.coll == mine.coll && h.dtype == mine.dtype && h.numel == mine.numel && h.op == mine.op &&
                    h.root == mine.root;
  if (same) {
    data.resize(size_t(h.numel) * dtype_size(DType(h.dtype)));
    ok = data.empty() || std::fread(data.data(), data.size(), 1, f) == 1;
  }
  std::fclose(f);
  if (!ok) fail(cat("rank ", rank_, " cannot read rank ", q, "'s part of collective #", mine.seq));
  if (!same) {
    aborted_ = cat("a mismatch in ", name);
    fail(cat("the ranks disagree on collective #", mine.seq, ": rank ", rank_, " issued ", describe(mine), ", rank ",
             q, " issued ", describe(h), " (every rank must issue the same collectives, in the same order and shapes)"));
  }
  return data;
}

void SimGroup::run(const char* name, Coll coll, const Tensor& send, const Tensor& recv, RedOp op, int root) {
  if (!aborted_.empty()) fail(cat("the simulated process group was aborted after ", aborted_));
  const bool reduces = coll == Coll::all_reduce || coll == Coll::reduce_scatter;
  if (reduces) check_reduction(send.dtype(), op);
  Header h;
  h.coll = int32_t(coll), h.dtype = int32_t(send.dtype()), h.op = reduces ? int32_t(op) : 0, h.root = root;
  h.seq = ++seq_, h.numel = send.numel();
  post(h, send);
  std::vector<std::string> parts(static_cast<size_t>(world_));
  for (int q = 0; q < world_; ++q)
    parts[size_t(q)] = q == rank_ ? std::string(send.data_bytes(), size_t(send.numel()) * send.itemsize()) : await(name, h, q);
  // every rank posted #seq, so every rank read #seq - 1: this rank's file of it can go
  if (h.seq > 1) std::remove(path(h.seq - 1, rank_).c_str());
  const size_t bytes = size_t(send.numel()) * send.itemsize();
  char* out = recv.data_bytes();
  switch (coll) {
    case Coll::all_reduce: return reduce_as(send.dtype(), parts, 0, send.numel(), op, out);
    case Coll::reduce_scatter: return reduce_as(send.dtype(), parts, rank_ * recv.numel(), recv.numel(), op, out);
    case Coll::broadcast: std::memcpy(out, parts[size_t(root)].data(), bytes); return;
    case Coll::all_gather:
      for (int q = 0; q < world_; ++q) std::memcpy(out + size_t(q) * bytes, parts[size_t(q)].data(), bytes);
      return;
  }
}

}  // namespace cr::dist
