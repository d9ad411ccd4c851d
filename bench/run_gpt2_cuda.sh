#!/usr/bin/env bash
# GPT-2-style generation on the GPU: crescent eager and compiled (bench/gpt2_bench.lua) and
# PyTorch eager and torch.compile (bench/torch_gpt2.py) in one run, batch 1 and 16; then the
# static-cache decoders: crescent's reduce-overhead step (CUDA graphs, KV=static) against the
# gpt-fast-style torch.compile(mode="reduce-overhead") one (bench/torch_gpt2_static.py), and
# crescent's static decoder with int8 weight-only projections and LM head (QUANT=int8) against
# gpt-fast's int8 form of the torch one.
#   bench/run_gpt2_cuda.sh [config=gpt2] [prompt=128] [new=128] [rounds=2]   (CRESCENT=binary)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
config="${1:-gpt2}" prompt="${2:-128}" new="${3:-128}" rounds="${4:-2}"
bin="${CRESCENT:-build/crescent}"
py="${PYTHON:-python3}"
out=$(mktemp)
for b in 1 16; do
  DEVICE=cuda "$bin" bench/gpt2_bench.lua "$config" "$b" "$prompt" "$new" "$rounds" >> "$out"
  DEVICE=cuda "$py" bench/torch_gpt2.py "$config" "$b" "$prompt" "$new" "$rounds" | grep '^{' >> "$out"
  DEVICE=cuda COMPILE=1 timeout 400 "$py" bench/torch_gpt2.py "$config" "$b" "$prompt" "$new" "$rounds" 2>/dev/null | grep '^{' >> "$out"
  KV=static DEVICE=cuda "$bin" bench/gpt2_bench.lua "$config" "$b" "$prompt" "$new" "$rounds" | sed 's/"side": "crescent"/"side": "crescent static"/' >> "$out"
  DEVICE=cuda timeout 400 "$py" bench/torch_gpt2_static.py "$config" "$b" "$prompt" "$new" "$rounds" 2>/dev/null | grep '^{' >> "$out"
  QUANT=int8 KV=static DEVICE=cuda "$bin" bench/gpt2_bench.lua "$config" "$b" "$prompt" "$new" "$rounds" | sed 's/"side": "crescent"/"side": "crescent static int8"/' >> "$out"
  QUANT=int8 DEVICE=cuda timeout 400 "$py" bench/torch_gpt2_static.py "$config" "$b" "$prompt" "$new" "$rounds" \
    2>/dev/null | grep '^{' | sed 's/"side": "torch static"/"side": "torch static int8"/' >> "$out"
done
"$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("| batch | torch eager | torch.compile | crescent eager | crescent compiled | compiled vs torch.compile |")
print("|---|---|---|---|---|---|")
for b in (1, 16):
    r = {x["side"]: x for x in rows if x["batch"] == b}
    te, tc, c = r.get("torch", {}), r.get("torch compiled", {}), r.get("crescent", {})
    f = lambda v: f"{v:.1f}" if v else "-"
    ratio = f"{c['compiled_decode_tps'] / tc['decode_tps']:.2f}x" if c and tc else "-"
    print(f"| {b} | {f(te.get('decode_tps'))} | {f(tc.get('decode_tps'))} | {f(c.get('eager_decode_tps'))} | "
          f"{f(c.get('compiled_decode_tps'))} | {ratio} |")
CFG = {"tiny": (96, 64, 32, 2), "small": (4096, 512, 256, 4), "gpt2": (50257, 1024, 768, 12)}
V, N, D, L = CFG.get(rows[0]["config"], (0, 0, 0, 0)) if rows else (0, 0, 0, 0)
WEIGHT_BYTES = 4 * (V * D + N * D + L * (12 * D * D + 13 * D) + 2 * D)  # float32, the LM head tied
print()
print("| batch | torch.compile static (reduce-overhead) | crescent static (CUDA graphs) | ratio | crescent GB/s of weights |")
print("|---|---|---|---|---|")
for b in (1, 16):
    r = {x["side"]: x for x in rows if x["batch"] == b}
    ts, cs = r.get("torch static", {}), r.get("crescent static", {})
    tps = cs.get("compiled_decode_tps")
    ratio = f"{tps / ts['decode_tps']:.2f}x" if tps and ts else "-"
    gbs = f"{tps / b * WEIGHT_BYTES / 1e9:.0f}" if tps else "-"
    print(f"| {b} | {ts.get('decode_tps', 0):.1f} | {tps or 0:.1f} | {ratio} | {gbs} |")
# int8: the projections and the LM head one byte a weight plus float32 scales; wpe, biases, norms float32
INT8_BYTES = V * D + L * 12 * D * D + 4 * (V + N * D + L * (9 * D + 13 * D) + 2 * D)
print()
print("| batch | torch.compile static int8 | crescent static int8 (CUDA graphs) | ratio | vs float32 static "
      "| GB/s of weights |")
print("|---|---|---|---|---|---|")
for b in (1, 16):
    r = {x["side"]: x for x in rows if x["batch"] == b}
    tps, f32 = r.get("crescent static int8", {}).get("compiled_decode_tps"), r.get("crescent static", {}).get("compiled_decode_tps")
    t8 = r.get("torch static int8", {}).get("decode_tps")
    vs = f"{tps / t8:.2f}x" if tps and t8 else "-"
    ratio = f"{tps / f32:.2f}x" if tps and f32 else "-"
    gbs = f"{tps / b * INT8_BYTES / 1e9:.0f}" if tps else "-"
    print(f"| {b} | {t8 or 0:.1f} | {tps or 0:.1f} | {vs} | {ratio} | {gbs} |")
c = [x for x in rows if x["side"] == "crescent"]
print("decode tokens/s (batch x new tokens / decode time); crescent graphs compiled / recompiles:",
      ", ".join(f"{x['graphs_compiled']}/{x['recompiles']}" for x in c))
PY
rm -f "$out"
