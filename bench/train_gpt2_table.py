"""The tables of bench/run_train_gpt2.sh from its JSON lines (a directory of NAME.jsonl, one line
per round): per side and mode the median step over the rounds, tokens/s against torch eager and
torch.compile, reserved device memory, compile times (crescent: the compiles' own time, and the
wall time from the first step until the last compile landed; torch.compile: its first step);
then each compiled crescent run's first steps, one by one (round 1).

    python3 bench/train_gpt2_table.py DIR
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import median  # noqa: E402

ORDER = ["torch-eager", "torch-compile", "crescent-eager", "crescent-model", "crescent-step", "crescent-step-disk"]
LABEL = {"torch-eager": "torch eager", "torch-compile": "torch.compile(model)", "crescent-eager": "crescent eager",
         "crescent-model": "crescent T.compile(model)", "crescent-step": "crescent T.compile(step)",
         "crescent-step-disk": "crescent T.compile(step), disk cache"}

runs = {}
for f in glob.glob(os.path.join(sys.argv[1], "*.jsonl")):
    rows = [json.loads(line) for line in open(f)]
    if rows:
        runs[os.path.basename(f)[:-6]] = rows
if not runs:
    sys.exit("train_gpt2_table.py: no results (every run failed)")


def m(name, key):
    vals = [r[key] for r in runs.get(name, []) if r.get(key) is not None]
    return median(vals) if vals else None


def ratio(name, base):
    a, b = m(name, "tokens_per_s"), m(base, "tokens_per_s")
    return f"{a / b:.2f}x" if a and b else "-"


def fmt(v, spec=".0f"):
    return "-" if v is None else format(v, spec)


def compile_cell(name):
    if name == "torch-compile":
        firsts = [r["first_ms"][0] for r in runs[name] if r.get("first_ms")]
        return f"first step {median(firsts) / 1e3:.1f} s" if firsts else "-"
    if m(name, "compile_ms") is None:
        return "-"
    return (f"{m(name, 'compile_ms') / 1e3:.2f} s compiling, all landed at {m(name, 'ready_ms') / 1e3:.1f} s; "
            f"kernels {fmt(m(name, 'kernels_compiled'))} built / {fmt(m(name, 'kernels_loaded'))} loaded")


any_row = next(iter(runs.values()))[0]
torch_v = next((r[0].get("torch") for k, r in runs.items() if k.startswith("torch")), "-")
rounds = max(len(r) for r in runs.values())
print(f"config {any_row['config']} ({any_row['params']} parameters), batch {any_row['batch']} x {any_row['seq']}, "
      f"device {any_row['device']}, autocast {any_row['autocast']}; torch {torch_v}; medians of {rounds} rounds")
print("| | step ms | tokens/s | vs torch eager | vs torch.compile | reserved MiB | compile | loss first -> last |")
print("|---|---|---|---|---|---|---|---|")
for name in ORDER:
    if name not in runs:
        continue
    r0 = runs[name][0]
    print(f"| {LABEL[name]} | {m(name, 'step_ms'):.1f} | {m(name, 'tokens_per_s'):.0f} | {ratio(name, 'torch-eager')} | "
          f"{ratio(name, 'torch-compile')} | {fmt(m(name, 'reserved_mib'))} | {compile_cell(name)} | "
          f"{r0['first_loss']:.3f} -> {r0['last_loss']:.3f} |")
for name in ORDER:
    if name in runs and name.startswith("torch") and m(name, "peak_mib") is not None:
        print(f"\n{LABEL[name]}: peak allocated (not reserved) {m(name, 'peak_mib'):.0f} MiB")
for name in ORDER[3:]:
    r0 = runs.get(name, [{}])[0]
    if r0.get("first_ms"):
        counts = ", ".join(f"{k} {fmt(r0.get(k))}" for k in
                           ("graphs", "backward_graphs", "graph_breaks", "recompiles", "grad_fallbacks", "eager_fallbacks"))
        slow = max(range(len(r0["first_ms"])), key=lambda i: r0["first_ms"][i])
        eager = m("crescent-eager", "step_ms")
        vs = f" ({r0['first_ms'][slow] / eager:.1f}x the eager step)" if eager else ""
        print(f"\n{LABEL[name]}, first {len(r0['first_ms'])} steps from the cold start, ms (compiles pending after each): "
              + " ".join(f"{t:.0f}({p})" for t, p in zip(r0["first_ms"], r0.get("first_pending", [])))
              + f"; slowest: step {slow + 1}, {r0['first_ms'][slow]:.0f} ms{vs}; {counts}; "
              f"settled after {fmt(r0.get('settle_calls'))} more calls; compiles while timed {fmt(r0.get('timed_compiles'))}")
