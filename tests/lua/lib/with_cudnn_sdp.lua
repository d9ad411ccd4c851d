-- with_cudnn_sdp(on, f): runs f with T.backends.cuda.enable_cudnn_sdp(on) (16-bit attention through
-- cuDNN's kernels or crescent's), then puts the previous setting back (also when f raises).
local T = require "crescent"
return function(on, f)
  local was = T.backends.cuda.cudnn_sdp_enabled()
  T.backends.cuda.enable_cudnn_sdp(on)
  local ok, err = pcall(f)
  T.backends.cuda.enable_cudnn_sdp(was)
  if not ok then error(err, 0) end
end
