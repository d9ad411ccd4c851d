-- Collectives inside compiled functions (issue 40): T.distributed's collectives are graph nodes
-- (the registry ops _dist_*), so a compiled DDP-style step is one graph around them. Checked on
-- the "simulated" process group (CPU tensors, ranks started by `crescent --nproc N`): compiled ==
-- eager == the host's result, no graph break, a rank mismatch and a rank that never joins raise
-- clear errors (caught by pcall) instead of hanging; T.compile(ddp)'s backward graph reduces
-- DDP's buckets itself (_dist_bucket_start / _dist_bucket_wait, vm/graph/buckets.hpp).
local T = require "crescent"
local SH = require "shell"
expect.covers("_dist_all_reduce", "_dist_all_gather", "_dist_reduce_scatter", "_dist_broadcast", "_dist_bucket_start",
  "_dist_bucket_wait")

local function has(s, part, what)
  if not s:find(part, 1, true) then error(string.format("%s does not contain %q:\n%s", what or "output", part, s), 2) end
end

-- Runs `text` under `crescent --nproc n`; returns stdout's lines sorted, stderr, status.
local function launch(n, text, env)
  local path = os.tmpname() .. "_dist.lua"
  SH.write(path, "local T = require 'crescent'\nlocal D = T.distributed\nD.init_process_group('simulated')\n"
    .. "local rank, world = D.get_rank(), D.get_world_size()\n" .. text)
  local out, err, st = expect.crescent({ "--nproc", tostring(n), path }, { env = env })
  os.remove(path)
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  table.sort(lines)
  return lines, err, st
end

