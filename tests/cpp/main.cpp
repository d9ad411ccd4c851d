#define CATCH_CONFIG_MAIN
// GCC 12 at -O1 (the sanitizer build) reports a false "may be used uninitialized" inside
// <regex>, which Catch2's runner includes: not our code, so silenced here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <catch2/catch.hpp>
#pragma GCC diagnostic pop
