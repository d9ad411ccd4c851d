// CRESCENT_LOGS: which kinds of lines go to stderr, and the line itself. Every layer logs; the
// runtime holds the switches (Context::logs) so that no layer reaches up for them.
#pragma once
#include <string>

namespace cr {

struct Logs {
  bool graph = false, guards = false, recompiles = false, graph_breaks = false, perf = false, fusion = false,
       output_code = false, host_ops = false, aot = false, partition = false,
       cudagraphs = false;
  void parse(const std::string& list);  // "graph,guards,+recompiles"; an unknown name throws
};

// One CRESCENT_LOGS line: "[crescent what] text" on stderr.
void log_line(const std::string& what, const std::string& text);

}  // namespace cr