describe("collectives in compiled functions (simulated ranks on the CPU)", function()
  it("on 2 and 3 ranks: compiled == eager == the host's result, one graph around the collectives", function()
    for _, world in ipairs({ 2, 3 }) do
      local lines, err, st = launch(world, [[
        local function inputs(r)
          T.manual_seed(40 + r)
          return T.randn({ 6, 4 }):double(), T.randn({ 6, 4 }):double(), T.randn({ 3 * world, 2 }):double()
        end
        -- a DDP-style step: the gradient averaged in place, an SGD update, the functional forms
        local function step(w, g, x)
          D.all_reduce(g, { op = "avg" })
          w:sub_(g * 0.5)
          local gathered = D.functional.all_gather_tensor(x * 2)
          local scattered = D.functional.reduce_scatter_tensor(gathered:narrow(1, 1, 3 * world) + 1)
          local top = D.functional.all_reduce(x:sum(), "max")
          return (w * w):sum(), scattered, top, D.functional.broadcast(x * rank, world - 1)
        end
        local function run(f)
          local w, g, x = inputs(rank)
          local out = { f(w, g, x) }
          return { w, g, out[1], out[2], out[3], out[4] }
        end
        -- the host's result, from every rank's inputs
        local all = {}
        for q = 0, world - 1 do all[q] = { inputs(q) } end
        local gsum, xmax, parts = all[0][2], all[0][3]:sum(), { all[0][3] * 2 }
        for q = 1, world - 1 do
          gsum, xmax = gsum + all[q][2], T.maximum(xmax, all[q][3]:sum())
          parts[q + 1] = all[q][3] * 2
        end
        local avg, piece = gsum / world, T.cat(parts):narrow(1, 1, 3 * world) + 1
        local red = piece
        for _ = 2, world do red = red + piece end
        local w = all[rank][1] - avg * 0.5
        local host = { w, avg, (w * w):sum(), red:narrow(1, rank * 3 + 1, 3), xmax, all[world - 1][3] * (world - 1) }
        local eager = run(step)
        T.config.sync_compile = true  -- (the second call runs the compiled graph)
        local compiled = T.compile(step)
        run(compiled)
        local again = run(compiled)  -- (the compiled graph's run)
        local function diff(a, b)
          local d = 0
          for i = 1, #a do d = math.max(d, (a[i] - b[i]):abs():max():item()) end
          return d
        end
        local r = T.explain(step, inputs(rank))
        local ops = table.concat(r.graph_ops[1] or {}, " ")
        local function count(name) local n = 0; for _ in ops:gmatch(name) do n = n + 1 end; return n end
        print(string.format("rank %d: host %g compiled %g graphs %d breaks %d collectives %d %d %d %d", rank,
          diff(eager, host), diff(again, eager), r.graph_count, r.graph_break_count, count("_dist_all_reduce"),
          count("_dist_all_gather"), count("_dist_reduce_scatter"), count("_dist_broadcast")))
      ]])
      expect.eq(st, 0, err)
      local want = {}
      for rank = 0, world - 1 do
        want[rank + 1] = string.format("rank %d: host 0 compiled 0 graphs 1 breaks 0 collectives 2 1 1 1", rank)
      end
      expect.eq(lines, want)
    end
  end)

  it("T.compile(ddp): each bucket reduced inside the compiled backward, after its last gradient; == eager DDP", function()
    local lines, err, st = launch(2, [[
      -- 4 buckets of at most 200 bytes (the 2 Linear layers' biases and weights, last first);
      -- accumulate: 2 micro-batches a step, the first under no_sync (the graph leaves it to the hooks)
      local function train(compiled, accumulate)
        T.manual_seed(300 + rank)  -- (rank 0's parameters are broadcast)
        local model = T.nn.Sequential(T.nn.Linear(5, 9), T.nn.Tanh(), T.nn.Linear(9, 4)):double()
        local ddp = T.nn.parallel.DistributedDataParallel(model, { bucket_cap_mb = 200 / 2 ^ 20 })
        local forward = compiled and T.compile(ddp) or ddp
        local opt = T.optim.AdamW(model:parameters(), { lr = 0.02 })
        local kept, kept_values = {}, {}  -- (step 1's gradients, which later backwards must not write)
        for s = 1, 5 do
          T.manual_seed(700 + s)
          local x, y = T.randn({ 6 * world, 5 }):double(), T.randn({ 6 * world, 4 }):double()
          local function micro(k)
            local at = rank * 6 + (k - 1) * 3 + 1
            T.F.mse_loss(forward(x:narrow(1, at, 3)), y:narrow(1, at, 3)):backward()
          end
          opt:zero_grad()
          if accumulate then ddp:no_sync(micro, 1) end
          micro(2)
          if s == 1 then
            for i, p in ipairs(model:parameters()) do kept[i], kept_values[i] = p.grad, p.grad:clone() end
          end
          opt:step()
        end
        local moved = 0
        for i = 1, #kept do moved = math.max(moved, (kept[i] - kept_values[i]):abs():max():item()) end
        return model:parameters(), moved
      end
      T.config.sync_compile = true
      if rank == 0 then T.compiler.set_logs("graph") end
      local compiled, moved = train(true, false)
      T.compiler.set_logs("")
      local eager, acc_c, acc_e = train(false, false), train(true, true), train(false, true)
      local d, da, sum = 0, 0, 0
      for i, p in ipairs(compiled) do
        d = math.max(d, (p - eager[i]):abs():max():item())
        da = math.max(da, (acc_c[i] - acc_e[i]):abs():max():item())
        sum = sum + p:sum():item()
      end
      print(string.format("rank %d: compiled vs eager %s, accumulated %s, step 1's gradients kept %s", rank,
        d < 1e-12 and "ok" or d, da < 1e-12 and "ok" or da, moved == 0 and "ok" or moved))
      print(string.format("checksum %.17g", sum))
    ]])
    expect.eq(st, 0, err)
    expect.eq(lines, { lines[1], lines[1], "rank 0: compiled vs eager ok, accumulated ok, step 1's gradients kept ok",
      "rank 1: compiled vs eager ok, accumulated ok, step 1's gradients kept ok" })
    -- rank 0's backward graph: 4 bucket starts, the first before backward ops that follow it, 4 waits at the end
    local graph = err:match("graph [^\n]*backward #[^\n]*\n(.-)  outputs:") or err
    local ops = {}
    for name in graph:gmatch("= ([%w_]+)%(") do ops[#ops + 1] = name end
    local starts, waits, first, after = 0, 0, nil, 0
    for i, name in ipairs(ops) do
      if name == "_dist_bucket_start" then starts, first = starts + 1, first or i end
      if name == "_dist_bucket_wait" then waits = waits + 1 end
      if first and not name:match("^_dist_") then after = after + 1 end
    end
    local tail = table.concat(ops, " ", #ops - 3)
    expect.eq(starts, 4, graph)
    expect.truthy(after >= 2, "backward ops after the first bucket's start:\n" .. graph)
    expect.eq(tail, "_dist_bucket_wait _dist_bucket_wait _dist_bucket_wait _dist_bucket_wait", graph)
  end)

  it("a rank mismatch (another collective, another shape) raises on every rank, compiled or not", function()
    local lines, err, st = launch(3, [[
      local f = T.compile(function(x)
        if rank == 2 then return D.functional.all_gather_tensor(x) end
        return D.functional.all_reduce(rank == 1 and T.cat({ x, x }) or x)
      end)
      local ok, e = pcall(f, T.ones({ 4 }):double())
      print(string.format("rank %d: %s", rank, ok and "no error" or e:match("_dist_all_%w+: the ranks disagree[^%(]*")))
      ok, e = pcall(D.all_reduce, T.ones(2):double())
      print(string.format("rank %d: then %s", rank, ok and "no error" or e:match("aborted after a mismatch")))
    ]])
    expect.eq(st, 0, err)
    expect.eq(lines, {
      "rank 0: _dist_all_reduce: the ranks disagree on collective #1: rank 0 issued all_reduce of 4 float64 elements, "
        .. "rank 1 issued all_reduce of 8 float64 elements ",
      "rank 0: then aborted after a mismatch",
      "rank 1: _dist_all_reduce: the ranks disagree on collective #1: rank 1 issued all_reduce of 8 float64 elements, "
        .. "rank 0 issued all_reduce of 4 float64 elements ",
      "rank 1: then aborted after a mismatch",
      "rank 2: _dist_all_gather: the ranks disagree on collective #1: rank 2 issued all_gather of 4 float64 elements, "
        .. "rank 0 issued all_reduce of 4 float64 elements ",
      "rank 2: then aborted after a mismatch",
    })
  end)

  it("a rank that never joins gives the others a catchable timeout error", function()
    local lines, err, st = launch(3, [[
      if rank == 1 then return end
      local f = T.compile(function(x) return D.functional.all_reduce(x * 2) end)
      local ok, e = pcall(f, T.ones(3):double())
      print(string.format("rank %d: %s", rank, ok and "no error" or e:match("_dist_all_reduce: rank %d timed out after 2 s waiting for rank 1[^%(]*")))
      ok, e = pcall(D.barrier)
      print(string.format("rank %d: then %s", rank, ok and "no error" or e:match("all_reduce: the simulated process group was aborted after a timeout in _dist_all_reduce")))
    ]], "CRESCENT_DIST_TIMEOUT=2")
    expect.eq(st, 0, err)
    expect.eq(lines, {
      "rank 0: _dist_all_reduce: rank 0 timed out after 2 s waiting for rank 1 to join collective #1 ",
      "rank 0: then all_reduce: the simulated process group was aborted after a timeout in _dist_all_reduce",
      "rank 2: _dist_all_reduce: rank 2 timed out after 2 s waiting for rank 1 to join collective #1 ",
      "rank 2: then all_reduce: the simulated process group was aborted after a timeout in _dist_all_reduce",
    })
  end)

  it("checks its arguments", function()
    local lines, err, st = launch(2, [[
      for i, f in ipairs({
        function() return D.functional.reduce_scatter_tensor(T.ones(3):double()) end,
        function() return D.functional.all_reduce(T.ones(3), "mean") end,
        function() return D.functional.all_reduce(T.ones(3):half()) end,
        function() return D.functional.broadcast(T.ones(3), 2) end,
        function() return D.all_reduce(T.ones(3), { op = "avg" }) and nil end,
      }) do
        local ok, e = pcall(f)
        print(rank .. " " .. i .. " " .. (ok and "no error" or e:gsub("^.-: ", "", 1):gsub("\n.*", "")))
      end
    ]])
    expect.eq(st, 0, err)
    expect.eq(#lines, 10)
    has(lines[1], "input's dim 1 (3) expected a multiple of the world size (2)")
    has(lines[2], "op expected \"sum\", \"avg\", \"max\", \"min\" or \"prod\", got \"mean\"")
    has(lines[3], "does not reduce float16 tensors")
    has(lines[4], "src expected a rank in 0 .. 1, got 2")
    expect.eq(lines[5], "0 5 no error")
  end)
end)
