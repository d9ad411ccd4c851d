#include "vm/env.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>

#include "vm/error.hpp"

namespace cr {

namespace {

std::string shown(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", x);
  return buf;
}

}  // namespace

double env_number(const EnvNumber& e) {
  const char* v = env_setting(e.setting);
  if (!v || !*v) return e.fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (end == v || *end || !(x >= e.lo && x <= e.hi) || (e.whole && x != std::floor(x)))
    throw Error(cat(setting_name(e.setting), ": expected ", e.whole ? "a whole number" : "a number", " from ", shown(e.lo), " to ",
                    shown(e.hi), ", got \"", v, "\""));
  return x;
}

void check_environment() {
  for (const EnvNumber& e : {kEnvJitTimeout, kEnvJitFork, kEnvCudaWaves, kEnvCpuStreamBytes, kEnvProgressAfter,
                             kEnvCudaMaxSplitMb, kEnvCudaPdl, kEnvSplitAll, kEnvDistTimeout})
    env_number(e);
  // settings that take one of a few words (empty: the default)
  const struct {
    Setting setting;
    std::initializer_list<const char*> words;
  } choices[] = {{Setting::Traceback, {"short", "full"}}, {Setting::Cudnn, {"0", "1"}}, {Setting::CudnnSdp, {"0", "1"}},
                 {Setting::CudnnApi, {"graph", "legacy"}}};
  for (const auto& c : choices) {
    const char* v = env_setting(c.setting);
    if (!v || !*v || std::any_of(c.words.begin(), c.words.end(), [&](const char* w) { return std::strcmp(v, w) == 0; }))
      continue;
    std::string list;
    for (const char* w : c.words) list += cat(list.empty() ? "" : " or ", w);
    throw Error(cat(setting_name(c.setting), ": expected ", list, ", got \"", v, "\""));
  }
}

}  // namespace cr
