"""torch.distributed.all_reduce bus bandwidth, the counterpart of bench/allreduce_bench.lua
(same sizes, float32 sum in place, device time of `iters` calls queued back to back).

    torchrun --nproc_per_node 2 bench/torch_allreduce.py [iters] [max_bytes] [min_bytes]
"""
import os
import sys

import torch
import torch.distributed as dist

iters = int(sys.argv[1]) if len(sys.argv) > 1 else 20
max_bytes = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 30
min_bytes = max(4, int(sys.argv[3]) if len(sys.argv) > 3 else 8)
warmup = 5

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
rank, n = dist.get_rank(), dist.get_world_size()
if rank == 0:
    print(f"all_reduce (sum, float32, in place) on {n} ranks, torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}")
    print(f"{'size (B)':>12} {'time (us)':>12} {'algbw (GB/s)':>12} {'busbw (GB/s)':>12}")
nbytes = min_bytes
while nbytes <= max_bytes:
    t = torch.ones(nbytes // 4, device="cuda")
    for _ in range(warmup):
        dist.all_reduce(t)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dist.barrier()
    e0.record()
    for _ in range(iters):
        dist.all_reduce(t)
    e1.record()
    e1.synchronize()
    s = e0.elapsed_time(e1) / 1000 / iters
    alg = nbytes / s / 1e9
    if rank == 0:
        print(f"{nbytes:12d} {s * 1e6:12.1f} {alg:12.2f} {alg * 2 * (n - 1) / n:12.2f}")
    del t
    nbytes *= 2
dist.destroy_process_group()
