"""gpt-fast-style PyTorch decoding on the GPT-2 generation benchmark (crescent's side: KV=static
bench/gpt2_bench.lua): a preallocated KV cache written with index_copy_ at the position (a device
tensor), the one-token decode step - model and greedy pick - compiled with
torch.compile(mode="reduce-overhead", fullgraph=True), so it replays as one CUDA graph.

    DEVICE=cuda python3 bench/torch_gpt2_static.py CONFIG BATCH PROMPT NEW ROUNDS

QUANT=int8: gpt-fast's WeightOnlyInt8Linear for the projections and the LM head (int8 weights
{out, in}, one scale per output channel, `F.linear(x, w.to(x.dtype)) * scales`), as crescent's
T.nn.quantize_int8.

Same weights and prompt as bench/torch_gpt2.py; one JSON line with the medians over the rounds
(after one warm-up generation, which compiles).
"""
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
from torch_gpt2 import CONFIGS, forward, random_params  # noqa: E402

name, batch, plen, new, rounds = sys.argv[1], *(int(a) for a in sys.argv[2:6])
torch.manual_seed(0)
cfg = CONFIGS[name]
dev = os.environ.get("DEVICE", "cuda")
dtype = getattr(torch, os.environ.get("DTYPE", "float32"))  # DTYPE=bfloat16: weights and cache
p = {k: v.to(dev, dtype) for k, v in random_params(cfg["vocab"], cfg["d"], cfg["n_layer"], cfg["n_ctx"], scale=0.05).items()}
prompt = torch.randint(0, cfg["vocab"], (batch, plen)).to(dev)
quant = os.environ.get("QUANT", "")
assert quant in ("", "int8"), f"QUANT expected int8, got {quant}"


def int8(w):
    """w {out, in}: int8 values and per-row scales (symmetric, max |row| / 127)."""
    scales = w.abs().amax(1).clamp(min=1e-12) / 127
    return (w / scales[:, None]).round().clamp(-127, 127).to(torch.int8), scales.to(w.dtype)


q8 = {}
if quant:
    for k, v in p.items():
        if v.dim() == 2 and (".c_" in k or k == "wte.weight"):
            q8[k] = int8(v.t().contiguous() if k != "wte.weight" else v)
d, H, layers = cfg["d"], cfg["n_head"], cfg["n_layer"]
S = plen + new
caches = [[torch.zeros(batch, H, S, d // H, device=dev, dtype=dtype) for _ in range(2)] for _ in range(layers)]
slots = torch.arange(S, device=dev)


def decode(ids, pos):
    """ids {B, 1}, pos {1} (a device tensor): the next ids {B, 1}; writes the caches in place."""
    B = ids.shape[0]
    x = p["wte.weight"][ids] + p["wpe.weight"][pos]
    mask = (slots <= pos).view(1, 1, 1, S)
    for i in range(layers):
        pre = f"h.{i}."
        ln = lambda t, n: F.layer_norm(t, (d,), p[pre + n + ".weight"], p[pre + n + ".bias"], 1e-5)
        if quant:
            conv = lambda t, n: F.linear(t, q8[pre + n + ".weight"][0].to(t.dtype)) * q8[pre + n + ".weight"][1] \
                + p[pre + n + ".bias"]
        else:
            conv = lambda t, n: torch.addmm(p[pre + n + ".bias"], t.reshape(-1, t.shape[-1]),
                                            p[pre + n + ".weight"]).view(*t.shape[:-1], -1)
        q, k, v = conv(ln(x, "ln_1"), "attn.c_attn").split(d, 2)
        q, k, v = (t.reshape(B, 1, H, d // H).transpose(1, 2) for t in (q, k, v))
        caches[i][0].index_copy_(2, pos, k)
        caches[i][1].index_copy_(2, pos, v)
        a = F.scaled_dot_product_attention(q, caches[i][0], caches[i][1], attn_mask=mask)
        x = x + conv(a.transpose(1, 2).reshape(B, 1, d), "attn.c_proj")
        h = F.gelu(conv(ln(x, "ln_2"), "mlp.c_fc"), approximate="tanh")
        x = x + conv(h, "mlp.c_proj")
    x = F.layer_norm(x, (d,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    logits = F.linear(x, q8["wte.weight"][0].to(x.dtype)) * q8["wte.weight"][1] if quant else x @ p["wte.weight"].t()
    return logits[:, -1].argmax(-1, keepdim=True)


step = torch.compile(decode, mode="reduce-overhead", fullgraph=True)


def generate():
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    cache = []
    logits = forward(p, prompt, H, 0, cache)  # prefill (eager), then its keys and values in place
    for i, (k, v) in enumerate(cache):
        caches[i][0][:, :, :plen].copy_(k)
        caches[i][1][:, :, :plen].copy_(v)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    out = [nxt]
    pos = torch.tensor([plen], device=dev)
    for i in range(new - 1):
        nxt = step(nxt, pos).clone()
        pos += 1
        out.append(nxt)
    torch.cat(out, 1).cpu()
    t2 = time.perf_counter()
    return (t1 - t0) * 1e3, batch * (new - 1) / (t2 - t1)


# read once per decode step (int8: the quantised weights and their scales instead)
weight_bytes = sum(t.numel() * t.element_size() for k, t in p.items() if k not in q8) + \
    sum(q.numel() + s.numel() * s.element_size() for q, s in q8.values())
with torch.no_grad():
    generate()
    runs = [generate() for _ in range(rounds)]
print(json.dumps({"side": "torch static", "dtype": str(dtype).split(".")[-1], "quant": quant, "device": dev,
                  "config": name, "batch": batch, "prompt": plen, "new": new,
                  "prefill_ms": statistics.median(r[0] for r in runs),
                  "decode_tps": statistics.median(r[1] for r in runs),
                  "weight_gbps": weight_bytes * statistics.median(r[1] for r in runs) / batch / 1e9}))
