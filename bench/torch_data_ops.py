"""The cases of bench/data_ops_bench.lua with PyTorch (Debian's 1.13, /usr/bin/python3): same
sizes (2^24), same thread count (CRESCENT_NUM_THREADS, default: all cores), 0-based indices,
medians over repeated runs.
    /usr/bin/python3 bench/torch_data_ops.py [reps]
Prints a table, then one line per case: RESULT <name> <median_us> <bytes> B."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import device_times_us, median, time_calls  # noqa: E402

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
threads = int(os.environ.get("CRESCENT_NUM_THREADS", "0")) or os.cpu_count()
torch.set_num_threads(threads)

N = 2 ** 24
dev = os.environ.get("DEVICE", "cpu")  # DEVICE=cuda: device time between two events
results = []


def bench(name, fn, args, nbytes):
    if dev == "cuda":  # one call to warm up, then device time between two events per call
        times = device_times_us(fn, args, reps, warm=1)
    else:
        fn(*args)
        times = [ms * 1e3 for ms in time_calls(lambda: fn(*args), reps)[0]]
    results.append((name, median(times), min(times), nbytes))


torch.manual_seed(0)
x = torch.randn(N).to(dev)
mask = x > 0
idx = torch.randint(0, N, (N,)).to(dev)
src = torch.randn(N).to(dev)
bench("copy 16M", lambda a: a.clone(), (x,), 8 * N)
bench("masked_select 16M", lambda a, m: a.masked_select(m), (x, mask), 4 * N + N + 2 * N)
bench("nonzero 16M", lambda m: torch.nonzero(m), (mask,), N + 4 * N)
bench("index_select 16M", lambda a, i: a.index_select(0, i), (x, idx), 8 * N + 8 * N)
bench("gather 16M", lambda a, i: a.gather(0, i), (x, idx), 8 * N + 8 * N)
bench("scatter_add 16M", lambda a, i, s: a.scatter_add(0, i, s), (x, idx, src), 8 * N + 4 * N + 12 * N)
small = torch.randint(0, 1000, (N,)).to(dev)
bench("index_add 16M into 1000", lambda a, i, s: a.index_add(0, i, s), (torch.zeros(1000, device=dev), small, src), 8 * N + 4 * N)
bench("bincount 16M into 1000", lambda i: torch.bincount(i), (small,), 8 * N)
bench("unique 16M in 1000", lambda i: torch.unique(i), (small,), 8 * N)
bench("sort 16M", lambda a: a.sort(), (x,), 4 * N + 12 * N)
bench("cumsum 16M", lambda a: a.cumsum(0), (x,), 8 * N)

print(f"torch {torch.__version__} eager {dev}, {torch.get_num_threads()} threads, median of {reps} runs")
print(f"{'case':24s} {'median us':>12s} {'min us':>12s} {'GB/s':>12s}")
for name, med, lo, nbytes in results:
    print(f"{name:24s} {med:12.0f} {lo:12.0f} {nbytes / med / 1e3:12.2f}")
for name, med, lo, nbytes in results:
    print(f"RESULT {name.replace(' ', '_')} {med:.3f} {nbytes} B")
