#include "vm/env.hpp"

#include <cmath>
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
                             kEnvCudaMaxSplitMb, kEnvCudaPdl, kEnvSplitAll})
    env_number(e);
}

}  // namespace cr
