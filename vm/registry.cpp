#include "vm/registry.hpp"
#include "vm/devices.hpp"

#include "vm/context.hpp"
#include "vm/autograd/grad_mode.hpp"
#include "vm/hooks.hpp"
#include "vm/nesting.hpp"
#include "vm/ops/losses.hpp"

#include <cmath>
#include <cstring>

namespace cr {

Registry& Registry::get() {
  static Registry r;
  return r;
}

Registry::Registry() {
  register_creation(*this);
  register_conversions(*this);
  register_pointwise(*this);
  register_reductions(*this);
  register_views(*this);
  register_joins(*this);
  register_indexing(*this);
  register_selection(*this);
  register_linalg(*this);
  register_sorting(*this);
  register_attention(*this);
  register_norm(*this);
  register_quant(*this);
  register_epilogue(*this);
  register_losses(*this);
  register_optim(*this);
  register_conv(*this);
  register_collectives(*this);
  register_derivatives(*this);
  for (const OpDef& d : ops_) infos_.push_back(cr_op_info{d.name, d.schema, int32_t(d.kind), d.flags});
  auto id = [this](const char* name) {
    const int i = index_of(name);
    if (i < 0) fail(cat("internal: CR_NAMED_OPS names '", name, "', which is no registered op"));
    return int32_t(i);
  };
#define CR_OP_ID(name) ids_.name = id(#name);
  CR_NAMED_OPS(CR_OP_ID)
#undef CR_OP_ID
}

void Registry::add(const OpDef& def) {
  if (find(def.name)) fail(cat("op '", def.name, "' registered twice"));
  ops_.push_back(def);
  OpDef& d = ops_.back();
  // device_arg is a position in the call's arguments: a Data argument (T.tensor's nested table) is
  // followed there by a hidden one, its shape (stdlib/binding.lua put.Data)
  int hidden = 0;
  for (int i = 0; i < 32; ++i) {
    const std::string name = schema_arg_name(d, i);
    if (name == "argument") break;
    if (name == "device") d.device_arg = int8_t(i + hidden);
    if (name == "dtype") d.dtype_arg = int8_t(i + hidden);
    if (std::strstr(d.schema, (name + ":Data").c_str())) hidden = 1;
  }
}

void Registry::set_derivative(const char* name, const Derivative& d) {
  int i = index_of(name);
  if (i < 0) fail(cat("derivative of '", name, "': no such op"));
  ops_[size_t(i)].grad = d;
}

void Registry::set_cast(std::initializer_list<const char*> names, CastPolicy p, bool cpu) {
  for (const char* name : names) {
    int i = index_of(name);
    if (i < 0) fail(cat("autocast policy of '", name, "': no such op"));
    if (p == CastPolicy::Float32Dtype && ops_[size_t(i)].dtype_arg < 0)
      fail(cat("autocast policy Float32Dtype of '", name, "': the op has no dtype argument"));
    (cpu ? ops_[size_t(i)].cast_cpu : ops_[size_t(i)].cast) = p;
  }
}

const OpDef* Registry::find(const std::string& name) const {
  int i = index_of(name);
  return i < 0 ? nullptr : &ops_[size_t(i)];
}

int Registry::index_of(const std::string& name) const {
  for (size_t i = 0; i < ops_.size(); ++i)
    if (name == ops_[i].name) return int(i);
  return -1;
}

// ---- argument access -------------------------------------------------------------------------

std::string value_kind(const cr_value& v) {
  switch (v.tag) {
    case kNone: return "nil";
    case kTensor: return Tensor(static_cast<cr_tensor*>(v.ptr), true).describe();
    case kNumber: return "number";
    case kBool: return "boolean";
    case kInts: return "list of numbers";
    case kTensors: return "list of tensors";
    case kDoubles: return "list of numbers";
    case kString: return cat("string \"", v.str, "\"");
  }
  return "unknown value";
}

// The name of argument i, from the schema ("self:T, other:TN" -> "other").
std::string schema_arg_name(const OpDef& def, int i) {
  const char* s = def.schema;
  for (int k = 0; k < i && s; ++k) {
    s = std::strchr(s, ',');
    if (s) ++s;
  }
  if (!s) return "argument";
  std::string name;
  while (*s == ' ') ++s;
  while (*s && *s != ':' && *s != ',') name += *s++;
  return name;
}

const char* OpCall::arg_name(int i) const {
  static thread_local std::string name;
  name = schema_arg_name(def, i);
  return name.c_str();
}

static std::string given(const OpCall& c, int i) { return i < c.nargs ? value_kind(c.args[i]) : "nothing"; }

Tensor OpCall::tensor(int i) const {
  if (!is_tensor(i)) fail(cat("argument ", i + 1, " (", arg_name(i), ") expected a tensor, got ", given(*this, i)));
  return Tensor(static_cast<cr_tensor*>(args[i].ptr), true);
}

double OpCall::number(int i) const {
  if (!has(i) || (args[i].tag != kNumber && args[i].tag != kBool))
    fail(cat("argument ", i + 1, " (", arg_name(i), ") expected a number, got ", given(*this, i)));
  return args[i].num;
}

int64_t OpCall::integer(int i) const {
  // as PyTorch: a boolean is no size, dim or count (True is an int in Python, not for torch)
  if (has(i) && args[i].tag == kBool) fail(cat("argument ", i + 1, " (", arg_name(i), ") expected an integer, got boolean"));
  double v = number(i);
  if (v != std::floor(v) || std::fabs(v) > 9.007199254740992e15)
    fail(cat("argument ", i + 1, " (", arg_name(i), ") expected an integer, got ", v));
  return int64_t(v);
}

bool OpCall::boolean_or(int i, bool dflt) const {
  if (!has(i)) return dflt;
  if (args[i].tag != kBool) fail(cat("argument ", i + 1, " (", arg_name(i), ") expected a boolean, got ", given(*this, i)));
  return args[i].num != 0;
}

std::vector<int64_t> OpCall::ints(int i) const {
  if (has(i) && args[i].tag == kNumber) return {integer(i)};
  if (!has(i) || args[i].tag != kInts)
    fail(cat("argument ", i + 1, " (", arg_name(i), ") expected a list of integers, got ", given(*this, i)));
  const int64_t* p = static_cast<const int64_t*>(args[i].ptr);
  return std::vector<int64_t>(p, p + args[i].n);
}

std::vector<Tensor> OpCall::tensors(int i) const {
  if (!has(i) || args[i].tag != kTensors)
    fail(cat("argument ", i + 1, " (", arg_name(i), ") expected a list of tensors, got ", given(*this, i)));
  cr_tensor* const* p = static_cast<cr_tensor* const*>(args[i].ptr);
  std::vector<Tensor> r;
  for (int k = 0; k < args[i].n; ++k) r.emplace_back(p[k], true);
  return r;
}

std::string OpCall::str(int i) const {
  if (!has(i) || args[i].tag != kString)
    fail(cat("argument ", i + 1, " (", arg_name(i), ") expected a string, got ", given(*this, i)));
  return args[i].str;
}

int normalize_dim(int64_t d, int ndim) {
  int n = ndim == 0 ? 1 : ndim;  // a 0-d tensor accepts dim 1 / -1, as PyTorch accepts 0 / -1
  if (d == 0 || d > n || d < -n)
    fail(cat("dim ", d, " is out of range for a ", ndim, "-d tensor (expected 1..", n, " or -", n, "..-1)"));
  return int(d > 0 ? d - 1 : d + n);
}

int OpCall::dim(int i, int ndim) const { return normalize_dim(integer(i), ndim); }

std::vector<int> OpCall::dims(int i, int ndim) const {
  std::vector<int> r;
  if (!has(i)) {
    for (int d = 0; d < ndim; ++d) r.push_back(d);
    return r;
  }
  for (int64_t d : ints(i)) {
    int k = normalize_dim(d, ndim);
    for (int prev : r)
      if (prev == k) fail(cat("dim ", d, " appears more than once in the list of dims"));
    r.push_back(k);
  }
  return r;
}

// ---- dispatch --------------------------------------------------------------------------------

thread_local int dispatch_depth = 0;

namespace {
thread_local bool phantom = false;

void no_memory(void*, void*) {}

std::vector<Tensor> run_phantom(OpCall& c) {
  const OpDef& def = c.def;
  if (def.flags & kReturnsSelf) return {};  // (as the eager in-place ops: the caller has self)
  switch (output_rule(def)) {
    case OutputRule::Infer:
      for (const Meta& m : def.infer(c)) c.outs.push_back(phantom_tensor(m.sizes, m.dtype, m.device));
      break;
    case OutputRule::Headers:
      def.run(c);  // (a copying reshape makes a phantom copy, vm/ops/views.cpp)
      break;
    case OutputRule::Conversion: {
      Meta m;
      if (def.conversion(c, &m)) c.outs.push_back(phantom_tensor(m.sizes, m.dtype, m.device));
      else c.outs.push_back(c.tensor(0));
      break;
    }
    case OutputRule::None:
      fail("no rule gives its outputs' layouts without running it: a phantom trace cannot run it");
  }
  return std::move(c.outs);
}
}  // namespace

OutputRule output_rule(const OpDef& def) {
  if (def.infer) return OutputRule::Infer;
  // (split, chunk; not the optimizers' updates, which write their lists and return nothing)
  if (def.kind == OpKind::View || ((def.flags & kListOut) && !def.writes)) return OutputRule::Headers;
  return def.conversion ? OutputRule::Conversion : OutputRule::None;
}

PhantomScope::PhantomScope() : was(phantom) { phantom = true; }
PhantomScope::~PhantomScope() { phantom = was; }
bool phantom_dispatch() { return phantom; }

Tensor phantom_tensor(const Shape& sizes, DType dtype, Device device) {
  Storage* s = storage_wrap(nullptr, size_t(shape_numel(sizes)) * dtype_size(dtype), device, no_memory, nullptr);
  return Tensor::from_storage(s, sizes, contiguous_strides(sizes), 0, dtype);
}

std::vector<Tensor> dispatch(Context& ctx, int op, const cr_value* args, int nargs, const Tensor* into, size_t ninto) {
  const auto& ops = Registry::get().ops();
  if (op < 0 || size_t(op) >= ops.size()) fail(cat("unknown op id ", op));
  const OpDef& def = ops[size_t(op)];
  OpCall c{ctx, def, args, nargs, {}, {}};
  DispatchNest nest;
  try {
    for (int i = 0; i < nargs; ++i) {  // values of compiled functions that are still lazy
      if (args[i].tag == kTensor) {
        auto* t = static_cast<cr_tensor*>(args[i].ptr);
        if (!t->_storage || t->_lazy) hooks().ensure_real(ctx, t);
      } else if (args[i].tag == kTensors) {
        for (int j = 0; j < args[i].n; ++j) {
          cr_tensor* t = static_cast<cr_tensor* const*>(args[i].ptr)[j];
          if (!t->_storage || t->_lazy) hooks().ensure_real(ctx, t);
        }
      }
    }
    if ((def.flags & kReturnsSelf) && nargs > 0 && args[0].tag == kTensor) {
      if (autograd::is_inference(static_cast<cr_tensor*>(args[0].ptr)) && !autograd::inference_mode)
        fail("Inplace update to inference tensor outside InferenceMode is not allowed. You can make a clone to get a "
             "normal tensor before doing inplace update.");
      auto* st = static_cast<Storage*>(static_cast<cr_tensor*>(args[0].ptr)->_storage);
      hooks().before_write(ctx, st);
      st->version.fetch_add(1);
    }
    for (int i = 0; def.writes && i < nargs; ++i) {
      if (!(def.writes >> i & 1) || (args[i].tag != kTensors && args[i].tag != kTensor)) continue;
      const bool list = args[i].tag == kTensors;
      for (int j = 0; j < (list ? args[i].n : 1); ++j) {
        cr_tensor* t = list ? static_cast<cr_tensor* const*>(args[i].ptr)[j] : static_cast<cr_tensor*>(args[i].ptr);
        auto* st = static_cast<Storage*>(t->_storage);
        hooks().before_write(ctx, st);
        st->version.fetch_add(1);
      }
    }
    if (phantom) return run_phantom(c);  // (after the versions: autograd's checks see the writes)
    // metadata-only and copying ops (views, joins, conversions) work on CUDA tensors as they are;
    // the others run on host copies until they have CUDA kernels (vm/devices.hpp)
    if (def.kind != OpKind::View && def.kind != OpKind::Join && def.kind != OpKind::Convert &&
        !(def.flags & kDeviceAware) && any_cuda(def, args, nargs)) {
      if (hooks().cuda_run_op(ctx, op, args, nargs, &c.outs)) return std::move(c.outs);
      return run_on_host(ctx, def, args, nargs);
    }
    if (def.infer) {
      c.metas = def.infer(c);
      for (size_t i = 0; i < c.metas.size(); ++i) {
        const Meta& m = c.metas[i];
        if (i < ninto && into[i].defined() && Tensor::give_storage(into[i].get(), m.sizes, m.dtype, m.device))
          c.outs.push_back(into[i]);
        else
          c.outs.push_back(Tensor::empty(m.sizes, m.dtype, m.device));
      }
    }
    def.run(c);
  } catch (const Error& e) {
    throw Error(cat(def.shown ? def.shown : def.name, ": ", e.what()));
  } catch (const std::bad_alloc&) {
    throw Error(cat(def.shown ? def.shown : def.name, ": out of memory"));
  }
  return std::move(c.outs);
}

}  // namespace cr
