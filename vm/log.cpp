#include "vm/log.hpp"

#include <cstdio>

namespace cr {

void Logs::parse(const std::string& list) {
  *this = Logs{};
  size_t i = 0;
  while (i <= list.size()) {
    size_t j = list.find(',', i);
    if (j == std::string::npos) j = list.size();
    std::string w = list.substr(i, j - i);
    while (!w.empty() && (w[0] == '+' || w[0] == ' ')) w.erase(0, 1);
    graph |= w == "graph";
    guards |= w == "guards";
    recompiles |= w == "recompiles";
    graph_breaks |= w == "graph_breaks";
    perf |= w == "perf";
    fusion |= w == "fusion";
    output_code |= w == "output_code";
    host_ops |= w == "host_ops";
    aot |= w == "aot";
    partition |= w == "partition";
    cudagraphs |= w == "cudagraphs";
    i = j + 1;
  }
}

void log_line(const std::string& what, const std::string& text) {
  std::fprintf(stderr, "[crescent %s] %s%s", what.c_str(), text.c_str(), text.empty() || text.back() != '\n' ? "\n" : "");
}

}  // namespace cr
