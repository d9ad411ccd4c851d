-- with_determinism(on, f[, warn_only]): runs f under T.use_deterministic_algorithms(on,
-- {warn_only}), then puts the previous setting back (also when f raises, whose error goes on).
local T = require "crescent"
return function(on, f, warn_only)
  local was, was_warn = T.are_deterministic_algorithms_enabled(), T.is_deterministic_algorithms_warn_only_enabled()
  T.use_deterministic_algorithms(on, { warn_only = warn_only or false })
  local ok, err = pcall(f)
  T.use_deterministic_algorithms(was, { warn_only = was_warn })
  if not ok then error(err, 0) end
end
