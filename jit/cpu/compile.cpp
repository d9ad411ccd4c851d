// A plan's kernels -> one shared object: the libgccjit context, its options (the target's
// -march), one function per distinct kernel (emit_kernel, jit/cpu/emit.cpp), and the compile.
#include "jit/cpu/emit.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "jit/cpu/kernel_emitter.hpp"
#include "jit/cpu/target.hpp"
#include "vm/cpu_march.hpp"

namespace cr::jit::cpu {

ScheduleTarget schedule_target(int threads) { return {threads, kBlock}; }

int64_t CodeShape::streams_from() const { return stream_from > 0 ? stream_from : stream_store_bytes(); }

std::string compiler_id() {
  return cat("libgccjit-12 -O3 -ffp-contract=off -march=", codegen_march(), " stream-from=", stream_store_bytes());
}

// (Kernel::str renders every expression, address, dtype and constant: it is the cache key's text)
std::string anonymous_code(const Kernel& k, int64_t block) {
  Kernel a = k;
  a.name.clear();
  std::fill(a.buffers.begin(), a.buffers.end(), 0);
  return a.str(block);
}

#if CRESCENT_HAVE_GCCJIT

void compile_plan(const Plan& plan, const FnTable& fns, const std::string& so_path, const std::string& c_dump_path,
                  CodeShape shape) {
  std::string why;
  const GccJit* J = gccjit(&why);
  if (!J) throw Error(cat("libgccjit is not available: ", why));
  // libgccjit's contexts share GCC's global state (a data race under ThreadSanitizer): one
  // compile at a time in a process (compiler processes serve one request at a time anyway)
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  gcc_jit_context* c = J->context_acquire();
  struct Release {
    const GccJit* J;
    gcc_jit_context* c;
    ~Release() { J->context_release(c); }
  } release{J, c};
  J->context_set_int_option(c, GCC_JIT_INT_OPTION_OPTIMIZATION_LEVEL, 3);
  J->context_set_bool_print_errors_to_stderr(c, 0);
  J->context_set_bool_allow_unreachable_blocks(c, 1);
  std::string march = cat("-march=", codegen_march());
  for (const char* opt : {march.c_str(), "-ffp-contract=off", "-fwrapv", "-fno-math-errno", "-fno-semantic-interposition"})
    J->context_add_command_line_option(c, opt);
  Types t = make_types(*J, c);
  // a kernel of the same code as an earlier one (a model's repeated layers) is compiled once
  std::map<std::string, gcc_jit_function*> made;
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const Kernel& k = plan.code(i);
    auto [at, fresh] = made.emplace(anonymous_code(k, shape.block), nullptr);
    if (fresh) at->second = emit_kernel(*J, c, t, k, fns, shape);
    else emit_call_of(*J, c, t, k.name, at->second);
  }
  if (!c_dump_path.empty()) J->context_dump_to_file(c, c_dump_path.c_str(), 0);
  J->context_compile_to_file(c, GCC_JIT_OUTPUT_KIND_DYNAMIC_LIBRARY, so_path.c_str());
  if (const char* err = J->context_get_first_error(c)) {
    const std::string_view set = cpu_march_override();  // (a -march gcc does not take fails the driver)
    throw Error(cat("libgccjit: ", err, set.empty() ? "" : cat(" (with CRESCENT_CPU_MARCH=", set, ": a -march gcc takes?)")));
  }
}

#else

void compile_plan(const Plan&, const FnTable&, const std::string&, const std::string&, CodeShape) {
  throw Error("this build has no libgccjit headers: CPU code generation is not available");
}

#endif

}  // namespace cr::jit::cpu
