"""The cases of bench/conv_bench.lua (which runs this script) with PyTorch eager, same device
(DEVICE: cpu or cuda), shapes, dtypes (DTYPES, comma-separated) and thread count
(CRESCENT_NUM_THREADS, default: all cores), medians over repeated runs (on CUDA: device time
between events, PyTorch's default cuDNN settings: TF32 allowed, benchmark off unless BENCHMARK=1).
    DEVICE=cuda DTYPES=float32,bfloat16 python3 bench/torch_conv.py [reps [batch]]
Prints a table, then one line per case: RESULT <name>_<dtype> <median_us> <GFLOP/s>."""
import os
import sys
import time

import torch
import torch.nn.functional as F

device = os.environ.get("DEVICE", "cpu")
cuda = device != "cpu"
reps = int(sys.argv[1]) if len(sys.argv) > 1 else (50 if cuda else 10)
batch = int(sys.argv[2]) if len(sys.argv) > 2 else (32 if cuda else 4)
dtypes = os.environ.get("DTYPES", "float32").split(",")
threads = int(os.environ.get("CRESCENT_NUM_THREADS", "0")) or os.cpu_count()
torch.set_num_threads(threads)
torch.backends.cudnn.benchmark = os.environ.get("BENCHMARK") == "1"

SHAPES = [
    ("conv1 7x7/2", 3, 64, 7, 2, 3, 224),
    ("layer1 3x3", 64, 64, 3, 1, 1, 56),
    ("layer2 3x3/2", 64, 128, 3, 2, 1, 56),
    ("layer2 3x3", 128, 128, 3, 1, 1, 28),
    ("layer2 1x1/2", 64, 128, 1, 2, 0, 56),
    ("layer3 3x3", 256, 256, 3, 1, 1, 14),
    ("layer4 3x3", 512, 512, 3, 1, 1, 7),
]


def elapsed_us(fn):
    """One run's time: device time between events on CUDA, else wall time."""
    if not cuda:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


torch.manual_seed(0)
print(f"torch {torch.__version__} conv2d forward on {device}"
      f"{' (cuDNN ' + str(torch.backends.cudnn.version()) + ')' if cuda else ''}, batch {batch}, {threads} threads")
print(f"{'case':16s} {'dtype':9s} {'median us':>12s} {'GFLOP/s':>10s}")
results = []
with torch.no_grad():
    for dt in dtypes:
        dtype = getattr(torch, dt)
        for name, cin, cout, k, stride, pad, hw in SHAPES:
            x = torch.randn(batch, cin, hw, hw).to(device, dtype)
            w, b = torch.randn(cout, cin, k, k).to(device, dtype), torch.randn(cout).to(device, dtype)
            for _ in range(3):
                F.conv2d(x, w, b, stride, pad)
            times = sorted(elapsed_us(lambda: F.conv2d(x, w, b, stride, pad)) for _ in range(reps))
            med = times[(reps + 1) // 2 - 1]  # T.bench's median
            ho = (hw + 2 * pad - k) // stride + 1
            gflops = 2 * batch * cout * ho * ho * cin * k * k / (med * 1e3)
            print(f"{name:16s} {dt:9s} {med:12.1f} {gflops:10.1f}")
            results.append(f"RESULT {name.replace(' ', '_')}_{dt} {med:.2f} {gflops:.2f}")
print("\n".join(results))
