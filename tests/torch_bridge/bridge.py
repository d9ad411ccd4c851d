"""The Python side of crescent's PyTorch bridge (tests/lua/lib/torch_bridge.lua): one process runs
a whole batch of jobs.

    python3 bridge.py DIR

DIR/jobs.jsonl holds a header line {"handler": "eval" | "replay", options...} and then one job a
line, each with its "key"; DIR/inputs.safetensors (when there is one) the tensors the jobs name.
The handler (evaluate.py: Python expressions; replay.py: the compile fuzzer's programs) writes a
record per job into DIR/status.lua (a Lua chunk returning {[key] = record}) and the tensors of the
results into DIR/outputs.safetensors.
"""
import json
import os
import sys
import warnings

import evaluate
import replay
from exchange import read_safetensors, write_safetensors, write_status

warnings.filterwarnings("ignore")  # var with too few elements etc.: the values are compared anyway
HANDLERS = {"eval": evaluate.run, "replay": replay.run}


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "jobs.jsonl")) as f:
        header = json.loads(f.readline())
        jobs = [json.loads(line) for line in f if line.strip()]
    path = os.path.join(d, "inputs.safetensors")
    inputs = read_safetensors(path) if os.path.exists(path) else {}
    outputs = {}
    status = HANDLERS[header["handler"]](header, jobs, inputs, outputs)
    write_safetensors(os.path.join(d, "outputs.safetensors"), outputs)
    write_status(os.path.join(d, "status.lua"), status)


if __name__ == "__main__":
    main()
