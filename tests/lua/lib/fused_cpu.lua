-- Runs f with the fused library ops recorded in training captures on the CPU too
-- (core.fused_op: the CPU default is the compositions), so that CI runs those extern nodes.
local core = require "crescent.core"
local with_field = require "with_field"
return function(f) with_field(core.fused_in_training, "cpu", true, f) end
