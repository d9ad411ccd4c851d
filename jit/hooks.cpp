#include "jit/hooks.hpp"

#include "jit/backend.hpp"
#include "jit/cuda/eager.hpp"
#include "jit/jit.hpp"
#include "jit/lower.hpp"

namespace cr::jit {

void install_hooks(Hooks& h) {
  Lowerings::get();  // the lowering table is checked as it is built: a bad entry fails at start
  h.cuda_run_op = cuda::run_op;
  h.cuda_copy = cuda::copy_on_device;
  h.cuda_cubin = [](Context& ctx, const std::string& source, const std::string& name, const std::string& arch) {
    return cuda_cubin(source, name, arch, cuda::compile_cache_dir(ctx));
  };
  h.compile_native = compile_native;
  h.backend_available = [](bool on_cuda, std::string* why) { return backend_for(Device{int8_t(on_cuda), 0}).available(why); };
}

}  // namespace cr::jit
