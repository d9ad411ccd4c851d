#!/usr/bin/env python3
"""Runs the CUDA modules that test_cuda_emit dumped on a GPU and compares every graph output with
the eager CPU value (a stand-in launcher until the CUDA driver side lands, and the reference for
its contract: jit/cuda/README.md).

    CRESCENT_TEST_CUDA_DUMP=dir build/tests/crescent_tests "[cuda]"   # anywhere with NVRTC
    python3 tests/cuda_check.py dir                                    # on a GPU host: torch, libcuda

Each module: load the CUBIN, allocate every plan buffer (inputs from their dumped bytes, others
filled with a marker), launch the kernels in plan order with (grid, block) from the manifest and
one device pointer per parameter, then compare the outputs. Exits non-zero on any mismatch."""
import ctypes
import glob
import json
import os
import sys

import numpy as np
import torch

DTYPES = {"float32": (torch.float32, np.float32), "float64": (torch.float64, np.float64),
          "int32": (torch.int32, np.int32), "int64": (torch.int64, np.int64), "bool": (torch.bool, np.bool_)}
TOLERANCE = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-9, 1e-9)}  # rtol, atol

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
cuda.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3


def ok(result, what):
    if result != 0:
        raise RuntimeError(f"{what}: CUresult {result}")


def buffers(base, manifest):
    out = []
    for i, b in enumerate(manifest["buffers"]):
        tdt, ndt = DTYPES[b["dtype"]]
        t = torch.empty(b["numel"], dtype=tdt, device="cuda")
        if tdt.is_floating_point:
            t.fill_(float("nan"))  # unwritten elements show up
        if b["role"] == "input":
            data = torch.from_numpy(np.fromfile(f"{base}.{i}.bin", dtype=ndt)).reshape(b["sizes"])
            t.as_strided(b["sizes"], b["strides"], b["offset"]).copy_(data)
        out.append(t)
    return out


def launch(module, kernel, bufs):
    f = ctypes.c_void_p()
    ok(cuda.cuModuleGetFunction(ctypes.byref(f), module, kernel["name"].encode()), "cuModuleGetFunction")
    ptrs = [ctypes.c_void_p(bufs[p].data_ptr()) for p in kernel["params"]]
    args = (ctypes.c_void_p * len(ptrs))(*[ctypes.cast(ctypes.byref(p), ctypes.c_void_p) for p in ptrs])
    ok(cuda.cuLaunchKernel(f, kernel["grid"], 1, 1, kernel["block"], 1, 1, 0, None, args, None), "cuLaunchKernel")


def check(base):
    manifest = json.load(open(base + ".json"))
    module = ctypes.c_void_p()
    ok(cuda.cuModuleLoadData(ctypes.byref(module), open(base + ".cubin", "rb").read()), "cuModuleLoadData")
    bufs = buffers(base, manifest)
    for k in manifest["kernels"]:
        launch(module, k, bufs)
    torch.cuda.synchronize()
    bad = []
    for i, b in enumerate(manifest["buffers"]):
        if b["role"] != "output":
            continue
        tdt, ndt = DTYPES[b["dtype"]]
        got = bufs[i].as_strided(b["sizes"], b["strides"], b["offset"]).cpu()
        want = torch.from_numpy(np.fromfile(f"{base}.{i}.bin", dtype=ndt)).reshape(b["sizes"])
        if tdt in TOLERANCE:
            rtol, atol = TOLERANCE[tdt]
            same = torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True) | (got == want)
        else:
            same = got == want
        if not bool(same.all()):
            where = (~same).nonzero()[0].tolist()
            bad.append(f"buffer {i} ({b['dtype']} {b['sizes']}): {int((~same).sum())} differ, first at {where}: "
                       f"got {got[tuple(where)].item()} want {want[tuple(where)].item()}")
    return bad


def main():
    torch.empty(1, device="cuda")  # the primary context, current on this thread
    failed = 0
    for manifest in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
        base = manifest[:-5]
        bad = check(base)
        failed += bool(bad)
        print(f"{'FAIL' if bad else 'ok  '} {os.path.basename(base)}")
        for line in bad:
            print("     ", line)
    print(f"{failed} modules failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
