-- In-place writes inside compiled training segments (issue 35): which a graph differentiates (a
-- write to memory no earlier op of the segment read, nothing it writes requiring grad) and how the
-- others run (eager autograd: vm/graph/joint.cpp plan_gradients); gradients equal eager's.
local T = require "crescent"
local S = expect

local function stat(k) return T.compiler.stats()[k] end

describe("in-place writes in compiled training segments", function()
  it("differentiates a segment writing memory no earlier op read; one that read it first runs eagerly", function()
    local programs = {
      buffer = function(x, idx)  -- (an integer buffer written beside the gradients)
        idx:add_(1)
        return x:gather(1, idx) * 2
      end,
      read_before = function(x, idx)  -- (x * f would recompute f from idx, written since)
        local y = x * idx:float()
        idx:add_(1)
        return y + x:gather(1, idx)
      end,
    }
    local function run(f)
      local x = T.tensor({ 1, 2, 3, 4 }, { dtype = "float32", requires_grad = true })
      local idx = T.tensor({ 0, 2, 1, 0 })
      ;(f(x * 1, idx) * T.tensor({ 1, 2, 3, 4 }):float()):sum():backward()
      return { x.grad:totable(), idx:totable() }
    end
    for name, prog in pairs(programs) do
      T.compiler.reset()
      local want, f = run(prog), T.compile(prog)
      for call = 1, 4 do
        if call == 4 then T.compiler.wait(f) end
        S.eq(run(f), want, ("%s, call %d"):format(name, call))
      end
      S.eq(stat("grad_fallbacks") > 0, name == "read_before", name .. ": eager autograd")
    end
  end)

  it("traces a whole step past a write to an input no earlier op read, writing it once", function()
    local w = T.tensor({ 1, 2, 3, 4 }, { dtype = "float32", requires_grad = true })
    local function step(idx)
      idx:add_(1)
      local l = (w:gather(1, idx) * T.tensor({ 1, 2, 3, 4 }):float()):sum()
      l:backward()
      return l
    end
    local function run(f)
      w.grad = nil
      local idx = T.tensor({ 1, 3, 2, 1 })
      local l = f(idx)
      return { l:item(), w.grad:totable(), idx:totable() }
    end
    T.compiler.reset()
    local want, f = run(step), T.compile(step)
    for call = 1, 4 do
      if call == 4 then T.compiler.wait(f) end
      S.eq(run(f), want, ("call %d"):format(call))
    end
    S.eq(stat("graph_breaks"), 0, "graph breaks")
    S.eq(stat("grad_fallbacks"), 0, "eager autograd")
  end)

  it("runs a replayed prefix with eager autograd when the rest of the call takes another path", function()
    -- (the first call raised after the write: no plan was made for the recorded path; the second
    -- replays it, then leaves it at y:sin(), and the prefix's write follows a read)
    local function prog(w, buf, k)
      local a = buf * 2
      buf:add_(1)
      local y = w * a
      if k == 0 then error("stop") end
      return (y:sin() * buf):sum()
    end
    local function run(f, k)
      local w = T.tensor({ 1, 2, 3 }, { dtype = "float64", requires_grad = true })
      local buf = T.tensor({ 0.5, 1.5, 2.5 }, { dtype = "float64" })
      local ok, l = pcall(f, w * 1, buf, k)
      if not ok then return { error = tostring(l):match("stop"), buf = buf:totable() } end
      l:backward()
      return { loss = l:item(), grad = w.grad:totable(), buf = buf:totable() }
    end
    T.compiler.reset()
    local f = T.compile(prog)
    for call, k in ipairs({ 0, 1, 1, 1 }) do
      S.eq(run(f, k), run(prog, k), ("call %d"):format(call))
    end
  end)

  it("an in-place op where a replayed prefix's call raised before: recorded with eager autograd", function()
    -- (the first call raised after the writes: the next replays up to them, then records them,
    -- the tensors requiring grad only once the prefix ran; mul_ by y needs t from before the write)
    local function prog(y, fail)
      local t = y / 2
      t:mul_(0.5):add_(1)
      t:mul_(y)
      if fail then error("stop") end
      return t
    end
    local function run(f, fail)
      local y = T.tensor({ 1, 2 }, { dtype = "float64", requires_grad = true })
      local ok, err = pcall(function() (f(y * 1, fail) ^ 2):sum():backward() end)
      return ok and y.grad:totable() or tostring(err):match("stop") or err
    end
    T.compiler.reset()
    local f = T.compile(prog)
    S.eq(run(f, true), "stop")
    for call = 2, 4 do S.eq(run(f, false), run(prog, false), "call " .. call) end
  end)
end)
