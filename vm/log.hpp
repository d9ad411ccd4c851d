// CRESCENT_LOGS: which kinds of lines go to stderr, and the line itself. Every layer logs; the
// runtime holds the switches (Context::logs) so that no layer reaches up for them.
#pragma once
#include <string>

namespace cr {

struct Logs {
  bool graph = false, guards = false, recompiles = false, graph_breaks = false, perf = false, fusion = false,
       output_code = false, host_ops = false, aot = false, partition = false,
       cudagraphs = false, autotune = false;
  bool progress = true;  // a note on stderr while a compile runs long (jit/progress.hpp)
  // "graph,guards,+recompiles,-progress": the names listed on, "-name" off, the others as by
  // default; an unknown name throws
  void parse(const std::string& list);
};

// One CRESCENT_LOGS line: "[crescent what] text" on stderr.
void log_line(const std::string& what, const std::string& text);

}  // namespace cr
