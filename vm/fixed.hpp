// Times and sizes in log lines: fixed precision (614.1 ms), never a 17-digit round trip.
#pragma once
#include <cstdio>
#include <string>

namespace cr {

inline std::string fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace cr
