#!/usr/bin/env bash
# GPT-2-style generation on the GPU: crescent eager and compiled (bench/gpt2_bench.lua) and
# PyTorch eager and torch.compile (bench/torch_gpt2.py) in one run, batch 1 and 16.
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
c = [x for x in rows if x["side"] == "crescent"]
print("decode tokens/s (batch x new tokens / decode time); crescent graphs compiled / recompiles:",
      ", ".join(f"{x['graphs_compiled']}/{x['recompiles']}" for x in c))
PY
rm -f "$out"
