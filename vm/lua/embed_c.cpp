// The C embedding API (include/crescent/crescent.h) over the C++ one: every entry checks its
// arguments, catches every exception and turns it into a status plus the calling thread's last
// error message. crescent_tensor* is a cr_tensor* under an opaque name.
#include <crescent/crescent.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>

#include <crescent/crescent.hpp>

#include "vm/tensor.hpp"

struct crescent_vm {
  crescent::VM vm;
  std::deque<std::string> strings;  // result strings of the last call (a deque never moves them)
};

namespace {

using crescent::Error;
using crescent::Status;
using crescent::Value;

thread_local std::string t_last_error;
thread_local int t_last_exit_code = 0;

crescent_status failed(crescent_status s, const std::string& msg) {
  t_last_error = msg;
  return s;
}

template <class F> crescent_status guarded(F&& f) {
  try {
    f();
    return CRESCENT_OK;
  } catch (const Error& e) {
    if (e.status() == Status::Exit) t_last_exit_code = e.exit_code();
    return failed(crescent_status(e.status()), e.what());
  } catch (const std::bad_alloc&) {
    return failed(CRESCENT_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return failed(CRESCENT_INTERNAL_ERROR, e.what());
  } catch (...) {
    return failed(CRESCENT_INTERNAL_ERROR, "unknown exception");
  }
}

[[noreturn]] void bad(const std::string& msg) { throw Error(Status::InvalidArgument, msg); }

cr_tensor* raw(const crescent_tensor* t) { return reinterpret_cast<cr_tensor*>(const_cast<crescent_tensor*>(t)); }
crescent_tensor* opaque(cr_tensor* t) { return reinterpret_cast<crescent_tensor*>(t); }

crescent_vm& check_vm(crescent_vm* vm, const char* fn) {
  if (!vm) bad(std::string(fn) + ": the VM is NULL");
  return *vm;
}

// The int a C caller stored in an enum, read without an enum-typed load: in C any int is a
// valid crescent_kind / crescent_dtype, in C++ values outside the enumerators' range are not.
template <class E> int enum_int(const E& e) {
  static_assert(sizeof(E) == sizeof(int));
  int i;
  std::memcpy(&i, &e, sizeof i);
  return i;
}

Value from_c(const crescent_value& v, const std::string& where) {
  switch (enum_int(v.kind)) {
    case CRESCENT_NIL: return {};
    case CRESCENT_BOOLEAN: return v.boolean != 0;
    case CRESCENT_NUMBER: return v.number;
    case CRESCENT_STRING:
      if (!v.string) bad(where + " is a string with a NULL pointer");
      return v.string;
    case CRESCENT_TENSOR:
      if (!v.tensor) bad(where + " is a tensor with a NULL pointer");
      return crescent::Tensor::borrow(raw(v.tensor));
  }
  bad(where + " has the unknown kind " + std::to_string(enum_int(v.kind)));
}

void check_c_kind(const Value& v, const std::string& where) {
  if (v.kind() == Value::Kind::List || v.kind() == Value::Kind::Dict)
    throw Error(Status::TypeError, where + " is a table; the C API passes nil, booleans, numbers, strings and tensors");
}

// Moves v into out: tensors become references the caller owns, strings live in vm.strings.
void to_c(crescent_vm& vm, Value& v, crescent_value* out) {
  *out = crescent_nil();
  switch (v.kind()) {
    case Value::Kind::Boolean: *out = crescent_boolean(v.as_bool()); break;
    case Value::Kind::Number: *out = crescent_number(v.as_number()); break;
    case Value::Kind::String:
      vm.strings.push_back(v.as_string());
      *out = crescent_string(vm.strings.back().c_str());
      break;
    case Value::Kind::Tensor: *out = crescent_tensor_value(opaque(crescent::Tensor(v.as_tensor()).release())); break;
    default: break;
  }
}

crescent::DType check_dtype(const crescent_dtype& d, const char* fn) {
  int i = enum_int(d);
  if (i < CRESCENT_FLOAT32 || i > CRESCENT_BOOL) bad(std::string(fn) + ": unknown dtype " + std::to_string(i));
  return crescent::DType(i);
}

// An accessor of the C++ API on t: its value, or -1 with the last error set.
template <class F> int64_t int_result(const crescent_tensor* t, const char* fn, F&& f) {
  int64_t r = -1;
  guarded([&] {
    if (!t) bad(std::string(fn) + ": the tensor is NULL");
    r = f(crescent::Tensor::borrow(raw(t)));
  });
  return r;
}

}  // namespace

extern "C" {

const char* crescent_last_error(void) { return t_last_error.c_str(); }
int crescent_last_exit_code(void) { return t_last_exit_code; }

const char* crescent_status_name(crescent_status status) {
  switch (status) {
    case CRESCENT_OK: return "CRESCENT_OK";
    case CRESCENT_LUA_ERROR: return "CRESCENT_LUA_ERROR";
    case CRESCENT_INVALID_ARGUMENT: return "CRESCENT_INVALID_ARGUMENT";
    case CRESCENT_TYPE_ERROR: return "CRESCENT_TYPE_ERROR";
    case CRESCENT_OUT_OF_MEMORY: return "CRESCENT_OUT_OF_MEMORY";
    case CRESCENT_INTERNAL_ERROR: return "CRESCENT_INTERNAL_ERROR";
    case CRESCENT_EXIT: return "CRESCENT_EXIT";
  }
  return "CRESCENT_UNKNOWN_STATUS";
}

const char* crescent_version(void) { return CRESCENT_VERSION; }

// ---- VMs ----------------------------------------------------------------------------------------

crescent_vm* crescent_vm_create(void) {
  crescent_vm* vm = nullptr;
  guarded([&] { vm = new crescent_vm(); });
  return vm;
}

void crescent_vm_destroy(crescent_vm* vm) { delete vm; }

crescent_status crescent_run_file(crescent_vm* vm, const char* path, int argc, const char* const* argv) {
  return guarded([&] {
    crescent_vm& v = check_vm(vm, "crescent_run_file");
    if (!path) bad("crescent_run_file: the path is NULL");
    if (argc < 0 || (argc > 0 && !argv)) bad("crescent_run_file: argc is " + std::to_string(argc) + " with argv NULL or argc negative");
    std::vector<std::string> args;
    for (int i = 0; i < argc; ++i) {
      if (!argv[i]) bad("crescent_run_file: argv[" + std::to_string(i) + "] is NULL");
      args.emplace_back(argv[i]);
    }
    v.vm.run_file(path, args);
  });
}

crescent_status crescent_run_string(crescent_vm* vm, const char* code) {
  return guarded([&] {
    crescent_vm& v = check_vm(vm, "crescent_run_string");
    if (!code) bad("crescent_run_string: the code is NULL");
    v.vm.run_string(code);
  });
}

crescent_status crescent_call(crescent_vm* vm, const char* name, const crescent_value* args, int nargs,
                              crescent_value* results, int max_results, int* nresults) {
  if (nresults) *nresults = 0;
  return guarded([&] {
    crescent_vm& v = check_vm(vm, "crescent_call");
    if (!name) bad("crescent_call: the function name is NULL");
    if (nargs < 0 || (nargs > 0 && !args)) bad("crescent_call: nargs is " + std::to_string(nargs) + " with args NULL or nargs negative");
    if (max_results < 0 || (max_results > 0 && !results))
      bad("crescent_call: max_results is " + std::to_string(max_results) + " with results NULL or max_results negative");
    std::vector<Value> in;
    for (int i = 0; i < nargs; ++i) in.push_back(from_c(args[i], "argument " + std::to_string(i + 1)));
    const std::string fn = name;  // (name may be a string of the last call's results, freed next)
    v.strings.clear();
    std::vector<Value> out = v.vm.invoke(fn, in);
    size_t keep = std::min(out.size(), size_t(max_results));
    for (size_t i = 0; i < keep; ++i) check_c_kind(out[i], "result " + std::to_string(i + 1));
    for (size_t i = 0; i < keep; ++i) to_c(v, out[i], &results[i]);
    if (nresults) *nresults = int(out.size());
  });
}

crescent_status crescent_set_global(crescent_vm* vm, const char* name, const crescent_value* value) {
  return guarded([&] {
    crescent_vm& v = check_vm(vm, "crescent_set_global");
    if (!name || !value) bad("crescent_set_global: the name or the value is NULL");
    v.vm.set_global(name, from_c(*value, "the value"));
  });
}

crescent_status crescent_get_global(crescent_vm* vm, const char* name, crescent_value* out) {
  return guarded([&] {
    crescent_vm& v = check_vm(vm, "crescent_get_global");
    if (!name || !out) bad("crescent_get_global: the name or the output is NULL");
    *out = crescent_nil();
    const std::string global = name;  // (name may be a string of the last call's results, freed next)
    v.strings.clear();
    Value r = v.vm.get_global(global);
    check_c_kind(r, "global '" + global + "'");
    to_c(v, r, out);
  });
}

crescent_status crescent_collect_garbage(crescent_vm* vm) {
  return guarded([&] { check_vm(vm, "crescent_collect_garbage").vm.collect_garbage(); });
}

// ---- tensors ------------------------------------------------------------------------------------

crescent_status crescent_tensor_from_blob(void* data, int ndim, const int64_t* sizes, const int64_t* strides,
                                          crescent_dtype dtype, const char* device,
                                          void (*deleter)(void* ctx, void* data), void* deleter_ctx,
                                          crescent_tensor** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    if (!out) bad("crescent_tensor_from_blob: out is NULL");
    if (ndim < 0 || ndim > cr::kMaxDims) bad("crescent_tensor_from_blob: ndim must be in 0..16, got " + std::to_string(ndim));
    if (ndim > 0 && !sizes) bad("crescent_tensor_from_blob: sizes is NULL");
    std::vector<int64_t> sz(sizes, sizes + ndim), st;
    if (strides) st.assign(strides, strides + ndim);
    std::function<void(void*)> del;
    if (deleter) del = [deleter, deleter_ctx](void* p) { deleter(deleter_ctx, p); };
    crescent::Tensor t = crescent::Tensor::from_blob(data, sz, st, check_dtype(dtype, "crescent_tensor_from_blob"), device ? device : "cpu", std::move(del));
    *out = opaque(t.release());
  });
}

