// Checks that device kernels make on data: the positions of gathers (jit/loop_ir.hpp) and of
// scatters (vm/kernels/cuda/scatter.cuh). A
// kernel that finds a position outside 1..limit reads position 1 instead (never a wild read) and
// records it in its plan's check word, four int64: {position, limit, site + 1, 0}. A CPU program
// reads the word when its run ends and raises. A CUDA program does not wait for its kernels: its
// word is read at the device's next synchronisation (a copy to the host, T.cuda.synchronize()),
// which raises then - the way CUDA reports a kernel's faults, but the context stays usable.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cr {

// A gather of a plan (LoopGraph::sites): {"x.lua:3", "index_select", "dim 1 of size 50"}.
struct CheckSite {
  std::string where, op, what;
};
using CheckSites = std::vector<CheckSite>;
constexpr int kCheckWords = 4;

// When the word records a bad position, throws the eager op's error: "x.lua:3: index_select:
// index 9 is out of range for dim 1 of size 3 (expected 1..3)", located at the op's line (a
// cr::LocatedError) unless `later` says where it was found instead (CUDA's next synchronisation).
void raise_check(const int64_t* word, const CheckSites& sites, const char* later = nullptr);

}  // namespace cr
