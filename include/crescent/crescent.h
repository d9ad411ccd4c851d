/* crescent: the plain C embedding API (API.md section 8).
 *
 * A host program creates VMs, runs Lua code in them and calls global Lua functions with
 * tensors, numbers, strings and booleans. Host buffers become tensors without a copy
 * (crescent_tensor_from_blob). Every handle is opaque, every fallible call returns a
 * crescent_status, and the message of the last failure on the calling thread (with the Lua
 * traceback where there is one) is crescent_last_error().
 *
 * Threads: several VMs may live in one process; each VM is used by one thread at a time.
 * Tensors are reference counted atomically and may be shared between VMs.
 * Dims in this API are 0-based, as is usual in C (Lua code sees them 1-based).
 */
#ifndef CRESCENT_CRESCENT_H
#define CRESCENT_CRESCENT_H
#include <stddef.h>
#include <stdint.h>

/* The version, also as numbers (CMakeLists.txt reads them: the project's one version). */
#define CRESCENT_VERSION_MAJOR 0
#define CRESCENT_VERSION_MINOR 1
#define CRESCENT_VERSION_PATCH 0
#define CRESCENT_VERSION "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, for #if CRESCENT_VERSION_NUM >= 100 */
#define CRESCENT_VERSION_NUM (CRESCENT_VERSION_MAJOR * 10000 + CRESCENT_VERSION_MINOR * 100 + CRESCENT_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct crescent_vm crescent_vm;         /* one Lua state with crescent loaded */
typedef struct crescent_tensor crescent_tensor; /* a reference to a tensor */

typedef enum crescent_status {
  CRESCENT_OK = 0,
  CRESCENT_LUA_ERROR = 1,        /* Lua code raised an error (message + traceback) */
  CRESCENT_INVALID_ARGUMENT = 2, /* NULL handle, bad sizes, dtype, device, index ... */
  CRESCENT_TYPE_ERROR = 3,       /* a value does not have the type that was asked for */
  CRESCENT_OUT_OF_MEMORY = 4,
  CRESCENT_INTERNAL_ERROR = 5,
  CRESCENT_EXIT = 6              /* the script called os.exit: see crescent_last_exit_code */
} crescent_status;

/* Same order as the Lua dtype names "float32", "float64", ... */
typedef enum crescent_dtype {
  CRESCENT_FLOAT32 = 0,
  CRESCENT_FLOAT64 = 1,
  CRESCENT_FLOAT16 = 2,
  CRESCENT_BFLOAT16 = 3,
  CRESCENT_INT32 = 4,
  CRESCENT_INT64 = 5,
  CRESCENT_BOOL = 6
} crescent_dtype;

typedef enum crescent_kind {
  CRESCENT_NIL = 0,
  CRESCENT_BOOLEAN = 1,
  CRESCENT_NUMBER = 2,
  CRESCENT_STRING = 3,
  CRESCENT_TENSOR = 4
} crescent_kind;

/* An argument or result of crescent_call. Only the field named by `kind` is meaningful. */
typedef struct crescent_value {
  crescent_kind kind;
  int boolean;
  double number;
  const char* string;       /* NUL-terminated */
  crescent_tensor* tensor;
} crescent_value;

/* ---- errors ------------------------------------------------------------------------------- */
/* The message of the last failed call made by this thread ("" if none). Valid until the next
 * failing call on this thread. */
const char* crescent_last_error(void);
const char* crescent_status_name(crescent_status status); /* "CRESCENT_LUA_ERROR", ... */
/* os.exit(code) in a script ends the script, not the host process: the call running it returns
 * CRESCENT_EXIT, the last error is "the script called os.exit(3)", and this returns the code of
 * the last CRESCENT_EXIT on this thread (os.exit(true) or os.exit() give 0, os.exit(false) 1). */
int crescent_last_exit_code(void);
const char* crescent_version(void);

/* ---- VMs ---------------------------------------------------------------------------------- */
/* NULL on failure (see crescent_last_error). */
crescent_vm* crescent_vm_create(void);
void crescent_vm_destroy(crescent_vm* vm); /* NULL is allowed */

/* Runs a file with the global `arg` = {[0] = path, argv[0], ...} (argc may be 0). */
crescent_status crescent_run_file(crescent_vm* vm, const char* path, int argc, const char* const* argv);
crescent_status crescent_run_string(crescent_vm* vm, const char* code);

