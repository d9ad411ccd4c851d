"""torch.compile, default mode and mode="max-autotune", on the GPU workloads of bench/workloads.lua
(bench/torch_workloads.py), for bench/run_autotune_cuda.sh: device time per call (CUDA events
around each of `reps` calls after warm-up, median, as T.bench measures crescent on CUDA) and the
cold compile (the first call's wall time). JSON lines.

    python3 bench/torch_autotune.py [reps] [names, comma-separated]
"""
import os
import sys

import torch

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 and sys.argv[2] else None
torch.manual_seed(0)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import device_us, emit, first_call_ms  # noqa: E402
from torch_workloads import workloads  # noqa: E402


for name, (fn, args, nbytes) in workloads("cuda").items():
    if only and name not in only:
        continue
    row = {"name": name, "bytes": nbytes}
    for mode in ("default", "max-autotune"):
        try:
            torch._dynamo.reset()
            cf = torch.compile(fn, mode=mode)
            row[f"{mode}_compile_ms"] = first_call_ms(cf, args)
            row[f"{mode}_us"] = device_us(cf, args, reps)
        except Exception as e:  # report, keep going
            row[f"{mode}_error"] = str(e).split("\n")[0]
    emit(row)
