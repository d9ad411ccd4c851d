-- The compile fuzzer's PyTorch comparison (lib/fuzz_torch.lua, tests/torch_bridge/replay.py) on programs
-- with known outcomes: agreement over views, in-place writes through them, index assignment,
-- splits, ties and graph breaks; a wrong value (a trace whose op is renamed) is a mismatch in
-- both modes; an aliasing difference (torch's copy where crescent made a view) is caught; a
-- documented difference is excused with its class. One python process runs them all.
local T = require "crescent"
local FT = require "fuzz_torch"
local S = expect

local PROGRAMS = {
  agree = function(P, observe)
    local x = P.randn(3, 4)
    local y = x:t() * 2 + 1                  -- torch keeps x:t()'s strides, crescent is contiguous
    local v = y:view(12)                     -- so torch's view() works only on crescent's strides
    y[2]:add_(1)                             -- a write through a view reaches v
    x[1] = 5
    local n = x:sum(1):amax():item()         -- a graph break: a Lua number
    local c = P.cat({ x, x * n }, 1)
    local m, i = P.relu(c):max(2)            -- ties between zeros
    local parts = c:split(2, 1)
    parts[1]:zero_()
    local w = P.where(x:gt(0), x, 0.5)
    local ok = pcall(function() return x + P.zeros(7) end)  -- both raise
    observe(x, y, v, m, i, parts, w, c, ok)
  end,
  wrong = function(P, observe)
    local x = P.randn(4, 4) * 3
    observe(x:floor():sum(2))                -- the trace's floor becomes ceil below
  end,
  alias = function(P, observe)
    local x = P.randn(2, 3)
    local c = x:squeeze()                    -- a view of x; the trace says clone below
    c:mul_(2)
    observe(x:sum())
  end,
  excused = function(P, observe)
    local a, b = P.randn(3), P.randn(3, { dtype = "float64" })
    observe(a:lerp(b, 0.3))                  -- crescent promotes; torch 1.13 raises
  end,
}

-- The first call of a trace named f.
local function call_named(calls, f) for _, c in ipairs(calls) do if c.f == f then return c end end end

describe("fuzz_torch: the compile fuzzer's comparison with PyTorch", function()
  local res
  local function results()
    if res then return res end
    local b, why = FT.batch("cpu")
    if not b then S.skip(why) end
    for key, run in pairs(PROGRAMS) do b:add(key, run) end
    call_named(b.progs.wrong.calls, "floor").f = "ceil"
    call_named(b.progs.alias.calls, "squeeze").f = "clone"
    res = b:run()
    return res
  end

  it("agrees on views, in-place writes, index assignment, splits, ties and errors", function()
    local r = results().agree
    S.eq(r.failed, nil)
    S.eq(#r.findings, 0, "findings: " .. (r.findings[1] and FT.describe(r.findings[1]) or ""))
    S.eq(r.chain, "ok")
    S.truthy(r.relayouts > 0, "torch's results took crescent's strides")
  end)

  it("a wrong value is a mismatch, found again on crescent's own arguments", function()
    local m = FT.mismatch(results().wrong)
    S.truthy(m, "no mismatch")
    S.eq({ m.op, m.kind, m.mode }, { "ceil", "differs", "op" })
  end)

  it("a write that reaches an alias in crescent only is an aliasing mismatch", function()
    local m = FT.mismatch(results().alias)
    S.truthy(m, "no mismatch")
    S.eq({ m.op, m.kind }, { "mul_", "alias" })
  end)

  it("a documented difference is excused with its class", function()
    local r = results().excused
    S.eq(FT.mismatch(r), nil)
    S.eq({ r.findings[1].op, r.findings[1].kind, r.findings[1].class }, { "lerp", "accepts", "extension" })
  end)

  it("encodes Lua values as the replayer reads them", function()
    S.eq(FT.json({ 1, 2.5, -0.0, 0 / 0, true, "a\"\n", n = 7 }),
      '[1, 2.5, -0.0, {"$f": "nan"}, true, "a\\"\\n", null]')
    S.eq(FT.json({ dtype = "float32", alpha = 2 }), '{"alpha": 2, "dtype": "float32"}')
    S.eq(FT.json({}), "[]")
  end)
end)
