"""Host overhead of torch.compile calls whose graphs are cached, for the same chains of n adds as
bench/capture_bench.lua (n = 1, 10, 100 on a 1-element tensor).

    python3 bench/torch_capture.py [calls]

Per call, mean over `calls` calls, best of 5 rounds: eager (CPU tensor), torch.compile default
and mode="reduce-overhead" on a CUDA tensor (the kernel is asynchronous and tiny, so the wall time
per call is the host's), and torch.compile on a CPU tensor where Inductor's C++ backend works.
"""
import sys
import time

import torch

calls = int(sys.argv[1]) if len(sys.argv) > 1 else 3000


def chain(n):
    def f(x):
        y = x
        for _ in range(n):
            y = y + 1
        return y
    return f


def measure(f, x, sync):
    for _ in range(20):
        f(x)
    sync()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            f(x)
        sync()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def nothing():
    pass


cuda = torch.cuda.is_available()
print(f"torch {torch.__version__}, cuda {cuda}, threads {torch.get_num_threads()}")
print(f"{'ops':<8} {'eager cpu':>10} {'compile cpu':>12} {'compile cuda':>13} {'r-o cuda':>10}")
for n in (1, 10, 100):
    f = chain(n)
    x = torch.ones(1)
    eager = measure(f, x, nothing)
    torch._dynamo.reset()
    try:
        ccpu = measure(torch.compile(f), x, nothing)
    except Exception as e:  # noqa: BLE001 - no C++ compiler for Inductor's CPU backend
        print("compile cpu failed:", type(e).__name__, str(e)[:200])
        ccpu = float("nan")
    ccuda = rocuda = float("nan")
    if cuda:
        xc = torch.ones(1, device="cuda")
        ccuda = measure(torch.compile(f), xc, torch.cuda.synchronize)
        rocuda = measure(torch.compile(f, mode="reduce-overhead"), xc, torch.cuda.synchronize)
    print(f"{n:<8} {eager:>10.2f} {ccpu:>12.2f} {ccuda:>13.2f} {rocuda:>10.2f}")
