"""The cases of bench/conv_bench.lua (which runs this script) with PyTorch (Debian's 1.13,
/usr/bin/python3) eager, same shapes and thread count (CRESCENT_NUM_THREADS, default: all
cores), medians over repeated runs.
    /usr/bin/python3 bench/torch_conv.py [reps [batch]]
Prints a table, then one line per case: RESULT <name> <median_us> <GFLOP/s>."""
import os
import sys
import time

import torch
import torch.nn.functional as F

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 4
threads = int(os.environ.get("CRESCENT_NUM_THREADS", "0")) or os.cpu_count()
torch.set_num_threads(threads)

SHAPES = [
    ("conv1 7x7/2", 3, 64, 7, 2, 3, 224),
    ("layer1 3x3", 64, 64, 3, 1, 1, 56),
    ("layer2 3x3/2", 64, 128, 3, 2, 1, 56),
    ("layer2 3x3", 128, 128, 3, 1, 1, 28),
    ("layer2 1x1/2", 64, 128, 1, 2, 0, 56),
    ("layer3 3x3", 256, 256, 3, 1, 1, 14),
    ("layer4 3x3", 512, 512, 3, 1, 1, 7),
]

torch.manual_seed(0)
print(f"torch {torch.__version__} conv2d forward, batch {batch}, {threads} threads, float32")
print(f"{'case':16s} {'median us':>12s} {'GFLOP/s':>10s}")
results = []
with torch.no_grad():
    for name, cin, cout, k, stride, pad, hw in SHAPES:
        x, w, b = torch.randn(batch, cin, hw, hw), torch.randn(cout, cin, k, k), torch.randn(cout)
        for _ in range(2):
            F.conv2d(x, w, b, stride, pad)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            F.conv2d(x, w, b, stride, pad)
            times.append((time.perf_counter() - t0) * 1e6)
        times.sort()
        med = times[(reps + 1) // 2 - 1]  # T.bench's median
        ho = (hw + 2 * pad - k) // stride + 1
        gflops = 2 * batch * cout * ho * ho * cin * k * k / (med * 1e3)
        print(f"{name:16s} {med:12.1f} {gflops:10.1f}")
        results.append(f"RESULT {name.replace(' ', '_')} {med:.2f} {gflops:.2f}")
print("\n".join(results))
