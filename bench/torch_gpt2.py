"""PyTorch eager on the GPT-2 generation benchmark (bench/gpt2_bench.lua is crescent's side).

    /usr/bin/python3 bench/torch_gpt2.py CONFIG BATCH PROMPT NEW ROUNDS     (THREADS=2 by default)
    DEVICE=cuda COMPILE=1 python3 bench/torch_gpt2.py ...    (on a GPU; COMPILE=1: torch.compile of
                                                              the step, dynamic=None as its default)

The same model as examples/models/gpt2.lua (tests/fixtures/torch_gpt2.py: random weights, GPT-2
names and layouts), greedy decoding with a KV cache grown by torch.cat as PyTorch's eager decoders
do. Per round: prefill ms and decode tokens/s (batch * (NEW - 1) / decode time). One JSON line
with the medians over the rounds (after one warm-up generation).
"""
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
from torch_gpt2 import CONFIGS, forward, random_params  # noqa: E402

name, batch, plen, new, rounds = sys.argv[1], *(int(a) for a in sys.argv[2:6])
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
torch.manual_seed(0)
cfg = CONFIGS[name]
dev = os.environ.get("DEVICE", "cpu")
p = {k: v.to(dev) for k, v in random_params(cfg["vocab"], cfg["d"], cfg["n_layer"], cfg["n_ctx"], scale=0.05).items()}
prompt = torch.randint(0, cfg["vocab"], (batch, plen)).to(dev)
step = forward
if os.environ.get("COMPILE") == "1":
    step = torch.compile(forward)


def sync():
    if dev != "cpu":
        torch.cuda.synchronize()


def generate():
    cache = []
    sync()
    t0 = time.perf_counter()
    logits = step(p, prompt, cfg["n_head"], 0, cache)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    sync()
    t1 = time.perf_counter()
    for i in range(new - 1):
        logits = step(p, nxt, cfg["n_head"], plen + i, cache)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
    sync()
    t2 = time.perf_counter()
    return (t1 - t0) * 1e3, batch * (new - 1) / (t2 - t1)


with torch.no_grad():
    generate()
    runs = [generate() for _ in range(rounds)]
print(json.dumps({"side": "torch" + (" compiled" if step is not forward else ""), "device": dev, "config": name, "batch": batch, "prompt": plen, "new": new,
                  "prefill_ms": statistics.median(r[0] for r in runs),
                  "decode_tps": statistics.median(r[1] for r in runs)}))
