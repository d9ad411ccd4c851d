// TEMPORARY build scaffold: replaced by vm/ops/views.cpp and vm/ops/joins.cpp
#include "vm/registry.hpp"

namespace cr {
void register_views(Registry&) {}
void register_joins(Registry&) {}
}  // namespace cr
