#include "vm/kernels/cuda/attention_simt.hpp"

#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::cuda {
// 8 rows x 8 keys a thread and one block of 8 warps per SM (64 independent FMAs a thread) beat
// 4 x 4 at two or three blocks per SM (bench/RESULTS.md H35): fewer shared-memory reads per FMA. Tiles of 128 keys for v's head sizes up to
// 64 (the registers of 8 x 8 scores and 8 x 4 outputs), else 64; smaller blocks where the shared
// memory does not take these (227 KiB a block on the H100, less on other GPUs).
SimtShape simt_shape(int E, int Ev, size_t shared_limit) {
  SimtShape s;
  s.pk = (E / 4) % 2 == 1 ? E : E + 4;  // (a pitch of an odd number of 16-byte chunks)
  const int cv = Ev / 16;
  s.g = cv % 4 == 0 ? 4 : cv % 2 == 0 ? 2 : 1;
  s.min_blocks = 1;
  for (auto [ra, bn] : {std::pair{8, 128}, {8, 64}, {4, 64}, {4, 32}}) {
    if (bn == 128 && Ev > 64) continue;
    s.ra = ra, s.bn = bn;
    if (s.shared_bytes(Ev) <= shared_limit) return s;
  }
  s.ra = 0;
  return s;
}

size_t SimtShape::shared_bytes(int Ev) const {
  return size_t(rows() * pk + bn * pk + bn * Ev + bn * (rows() + 4)) * 4;
}

std::string attention_simt_source(int E, int Ev, size_t shared_limit) {
  const SimtShape s = simt_shape(E, Ev, shared_limit);
  return cat(prelude(), "\n#define E ", E, "\n#define EV ", Ev, "\n#define RA ", s.ra, "\n#define BN ", s.bn, "\n#define G ",
             s.g, "\n#define PK ", s.pk, "\n#define PP ", s.rows() + 4, "\n#define MIN_BLOCKS ", s.min_blocks, "\n",
             cuda_source("attention_common.cuh"), cuda_source("attention_simt.cuh"));
}

}  // namespace cr::cuda
