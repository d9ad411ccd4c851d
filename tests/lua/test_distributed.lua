-- T.distributed, T.nn.parallel.DistributedDataParallel and `crescent --nproc N` (issue 40).
-- Run as one process, this file checks the launcher, the errors of a machine without NCCL or
-- GPUs, the autograd hooks DDP stands on, and (with NCCL and GPUs) timeouts and a failing rank.
-- Run under `crescent --nproc 2 tests/lua/run.lua tests/lua/test_distributed.lua` (ctest
-- lua_distributed_nproc2), every rank runs the "on every rank" specs: collectives against
-- results computed on the host, work handles, DDP == one process on the whole batch, the sharded
-- optimizer == DDP + AdamW (its arithmetic and a simulated group run on the CPU). Those skip
-- without 2 GPUs or NCCL. Each such spec issues all its collectives before it checks anything,
-- so a failed check on one rank does not leave the other waiting in a collective.
local T = require "crescent"
local D = T.distributed
local SH = require "shell"

local RANKED = os.getenv("RANK") ~= nil and os.getenv("CRESCENT_DIST_RUN") ~= nil

local function has(s, part, what)
  if not s:find(part, 1, true) then error(string.format("%s does not contain %q:\n%s", what or "output", part, s), 2) end
end

local function need_gpus(n)
  if not D.is_available() then expect.skip("NCCL is not available: " .. D.unavailable_reason()) end
  if T.cuda.device_count() < n then expect.skip("needs " .. n .. " CUDA devices, this machine has " .. T.cuda.device_count()) end
end

-- Runs `text` as a script under `crescent --nproc n`; returns stdout, stderr, status.
local function launch(n, text, env)
  local path = os.tmpname() .. "_dist.lua"
  SH.write(path, text)
  local out, err, st = expect.crescent({ "--nproc", tostring(n), path }, { env = env })
  os.remove(path)
  return out, err, st
end

