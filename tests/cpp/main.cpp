#define CATCH_CONFIG_RUNNER
// GCC 12 at -O1 (the sanitizer build) reports a false "may be used uninitialized" inside
// <regex>, which Catch2's runner includes: not our code, so silenced here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <catch2/catch.hpp>
#pragma GCC diagnostic pop

#include "vm/lua/layers.hpp"

// The tests make cr::Context objects without a VM: the layers' hooks go in first (vm/hooks.hpp).
int main(int argc, char** argv) {
  cr::install_hooks();
  return Catch::Session().run(argc, argv);
}
