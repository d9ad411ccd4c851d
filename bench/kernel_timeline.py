"""Where a CUDA graph's time goes, kernel by kernel, from bench/cupti_trace.cpp's CSV.

    python3 bench/kernel_timeline.py trace.csv [launches=50]

Takes the CUDA graph that ran most often (a decode step's), cuts its kernels into launches (one
run of every node, in start order) and, over the last `launches` of them, gives each node's
median device time (end - start; with programmatic dependent launch it includes the wait for the
previous kernel) and what it adds to the launch (its end minus the latest end before it: the
launch's time is the sum of these), then the same summed by kernel name.
"""
import collections
import statistics
import sys

path = sys.argv[1]
keep = int(sys.argv[2]) if len(sys.argv) > 2 else 50
rows = []
with open(path) as f:
    next(f)
    for line in f:
        start, end, graph, node, stream, name = line.rstrip("\n").split(",", 5)
        rows.append((int(start), int(end), int(graph), int(node), name))
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
    front = l[0][0]
    totals.append((max(r[1] for r in l) - l[0][0]) / 1e3)
    for r in l:
        d = per_node[r[3]]
        d["name"] = r[4]
        d["dur"].append((r[1] - r[0]) / 1e3)
        d["add"].append(max(0, r[1] - front) / 1e3)
        front = max(front, r[1])
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
