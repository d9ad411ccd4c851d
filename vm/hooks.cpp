#include "vm/hooks.hpp"

#include "vm/error.hpp"

namespace cr {
namespace {

// The defaults: the layer that provides the entry is not installed (a program linking the
// runtime alone, or one that made a Context before install_hooks).
[[noreturn]] void missing(const char* entry, const char* layer) {
  throw Error(cat("internal: ", entry, " needs the ", layer, " layer, which is not installed (cr::install_hooks)"));
}

Hooks g_hooks = {
    [](Context&) { missing("start_capture", "capture"); },
    [](Context&, cr_tensor*) { missing("ensure_real", "capture"); },
    [](Context&, Storage*) { missing("before_write", "capture"); },
    [](cr_tensor*) { missing("release_lazy", "capture"); },
    [](Context&, int, const cr_value*, int, std::vector<Tensor>&) { return false; },  // (no capture: none active)
    [](Context&, int, const cr_value*, int, std::vector<Tensor>*) -> bool { missing("cuda_run_op", "compiler"); },
    [](const Tensor&, const Tensor&) -> bool { missing("cuda_copy", "compiler"); },
    [](Context&, const std::string&, const std::string&, const std::string&) -> std::string {
      missing("cuda_cubin", "compiler");
    },
    [](const std::shared_ptr<graph::Graph>&, const graph::NativeOptions&) { missing("compile_native", "compiler"); },
    [](bool, std::string*) -> bool { missing("backend_available", "compiler"); },
};

}  // namespace

Hooks& hooks() { return g_hooks; }

}  // namespace cr
