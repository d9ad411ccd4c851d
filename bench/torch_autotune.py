"""torch.compile, default mode and mode="max-autotune", on the GPU workloads of bench/workloads.lua
(bench/torch_workloads.py), for bench/run_autotune_cuda.sh: device time per call (CUDA events
around each of `reps` calls after warm-up, median, as T.bench measures crescent on CUDA) and the
cold compile (the first call's wall time). JSON lines.

    python3 bench/torch_autotune.py [reps] [names, comma-separated]
"""
import json
import os
import statistics
import sys
import time

import torch

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 and sys.argv[2] else None
torch.manual_seed(0)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_workloads import workloads  # noqa: E402


def device_us(fn, args):
    for _ in range(10):
        fn(*args)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(*args)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


for name, (fn, args, nbytes) in workloads("cuda").items():
    if only and name not in only:
        continue
    row = {"name": name, "bytes": nbytes}
    for mode in ("default", "max-autotune"):
        try:
            torch._dynamo.reset()
            cf = torch.compile(fn, mode=mode)
            t0 = time.perf_counter()
            cf(*args)
            torch.cuda.synchronize()
            row[f"{mode}_compile_ms"] = (time.perf_counter() - t0) * 1e3
            row[f"{mode}_us"] = device_us(cf, args)
        except Exception as e:  # report, keep going
            row[f"{mode}_error"] = str(e).split("\n")[0]
    print(json.dumps(row), flush=True)
