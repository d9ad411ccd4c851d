-- cuda_work(f): the device work f queues from the host, counted by T.cuda.stats(): our kernels
-- launched and library calls (cuBLAS, cuDNN), then f's results.
local T = require "crescent"

return function(f)
  T.cuda.synchronize()
  local s0 = T.cuda.stats()
  local function counted(...)
    local s1 = T.cuda.stats()
    return s1.kernel_launches - s0.kernel_launches, s1.blas_calls - s0.blas_calls, ...
  end
  return counted(f())
end
