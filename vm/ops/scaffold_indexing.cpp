// TEMPORARY build scaffold: replaced by vm/ops/indexing.cpp and vm/ops/linalg.cpp
#include "vm/registry.hpp"

namespace cr {
void register_indexing(Registry&) {}
void register_linalg(Registry&) {}
}  // namespace cr
