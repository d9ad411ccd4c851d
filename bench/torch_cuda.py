"""PyTorch 2.x on the GPU workloads of bench/codegen_bench.lua (DEVICE=cuda: the anchor's GPU sizes,
N = 2^24; R, C = 8192, 4096), eager and torch.compile, for the side-by-side table of bench/run_cuda.sh.

    python3 bench/torch_cuda.py [reps]

Device time per call: CUDA events around each of `reps` calls after warm-up, median (as T.bench
measures crescent on CUDA); for torch.compile also around batches of 10 calls issued back to back
(T.bench's batch = 10: host gaps hidden, as triton's do_bench and the anchor measure). torch.compile's cold compile is the first call's wall time. Also the
copy bandwidth (y.copy_(x), 2^24 floats). JSON lines.
"""
import os
import sys

import torch

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
dev = "cuda"
torch.manual_seed(0)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import device_us, emit, first_call_ms  # noqa: E402
from torch_workloads import workloads  # noqa: E402

WORK = workloads(dev)
N = 1 << 24


x, y = torch.randn(N, device=dev), torch.empty(N, device=dev)
copy_us = device_us(lambda a, b: b.copy_(a), (x, y), reps)
emit({"name": "copy", "eager_us": copy_us, "GBps": 8 * N / copy_us / 1e3})
for name, (fn, args, nbytes) in WORK.items():
    row = {"name": name, "eager_us": device_us(fn, args, reps)}
    try:
        cf = torch.compile(fn)
        row["cold_compile_ms"] = first_call_ms(cf, args)
        row["compiled_us"] = device_us(cf, args, reps)
        row["compiled_batch_us"] = device_us(cf, args, reps, batch=10)
    except Exception as e:  # report, keep going
        row["compile_error"] = str(e).split("\n")[0]
    emit(row)
