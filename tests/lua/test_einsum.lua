-- einsum: PyTorch's equation syntax (explicit and implicit output, '...', repeated subscripts,
-- broadcasting, spaces) against PyTorch 1.13, values and the gradient of every operand; errors;
-- compiled == eager.
local T = require "crescent"
local R = require "torch_ref"

T.manual_seed(37)
local errs = expect.error_checker("test_einsum.lua")

local L = R.list()
local NAMES = { "a", "b", "c" }

-- the case `eq` on operands of `shapes` (float64): the result, and each operand's gradient
local n = 0
local function case(eq, shapes, dtype)
  dtype = dtype or "float64"
  n = n + 1
  local xs, inputs, py = {}, {}, {}
  for j, s in ipairs(shapes) do
    xs[j] = dtype == "int64" and T.randint(-5, 6, s) or T.randn(s, { dtype = dtype })
    inputs[NAMES[j]], py[j] = xs[j], NAMES[j]
  end
  local args = table.concat(py, ", ")
  L:case(("einsum %d '%s' %s"):format(n, eq, dtype), function() return T.einsum(eq, xs) end,
    ("torch.einsum(%q, %s)"):format(eq, args), inputs)
  if dtype ~= "float64" then return end
  local y = T.einsum(eq, xs)
  local g = T.randn(y.shape, { dtype = dtype })
  inputs.g = g
  for j in ipairs(xs) do
    L:case(("einsum %d '%s' grad %s"):format(n, eq, NAMES[j]), function()
      local leaves = {}
      for m, x in ipairs(xs) do leaves[m] = x:clone():requires_grad_() end
      ;(T.einsum(eq, leaves) * g):sum():backward()
      return leaves[j].grad
    end, ("(lambda %s: torch.autograd.grad((torch.einsum(%q, %s) * g).sum(), %s)[0])(%s)"):format(args, eq, args,
      NAMES[j], table.concat((function()
        local r = {}
        for m = 1, #xs do r[m] = NAMES[m] .. ".clone().requires_grad_()" end
        return r
      end)(), ", ")), inputs)
  end
end

case("ij,jk->ik", { { 3, 4 }, { 4, 5 } })
case("ij,jk", { { 3, 4 }, { 4, 5 } })
case("ij->ji", { { 3, 4 } })
case("ij->", { { 3, 4 } })
case("ii", { { 4, 4 } })
case("ii->i", { { 4, 4 } })
case("iij->ji", { { 3, 3, 2 } })
case("i,i->", { { 5 }, { 5 } })
case("i,j->ij", { { 3 }, { 4 } })
case("bij,bjk->bik", { { 2, 3, 4 }, { 2, 4, 5 } })
case("...ij,...jk->...ik", { { 2, 1, 3, 4 }, { 5, 4, 2 } })
case("...ij,jk", { { 2, 3, 4 }, { 4, 5 } })
case("i...->...", { { 3, 2, 4 } })
case("...ii->...i", { { 2, 3, 3 } })
case("b i d, b j d -> b i j", { { 2, 3, 4 }, { 2, 5, 4 } })
case("bhqd,bhkd->bhqk", { { 2, 2, 3, 4 }, { 2, 2, 5, 4 } })
case("ij,jk,kl->il", { { 2, 3 }, { 3, 4 }, { 4, 5 } })
case("ab,bc,ca->", { { 2, 3 }, { 3, 4 }, { 4, 2 } })
case("ijk,ikl,j->il", { { 2, 3, 4 }, { 2, 4, 5 }, { 3 } })
case("ij,ij->ij", { { 3, 4 }, { 3, 4 } })
case("ij,kj->", { { 1, 4 }, { 3, 4 } })
case("ij,j->i", { { 3, 1 }, { 4 } })
case("Ab,ba->Aa", { { 2, 3 }, { 3, 4 } })
case("ba", { { 2, 3 } })
case("i,i", { { 0 }, { 0 } })
case("ij,jk->ik", { { 2, 0 }, { 0, 3 } })
case("ij,jk->ik", { { 3, 4 }, { 4, 2 } }, "float32")
case("ij,jk->ik", { { 3, 4 }, { 4, 2 } }, "int64")
L:check("einsum vs PyTorch", function(got)
  if got.dtype == "float32" then return 1e-5, 1e-5 end
  return 1e-10, 1e-10
end)

describe("einsum", function()
  it("takes the operands as arguments or as one table", function()
    local a, b = T.randn(2, 3), T.randn(3, 2)
    expect.close(T.einsum("ij,jk->ik", a, b), T.einsum("ij,jk->ik", { a, b }))
  end)
  it("raises on bad equations and operands", function()
    local a = T.randn(2, 3)
    errs(function() T.einsum("ij,jk->ik", a) end, "einsum", "names 2 operands, got 1")
    errs(function() T.einsum("ijk->i", a) end, "einsum", "operand 1 has 2 dims but 'ijk->i' gives it 3 subscripts")
    errs(function() T.einsum("i->i", a) end, "einsum", "and no ellipsis")
    errs(function() T.einsum("i1->i", a) end, "einsum", "invalid subscript '1'")
    errs(function() T.einsum("ij->k", a) end, "einsum", "output subscript k does not appear")
    errs(function() T.einsum("ij->ii", a) end, "einsum", "output subscript i appears more than once")
    errs(function() T.einsum("ii->i", a) end, "einsum", "subscript i is repeated for operand 1 but the sizes don't match, 2 != 3")
    errs(function() T.einsum("ij,ij->ij", a, T.randn(2, 4)) end, "einsum", "subscript j has size 4 for operand 2")
    errs(function() T.einsum("..i.->i", a) end, "einsum", "not part of any ellipsis")
    errs(function() T.einsum("......->", a) end, "einsum", "more than one ellipsis")
    errs(function() T.einsum(a, a) end, "einsum", "expected a string")
    errs(function() T.einsum("ij", 3) end, "einsum", "expected a tensor")
  end)
  it("is captured by T.compile with the eager results", function()
    local f = T.compile(function(a, b) return T.einsum("bij,bjk->bik", a, b):relu() end, { backend = "cpu" })
    local a, b = T.randn(2, 3, 4), T.randn(2, 4, 5)
    for _ = 1, 3 do expect.close(f(a, b), T.einsum("bij,bjk->bik", a, b):relu()) end
  end)
end)
