// The op registry: every operation is declared once here (name, argument schema, kind, output
// metadata rule, eager kernel, and for pointwise ops the scalar expression the code generators
// use). The Lua binding, the dispatcher, and the tests' op list are all driven from this table.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "vm/context.hpp"
#include "vm/tensor.hpp"

namespace cr {

// Argument tags of cr_value (vm/abi.h's codes, which stdlib/binding.lua reads).
enum ValueTag : int32_t {
  kNone = CR_TAG_NONE, kTensor = CR_TAG_TENSOR, kNumber = CR_TAG_NUMBER, kBool = CR_TAG_BOOL, kInts = CR_TAG_INTS,
  kTensors = CR_TAG_TENSORS, kString = CR_TAG_STRING, kDoubles = CR_TAG_DOUBLES
};

enum class OpKind : int32_t {  // (vm/abi.h's codes)
  Unary = CR_KIND_UNARY, Binary = CR_KIND_BINARY, Ternary = CR_KIND_TERNARY, Reduction = CR_KIND_REDUCTION,
  View = CR_KIND_VIEW, Join = CR_KIND_JOIN, Index = CR_KIND_INDEX, Linalg = CR_KIND_LINALG,
  Creation = CR_KIND_CREATION, Convert = CR_KIND_CONVERT, Other = CR_KIND_OTHER
};

enum OpFlag : int32_t {  // (those Lua reads are vm/abi.h's codes)
  kReturnsSelf = CR_OP_RETURNS_SELF,  // in-place: the Lua wrapper returns its first argument
  kNoMethod = CR_OP_NO_METHOD,        // only T.op(...), not x:op(...)
  kNoFunction = CR_OP_NO_FUNCTION,    // only x:op(...)
  kMultiOut = CR_OP_MULTI_OUT,        // returns several tensors as several Lua values
  kListOut = CR_OP_LIST_OUT,          // returns a Lua table of tensors (split, chunk)
  kRandom = 32,       // draws from the generator: never folded, merged or dropped by graph passes
  kValueErrors = 64,  // may fail on tensor values (an index out of range), not only on metadata
  kBoolResult = 128,  // pointwise: a bool result whatever the compute dtype (isnan, eq, logical_and)
  kDeviceAware = 256, // runs on CUDA tensors itself (matmul: cuBLAS); others run on host copies
  kDataSize = CR_OP_DATA_SIZE,        // result sizes depend on the values (nonzero): a graph break when compiled
  // guard semantics of a trace's number arguments (vm/graph/keys.cpp), which the lowering shares:
  kCodeNumbers = 1024,  // a number operand picks the code (pow's exponent: x * x for 2): never varies
  kConditionArg = 2048, // argument 0 is a bool condition (where), no operand of the result type
  // no loop lowering by design: compiled graphs run it on its eager kernel as an Extern step
  // (a library call, a join, a sort); jit/lower.hpp checks every other op has a lowering
  kExtern = 4096,
  kCollective = 8192,   // talks to the other ranks (vm/ops/collectives.cpp): kept in place as kRandom is
  // an extern whose numbers are all values its kernel reads (an optimizer's lr, step count): they
  // vary between calls from the first one, without a recompile (vm/graph/keys.cpp varies)
  kRunNumbers = 16384,
  // add / sub {alpha = a}: a floating other * a joins self in one rounding (ATen's fmadd), eager
  // and generated alike; kAlphaNegates: sub's other * -a
  kAlphaFma = 32768,
  kAlphaNegates = 65536,
};

struct Meta {
  Shape sizes;
  DType dtype;
  Device device;
};

struct OpDef;

// One call of an op: argument accessors that validate and explain, and the outputs.
struct OpCall {
  Context& ctx;
  const OpDef& def;
  const cr_value* args;
  int nargs;
  std::vector<Meta> metas;   // filled by def.infer before run
  std::vector<Tensor> outs;  // allocated from metas by the dispatcher, unless the op makes its own