/* Calls the global function `name` ("f", or a dotted path "model.forward") with `nargs`
 * arguments. Up to `max_results` results are stored in `results`; *nresults (may be NULL)
 * receives how many the function returned. Result tensors are new references the caller
 * releases; result strings stay valid until the next call into this VM. On failure no results
 * are stored and nothing needs releasing. Results that are tables or functions fail with
 * CRESCENT_TYPE_ERROR. */
crescent_status crescent_call(crescent_vm* vm, const char* name, const crescent_value* args, int nargs,
                              crescent_value* results, int max_results, int* nresults);

/* Globals: set from a value (tensors are retained by Lua), read into a value (as for results). */
crescent_status crescent_set_global(crescent_vm* vm, const char* name, const crescent_value* value);
crescent_status crescent_get_global(crescent_vm* vm, const char* name, crescent_value* out);

/* A full Lua garbage collection: Lua lets go of tensors it no longer references. */
crescent_status crescent_collect_garbage(crescent_vm* vm);

/* ---- tensors ------------------------------------------------------------------------------ */
/* Wraps host memory without copying. strides (in elements) may be NULL for a contiguous
 * (row-major) layout; device is "cpu" (NULL means "cpu"). The memory must stay valid until
 * the tensor and every view of it are released, in the host and in Lua (Lua releases at garbage
 * collection, see crescent_collect_garbage). If `deleter` is not NULL it is called with
 * (deleter_ctx, data) when the last reference goes away. */
crescent_status crescent_tensor_from_blob(void* data, int ndim, const int64_t* sizes, const int64_t* strides,
                                          crescent_dtype dtype, const char* device,
                                          void (*deleter)(void* ctx, void* data), void* deleter_ctx,
                                          crescent_tensor** out);
void crescent_tensor_retain(crescent_tensor* t);
void crescent_tensor_release(crescent_tensor* t); /* NULL is allowed */

/* Accessors return -1 (or NULL) and set the last error on a NULL tensor or a bad dim. `dim` is
 * 0-based (Lua's x:size(1) is crescent_tensor_size(x, 0)); a negative dim counts from the end
 * (-1 is the last), as in C++ and PyTorch. */
int crescent_tensor_ndim(const crescent_tensor* t);
int64_t crescent_tensor_size(const crescent_tensor* t, int dim);
int64_t crescent_tensor_stride(const crescent_tensor* t, int dim);
int64_t crescent_tensor_numel(const crescent_tensor* t);
int crescent_tensor_dtype(const crescent_tensor* t);      /* a crescent_dtype, or -1 */
int crescent_tensor_is_contiguous(const crescent_tensor* t); /* 1, 0 or -1 */
/* The address of the first element (strides apply from there); NULL if not on the CPU. */
void* crescent_tensor_data(const crescent_tensor* t);
/* Copies the elements in row-major order into `out`, converted to `dtype`, whatever the
 * tensor's strides; out_bytes must be numel * size of dtype. */
crescent_status crescent_tensor_copy_to(const crescent_tensor* t, crescent_dtype dtype, void* out, size_t out_bytes);
/* Like tostring(x) in Lua. The string is the caller's to free() (NULL on failure). */
char* crescent_tensor_to_string(const crescent_tensor* t);

/* ---- value constructors --------------------------------------------------------------------- */
static inline crescent_value crescent_nil(void) {
  crescent_value v = {CRESCENT_NIL, 0, 0.0, NULL, NULL};
  return v;
}
static inline crescent_value crescent_boolean(int b) {
  crescent_value v = {CRESCENT_BOOLEAN, b != 0, 0.0, NULL, NULL};
  return v;
}
static inline crescent_value crescent_number(double x) {
  crescent_value v = {CRESCENT_NUMBER, 0, x, NULL, NULL};
  return v;
}
static inline crescent_value crescent_string(const char* s) {
  crescent_value v = {CRESCENT_STRING, 0, 0.0, s, NULL};
  return v;
}
static inline crescent_value crescent_tensor_value(crescent_tensor* t) {
  crescent_value v = {CRESCENT_TENSOR, 0, 0.0, NULL, t};
  return v;
}

#ifdef __cplusplus
}
#endif
#endif
