// TEMPORARY build scaffold: replaced by vm/ops/reductions.cpp
#include "vm/registry.hpp"

namespace cr {
void register_reductions(Registry&) {}
}  // namespace cr
