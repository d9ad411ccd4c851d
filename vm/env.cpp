#include "vm/env.hpp"

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

int env_word(const EnvWords& e) {
  const char* v = env_setting(e.setting);
  if (!v || !*v) return e.fallback;
  for (int i = 0; i < 2; ++i)
    if (std::strcmp(v, e.words[i]) == 0) return i;
  throw Error(cat(setting_name(e.setting), ": expected ", e.words[0], " or ", e.words[1], ", got \"", v, "\""));
}

void check_environment() {
  for (const EnvNumber& e : {kEnvJitTimeout, kEnvJitFork, kEnvCudaWaves, kEnvCpuStreamBytes, kEnvProgressAfter,
                             kEnvCudaMaxSplitMb, kEnvCudaPdl, kEnvSplitAll, kEnvDistTimeout})
    env_number(e);
  for (const EnvWords& e : {kEnvTraceback, kEnvCudnn, kEnvCudnnSdp, kEnvCudnnApi}) env_word(e);
}

}  // namespace cr