  bool has(int i) const { return i < nargs && args[i].tag != kNone; }
  bool is_tensor(int i) const { return has(i) && args[i].tag == kTensor; }
  Tensor tensor(int i) const;
  double number(int i) const;
  double number_or(int i, double dflt) const { return has(i) ? number(i) : dflt; }
  int64_t integer(int i) const;  // rejects non-integral numbers
  int64_t integer_or(int i, int64_t dflt) const { return has(i) ? integer(i) : dflt; }
  bool boolean_or(int i, bool dflt) const;
  std::vector<int64_t> ints(int i) const;  // a number or a list
  std::vector<Tensor> tensors(int i) const;
  std::string str(int i) const;
  // A 1-based (or negative) Lua dim -> 0-based, checked against ndim.
  int dim(int i, int ndim) const;
  std::vector<int> dims(int i, int ndim) const;  // absent -> all dims; checks duplicates
  const char* arg_name(int i) const;
};

// A precompiled array function of a pointwise op, for generated kernels (jit/cpu/helpers.hpp):
// out[i] = f(a[i], b[i]) for i < n over contiguous arrays of the op's compute dtype (out: bool
// for predicates and comparisons; unary functions ignore b). out may be the same array as a or b
// (element i is read before it is written), as in the eager in-place kernels; no other overlap.
using BlockFn = void (*)(const void* a, const void* b, void* out, int64_t n);

namespace autograd {
class Grad;
}
// An op's derivative (vm/ops/*_grad.cpp, vm/autograd/grad.hpp): the rule computing its inputs'
// gradients from its outputs' through registry ops, and what the forward keeps for it.
struct Derivative {
  void (*fn)(autograd::Grad&) = nullptr;  // null: none (a backward reaching the op raises)
  uint32_t saves_inputs = 0;               // bit i: tensor argument i is kept
  // of saves_inputs, bit i: kept only for the other arguments' gradients (mul's operands), so only
  // when one of them requires grad, as PyTorch's generated code saves them
  uint32_t saved_for_others = 0;
  uint32_t saves_outputs = 0;              // bit k: output k is kept
  // When argument `given` is given, `given_inputs` / `given_outputs` are kept instead (max / min
  // along a dim keep the indices only, as torch's max.dim; without a dim the input and the value).
  int8_t given = -1;
  uint32_t given_inputs = 0, given_outputs = 0;
  uint32_t inputs_kept(bool given_arg) const { return given >= 0 && given_arg ? given_inputs : saves_inputs; }
  uint32_t outputs_kept(bool given_arg) const { return given >= 0 && given_arg ? given_outputs : saves_outputs; }
  uint32_t nondiff = 0;                    // bit i: argument i gets no gradient (indices, masks)
  bool not_differentiable = false;         // no derivative exists (integer / bool results, creation)
  bool saves_geometry = false;             // the node keeps tensor argument 0's strides and offset
};

// An op's autocast policy (vm/autograd/autocast.hpp; PyTorch's autocast op lists): None runs it as
// it is; Lower casts its floating arguments on the autocast device to the autocast dtype (matmuls,
// attention), Float32 to float32 (reductions that lose precision, exp/log/pow, softmax),
// Promote to the widest of them (ops taking several tensors that must agree). Float32Dtype is
// Float32 for an op that converts its first argument itself, by its `dtype` argument, as it reads
// it (no float32 copy of a 16-bit input); its other floating arguments are cast.
enum class CastPolicy : uint8_t { None, Lower, Float32, Promote, Float32Dtype };

struct OpDef;
std::string schema_arg_name(const OpDef& def, int i);
int normalize_dim(int64_t d, int ndim);  // throws with the valid range
std::string value_kind(const cr_value& v);

struct OpDef {
  const char* name;
  const char* schema;  // "self:T, other:TN, opts:{alpha:N}" - see stdlib/binding.lua
  OpKind kind;
  int32_t flags;
  // Output metadata. Null for ops that make their outputs themselves (views, in-place, lists).
  std::vector<Meta> (*infer)(OpCall&);
  void (*run)(OpCall&);
  const char* expr = nullptr;  // pointwise: scalar expression over a, b, c (for code generators)
  // Unary / binary pointwise: the BlockFn computing in `compute` (the dtype the op computes in,
  // after promotion), bit-identical to the eager kernel; nullptr when the op does not compute in
  // that dtype, and for float16 / bfloat16.
  BlockFn (*block)(DType compute) = nullptr;
  // The argument slot of the op's {device =} option (creation ops), -1 without one; set by
  // Registry::add from the schema.
  int8_t device_arg = -1;
  int8_t dtype_arg = -1;  // the slot of its `dtype` argument (autocast's Float32Dtype), -1 without one
  Derivative grad{};
  CastPolicy cast = CastPolicy::None;      // under CUDA autocast
  CastPolicy cast_cpu = CastPolicy::None;  // under CPU autocast (PyTorch's CPU lists are shorter)
  // bit i: the op writes tensor argument i, or the tensors of list argument i, in place (the
  // fused optimizer updates, _attention_cache): the dispatcher bumps their versions as for an
  // in-place op's self
  uint32_t writes = 0;
  // Conversions (to, float, cpu, contiguous, ...), which return argument 0 itself when nothing
  // changes and have no infer: false when the call returns it, else true with the metadata of
  // the contiguous copy it makes. Read without running the op by graph replay (vm/graph/shapes.cpp).
  bool (*conversion)(OpCall&, Meta*) = nullptr;
  // How its errors name it, where only a Lua wrapper calls it (_div_floor: div's rounding mode);
  // null: its name
  const char* shown = nullptr;
};

// The ops that code outside vm/ops/ builds or matches by identity (graph rewrites, device copies),
// as registry ids found once when the registry is built (LuaJIT's IR_ opcodes): no op name is
// looked up anywhere else.
#define CR_NAMED_OPS(X) \
  X(_addmm_epilogue) X(_attention_cache) X(_int8_weight_mm) X(add) X(as_strided) X(attention) X(clone) X(div) X(gelu) \
  X(index_put_) X(linear) X(logical_not) X(masked_fill) X(matmul) X(mul) X(relu) X(softmax) X(transpose)
struct OpIds {
#define CR_OP_ID(name) int32_t name = -1;
  CR_NAMED_OPS(CR_OP_ID)
#undef CR_OP_ID
};

class Registry {
 public:
  static Registry& get();
  const std::vector<OpDef>& ops() const { return ops_; }
  const OpDef* find(const std::string& name) const;
  int index_of(const std::string& name) const;
  void add(const OpDef& def);
  void set_derivative(const char* name, const Derivative& d);
  // at the ops' registration: the CUDA autocast policy, or the CPU one (cpu = true)
  void set_cast(std::initializer_list<const char*> names, CastPolicy p, bool cpu = false);
  const std::vector<cr_op_info>& infos() const { return infos_; }
  const OpIds& ids() const { return ids_; }

