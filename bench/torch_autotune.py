"""torch.compile, default mode and mode="max-autotune", on the GPU workloads of bench/workloads.lua
(bench/torch_workloads.py), for bench/run_autotune_cuda.sh. Timed as shared/anchors/torch_anchor.py
times torch.compile: triton.testing.do_bench (warm-up 50 ms, 400 ms of runs, median; it clears the
L2 cache before each run, so the host's ~35 us of guards and launch per call hide behind that
clear and the time is the device's). Also the cold compile (the first call's wall time). A compile
that passes CAP seconds (environment, default 90) is abandoned and reported. JSON lines on stdout,
progress on stderr.

    python3 bench/torch_autotune.py [names, comma-separated]     (DTYPE=bfloat16: inputs of that dtype)
"""
import os
import signal
import sys
import time

import torch
import torch._inductor.config as inductor
from triton.testing import do_bench

only = set(sys.argv[1].split(",")) if len(sys.argv) > 1 and sys.argv[1] else None
cap = int(os.environ.get("CAP", "90"))
torch.manual_seed(0)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import emit, first_call_ms  # noqa: E402
from torch_workloads import workloads  # noqa: E402

# max-autotune's matmul search: its default space (Triton templates vs cuBLAS), compiled on every core
for key, value in (("max_autotune_gemm_search_space", "DEFAULT"), ("compile_threads", max(1, os.cpu_count() or 1))):
    if hasattr(inductor, key):
        setattr(inductor, key, value)


class Cap(Exception):
    pass


def on_alarm(*_):
    raise Cap(f"compile passed {cap} s")


signal.signal(signal.SIGALRM, on_alarm)


def anchor_us(fn, args):  # (the anchors' method, not torch_common's events around each call)
    return do_bench(lambda: fn(*args), warmup=50, rep=400, return_mode="median") * 1e3


def log(text):
    print(f"[torch_autotune {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


for name, (fn, args, nbytes) in workloads("cuda").items():
    if only and name not in only:
        continue
    row = {"name": name, "bytes": nbytes, "dtype": os.environ.get("DTYPE", "float32")}
    for mode in ("default", "max-autotune"):
        try:
            torch._dynamo.reset()
            cf = torch.compile(fn, mode=mode)
            torch.cuda.synchronize()
            signal.alarm(cap)
            try:
                row[f"{mode}_compile_ms"] = first_call_ms(cf, args)
            finally:
                signal.alarm(0)
            row[f"{mode}_us"] = anchor_us(cf, args)
        except Exception as e:  # report, keep going
            row[f"{mode}_error"] = str(e).split("\n")[0][:200]
        log(f"{name} {row['dtype']} {mode}: {row.get(f'{mode}_us', row.get(f'{mode}_error'))}")
    emit(row)
