// vm/config.hpp: every setting in one table, read through env_setting, listed by --help.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "vm/config.hpp"

using namespace cr;

TEST_CASE("settings: one table with the variable of each, read when asked", "[config]") {
  CHECK(std::string(setting_name(Setting::NumThreads)) == "CRESCENT_NUM_THREADS");
  CHECK(std::string(setting_name(Setting::CudaWaves)) == "CRESCENT_CUDA_WAVES");
  const std::string help = settings_help();
#define CR_SETTING_LISTED(id, env, fallback, doc)                                      \
  CHECK(std::string(setting_name(Setting::id)) == env);                                \
  CHECK(help.find(std::string("  ") + env + "  ") != std::string::npos);               \
  CHECK(help.find(std::string(doc) + " (default: " + fallback + ")") != std::string::npos);
  CR_SETTINGS(CR_SETTING_LISTED)
#undef CR_SETTING_LISTED
  ::setenv("CRESCENT_NVRTC_OPTIONS", "-lineinfo", 1);
  REQUIRE(env_setting(Setting::NvrtcOptions) != nullptr);
  CHECK(std::string(env_setting(Setting::NvrtcOptions)) == "-lineinfo");
  ::unsetenv("CRESCENT_NVRTC_OPTIONS");
  CHECK(env_setting(Setting::NvrtcOptions) == nullptr);
}

TEST_CASE("settings: found by their variable, as the Lua side reads them", "[config]") {
  Setting s;
#define CR_SETTING_FOUND(id, env, ...)    \
  REQUIRE(find_setting(env, &s));        \
  CHECK(s == Setting::id);
  CR_SETTINGS(CR_SETTING_FOUND)
#undef CR_SETTING_FOUND
  CHECK_FALSE(find_setting("CRESCENT_NO_SUCH_SETTING", &s));
  CHECK_FALSE(find_setting("HOME", &s));
}
