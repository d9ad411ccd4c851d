-- T.distributed.all_reduce bus bandwidth, as nccl-tests' all_reduce_perf reports it: algbw =
-- bytes / time, busbw = algbw * 2 (n - 1) / n (what each link carries in a ring), float32 sum,
-- in place, sizes 8 B .. 1 GB doubling; the time of one call is the device time of `iters` calls
-- queued back to back on the current stream (CUDA events), after `warmup` calls. Rank 0 prints.
--
--   crescent --nproc 2 bench/allreduce_bench.lua [--iters 20] [--warmup 5] [--min-bytes 8] [--max-bytes 1073741824]
-- Its counterparts: torchrun --nproc_per_node 2 bench/torch_allreduce.py (PyTorch) and
-- build/nccl_allreduce --ngpus 2 (bare NCCL); bench/run_allreduce.sh runs the three.
local T = require "crescent"
local D = T.distributed

local o = { iters = 20, warmup = 5, min_bytes = 8, max_bytes = 2 ^ 30 }
for i = 1, #arg, 2 do
  local k = arg[i]:match("^%-%-([%w%-]+)$")
  k = k and k:gsub("%-", "_")
  if not k or o[k] == nil or not tonumber(arg[i + 1]) then error("allreduce_bench.lua: unknown option " .. arg[i], 0) end
  o[k] = tonumber(arg[i + 1])
end

D.init_process_group("nccl")
local rank, n, dev = D.get_rank(), D.get_world_size(), D.device()
if rank == 0 then
  print(string.format("all_reduce (sum, float32, in place) on %d ranks, NCCL through crescent", n))
  print(string.format("%12s %12s %12s %12s", "size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)"))
end
local bytes = math.max(4, o.min_bytes)
while bytes <= o.max_bytes do
  local t = T.ones(math.floor(bytes / 4), { device = dev })
  for _ = 1, o.warmup do D.all_reduce(t) end
  local e0, e1 = T.cuda.Event({ enable_timing = true }), T.cuda.Event({ enable_timing = true })
  local stream = T.cuda.current_stream(dev)
  D.barrier()
  e0:record(stream)
  for _ = 1, o.iters do D.all_reduce(t) end
  e1:record(stream)
  e1:synchronize()
  local s = e0:elapsed_time(e1) / 1000 / o.iters
  local alg = bytes / s / 1e9
  if rank == 0 then print(string.format("%12d %12.1f %12.2f %12.2f", bytes, s * 1e6, alg, alg * 2 * (n - 1) / n)) end
  t = nil
  collectgarbage()
  bytes = bytes * 2
end
D.destroy_process_group()