-- the largest difference of two optimizer state_dicts (an error when they differ in structure)
local function state_diff(a, b)
  expect.eq(#a.param_groups, #b.param_groups)
  for gi, g in ipairs(b.param_groups) do
    for k, v in pairs(g) do expect.eq(a.param_groups[gi][k], v, "param group " .. gi .. " " .. k) end
  end
  local d, n = 0, 0
  for id, st in pairs(b.state) do
    n = n + 1
    for k, v in pairs(st) do
      local w = a.state[id] and a.state[id][k]
      if not T.is_tensor(v) then expect.eq(w, v)
      elseif k == "step" then expect.eq(w:item(), v:item())
      else
        expect.eq(w.shape, v.shape)
        d = math.max(d, (w - v):abs():max():item())
      end
    end
  end
  for _ in pairs(a.state) do n = n - 1 end
  expect.eq(n, 0, "as many states")
  return d
end

if not RANKED then
  describe("crescent --nproc (the launcher)", function()
    it("starts N ranks with RANK, LOCAL_RANK, WORLD_SIZE and a rendezvous file", function()
      local out, err, st = launch(2, [[
        print(string.format("rank=%s local=%s world=%s file=%s args=%s", os.getenv("RANK"), os.getenv("LOCAL_RANK"),
          os.getenv("WORLD_SIZE"), tostring((os.getenv("CRESCENT_DIST_FILE") or "") ~= ""), table.concat(arg, ",")))
      ]])
      expect.eq(st, 0, err)
      local lines = {}
      for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
      table.sort(lines)
      expect.eq(lines, { "rank=0 local=0 world=2 file=true args=", "rank=1 local=1 world=2 file=true args=" })
    end)

    it("exits with a failed rank's status, naming it, and stops the others", function()
      local out, err, st = launch(2, [[
        if os.getenv("RANK") == "1" then io.stderr:write("rank 1 gives up\n"); os.exit(3) end
        os.execute("sleep 60")  -- (stopped by the launcher, with its process group)
        print("rank 0 was not stopped")
      ]])
      expect.eq(st, 3)
      has(err, "rank 1 gives up")
      has(err, "rank 1 of 2 failed (it exited with status 3)")
      expect.eq(out, "")
    end)

    it("reports a rank that raised", function()
      local _, err, st = launch(2, [[if os.getenv("RANK") == "0" then error("planned failure") end]])
      expect.eq(st, 1)
      has(err, "planned failure")
      has(err, "rank 0 of 2 failed")
    end)

    it("checks its argument and lists it in --help", function()
      for _, bad in ipairs({ "0", "x", "-1", "2000" }) do
        local _, err, st = expect.crescent({ "--nproc", bad, "x.lua" })
        expect.eq(st, 1)
        has(err, "--nproc needs a number of processes, 1 to 1024")
      end
      local out = expect.crescent({ "--help" })
      has(out, "--nproc N")
      has(out, "CRESCENT_NCCL_LIB")
      has(out, "CRESCENT_DIST_TIMEOUT")
    end)
  end)

  describe("T.distributed without a process group", function()
    it("raises clear errors", function()
      expect.eq(D.is_initialized(), false)
      expect.eq(D.get_rank(), -1)
      expect.errors(function() D.init_process_group("gloo") end, "backend \"gloo\" is not available")
      expect.errors(function() D.all_reduce(T.ones(2)) end, "all_reduce: the default process group is not initialized")
      expect.errors(function() D.barrier() end, "barrier: the default process group is not initialized")
      expect.errors(function() T.nn.parallel.DistributedDataParallel(T.nn.Linear(2, 2)) end, "not initialized")
      if not D.is_available() then
        expect.truthy(D.unavailable_reason() ~= "")
        expect.errors(function() D.init_process_group("nccl", { rank = 0, world_size = 1 }) end,
          "the nccl backend is not available: ")
      end
    end)

    it("asks for RANK and WORLD_SIZE", function()
      if not D.is_available() then expect.skip("NCCL is not available: " .. D.unavailable_reason()) end
      local _, err, st = expect.crescent({ "-e", "crescent.distributed.init_process_group('nccl')" }, { env = "RANK= WORLD_SIZE=" })
      expect.eq(st, 1)
      has(err, "RANK and WORLD_SIZE are not set")
    end)
  end)

  describe("autograd hooks for DDP", function()
    it("calls post-accumulate-grad hooks once per backward, after .grad is complete", function()
      local w = T.tensor({ 1, 2, 3 }, { dtype = "float32", requires_grad = true })
      local seen, finals = {}, {}
      w:register_post_accumulate_grad_hook(function(p)
        seen[#seen + 1] = p.grad:totable()
        T.autograd.queue_callback(function() finals[#finals + 1] = w.grad:totable() end)
      end)
      ;((w * w):sum() + (w * 3):sum()):backward()
      expect.eq(seen, { { 5, 7, 9 } })
      expect.eq(finals, { { 5, 7, 9 } })
      ;(w * 2):sum():backward()
      expect.eq(seen[2], { 7, 9, 11 })
      expect.eq(#finals, 2)
      expect.errors(function() T.autograd.queue_callback(function() end) end, "only be queued during a backward pass")
      local x = T.ones(2, { requires_grad = true })
      expect.errors(function() (x * 2):register_post_accumulate_grad_hook(function() end) end, "expected a leaf tensor")
    end)
  end)

  -- A process group of `world` ranks simulated in one process (CPU tensors): each rank runs in a
  -- coroutine; a collective completes once every rank posted it, and its wait() yields until then.
  local function fabric(world)
    local F, posts = { world = world }, {}
    local function complete(slot)
      T.no_grad(function()
        local results = {}  -- (all computed before any is written: all_reduce is in place)
        for r = 0, world - 1 do
          local n = slot[r].out:numel()
          if slot.kind == "reduce_scatter" or slot.kind == "all_reduce" then
            local acc
            for q = 0, world - 1 do
              local part = slot.kind == "all_reduce" and slot[q].t or slot[q].t:narrow(1, r * n + 1, n)
              acc = acc and acc + part or part:clone()
            end
            results[r] = acc / world
          elseif slot.kind == "all_gather" then
            local parts = {}
            for q = 0, world - 1 do parts[q + 1] = slot[q].t end
            results[r] = T.cat(parts)
          else
            results[r] = slot[0].t:clone()
          end
        end
        for r = 0, world - 1 do slot[r].out:copy_(results[r]:view(slot[r].out.shape)) end
      end)
      slot.done = true
    end
    local seqs = {}  -- (a rank's collectives, numbered across its comm objects)
    function F.comm(rank)
      local function post(kind, out, t)
        seqs[rank] = (seqs[rank] or 0) + 1
        local seq = seqs[rank]
        local slot = posts[seq] or { n = 0, kind = kind }
        posts[seq] = slot
        if slot.kind ~= kind then error(string.format("rank %d posted %s where another rank posted %s", rank, kind, slot.kind)) end
        slot[rank], slot.n = { out = out, t = t }, slot.n + 1
        if slot.n == world then complete(slot) end
        return { wait = function() while not slot.done do coroutine.yield() end end }
      end
      return { rank = rank, world = world,
        all_reduce = function(t) return post("all_reduce", t, t) end,
        reduce_scatter = function(out, t) return post("reduce_scatter", out, t) end,
        all_gather = function(out, t) return post("all_gather", out, t) end,
        broadcast = function(t) post("broadcast", t, t):wait() end }
    end
    -- body(rank) on every rank, round robin until all are done
    function F.run(body)
      local cos = {}
      for r = 0, world - 1 do cos[r] = coroutine.create(function() body(r) end) end
      for _ = 1, 100000 do
        local alive = 0
        for r = 0, world - 1 do
          if coroutine.status(cos[r]) ~= "dead" then
            local ok, err = coroutine.resume(cos[r])
            if not ok then error(err, 0) end
            if coroutine.status(cos[r]) ~= "dead" then alive = alive + 1 end
          end
        end
        if alive == 0 then return end
      end
      error("the simulated ranks did not finish (a collective some rank never posted)")
    end
    return F
  end

  describe("ShardedOptimizer (ZeRO-2) without GPUs", function()
    local Z, ddp = require "crescent.zero", require "crescent.ddp"
    local function sharded(params, cls, opts, group)
      local o = { process_group = group }
      for k, v in pairs(opts) do o[k] = v end
      return D.ShardedOptimizer(params, cls, o)
    end

    it("plans buckets and shards: padding, a shard boundary inside a tensor", function()
      -- parameters of 35, 7, 28 and 4 elements (float64), buckets of at most 300 bytes
      local info = {}
      for i, n in ipairs({ 35, 7, 28, 4 }) do info[i] = { numel = n, bytes = 8 * n, key = "float64@cpu" } end
      local b = ddp.plan(info, 300)
      expect.eq(#b, 3)
      expect.eq({ b[1].numel, b[2].numel, b[3].numel }, { 32, 7, 35 })
      expect.eq({ b[1].entries[1].index, b[1].entries[2].index, b[1].entries[2].offset }, { 4, 3, 4 })
      expect.eq({ Z.shard_size(32, 3), Z.shard_size(7, 2), Z.shard_size(35, 2), Z.shard_size(8, 4) }, { 11, 4, 18, 2 })
      -- world 3, bucket 1 (param 4: 0..3, param 3: 4..31 of the bucket): shards 0..10, 11..21, 22..32
      expect.eq(Z.pieces(b[1], 3, 0), { { index = 4, from = 0, to = 0, numel = 4 }, { index = 3, from = 0, to = 4, numel = 7 } })
      expect.eq(Z.pieces(b[1], 3, 1), { { index = 3, from = 7, to = 0, numel = 11 } })
      expect.eq(Z.pieces(b[1], 3, 2), { { index = 3, from = 18, to = 0, numel = 10 } })  -- (and 1 of padding)
      expect.eq(Z.pieces(b[2], 2, 1), { { index = 2, from = 4, to = 0, numel = 3 } })
      local total = 0
      for r = 0, 2 do
        for _, pc in ipairs(Z.pieces(b[3], 3, r)) do total = total + pc.numel end
      end
      expect.eq(total, 35)
    end)

    it("checks its arguments", function()
      local F = fabric(1)
      local w = T.zeros(3, { requires_grad = true })
      expect.errors(function() sharded(w, T.optim.AdamW, {}, F.comm(0)) end, "expected a list of tensors or of groups, got a tensor")
      expect.errors(function() sharded({ { w } }, T.optim.AdamW, {}, F.comm(0)) end, "param group 1 expected a table {params = a list of tensors, ...}, got a table without params")
      expect.errors(function() sharded({ w, 3 }, T.optim.AdamW, {}, F.comm(0)) end, "param 2 of group 1 is a number, expected a tensor")
      expect.errors(function() sharded({ w }, "AdamW", {}, F.comm(0)) end, "expected an optimizer class")
      expect.errors(function() sharded({ w }, T.optim.AdamW, { bucket_cap_mb = 0 }, F.comm(0)) end, "bucket_cap_mb expected a positive number")
      expect.errors(function() sharded({ w }, T.optim.AdamW, { lr = 0.1, bogus = 1 }, F.comm(0)) end, "unknown option 'bogus'")
      expect.errors(function() sharded({ T.zeros(2) }, T.optim.AdamW, {}, F.comm(0)) end, "none of the parameters requires grad")
      expect.errors(function() T.distributed.ShardedOptimizer({ w }, T.optim.AdamW) end, "not initialized")
      expect.errors(function() sharded({ w }, T.optim.AdamW, {}, 3) end, "process_group expected a table")
      local a, b = T.ones(2, { requires_grad = true }), T.ones(3, { requires_grad = true })
      sharded({ a, b }, T.optim.AdamW, { bucket_cap_mb = 1e-6 }, F.comm(0))
      expect.errors(function() (a * 2):sum():backward() end, "ShardedOptimizer: 1 parameter%(s%) that require grad got no gradient in this backward %(shapes 3%)")
    end)

    it("on 2 (compiled, 2 param groups) and 3 (accumulated, clipped) simulated ranks == AdamW on the whole batch (10 steps)", function()
      local function mlp(seed)
        T.manual_seed(seed)
        return T.nn.Sequential(T.nn.Linear(5, 7), T.nn.Tanh(), T.nn.Linear(7, 4)):double()
      end
      local opts = { lr = 0.02, weight_decay = 0.1 }
      for _, world in ipairs({ 2, 3 }) do
        local per, steps, data = 2, 10, {}
        for s = 1, steps do
          T.manual_seed(500 + s)
          data[s] = { T.randn({ per * world, 5 }):double(), T.randn({ per * world, 4 }):double() }
        end
        -- world 3: two micro-batches a step (gradients accumulate in the shards), clipped
        local micro, clip = world == 3 and 2 or 1, world == 3 and 0.05 or nil
        -- world 2: two param groups (no weight decay on biases), as GPT training has
        local function groups(m)
          if world ~= 2 then return m:parameters() end
          local decay, plain = {}, {}
          for _, p in ipairs(m:parameters()) do table.insert(p:dim() == 1 and plain or decay, p) end
          return { { params = decay }, { params = plain, weight_decay = 0 } }
        end
        local ref = mlp(100)
        local ropt = T.optim.AdamW(groups(ref), opts)
        for s = 1, steps do
          ropt:zero_grad()
          T.F.mse_loss(ref(data[s][1]), data[s][2]):backward()
          if clip then T.nn.utils.clip_grad_norm_(ref:parameters(), clip) end
          ropt:step()
        end
        local rsd = ropt:state_dict()
        local F, models, mems, grads_left, norms, sds, sds_again = fabric(world), {}, {}, 0, {}, {}, {}
        F.run(function(rank)
          local model = mlp(100 + rank)  -- (rank 0's parameters are broadcast)
          local opt = sharded(groups(model), T.optim.AdamW, { lr = opts.lr, weight_decay = opts.weight_decay,
            bucket_cap_mb = 300 / 2 ^ 20 }, F.comm(rank))
          local forward = world == 2 and T.compile(model) or model  -- (gradients out of one compiled backward)
          for s = 1, steps do
            opt:zero_grad()
            for m = 1, micro do
              local rows = per / micro
              local at = rank * per + (m - 1) * rows + 1
              local loss = T.F.mse_loss(forward(data[s][1]:narrow(1, at, rows)), data[s][2]:narrow(1, at, rows))
              ;(loss / micro):backward()
            end
            for _, p in ipairs(model:parameters()) do
              if p.grad ~= nil then grads_left = grads_left + 1 end
            end
            if clip then
              local n = opt:clip_grad_norm_(clip):item()  -- (it yields: the index is taken after)
              norms[#norms + 1] = n
            end
            opt:step()
          end
          models[rank], mems[rank] = model, opt:memory()
          -- the whole state on every rank; loaded into a fresh optimizer, sharded again
          local again = sharded(groups(model), T.optim.AdamW, { lr = 1 }, F.comm(rank))
          again:load_state_dict(rsd)
          sds[rank], sds_again[rank] = opt:state_dict(), again:state_dict()
        end)
        expect.eq(grads_left, 0)
        expect.eq(#norms, clip and world * steps or 0)
        for _, n in ipairs(norms) do expect.truthy(n > clip, "clipped: the norm " .. n .. " is above max_norm") end
        for r = 0, world - 1 do
          expect.truthy(state_diff(sds[r], rsd) < 1e-12, "state_dict: rank " .. r .. " differs by " .. state_diff(sds[r], rsd))
          expect.eq(state_diff(sds_again[r], rsd), 0)
          local d, rp = 0, ref:parameters()
          for i, p in ipairs(models[r]:parameters()) do d = math.max(d, (p - rp[i]):abs():max():item()) end
          expect.truthy(d < 1e-12, string.format("world %d rank %d: sharded and whole differ by %g", world, r, d))
          -- AdamW's two moments for the rank's shards only (74 elements: 2 x 74 x 8 B over world ranks)
          expect.truthy(mems[r].state >= 2 * mems[r].shards and mems[r].state <= 2 * mems[r].shards + 64, tostring(mems[r].state))
          expect.truthy(mems[r].shards <= 8 * (math.ceil(74 / world) + 3), tostring(mems[r].shards))
        end
      end
    end)
  end)

  describe("DistributedDataParallel on simulated ranks (CPU)", function()
    -- 2 ranks x 3 rows; a model whose parameters make 3 buckets of at most 200 bytes
    local function train(compiled, steps)
      local world, per, data = 2, 3, {}
      for s = 1, steps do
        T.manual_seed(700 + s)
        data[s] = { T.randn({ per * world, 5 }):double(), T.randn({ per * world, 4 }):double() }
      end
      local F, models, fired = fabric(world), {}, 0
      F.run(function(rank)
        T.manual_seed(300 + rank)  -- (rank 0's parameters are broadcast)
        local model = T.nn.Sequential(T.nn.Linear(5, 9), T.nn.Tanh(), T.nn.Linear(9, 4)):double()
        local ddp = T.nn.parallel.DistributedDataParallel(model, { process_group = F.comm(rank), bucket_cap_mb = 200 / 2 ^ 20 })
        for _, p in ipairs(model:parameters()) do p:register_post_accumulate_grad_hook(function() fired = fired + 1 end) end
        local forward = compiled and T.compile(ddp) or ddp
        local opt = T.optim.AdamW(ddp:parameters(), { lr = 0.02 })
        for s = 1, steps do
          opt:zero_grad()
          local x, y = data[s][1]:narrow(1, rank * per + 1, per), data[s][2]:narrow(1, rank * per + 1, per)
          T.F.mse_loss(forward(x), y):backward()
          opt:step()
        end
        models[rank + 1] = model
      end)
      return models, fired
    end

    it("compiled DDP == eager DDP (5 AdamW steps): one compiled backward node fires every bucket's hooks", function()
      local stats0 = T.compiler.stats()
      local compiled, fired = train(true, 5)
      local stats1 = T.compiler.stats()
      local eager = train(false, 5)
      expect.eq(fired, 2 * 5 * 4)
      expect.truthy(stats1.graphs_compiled > stats0.graphs_compiled and stats1.backward_graphs_compiled > stats0.backward_graphs_compiled,
        "the forward and its backward were compiled")
      for r = 1, 2 do
        local d, ep = 0, eager[r]:parameters()
        for i, p in ipairs(compiled[r]:parameters()) do d = math.max(d, (p - ep[i]):abs():max():item()) end
        expect.truthy(d < 1e-12, string.format("rank %d: compiled and eager DDP differ by %g", r - 1, d))
      end
      local d, p2 = 0, eager[2]:parameters()
      for i, p in ipairs(eager[1]:parameters()) do d = math.max(d, (p - p2[i]):abs():max():item()) end
      expect.eq(d, 0)
    end)
  end)

  describe("T.distributed with NCCL (one process)", function()
    it("times out waiting for rank 0's id, and for the other ranks", function()
      need_gpus(1)
      local file = os.tmpname() .. "_none.id"
      local _, err, st = expect.crescent({ "-e", "crescent.distributed.init_process_group('nccl')" },
        { env = "RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 CRESCENT_DIST_TIMEOUT=2 CRESCENT_DIST_RUN= CRESCENT_DIST_FILE=" .. file })
      expect.eq(st, 1)
      has(err, "rank 1 waited 2 s for rank 0's NCCL id")
      _, err, st = expect.crescent({ "-e", "crescent.distributed.init_process_group('nccl')" },
        { env = "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 CRESCENT_DIST_TIMEOUT=3 CRESCENT_DIST_RUN= CRESCENT_DIST_FILE=" .. file })
      os.remove(file)
      expect.eq(st, 1)
      has(err, "timed out after 3 s waiting for the other ranks")
    end)

    it("a rank that never joins a barrier gives the others a catchable timeout error", function()
      need_gpus(2)
      local out, err, st = launch(2, [[
        local T = require "crescent"
        T.distributed.init_process_group("nccl")
        T.distributed.barrier()  -- (connects the peers: an enqueue that connects waits inside NCCL)
        if T.distributed.get_rank() == 1 then os.execute("sleep 30"); os.exit(0) end
        local ok, e = pcall(T.distributed.barrier)
        print(ok and "no error" or e)
        ok, e = pcall(T.distributed.all_reduce, T.ones(2, { device = T.distributed.device() }))
        print(ok and "no error" or e)
      ]], "CRESCENT_DIST_TIMEOUT=15")
      expect.eq(st, 0, err)
      has(out, "barrier: rank 0 timed out after 15 s waiting for the other ranks")
      has(out, "the communicator is aborted")
      has(out, "the communicator was aborted after an earlier error")
    end)

    it("a rank that raises stops the run with a clear error, not a hang", function()
      need_gpus(2)
      local _, err, st = launch(2, [[
        local T = require "crescent"
        T.distributed.init_process_group("nccl")
        if T.distributed.get_rank() == 1 then error("planned failure on rank 1") end
        local t = T.ones(4, { device = T.distributed.device() })
        T.distributed.all_reduce(t)  -- (rank 1 never joins: rank 0 waits until stopped)
        T.cuda.synchronize(T.distributed.device())
      ]], "CRESCENT_DIST_TIMEOUT=60")
      expect.truthy(st ~= 0)
      has(err, "planned failure on rank 1")
      has(err, "rank 1 of 2 failed")
    end)
  end)
  return
end

-- on every rank (under crescent --nproc N) ---------------------------------------------------------

local function ensure_group()
  need_gpus(2)
  if not D.is_initialized() then D.init_process_group("nccl") end
  return D.get_rank(), D.get_world_size(), D.device()
end

local function host(t) return t:cpu():double():totable() end

-- element i (1-based) of rank r's input for op
local function value(op, dtype, r, i, n)
  if dtype == "bool" then return (i + r) % 3 == 0 end
  if op == "prod" then return 1 + (i + r) % 2 end
  return 1 + i % 4 + n * ((i + r) % 3)  -- (the sum over ranks divides by n: avg is exact for integers)
end

local function expected(op, dtype, i, n)
  local acc
  for r = 0, n - 1 do
    local v = value(op, dtype, r, i, n)
    if dtype == "bool" then v = v and 1 or 0 end
    if acc == nil then acc = v
    elseif op == "sum" or op == "avg" then acc = acc + v
    elseif op == "prod" then acc = acc * v
    elseif op == "max" then acc = math.max(acc, v)
    else acc = math.min(acc, v) end
  end
  if dtype == "bool" then return acc ~= 0 and 1 or 0 end
  return op == "avg" and acc / n or acc
end

local DTYPES = { "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool" }
local OPS = { "sum", "avg", "max", "min", "prod" }
local N = 12

describe("T.distributed on every rank", function()
  it("all_reduce: every dtype and op against the host", function()
    local rank, world, dev = ensure_group()
    local got, bool_avg = {}, nil
    for _, dt in ipairs(DTYPES) do
      for _, op in ipairs(OPS) do
        if dt == "bool" and op == "avg" then
          local t = T.zeros(N, { dtype = "bool", device = dev })
          bool_avg = select(2, pcall(D.all_reduce, t, { op = "avg" }))
        else
          local vals = {}
          for i = 1, N do vals[i] = value(op, dt, rank, i, world) end
          local t = T.tensor(vals, { dtype = dt, device = dev })
          D.all_reduce(t, { op = op })
          got[dt .. " " .. op] = t
        end
      end
    end
    T.cuda.synchronize(dev)
    for key, t in pairs(got) do
      local dt, op = key:match("(%S+) (%S+)")
      local want = {}
      for i = 1, N do want[i] = expected(op, dt, i, world) end
      expect.eq(host(t), want, key)
      expect.eq(t.dtype, dt)
    end
    has(tostring(bool_avg), "not defined for bool tensors")
  end)

  it("async work handles, broadcast, all_gather and reduce_scatter", function()
    local rank, world, dev = ensure_group()
    local a = T.full({ 3, 4 }, rank + 1, { device = dev })
    local w = D.all_reduce(a, { op = "max", async_op = true })
    w:wait()
    local b = T.arange(6, { device = dev }):double() + 10 * rank
    D.broadcast(b, world - 1)
    local x = T.tensor({ rank, rank + 0.5 }, { device = dev })
    local list = {}
    for i = 1, world do list[i] = T.zeros(2, { device = dev }) end
    local wl = D.all_gather(list, x, { async_op = true })
    local flat = T.zeros({ world, 2 }, { device = dev })
    D.all_gather_into_tensor(flat, x)
    local parts = {}
    for i = 1, world do parts[i] = T.full({ 2 }, 100 * i + rank, { dtype = "float32", device = dev }) end
    local rs = T.zeros(2, { device = dev })
    D.reduce_scatter(rs, parts, { op = "sum" })
    local rst = T.zeros(3, { dtype = "int64", device = dev })
    local wr = D.reduce_scatter_tensor(rst, T.arange(3 * world, { dtype = "int64", device = dev }), { op = "min", async_op = true })
    wl:wait()
    wr:wait()
    D.barrier()
    expect.truthy(w:is_completed() and wl:is_completed() and wr:is_completed())
    expect.eq(host(a), host(T.full({ 3, 4 }, world)))
    expect.eq(host(b), host(T.arange(6):double() + 10 * (world - 1)))
    for i = 1, world do expect.eq(host(list[i]), { i - 1, i - 0.5 }) end
    expect.eq(host(flat)[world], { world - 1, world - 0.5 })
    local s = 0
    for r = 0, world - 1 do s = s + 100 * (rank + 1) + r end
    expect.eq(host(rs), { s, s })
    expect.eq(host(rst), { 3 * rank, 3 * rank + 1, 3 * rank + 2 })
    expect.errors(function() D.all_reduce(T.ones(2)) end, "is a CPU tensor")
    expect.errors(function() D.all_gather_into_tensor(T.zeros(3, { device = dev }), x) end, "output elements = input elements x world size")
    expect.errors(function() D.broadcast(x, world) end, "src expected a rank")
  end)

  -- a small MLP, float64: DDP over the ranks' slices == one process on the whole batch
  local function mlp(seed, dev)
    T.manual_seed(seed)
    return T.nn.Sequential(T.nn.Linear(6, 16), T.nn.Tanh(), T.nn.Linear(16, 16), T.nn.Tanh(), T.nn.Linear(16, 3)):double():to(dev)
  end

  -- a step's batch, per rows a rank: the whole x, y, then this rank's rows
  local function batch(seed, rank, world, per, dev)
    T.manual_seed(seed)
    local x, y = T.randn({ per * world, 6 }):double():to(dev), T.randn({ per * world, 3 }):double():to(dev)
    return x, y, x:narrow(1, rank * per + 1, per), y:narrow(1, rank * per + 1, per)
  end

  local function max_diff(m1, m2)
    local d, p2 = 0, m2:parameters()
    for i, p in ipairs(m1:parameters()) do d = math.max(d, (p - p2[i]):abs():max():item()) end
    return d
  end

  it("DistributedDataParallel == one process on the concatenated batch (10 SGD steps)", function()
    local rank, world, dev = ensure_group()
    local model = mlp(100 + rank, dev)  -- (different on each rank: DDP broadcasts rank 0's)
    local ddp = T.nn.parallel.DistributedDataParallel(model, { bucket_cap_mb = 0.001 })
    local ref = mlp(0, dev)
    ref:load_state_dict(ddp:state_dict())
    local per = 4
    local opt = T.optim.SGD(ddp:parameters(), { lr = 0.1 })
    local ropt = T.optim.SGD(ref:parameters(), { lr = 0.1 })
    for step = 1, 10 do
      local x, y, xs, ys = batch(1000 + step, rank, world, per, dev)
      opt:zero_grad()
      T.F.mse_loss(ddp(xs), ys):backward()
      opt:step()
      ropt:zero_grad()
      T.F.mse_loss(ref(x), y):backward()
      ropt:step()
    end
    local gathered = T.zeros({ world, 3 }, { dtype = "float64", device = dev })
    D.all_gather_into_tensor(gathered, model:parameters()[5]:reshape(-1):narrow(1, 1, 3):contiguous())
    T.cuda.synchronize(dev)
    expect.truthy(max_diff(model, ref) < 1e-12, "DDP and one process differ by " .. max_diff(model, ref))
    local g = host(gathered)
    for r = 2, world do expect.eq(g[r], g[1]) end
  end)

  it("no_sync accumulates locally; the next backward reduces the sum", function()
    local rank, world, dev = ensure_group()
    local ddp = T.nn.parallel.DistributedDataParallel(mlp(7, dev))
    local ref = mlp(7, dev)
    local per = 3
    local batches = {}
    for k = 1, 3 do
      T.manual_seed(50 + k)
      batches[k] = { T.randn({ per * world, 6 }):double():to(dev), T.randn({ per * world, 3 }):double():to(dev) }
    end
    local function local_step(k)
      local x, y = batches[k][1], batches[k][2]
      T.F.mse_loss(ddp(x:narrow(1, rank * per + 1, per)), y:narrow(1, rank * per + 1, per)):backward()
    end
    ddp:no_sync(function() local_step(1); local_step(2) end)
    local_step(3)
    for k = 1, 3 do T.F.mse_loss(ref(batches[k][1]), batches[k][2]):backward() end
    T.cuda.synchronize(dev)
    local d, rp = 0, ref:parameters()
    for i, p in ipairs(ddp:parameters()) do d = math.max(d, (p.grad - rp[i].grad):abs():max():item()) end
    expect.truthy(d < 1e-12, "accumulated gradients differ by " .. d)
  end)

  it("compiled DDP == eager DDP (5 AdamW steps)", function()
    local rank, world, dev = ensure_group()
    local function run(compiled)
      local ddp = T.nn.parallel.DistributedDataParallel(mlp(100 + rank, dev), { bucket_cap_mb = 0.001 })
      local forward = compiled and T.compile(ddp) or ddp
      local opt = T.optim.AdamW(ddp:parameters(), { lr = 0.01 })
      local per = 4
      for step = 1, 5 do
        local _, _, xs, ys = batch(3000 + step, rank, world, per, dev)
        opt:zero_grad()
        T.F.mse_loss(forward(xs), ys):backward()
        opt:step()
      end
      return ddp.module
    end
    local before = T.compiler.stats().backward_graphs_compiled
    local compiled, eager = run(true), run(false)
    T.cuda.synchronize(dev)
    expect.truthy(T.compiler.stats().backward_graphs_compiled > before, "the backward was compiled")
    expect.truthy(max_diff(compiled, eager) < 1e-10, "compiled and eager DDP differ by " .. max_diff(compiled, eager))
  end)

  -- the device memory a first step keeps (the optimizer's state): what is in use after backward,
  -- step and zero_grad (gradients and buffers gone) beyond what was before the backward
  local function state_growth(opt, model, x, dev)
    opt:zero_grad()
    collectgarbage()
    T.cuda.synchronize(dev)
    local before = T.cuda.stats(dev).in_use
    model(x):sum():backward()
    opt:step()
    opt:zero_grad()
    collectgarbage()
    collectgarbage()
    T.cuda.synchronize(dev)
    return T.cuda.stats(dev).in_use - before
  end

  it("ShardedOptimizer (ZeRO-2) == DDP + AdamW (10 clipped steps, uneven shards); its state ~1/world", function()
    local rank, world, dev = ensure_group()
    local opts = { lr = 0.01, weight_decay = 0.05 }
    local ddp = T.nn.parallel.DistributedDataParallel(mlp(100 + rank, dev), { bucket_cap_mb = 0.001 })
    local model = mlp(0, dev)
    model:load_state_dict(ddp:state_dict())
    local dopt = T.optim.AdamW(ddp:parameters(), opts)
    -- 435 parameters in buckets of 67, 256 and 112: shard boundaries inside tensors, padding
    local sopts = { bucket_cap_mb = 0.001 }
    for k, v in pairs(opts) do sopts[k] = v end
    local sopt = D.ShardedOptimizer(model:parameters(), T.optim.AdamW, sopts)
    local per, grads_left = 4, 0
    for step = 1, 10 do
      local _, _, xs, ys = batch(2000 + step, rank, world, per, dev)
      dopt:zero_grad()
      T.F.mse_loss(ddp(xs), ys):backward()
      T.nn.utils.clip_grad_norm_(ddp:parameters(), 0.05)
      dopt:step()
      sopt:zero_grad()
      T.F.mse_loss(model(xs), ys):backward()
      for _, p in ipairs(model:parameters()) do
        if p.grad ~= nil then grads_left = grads_left + 1 end
      end
      sopt:clip_grad_norm_(0.05)
      sopt:step()
    end
    -- state memory: AdamW on one rank's whole Linear against the sharded one (float32, ~1 M parameters)
    T.manual_seed(5)
    local big1, big2 = T.nn.Linear(1001, 999):to(dev), T.nn.Linear(1001, 999):to(dev)
    local xb = T.randn({ 2, 1001 }):to(dev)
    local whole = state_growth(T.optim.AdamW(big1:parameters(), opts), big1, xb, dev)
    local big_opt = D.ShardedOptimizer(big2:parameters(), T.optim.AdamW, opts)
    local sharded = state_growth(big_opt, big2, xb, dev)
    local counted = big_opt:memory()
    local ssd, dsd = sopt:state_dict(), dopt:state_dict()
    T.cuda.synchronize(dev)
    if rank == 0 then
      print(string.format("ShardedOptimizer state on %d ranks: AdamW %.2f MB per rank, sharded %.2f MB (T.cuda in_use growth of "
        .. "a first step; the shards' own count %.2f MB of state, %.2f MB of shards)", world, whole / 2 ^ 20,
        sharded / 2 ^ 20, counted.state / 2 ^ 20, counted.shards / 2 ^ 20))
    end
    expect.eq(grads_left, 0)
    expect.truthy(max_diff(model, ddp.module) < 1e-12, "sharded and DDP differ by " .. max_diff(model, ddp.module))
    expect.truthy(state_diff(ssd, dsd) < 1e-12, "the state_dicts differ by " .. state_diff(ssd, dsd))
    local n = 1001 * 999 + 999
    expect.truthy(counted.state >= 8 * math.ceil(n / world) and counted.state <= 8 * math.ceil(n / world) + 64, tostring(counted.state))
    expect.truthy(whole >= 8 * n and sharded >= counted.state, string.format("growth below the state: sharded %d B "
      .. "(state %d B), whole %d B", sharded, counted.state, whole))
    expect.truthy(sharded < whole * (1 / world + 0.25), string.format("sharded state %d B, whole %d B", sharded, whole))
  end)

  it("a compiled step's collectives are graph nodes: compiled == eager, no graph break", function()
    local rank, world, dev = ensure_group()
    local function step(w, g, x)  -- (the gradient averaged in place, an update, a gather)
      D.all_reduce(g, { op = "avg" })
      w:sub_(g * 0.5)
      return (w * w):sum(), D.functional.all_gather_tensor(x * (rank + 1)), D.functional.reduce_scatter_tensor(x)
    end
    local function run(f)
      T.manual_seed(60 + rank)
      local w, g, x = T.randn({ 64, 8 }):to(dev), T.randn({ 64, 8 }):to(dev), T.randn({ 4 * world, 3 }):to(dev)
      local out = { f(w, g, x) }
      return { w, g, out[1], out[2], out[3] }
    end
    local eager, sync = run(step), T.config.sync_compile
    T.config.sync_compile = true  -- (the second call runs the compiled graph)
    local compiled = T.compile(step)
    run(compiled)
    local again = run(compiled)
    T.config.sync_compile = sync
    T.manual_seed(60 + rank)
    local r = T.explain(step, T.randn({ 64, 8 }):to(dev), T.randn({ 64, 8 }):to(dev), T.randn({ 4 * world, 3 }):to(dev))
    T.cuda.synchronize(dev)
    for i = 1, #eager do
      local d = (again[i]:double() - eager[i]:double()):abs():max():item()
      expect.truthy(d < 1e-5, string.format("rank %d: result %d: compiled and eager differ by %g", rank, i, d))
    end
    expect.eq({ r.graph_count, r.graph_break_count }, { 1, 0 })
    local ops = table.concat(r.graph_ops[1], " ")
    for _, name in ipairs({ "_dist_all_reduce", "_dist_all_gather", "_dist_reduce_scatter" }) do has(ops, name, "the graph's ops") end
  end)

  it("destroy_process_group flushes and leaves no group", function()
    ensure_group()
    D.destroy_process_group()
    expect.eq(D.is_initialized(), false)
    expect.errors(function() D.all_reduce(T.ones(2)) end, "not initialized")
  end)
end)
