"""The cases of bench/eager_bench.lua with PyTorch (Debian's 1.13, /usr/bin/python3), same sizes,
same thread count (CRESCENT_NUM_THREADS, default: all cores), medians over repeated runs.
    /usr/bin/python3 bench/torch_eager.py [reps]
Prints a table, then one line per case: RESULT <name> <median_us> <work> <unit>."""
import os
import statistics
import sys
import time

import torch

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
threads = int(os.environ.get("CRESCENT_NUM_THREADS", "0")) or os.cpu_count()
torch.set_num_threads(threads)

N = 2048 * 2048
LOOP = 1000
results = []


def bench(name, fn, args, work=None, unit=None, warmup=3, per=1):
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - t0) * 1e6 / per)
    times.sort()
    # the same median as T.bench: element (reps + 1) // 2 of the sorted list, 1-based
    results.append((name, times[(reps + 1) // 2 - 1], times[0], work, unit))


torch.manual_seed(0)
x, y = torch.randn(2048, 2048), torch.randn(2048, 2048)
nbytes = 4 * N
bench("add 4M", lambda a, b: a + b, (x, y), 3 * nbytes, "B")
bench("mul 4M", lambda a, b: a * b, (x, y), 3 * nbytes, "B")
bench("exp 4M", lambda a: a.exp(), (x,), 2 * nbytes, "B")
bench("sum 4M", lambda a: a.sum(), (x,), nbytes, "B")
bench("softmax 2048x2048 dim -1", lambda a: a.softmax(-1), (x,), 2 * nbytes, "B")
m1, m2 = torch.randn(1024, 1024), torch.randn(1024, 1024)
bench("matmul 1024x1024x1024", lambda a, b: torch.matmul(a, b), (m1, m2), 2 * 1024 ** 3, "FLOP")

s1, s2 = torch.randn(4), torch.randn(4)


def add_loop(a, b):
    for _ in range(LOOP):
        a + b


def exp_loop(a):
    for _ in range(LOOP):
        a.exp()


bench("dispatch add 4 elements (per op)", add_loop, (s1, s2), warmup=5, per=LOOP)
bench("dispatch exp 4 elements (per op)", exp_loop, (s1,), warmup=5, per=LOOP)

print(f"torch {torch.__version__} eager CPU, {torch.get_num_threads()} threads, float32, median of {reps} runs")
print(f"{'case':36s} {'median us':>12s} {'min us':>12s} {'rate':>14s}")
for name, med, lo, work, unit in results:
    rate = ""
    if unit == "B":
        rate = f"{work / med / 1e3:.1f} GB/s"
    elif unit == "FLOP":
        rate = f"{work / med / 1e3:.1f} GFLOP/s"
    print(f"{name:36s} {med:12.2f} {lo:12.2f} {rate:>14s}")
for name, med, lo, work, unit in results:
    print(f"RESULT {name.replace(' ', '_')} {med:.3f} {work if work else '-'} {unit or '-'}")
