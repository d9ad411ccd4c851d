/* The Lua <-> C++ boundary (DESIGN.md "The Lua boundary").
 *
 * This file is read twice: by the C++ compiler, and - with its '#' lines stripped - by LuaJIT's
 * ffi.cdef, so it must stay plain C declarations. The C++ side fills one `cr_api` table of
 * function pointers per process and hands its address, plus the VM's `cr_ctx`, to the Lua
 * module; Lua calls through the pointers, which LuaJIT compiles into direct calls.
 */
#ifndef CRESCENT_FFI_API_H
#define CRESCENT_FFI_API_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* A tensor: a view (sizes, strides in elements, offset in elements) over a refcounted storage.
 * Lua reads the leading fields directly (x:dim(), x:size(), x.dtype) without a call. */
typedef struct cr_tensor {
  int32_t _refs;          /* atomic on the C++ side; Lua never touches it */
  int8_t _dtype;          /* cr::DType */
  int8_t _dev_type;       /* 0 = cpu, 1 = cuda */
  int8_t _dev_index;
  int8_t _flags;
  int32_t _ndim;
  int32_t _pad;
  int64_t _offset;
  int64_t _sizes[16];
  int64_t _strides[16];
  void* _storage;
  void* _node;            /* reserved for the graph recorder (lazy tensors) */
} cr_tensor;

/* The Lua handle: a struct (not a pointer) so that x[i] reaches __index. */
typedef struct cr_handle { cr_tensor* p; } cr_handle;

/* One argument of an op call. tag: see cr::ValueTag. */
typedef struct cr_value {
  int32_t tag;
  int32_t n;              /* element count for lists */
  double num;             /* number, integer or boolean */
  void* ptr;              /* cr_tensor*, int64_t*, double*, cr_tensor** */
  const char* str;        /* strings */
} cr_value;

/* Per-VM state the Lua side reads without a call. */
typedef struct cr_ctx {
  int32_t need_gc;        /* set when tensor memory grew enough to run a Lua collection */
  int32_t _pad;
  void* impl;             /* cr::Context* */
} cr_ctx;

typedef struct cr_op_info {
  const char* name;
  const char* schema;     /* argument schema, parsed by stdlib/binding.lua */
  int32_t kind;           /* cr::OpKind */
  int32_t flags;          /* cr::OpFlag bits */
} cr_op_info;

typedef struct cr_api {
  int32_t version;
  int32_t op_count;
  const cr_op_info* (*op_info)(int32_t op);
  /* Runs op `op` on `args`; writes up to `cap` results to `outs` and returns how many there are
   * (if more than cap, call take_outputs with a bigger buffer), or -1 on error. */
  int32_t (*call)(cr_ctx* ctx, int32_t op, const cr_value* args, int32_t nargs,
                  cr_tensor** outs, int32_t cap);
  int32_t (*take_outputs)(cr_ctx* ctx, cr_tensor** outs, int32_t cap);
  const char* (*last_error)(cr_ctx* ctx);
  void (*retain)(cr_tensor* t);
  void (*release)(cr_tensor* t);
  int32_t (*item)(cr_ctx* ctx, cr_tensor* t, double* out);
  /* Reads element `i` (row-major over the view) as a double; for totable. */
  int32_t (*read_all)(cr_ctx* ctx, cr_tensor* t, double* out, int64_t n);
  const char* (*format)(cr_ctx* ctx, cr_tensor* t);       /* tostring; NULL on error */
  void* (*data_ptr)(cr_tensor* t);
  int32_t (*is_contiguous)(cr_tensor* t);
  void (*manual_seed)(cr_ctx* ctx, uint64_t seed);
  int32_t (*num_threads)(void);
  double (*now_us)(void);
  void (*gc_done)(cr_ctx* ctx);
  /* IO: safetensors / npy. save_* take n tensors and names; load_* return the count or -1. */
  int32_t (*save_safetensors)(cr_ctx* ctx, const char* path, const char** names,
                              cr_tensor** ts, int32_t n);
  int32_t (*load_safetensors)(cr_ctx* ctx, const char* path, cr_tensor** outs, int32_t cap);
  const char* (*loaded_name)(cr_ctx* ctx, int32_t i);
  int32_t (*save_npy)(cr_ctx* ctx, const char* path, cr_tensor* t);
  cr_tensor* (*load_npy)(cr_ctx* ctx, const char* path);
  /* The handle finaliser: a C function, so a collection never re-enters Lua (which would
   * abort JIT traces recording at that moment). */
  void (*release_handle)(cr_handle* h);
} cr_api;

#ifdef __cplusplus
}
#endif
#endif
