-- Runs f with the fused library ops recorded in training captures on the CPU too
-- (core.fused_op: the CPU default is the compositions), so that CI runs those extern nodes.
local core = require "crescent.core"
return function(f)
  local was = core.fused_in_training.cpu
  core.fused_in_training.cpu = true
  local ok, err = pcall(f)
  core.fused_in_training.cpu = was
  if not ok then error(err, 0) end
end