void crescent_tensor_retain(crescent_tensor* t) {
  if (t) cr::tensor_retain(raw(t));
}
void crescent_tensor_release(crescent_tensor* t) { cr::tensor_release(raw(t)); }

int crescent_tensor_ndim(const crescent_tensor* t) {
  return int(int_result(t, "crescent_tensor_ndim", [](const crescent::Tensor& x) { return x.dim(); }));
}

int64_t crescent_tensor_size(const crescent_tensor* t, int dim) {
  return int_result(t, "crescent_tensor_size", [&](const crescent::Tensor& x) { return x.size(dim); });
}

int64_t crescent_tensor_stride(const crescent_tensor* t, int dim) {
  return int_result(t, "crescent_tensor_stride", [&](const crescent::Tensor& x) { return x.stride(dim); });
}

int64_t crescent_tensor_numel(const crescent_tensor* t) {
  return int_result(t, "crescent_tensor_numel", [](const crescent::Tensor& x) { return x.numel(); });
}

int crescent_tensor_dtype(const crescent_tensor* t) {
  return int(int_result(t, "crescent_tensor_dtype", [](const crescent::Tensor& x) { return int(x.dtype()); }));
}

int crescent_tensor_is_contiguous(const crescent_tensor* t) {
  return int(int_result(t, "crescent_tensor_is_contiguous", [](const crescent::Tensor& x) { return x.is_contiguous() ? 1 : 0; }));
}

void* crescent_tensor_data(const crescent_tensor* t) {
  void* p = nullptr;
  guarded([&] {
    if (!t) bad("crescent_tensor_data: the tensor is NULL");
    p = crescent::Tensor::borrow(raw(t)).data_ptr();
  });
  return p;
}

crescent_status crescent_tensor_copy_to(const crescent_tensor* t, crescent_dtype dtype, void* out, size_t out_bytes) {
  return guarded([&] {
    if (!t) bad("crescent_tensor_copy_to: the tensor is NULL");
    crescent::Tensor::borrow(raw(t)).copy_to(out, check_dtype(dtype, "crescent_tensor_copy_to"), out_bytes);
  });
}

char* crescent_tensor_to_string(const crescent_tensor* t) {
  char* s = nullptr;
  guarded([&] {
    if (!t) bad("crescent_tensor_to_string: the tensor is NULL");
    std::string str = crescent::Tensor::borrow(raw(t)).to_string();
    s = static_cast<char*>(std::malloc(str.size() + 1));
    if (!s) throw std::bad_alloc();
    std::memcpy(s, str.c_str(), str.size() + 1);
  });
  return s;
}

}  // extern "C"
