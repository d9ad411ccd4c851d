// The capture layer's entries of the runtime's hook table (vm/hooks.hpp).
#pragma once
#include "vm/hooks.hpp"

namespace cr::graph {

void install_hooks(Hooks& h);

}  // namespace cr::graph
