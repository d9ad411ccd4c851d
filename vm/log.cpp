#include "vm/log.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace cr {

namespace {

struct Name {
  const char* name;
  bool Logs::*on;
};
constexpr Name kNames[] = {{"graph", &Logs::graph},           {"guards", &Logs::guards},
                           {"recompiles", &Logs::recompiles}, {"graph_breaks", &Logs::graph_breaks},
                           {"perf", &Logs::perf},             {"fusion", &Logs::fusion},
                           {"output_code", &Logs::output_code}, {"host_ops", &Logs::host_ops},
                           {"aot", &Logs::aot},               {"partition", &Logs::partition},
                           {"cudagraphs", &Logs::cudagraphs}, {"autotune", &Logs::autotune},
                           {"progress", &Logs::progress}};

std::string valid_names() {
  std::string out;
  for (const Name& n : kNames) out += std::string(out.empty() ? "" : ", ") + n.name;
  return out;
}

}  // namespace

// An unknown name raises, naming the valid ones (as TORCH_LOGS does), rather than logging less
// than was asked without a word.
void Logs::parse(const std::string& list) {
  Logs parsed;
  for (size_t i = 0; i <= list.size();) {
    size_t j = std::min(list.find(',', i), list.size());
    std::string w = list.substr(i, j - i);
    i = j + 1;
    w.erase(0, w.find_first_not_of(' '));
    w.erase(w.find_last_not_of(' ') + 1);
    const bool on = w.empty() || w[0] != '-';
    if (!w.empty() && (w[0] == '+' || w[0] == '-')) w.erase(0, 1);
    if (w.empty()) continue;
    bool known = false;
    for (const Name& n : kNames)
      if (w == n.name) parsed.*n.on = on, known = true;
    if (!known)
      throw std::invalid_argument("CRESCENT_LOGS / T.compiler.set_logs: unknown log name \"" + w +
                                  "\" (expected a comma list of: " + valid_names() + "; -name turns one off)");
  }
  *this = parsed;
}

void log_line(const std::string& what, const std::string& text) {
  std::fprintf(stderr, "[crescent %s] %s%s", what.c_str(), text.c_str(), text.empty() || text.back() != '\n' ? "\n" : "");
}

}  // namespace cr
