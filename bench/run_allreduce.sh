#!/bin/sh
# all_reduce bus bandwidth side by side on N GPUs of this machine: crescent (T.distributed),
# PyTorch (dist.all_reduce) and bare NCCL (build/nccl_allreduce, nccl-tests' method), each with
# the NCCL of PyTorch's wheel unless CRESCENT_NCCL_LIB names another.
#   bench/run_allreduce.sh [N=2] [build=build]
# (each part runs even when another fails)
N=${1:-2}
BUILD=${2:-build}
PY=${PYTHON:-python3}
if [ -z "$CRESCENT_NCCL_LIB" ]; then
  CRESCENT_NCCL_LIB=$($PY -c "import glob, site; print(next(iter(p for d in site.getsitepackages() + [site.getusersitepackages()] for p in glob.glob(d + '/nvidia/**/libnccl.so.2', recursive=True)), ''))")
fi
export CRESCENT_NCCL_LIB NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
echo "== crescent"; "$BUILD/crescent" --nproc "$N" bench/allreduce_bench.lua
echo "== torch"; $PY -m torch.distributed.run --nproc_per_node "$N" bench/torch_allreduce.py
echo "== bare NCCL"; "$BUILD/nccl_allreduce" --ngpus "$N"
