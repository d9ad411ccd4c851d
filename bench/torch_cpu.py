"""PyTorch on the CPU workloads of bench/codegen_bench.lua (the anchor's CPU sizes: N = 2^22;
R, C = 2048, 2048), for the side-by-side table of "CPU code generation (issue 4)".

    /usr/bin/python3 bench/torch_cpu.py [reps]     (THREADS=2 by default; env COMPILE=0 skips
                                                     torch.compile, COMPILE_TIMEOUT=s its limit)

Per workload: eager median µs over `reps` timed calls after 5 warm-up calls (wall time, as the
anchor's bench()), GB/s with the anchor's bytes; then torch.compile (Inductor's C++ backend), tried
in a child process with a timeout, skipped gracefully where it fails (Debian's torch 1.13 may lack
a working Inductor). Also the copy bandwidth baseline (y.copy_(x) on 2^24 floats,
GB/s = 2 * bytes / time). JSON lines, then a markdown table.
"""
import json
import math
import multiprocessing as mp
import os
import sys
import time

import torch

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
threads = int(os.environ.get("THREADS", "2"))
torch.set_num_threads(threads)
torch.manual_seed(0)
WARMUP = 5

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_workloads import workloads  # noqa: E402


def bench(fn, args):
    for _ in range(WARMUP):
        fn(*args)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[(reps - 1) // 2] * 1e6


def compiled_worker(q):
    """torch.compile on every workload, in a child process (a hang or crash stays there)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if not hasattr(torch, "compile"):
        q.put({"error": f"torch {torch.__version__} has no torch.compile"})
        return
    for name, (fn, args, nbytes) in workloads().items():
        row = {"name": name}
        try:
            torch._dynamo.reset()
            cf = torch.compile(fn)
            t = time.perf_counter()
            cf(*args)
            row["compile_cold_s"] = time.perf_counter() - t
            row["max_abs_diff"] = float((cf(*args) - fn(*args)).abs().max())
            row["compiled_us"] = bench(cf, args)
        except Exception as e:  # noqa: BLE001 - Inductor's C++ backend unavailable
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        q.put(row)
    q.put(None)


def run_compiled(timeout):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=compiled_worker, args=(q,), daemon=True)
    p.start()
    rows, deadline = {}, time.time() + timeout
    while True:
        try:
            row = q.get(timeout=max(0.1, deadline - time.time()))
        except Exception:  # noqa: BLE001 - queue.Empty: timed out
            rows["_error"] = f"timed out after {timeout} s"
            break
        if row is None:
            break
        if "name" not in row:
            rows["_error"] = row.get("error")
            break
        rows[row["name"]] = row
    if p.is_alive():
        p.terminate()
    p.join(5)
    return rows


def main():
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "reps": reps}),
          flush=True)
    x, y = torch.randn(1 << 24), torch.empty(1 << 24)
    copy_us = bench(lambda: y.copy_(x), ())
    copy_gbps = 2 * 4 * (1 << 24) / copy_us / 1e3
    del x, y
    print(json.dumps({"name": "copy", "eager_us": copy_us, "GBps": copy_gbps}), flush=True)

    rows = []
    for name, (fn, args, nbytes) in workloads().items():
        row = {"name": name, "eager_us": bench(fn, args)}
        if nbytes:
            row["eager_GBps"] = nbytes / row["eager_us"] / 1e3
            row["copy_fraction"] = row["eager_GBps"] / copy_gbps
        rows.append(row)
        print(json.dumps(row), flush=True)

    compiled = {}
    if os.environ.get("COMPILE", "1") != "0":
        compiled = run_compiled(float(os.environ.get("COMPILE_TIMEOUT", "300")))
        if "_error" in compiled:
            print(json.dumps({"name": "torch.compile", "error": compiled["_error"]}), flush=True)
        for name, row in compiled.items():
            if name != "_error":
                print(json.dumps({**row, "name": name + " (torch.compile)"}), flush=True)

    def f(v, fmt):
        return fmt % v if v is not None and not (isinstance(v, float) and math.isnan(v)) else "-"

    print(f"\ncopy 2^24 float32: {copy_us:.1f} us, {copy_gbps:.1f} GB/s; torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, medians of {reps}")
    print("| workload | torch eager µs | GB/s | % of copy | torch.compile µs | compile s |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        c = compiled.get(row["name"], {})
        cu = c.get("compiled_us") if "error" not in c else None
        print(f"| {row['name']} | {row['eager_us']:.1f} | {f(row.get('eager_GBps'), '%.1f')} | "
              f"{f(row.get('copy_fraction') and row['copy_fraction'] * 100, '%.0f')} | "
              f"{f(cu, '%.1f') if cu else ('failed' if c else '-')} | {f(c.get('compile_cold_s'), '%.1f')} |")


if __name__ == "__main__":
    main()
