"""Helpers shared by the PyTorch sides of the benches (bench/lib/timing.lua is crescent's twin):
T.bench's median, wall-clock and CUDA-event timing, a training loop, peak device memory and one
JSON line per run (the side-by-side scripts read them)."""
import json
import time

import torch


def median(xs):
    """T.bench's median: element (n + 1) // 2 of the sorted values, 1-based (the lower middle)."""
    s = sorted(xs)
    return s[(len(s) + 1) // 2 - 1]


def time_calls(fn, n, sync=None):
    """Calls fn() n times: each call's wall time in ms (after sync(), when given) and the results."""
    times, results = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        results.append(fn())
        if sync:
            sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, results


def measure(fn, warm, reps):
    """After `warm` calls, `reps` timed ones: the median wall time and the process's CPU time per
    call, in ms (on a loaded machine CPU time compares runs better than wall time)."""
    for _ in range(warm):
        fn()
    c0 = time.process_time()
    times = time_calls(fn, reps)[0]
    return median(times), (time.process_time() - c0) * 1e3 / reps


def device_times_us(fn, args, reps, warm=10, batch=1):
    """Device time per call in us of each of `reps` runs: CUDA events around one call (or `batch`
    calls issued back to back), after `warm` calls."""
    for _ in range(warm):
        fn(*args)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(batch):
            fn(*args)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / batch)
    return times


def device_us(fn, args, reps, warm=10, batch=1):
    """The median of device_times_us."""
    return median(device_times_us(fn, args, reps, warm, batch))


def first_call_ms(fn, args):
    """The first call's wall time in ms, device work included (torch.compile's cold compile)."""
    t0 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def train_loop(step, warm, steps, cuda=False):
    """`warm` steps, then `steps` timed ones (the peak memory counted from there on a GPU); step()
    returns the loss as a float. The first and last losses, the median step in ms and each warm
    step's time (the first one of torch.compile's holds its compile)."""
    first_ms, warm_losses = time_calls(step, warm)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times, losses = time_calls(step, steps)
    return dict(first_loss=(warm_losses + losses)[0], last_loss=losses[-1], step_ms=median(times), first_ms=first_ms)


def cuda_memory():
    """Peak bytes allocated and reserved by the caching allocator, in MiB."""
    return dict(peak_mib=torch.cuda.max_memory_allocated() / 2**20,
                reserved_mib=torch.cuda.max_memory_reserved() / 2**20)


def emit(row):
    print(json.dumps(row), flush=True)
