"""The C API of the installed libcrescent.so from Python's ctypes (tests/CMakeLists.txt,
"embedding"): a VM, a zero-copy tensor over a Python buffer, a call, its results and an error.
Usage: python3 ctypes_test.py PREFIX"""
import ctypes
import glob
import os
import sys

prefix = sys.argv[1]
sonames = glob.glob(os.path.join(prefix, "lib", "libcrescent.so.*.*"))
sonames = [p for p in sonames if p.count(".") == 3]  # libcrescent.so.MAJOR.MINOR, the SONAME
assert len(sonames) == 1, f"expected one libcrescent.so.MAJOR.MINOR in {prefix}/lib, found {sonames}"
lib = ctypes.CDLL(sonames[0])


class Value(ctypes.Structure):  # crescent_value
    _fields_ = [("kind", ctypes.c_int), ("boolean", ctypes.c_int), ("number", ctypes.c_double),
                ("string", ctypes.c_char_p), ("tensor", ctypes.c_void_p)]


CRESCENT_NUMBER, CRESCENT_TENSOR, CRESCENT_FLOAT64, CRESCENT_LUA_ERROR = 2, 4, 1, 1
lib.crescent_version.restype = ctypes.c_char_p
lib.crescent_last_error.restype = ctypes.c_char_p
lib.crescent_vm_create.restype = ctypes.c_void_p
lib.crescent_vm_destroy.argtypes = [ctypes.c_void_p]
lib.crescent_run_string.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.crescent_tensor_from_blob.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p,
                                          ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                                          ctypes.POINTER(ctypes.c_void_p)]
lib.crescent_call.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Value), ctypes.c_int,
                              ctypes.POINTER(Value), ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
lib.crescent_tensor_size.argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.crescent_tensor_size.restype = ctypes.c_int64
lib.crescent_tensor_copy_to.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
lib.crescent_tensor_release.argtypes = [ctypes.c_void_p]


def check(status, what):
    if status != 0:
        raise SystemExit(f"FAIL: {what}: status {status}: {lib.crescent_last_error().decode()}")


version = lib.crescent_version().decode()
print("libcrescent", version, "from", sonames[0])
assert sonames[0].endswith(".".join(version.split(".")[:2])), "the SONAME carries MAJOR.MINOR of the version"
vm = lib.crescent_vm_create()
assert vm, lib.crescent_last_error().decode()
check(lib.crescent_run_string(vm, b"function affine(x, a) return x * a + 1, x:sum():item() end\n"
                                  b"function broken(x) return x:view(7) end"), "run_string")
data = (ctypes.c_double * 6)(1, 2, 3, 4, 5, 6)
sizes = (ctypes.c_int64 * 2)(2, 3)
x = ctypes.c_void_p()
check(lib.crescent_tensor_from_blob(data, 2, sizes, None, CRESCENT_FLOAT64, b"cpu", None, None, ctypes.byref(x)), "from_blob")
args = (Value * 2)(Value(kind=CRESCENT_TENSOR, tensor=x), Value(kind=CRESCENT_NUMBER, number=10))
results, n = (Value * 2)(), ctypes.c_int()
check(lib.crescent_call(vm, b"affine", args, 2, results, 2, ctypes.byref(n)), "call affine")
assert n.value == 2 and results[0].kind == CRESCENT_TENSOR and results[1].number == 21, (n.value, results[1].number)
y = results[0].tensor
assert (lib.crescent_tensor_size(y, 0), lib.crescent_tensor_size(y, 1)) == (2, 3)
out = (ctypes.c_double * 6)()
check(lib.crescent_tensor_copy_to(y, CRESCENT_FLOAT64, out, ctypes.sizeof(out)), "copy_to")
assert list(out) == [11, 21, 31, 41, 51, 61], list(out)
print("affine:", list(out))
status = lib.crescent_call(vm, b"broken", args, 1, None, 0, None)
message = lib.crescent_last_error().decode()
assert status == CRESCENT_LUA_ERROR and "view" in message, (status, message)
print("error:", message.splitlines()[0])
# compiled code through the shared library: in process (the compiler processes would run python)
os.environ["CRESCENT_JIT_FORK"] = "0"
check(lib.crescent_run_string(vm, b"""
local T = crescent
if not T.compiler.native_available('cpu') then print('compiled: no native CPU code here') return end
T.config.sync_compile, T.config.cache_dir = true, '0'
local f, v = T.compile(function(v) return (v * 2 + 1):tanh() end, { hot = 0 }), T.randn(8)
for _ = 1, 3 do assert((f(v) - (v * 2 + 1):tanh()):abs():max():item() == 0, 'compiled result') end
local s = T.compiler.stats()
assert(s.kernels_compiled >= 1 and s.eager_fallbacks == 0, 'native code ran')
print('compiled: ' .. s.kernels_compiled .. ' kernel(s), native')
"""), "compiled function")
lib.crescent_tensor_release(y)
lib.crescent_tensor_release(x)
lib.crescent_vm_destroy(vm)
print("ctypes binding ok")
