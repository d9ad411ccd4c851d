"""Where a CUDA graph's time goes, kernel by kernel, from bench/cupti_trace.cpp's CSV.

    python3 bench/kernel_timeline.py trace.csv [launches=50]
    python3 bench/kernel_timeline.py trace.csv --steps MARK [steps=5]

Takes the CUDA graph that ran most often (a decode step's), cuts its kernels into launches (one
run of every node, in start order) and, over the last `launches` of them, gives each node's
median device time (end - start; with programmatic dependent launch it includes the wait for the
previous kernel) and what it adds to the launch (its end minus the latest end before it: the
launch's time is the sum of these), then the same summed by kernel name.
--steps: work outside CUDA graphs (a training step): a step starts at each kernel whose name
contains MARK (one that runs once a step, such as the loss's); over the last `steps` whole steps,
each kernel name's calls and what they add to a step (as a launch's, above), largest first.
"""
import collections
import statistics
import sys

path = sys.argv[1]
rows = []
with open(path) as f:
    next(f)
    for line in f:
        start, end, graph, node, stream, name = line.rstrip("\n").split(",", 5)
        rows.append((int(start), int(end), int(graph), int(node), name))


def added(kernels):
    """(kernel, us) in start order: its end minus the latest end before it (from the first start),
    so that the sum is the span and an idle gap counts to the kernel after it."""
    front = kernels[0][0]
    for r in kernels:
        yield r, max(0, r[1] - front) / 1e3
        front = max(front, r[1])

if len(sys.argv) > 2 and sys.argv[2] == "--steps":
    mark, keep = sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 5
    rows.sort()
    starts = [i for i, r in enumerate(rows) if mark in r[4]]
    steps = [rows[a:b] for a, b in zip(starts, starts[1:])][-keep:]
    if not steps:
        sys.exit(f"fewer than two kernels named like {mark!r}: no whole step")
    adds, calls = collections.Counter(), collections.Counter()
    for st in steps:
        for r, add in added(st):
            adds[r[4]] += add
            calls[r[4]] += 1
    spans = [(st[-1][1] - st[0][0]) / 1e3 for st in steps]
    print(f"{len(steps)} steps from {mark!r}: median {statistics.median(spans):.1f} us (first start to last end), "
          f"{statistics.median(len(st) for st in steps)} kernels")
    print("| kernel | calls a step | adds us a step |")
    print("|---|---|---|")
    for name, us in adds.most_common():
        print(f"| {name[:80]} | {calls[name] / len(steps):g} | {us / len(steps):.1f} |")
    sys.exit(0)

keep = int(sys.argv[2]) if len(sys.argv) > 2 else 50
graphs = collections.Counter(r[2] for r in rows if r[2] != 0)
if not graphs:
    sys.exit("no kernel ran inside a CUDA graph")
gid = graphs.most_common(1)[0][0]
ks = sorted((r for r in rows if r[2] == gid), key=lambda r: r[0])
nodes = len({r[3] for r in ks})
launches = [ks[i:i + nodes] for i in range(0, len(ks) - nodes + 1, nodes)]
launches = [l for l in launches if len({r[3] for r in l}) == nodes][-keep:]
per_node = collections.defaultdict(lambda: {"dur": [], "add": [], "name": ""})
totals, sums = [], []
for l in launches:
    totals.append((max(r[1] for r in l) - l[0][0]) / 1e3)
    for r, add in added(l):
        d = per_node[r[3]]
        d["name"] = r[4]
        d["dur"].append((r[1] - r[0]) / 1e3)
        d["add"].append(add)
print(f"graph {gid}: {nodes} kernels a launch, {len(launches)} launches timed; "
      f"launch median {statistics.median(totals):.1f} us (first start to last end)")
order = [r[3] for r in launches[-1]]  # (the last launch's start order)
print("| # | kernel | device us | adds us |")
print("|---|---|---|---|")
by_name = collections.defaultdict(lambda: [0, 0.0, 0.0])
for i, n in enumerate(order):
    d = per_node[n]
    dur, add = statistics.median(d["dur"]), statistics.median(d["add"])
    print(f"| {i + 1} | {d['name'][:60]} | {dur:.2f} | {add:.2f} |")
    b = by_name[d["name"][:60]]
    b[0] += 1
    b[1] += dur
    b[2] += add
print()
print("| kernel | count | device us | adds us | adds us each |")
print("|---|---|---|---|---|")
for name, (c, dur, add) in sorted(by_name.items(), key=lambda kv: -kv[1][2]):
    print(f"| {name} | {c} | {dur:.1f} | {add:.1f} | {add / c:.2f} |")
print(f"| all | {nodes} | {sum(v[1] for v in by_name.values()):.1f} | {sum(v[2] for v in by_name.values()):.1f} | |")