 private:
  Registry();
  std::vector<OpDef> ops_;
  OpIds ids_;
  std::vector<cr_op_info> infos_;
};

// The op families, each in its own file under vm/ops/.
void register_pointwise(Registry& r);
// Pointwise ops with an in-place form x:op_(...) (vm/ops/pointwise.cpp run_inplace: the op, then
// its result written into x), differentiated by the op's rule
#define CR_INPLACE_OPS(X)                                                                                         \
  X(add) X(sub) X(mul) X(div) X(clamp) X(neg) X(abs) X(exp) X(exp2) X(log) X(log2) X(log1p) X(expm1) X(sqrt)    \
  X(rsqrt) X(sin) X(cos) X(tan) X(tanh) X(sigmoid) X(relu) X(erf) X(floor) X(ceil) X(trunc) X(sign) X(reciprocal) \
  X(square) X(pow) X(fmod) X(remainder) X(atan2) X(hypot) X(lerp) X(addcmul)
void register_reductions(Registry& r);
void register_views(Registry& r);
void register_joins(Registry& r);
void register_indexing(Registry& r);
void register_selection(Registry& r);  // masked_select, nonzero, index, index_put
void register_linalg(Registry& r);
void register_sorting(Registry& r);
void register_attention(Registry& r);
void register_norm(Registry& r);  // _layer_norm and its backward
void register_quant(Registry& r);  // int8 weight-only quantisation
void register_epilogue(Registry& r);  // _addmm_epilogue (vm/graph/epilogues.cpp makes it)
void register_creation(Registry& r);
void register_conversions(Registry& r);
void register_optim(Registry& r);
void register_conv(Registry& r);
void register_collectives(Registry& r);  // T.distributed's collectives as graph nodes
void register_derivatives(Registry& r);  // vm/ops/*_grad.cpp

// Block functions of no registry op, which the code generators call by name, with the scalar
// expression the CUDA code generator emits for each: gelu's {approximate = "tanh"} form (the
// registry's gelu.block is the erf form), the exp and log of the eager softmax kernels
// (vm/ops/scans.cpp), so that compiled softmax / log_softmax fold exactly as eager does, and
// rand / randn's draws and randint's bits (vm/kernels/philox.hpp: int64 counters and seeds in,
// float64 numbers / int64 bits out).
struct ExtraBlock {
  const char* name;
  BlockFn (*block)(DType compute);
  const char* expr;
};
const ExtraBlock* extra_block(const std::string& name);  // null for other names
// The block function of `op` over `compute` (a registry op's, else an extra block's): what
// generated CPU code calls for a loop IR call of that op and dtype; null when there is none.
BlockFn block_function(const std::string& op, DType compute);
BlockFn gelu_tanh_block(DType compute);
BlockFn softmax_exp_block(DType compute);  // lanes::exp_poly for float32, vmath::exp for float64
BlockFn softmax_log_block(DType compute);  // std::log

// While a PhantomScope is open on this thread, op calls compute nothing (as torch's fake tensors,
// for traces that keep only the graph): outputs get the layouts of the op's infer, view or
// conversion rule over storage without memory; an op with none of these raises.
struct PhantomScope {
  bool was;
  PhantomScope();
  ~PhantomScope();
};
bool phantom_dispatch();
Tensor phantom_tensor(const Shape& sizes, DType dtype, Device device);  // contiguous, no memory
// Which rule gives an op's outputs' layouts without its kernel (phantom calls, dynamic replays:
// graph/shapes.cpp): its infer rule, its own run on headers (views, lists), its conversion rule.
enum class OutputRule { Infer, Headers, Conversion, None };
OutputRule output_rule(const OpDef& def);

// Runs one op eagerly (infer, allocate, run). Throws cr::Error with the op name prefixed.
// `into` (optional, one per output): lazy tensors that receive the outputs' storage directly
// when their layout is the contiguous one the op produces (the eager backend of captured graphs).
std::vector<Tensor> dispatch(Context& ctx, int op, const cr_value* args, int nargs, const Tensor* into = nullptr,
                             size_t ninto = 0);

}  // namespace cr
