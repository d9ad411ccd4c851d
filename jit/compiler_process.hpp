// CPU code is generated in compiler processes: the program's own executable started again
// (posix_spawn of /proc/self/exe), which serves compile requests from its start, before main().
// A fork() of a threaded program would copy locks other threads held (glibc's, libgccjit's, any
// library's) into a child that then runs a whole compiler; a fresh process holds none. The
// process also keeps libgccjit's per-context memory (about half a megabyte each) and an internal
// compiler error (GCC calls exit) away from the program.
//
// Requests travel over a socket (jit/cpu/wire.hpp: the kernels; the reply: ok, or the error). A
// pool keeps up to one process per core (at least 2) between compiles; each serves at most 256
// compiles, then a new one starts. A process that dies or takes longer than the timeout
// (CRESCENT_JIT_TIMEOUT seconds, default 60) is killed and the compile fails (the graph stays
// eager, with the reason logged). A process whose program ended exits: at the end of its input,
// or within a second of being orphaned (a compile that hangs).
#pragma once
#include <string>

#include "jit/backend.hpp"
#include "jit/cpu/emit.hpp"

namespace cr::jit {

// Compiles the plan's kernels into the shared object `so_path` (and libgccjit's dump into
// `c_dump`, when given) in a compiler process, shaped as `shape` (cpu::compile_plan); throws Error with
// the reason when it fails. `injected`: what the process does instead of compiling
// (jit/backend.hpp injected_failure).
void compile_in_compiler_process(const Plan& plan, const cpu::FnTable& fns, const std::string& so_path,
                                 const std::string& c_dump, Injected injected = Injected::None,
                                 cpu::CodeShape shape = {});

// CRESCENT_JIT_TIMEOUT in milliseconds (default 60 s).
int compile_timeout_ms();

// Compiler processes started since the program began (for tests).
int64_t compiler_processes_started();

}  // namespace cr::jit
