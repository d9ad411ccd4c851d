#include "vm/lua/layers.hpp"

#include <mutex>

#include "jit/hooks.hpp"
#include "vm/graph/hooks.hpp"

namespace cr {

void install_hooks() {
  static std::once_flag once;
  std::call_once(once, [] {
    graph::install_hooks(hooks());
    jit::install_hooks(hooks());
  });
}

}  // namespace cr
