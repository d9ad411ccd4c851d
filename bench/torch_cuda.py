"""PyTorch 2.x on the GPU workloads of bench/codegen_bench.lua (DEVICE=cuda: the anchor's GPU sizes,
N = 2^24; R, C = 8192, 4096), eager and torch.compile, for the side-by-side table of bench/run_cuda.sh.

    python3 bench/torch_cuda.py [reps]

Device time per call: CUDA events around each of `reps` calls after warm-up, median (as T.bench
measures crescent on CUDA). torch.compile's cold compile is the first call's wall time. Also the
copy bandwidth (y.copy_(x), 2^24 floats). JSON lines.
"""
import json
import statistics
import sys
import time

import torch

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
dev = "cuda"
torch.manual_seed(0)
N, R, C = 1 << 24, 8192, 4096


def gelu(x):
    return x * 0.5 * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


def small_chain(x):
    for _ in range(20):
        x = torch.sin(x) * 1.01 + 0.1
    return x


def r(*shape):
    return torch.randn(*shape, device=dev)


WORK = {
    "pw_chain": (lambda x: torch.sin((x + 1) * 2), (r(N),), 8 * N),
    "gelu": (gelu, (r(N),), 8 * N),
    "add_mul_sum": (lambda x, y: ((x + y) * 2).sum(), (r(R, C), r(R, C)), 8 * R * C),
    "row_sum": (lambda x: x.sum(dim=1), (r(R, C),), 4 * R * C),
    "bias_relu": (lambda x, b: torch.relu(x + b), (r(R, C), r(C)), 8 * R * C),
    "softmax": (lambda x: torch.softmax(x, dim=-1), (r(R, C),), 8 * R * C),
    "layernorm": (lambda x, w, b: torch.nn.functional.layer_norm(x, (C,), w, b), (r(R, C), r(C), r(C)), 8 * R * C),
    "small_chain": (small_chain, (r(1024),), None),
    "mlp": (lambda x, w1, b1, w2, b2: gelu(x @ w1 + b1) @ w2 + b2,
            (r(4096, 1024), r(1024, 4096), r(4096), r(4096, 1024), r(1024)), None),
    "attention": (lambda q, k, v: torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / 8, dim=-1), v),
                  (r(16, 8, 1024, 64), r(16, 8, 1024, 64), r(16, 8, 1024, 64)), None),
}


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


x, y = r(N), torch.empty(N, device=dev)
copy_us = device_us(lambda a, b: b.copy_(a), (x, y))
print(json.dumps({"name": "copy", "eager_us": copy_us, "GBps": 8 * N / copy_us / 1e3}))
for name, (fn, args, nbytes) in WORK.items():
    row = {"name": name, "eager_us": device_us(fn, args)}
    try:
        cf = torch.compile(fn)
        t0 = time.perf_counter()
        cf(*args)
        torch.cuda.synchronize()
        row["cold_compile_ms"] = (time.perf_counter() - t0) * 1e3
        row["compiled_us"] = device_us(cf, args)
    except Exception as e:  # report, keep going
        row["compile_error"] = str(e).split("\n")[0]
    print(json.dumps(row), flush=True)
