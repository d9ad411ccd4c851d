/* The C layout of the runtime's objects that Lua reads and writes directly: tensor headers,
 * op arguments, the per-VM cr_ctx and the op table's entries (DESIGN.md "The Lua boundary").
 *
 * Like vm/lua/ffi_api.h, which declares the calls on top of these, this file is read twice: by
 * the C++ compiler, and - with its '#' lines stripped - by LuaJIT's ffi.cdef, so it must stay
 * plain C declarations.
 */
#ifndef CRESCENT_ABI_H
#define CRESCENT_ABI_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Codes the Lua side reads as ffi.C.<NAME>, never as copies of the numbers; the C++ enums
 * (cr::DType, cr::ValueTag, cr::OpKind, cr::OpFlag) are defined from them. */
enum cr_dtype { CR_FLOAT32, CR_FLOAT64, CR_FLOAT16, CR_BFLOAT16, CR_INT32, CR_INT64, CR_BOOL, CR_NUM_DTYPES };
enum cr_value_tag {
  CR_TAG_NONE, CR_TAG_TENSOR, CR_TAG_NUMBER, CR_TAG_BOOL, CR_TAG_INTS, CR_TAG_TENSORS, CR_TAG_STRING, CR_TAG_DOUBLES
};
/* cr_op_info::kind (cr::OpKind) */
enum cr_op_kind {
  CR_KIND_UNARY, CR_KIND_BINARY, CR_KIND_TERNARY, CR_KIND_REDUCTION, CR_KIND_VIEW, CR_KIND_JOIN, CR_KIND_INDEX,
  CR_KIND_LINALG, CR_KIND_CREATION, CR_KIND_CONVERT, CR_KIND_OTHER
};
/* the cr_op_info::flags bits the Lua binding reads (vm/registry.hpp OpFlag says what each means) */
enum cr_op_flag {
  CR_OP_RETURNS_SELF = 1, CR_OP_NO_METHOD = 2, CR_OP_NO_FUNCTION = 4, CR_OP_MULTI_OUT = 8, CR_OP_LIST_OUT = 16,
  CR_OP_DATA_SIZE = 512
};

/* A tensor: a view (sizes, strides in elements, offset in elements) over a refcounted storage.
 * Lua reads the leading fields directly (x:dim(), x:size(), x.dtype) without a call. */
/* Everything but the sizes and strides lies in the first 64 bytes: a release (the collector
   frees thousands of a compiled function's lazy tensors at a time, long after their call) then
   touches one cache line of the header. */
typedef struct cr_tensor {
  int32_t _refs;          /* atomic on the C++ side; Lua never touches it */
  int8_t _dtype;          /* enum cr_dtype (cr::DType) */
  int8_t _dev_type;       /* 0 = cpu, 1 = cuda */
  int8_t _dev_index;
  int8_t _flags;
  int32_t _ndim;
  int32_t _vid;           /* graph recorder: value id of this tensor in segment _gen */
  void* _storage;         /* NULL: a lazy tensor, whose value a captured graph computes later */
  void* _lazy;            /* graph recorder: how a lazy tensor gets its value (cr::graph::LazyInfo) */
  uint64_t _gen;          /* graph recorder: the segment _vid belongs to */
  void* _autograd;        /* autograd metadata (vm/autograd/meta.hpp); NULL: never required grad */
  uint32_t _dynamic;      /* T.mark_dynamic: bit d set = dim d (0-based) has a symbolic size */
  uint32_t _pad;
  int64_t _offset;
  int64_t _sizes[16];
  int64_t _strides[16];
} cr_tensor;

/* The payload of a Lua tensor handle, a userdata (stdlib/core.lua, vm/lua/lua_vm.cpp new_handles). */
typedef struct cr_handle { cr_tensor* p; } cr_handle;

/* One argument of an op call. tag: enum cr_value_tag (cr::ValueTag). */
typedef struct cr_value {
  int32_t tag;
  int32_t n;              /* element count for lists */
  double num;             /* number, integer or boolean */
  void* ptr;              /* cr_tensor*, int64_t*, double*, cr_tensor** */
  const char* str;        /* strings */
} cr_value;

/* cr_ctx::service bits: what the Lua side does after an op (stdlib/core.lua core.service) */
enum cr_service {
  CR_SERVICE_GC_FULL = 1,     /* run a full collection (tensor memory grew), then gc_done */
  CR_SERVICE_WHERE = 2,       /* tell the recorder the Lua position (cap_where) */
  CR_SERVICE_GC_STEP = 4,     /* complete the collector's cycle (handle count), then gc_done */
  CR_SERVICE_GRAD_WHERE = 8,  /* tell autograd the Lua position (autograd->where) */
  CR_SERVICE_NAME = 16        /* name the tensor of a failed guard (cap_unnamed, cap_name) */
};

/* Per-VM state the Lua side reads without a call. */
typedef struct cr_ctx {
  int32_t service;        /* requests to the Lua side after an op: enum cr_service bits */
  int32_t capturing;      /* a compiled function is being captured: reading data is a graph break;
                             2: a training capture (stdlib/core.lua fused_op reads it) */
  int32_t claimed;        /* how many of the tensors handed out last Lua has wrapped (core.wrap) */
  void* impl;             /* cr::Context* */
  int32_t collect;        /* the captured call recorded ops: collect garbage before handing its
                             results to the recorder (what Lua still reaches is learned); 2: its
                             replayed values passed the budget, collect where cap_collect_pays */
} cr_ctx;

typedef struct cr_op_info {
  const char* name;
  const char* schema;     /* argument schema, parsed by stdlib/binding.lua */
  int32_t kind;           /* enum cr_op_kind (cr::OpKind) */
  int32_t flags;          /* cr::OpFlag bits */
} cr_op_info;

#ifdef __cplusplus
}
#endif
#endif
