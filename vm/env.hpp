// Numbers and words from the environment (CRESCENT_*): a variable that is set but holds no number of its
// range is an error naming it, the range and what it holds, never silently the default. The VM
// checks them all when it starts (check_environment), so a typo fails at once.
#pragma once
#include "vm/config.hpp"

namespace cr {

struct EnvNumber {
  Setting setting;          // its variable (vm/config.hpp)
  double fallback, lo, hi;  // unset or empty: fallback
  bool whole;               // an integer
};

inline constexpr EnvNumber kEnvJitTimeout{Setting::JitTimeout, 60, 0.001, 86400, false};
inline constexpr EnvNumber kEnvJitFork{Setting::JitFork, 1, 0, 1, true};
inline constexpr EnvNumber kEnvCudaWaves{Setting::CudaWaves, 8, 1, 1024, true};
inline constexpr EnvNumber kEnvProgressAfter{Setting::ProgressAfter, 1, 0, 86400, false};
inline constexpr EnvNumber kEnvCpuStreamBytes{Setting::CpuStreamBytes, 0, 1, 1e15, true};  // 0: unset
inline constexpr EnvNumber kEnvCudaPdl{Setting::CudaPdl, 1, 0, 1, true};
inline constexpr EnvNumber kEnvCudaMaxSplitMb{Setting::CudaMaxSplitMb, 0, 20, 1e9, true};  // 0: unset
inline constexpr EnvNumber kEnvSplitAll{Setting::SplitAll, 0, 0, 1, true};
inline constexpr EnvNumber kEnvDistTimeout{Setting::DistTimeout, 300, 0.001, 1e9, false};

// Settings that take one of two words; unset or empty: words[fallback].
struct EnvWords {
  Setting setting;
  const char* words[2];
  int fallback;
};
inline constexpr EnvWords kEnvTraceback{Setting::Traceback, {"short", "full"}, 0};
inline constexpr EnvWords kEnvCudnn{Setting::Cudnn, {"0", "1"}, 1};
inline constexpr EnvWords kEnvCudnnSdp{Setting::CudnnSdp, {"0", "1"}, 1};
inline constexpr EnvWords kEnvCudnnApi{Setting::CudnnApi, {"graph", "legacy"}, 0};

double env_number(const EnvNumber& v);
// The index in e.words of the variable's value; another value raises, naming what it takes.
int env_word(const EnvWords& e);
void check_environment();

}  // namespace cr
