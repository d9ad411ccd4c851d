-- No silent nil (API.md: every misuse raises): reading a field a tensor does not have, or
-- indexing it with an unsupported key, raises at the user's line, naming what was asked, the
-- near names ("did you mean") and the fields that exist.
local T = require "crescent"
local S = expect

describe("tensor fields", function()
  local x = T.ones(2, 3)
  it("an unknown name raises with the nearest fields and methods", function()
    S.errors(function() return x.shap end,
      'test_fields.lua:%d+: tensor: no field or method "shap" %(did you mean shape%?%); the fields are data, device, dtype, grad, grad_fn, H, ')
    S.errors(function() return x.Shape end, '"Shape" %(did you mean shape%?%)')
    S.errors(function() return x.dtyp end, '"dtyp" %(did you mean dtype%?%)')
    S.errors(function() return x.requires_gard end, "did you mean requires_grad or requires_grad_%?")
    S.errors(function() return x:sizee(1) end, '"sizee" %(did you mean size%?%)')
    S.errors(function() return x:embedding(x) end, 'test_fields.lua:%d+: tensor: no method "embedding": T.embedding is a function, not a method')
    S.errors(function() return x.qqqqqqqq end, '"qqqqqqqq"; the fields are data, device, dtype, grad, grad_fn, H, is_leaf, mH, mT, requires_grad, retains_grad, shape, T, the methods the ops')
  end)
  it("an unsupported key raises naming what indexing takes", function()
    S.errors(function() return x[{ {}, 1 }] end, "test_fields.lua:%d+: index: entry 1 expected a range {start, stop%[, step%]} of numbers")
    S.errors(function() return x[true] end, "tensor: cannot index with a boolean")
  end)
  it("fields, methods and number indices still read as before", function()
    S.eq(x.shape, { 2, 3 })
    S.eq({ x.dtype, x.device, x.requires_grad, x.grad }, { "float32", "cpu", false, nil })
    S.eq(x[2]:totable(), { 1, 1, 1 })
    S.eq(x:size(2), 3)
  end)
end)
