// crescent: the C++ embedding API (API.md section 8).
//
//   crescent::VM vm;                                   // a Lua state with crescent loaded
//   vm.run_file("model.lua");                          // defines global functions
//   std::vector<float> buf(6, 1.0f);
//   auto x = crescent::Tensor::from_blob(buf.data(), {2, 3});   // no copy
//   crescent::Tensor y = vm.call_tensor("forward", x, 0.5);
//   std::vector<float> out = y.to_vector<float>();
//
// Every failure throws crescent::Error, whose message carries the Lua source location and whose
// traceback() is the Lua stack traceback. os.exit in a script ends the script with an Error of
// status Exit (see Error::exit_code), not the host process. Several VMs may live in one process; each is used by
// one thread at a time. Tensors are reference counted atomically and may move between VMs.
// Dims in this API are 0-based, as is usual in C++ (Lua code sees them 1-based).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "crescent/crescent.h"

struct cr_tensor;
struct lua_State;

namespace crescent {

enum class DType : int8_t {
  Float32 = CRESCENT_FLOAT32,
  Float64 = CRESCENT_FLOAT64,
  Float16 = CRESCENT_FLOAT16,
  BFloat16 = CRESCENT_BFLOAT16,
  Int32 = CRESCENT_INT32,
  Int64 = CRESCENT_INT64,
  Bool = CRESCENT_BOOL,
};
const char* dtype_name(DType d);  // "float32", as in Lua
size_t dtype_size(DType d);

// The dtype of a C++ element type (float, double, int32_t, int64_t, bool).
template <class T> constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::Float32;
  else if constexpr (std::is_same_v<T, double>) return DType::Float64;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::Int32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::Int64;
  else if constexpr (std::is_same_v<T, bool>) return DType::Bool;
  else static_assert(sizeof(T) == 0, "crescent: no dtype for this element type");
}

enum class Status {
  Ok = CRESCENT_OK,
  LuaError = CRESCENT_LUA_ERROR,
  InvalidArgument = CRESCENT_INVALID_ARGUMENT,
  TypeError = CRESCENT_TYPE_ERROR,
  OutOfMemory = CRESCENT_OUT_OF_MEMORY,
  InternalError = CRESCENT_INTERNAL_ERROR,
  Exit = CRESCENT_EXIT,
};

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message, const std::string& traceback = "", int exit_code = 0);
  Status status() const { return status_; }
  // Status::Exit: the script called os.exit(code), which ends the script, not the host process;
  // message() is "the script called os.exit(3)" and exit_code() 3 (os.exit(true) / () give 0,
  // os.exit(false) 1). 0 for other errors.
  int exit_code() const { return exit_code_; }
  // "model.lua:12: add: shapes {2,3} and {4} cannot be broadcast"
  const std::string& message() const { return message_; }
  // "stack traceback:\n\t..." ("" for errors found outside Lua). what() is message + traceback.
  const std::string& traceback() const { return traceback_; }

 private:
  Status status_;
  int exit_code_;
  std::string message_, traceback_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: every accessor but defined() throws
  Tensor(const Tensor& o);
  Tensor(Tensor&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  Tensor& operator=(Tensor o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~Tensor();

  // Wraps host memory without copying. strides are in elements (empty: contiguous). The
  // memory must outlive the tensor and its views in the host and in Lua (Lua lets go at garbage
  // collection, see VM::collect_garbage); `deleter`, if given, runs when the last one goes.
  static Tensor from_blob(void* data, const std::vector<int64_t>& sizes, DType dtype, const std::string& device = "cpu");
  static Tensor from_blob(void* data, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                          DType dtype, const std::string& device = "cpu", std::function<void(void*)> deleter = {});
  // (the dtype from T; a const T's memory the tensor must not be written through, as torch's)
  template <class T, class = std::enable_if_t<!std::is_void_v<T>>>
  static Tensor from_blob(T* data, const std::vector<int64_t>& sizes) {
    return from_blob(const_cast<void*>(static_cast<const void*>(data)), sizes, dtype_of<std::remove_const_t<T>>());
  }

  bool defined() const { return p_ != nullptr; }
  int dim() const;
  std::vector<int64_t> sizes() const;
  int64_t size(int d) const;  // 0-based (Lua's x:size(1) is size(0)); negative counts from the end
  std::vector<int64_t> strides() const;  // in elements
  int64_t stride(int d) const;           // in elements; d as for size()
  int64_t numel() const;
  DType dtype() const;
  std::string device() const;  // "cpu", "cuda:0"
  bool is_contiguous() const;
  // The first element (strides apply from there); only for CPU tensors.
  void* data_ptr() const;
  template <class T> T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(data_ptr());
  }
  // The elements in row-major order, converted to T, whatever the strides.
  template <class T> std::vector<T> to_vector() const {
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<uint8_t> raw = to_vector<uint8_t>();
      return std::vector<bool>(raw.begin(), raw.end());
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      std::vector<uint8_t> v(static_cast<size_t>(numel()));
      copy_to(v.data(), DType::Bool, v.size());
      return v;
    } else {
      std::vector<T> v(static_cast<size_t>(numel()));
      copy_to(v.data(), dtype_of<T>(), v.size() * sizeof(T));
      return v;
    }
  }
  void copy_to(void* out, DType dtype, size_t out_bytes) const;
  double item() const;            // one-element tensors
  std::string to_string() const;  // as tostring(x) in Lua

  // The underlying cr_tensor (for the C API and advanced hosts). adopt: take over one reference.
  static Tensor adopt(cr_tensor* p);
  static Tensor borrow(cr_tensor* p);
  cr_tensor* get() const { return p_; }
  cr_tensor* release() {
    cr_tensor* p = p_;
    p_ = nullptr;
    return p;
  }

 private:
  void check_dtype(DType want) const;
  cr_tensor* p_ = nullptr;
};

// A value crossing between the host and Lua: nil, boolean, number, string, tensor, or a table
// (a list: keys 1..n, or a dict: string keys, kept sorted).
class Value {
 public:
  enum class Kind { Nil, Boolean, Number, String, Tensor, List, Dict };

  Value() = default;
  Value(std::nullptr_t) {}
  Value(bool b) : kind_(Kind::Boolean), boolean_(b) {}
  template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
  Value(N x) : kind_(Kind::Number), number_(double(x)) {}
  Value(const char* s) : kind_(Kind::String), string_(s ? s : "") {}
  Value(std::string s) : kind_(Kind::String), string_(std::move(s)) {}
  Value(crescent::Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}
  Value(std::vector<Value> items) : kind_(Kind::List), items_(std::move(items)) {}
  static Value dict(std::vector<std::pair<std::string, Value>> fields);

  Kind kind() const { return kind_; }
  const char* type_name() const;  // "nil", "boolean", "number", "string", "tensor", "list", "dict"
  bool is_nil() const { return kind_ == Kind::Nil; }
  bool is_tensor() const { return kind_ == Kind::Tensor; }
  bool is_number() const { return kind_ == Kind::Number; }

  // Each throws Error(TypeError) naming the kind it found.
  bool as_bool() const;
  double as_number() const;
  const std::string& as_string() const;
  const crescent::Tensor& as_tensor() const;
  const std::vector<Value>& items() const;       // list elements or dict values
  const std::vector<std::string>& keys() const;  // dict keys (parallel to items())
  const Value& operator[](size_t i) const;       // list element, 0-based
  const Value& field(const std::string& key) const;  // dict value
  size_t size() const { return items_.size(); }

 private:
  Kind kind_ = Kind::Nil;
  bool boolean_ = false;
  double number_ = 0;
  std::string string_;
  crescent::Tensor tensor_;
  std::vector<Value> items_;
  std::vector<std::string> keys_;
};

class VM {
 public:
  VM();  // a fresh Lua state with crescent loaded as the global `crescent`
  ~VM();
  VM(VM&&) noexcept;
  VM& operator=(VM&&) noexcept;
  VM(const VM&) = delete;
  VM& operator=(const VM&) = delete;

  // Run a file (global `arg` = {[0] = path, args...}, also passed as `...`) or a string; return
  // what the chunk returns. chunkname "" names a string chunk after its text, as Lua does.
  std::vector<Value> run_file(const std::string& path, const std::vector<std::string>& args = {});
  std::vector<Value> run_string(const std::string& code, const std::string& chunkname = "");

  // Calls a global function: "f", a dotted path "nn.layers.f", or "obj:method" (obj passed as
  // self). Arguments convert with Value's constructors: tensors, numbers, strings, bools, ...
  template <class... A> std::vector<Value> call(const std::string& name, A&&... args) {
    return invoke(name, std::vector<Value>{Value(std::forward<A>(args))...});
  }
  // As call, when the first result must be a tensor.
  template <class... A> Tensor call_tensor(const std::string& name, A&&... args) {
    return first_tensor(name, invoke(name, std::vector<Value>{Value(std::forward<A>(args))...}));
  }
  std::vector<Value> invoke(const std::string& name, const std::vector<Value>& args);

  void set_global(const std::string& name, const Value& value);  // dotted paths allowed ("cfg.lr":
  Value get_global(const std::string& name);                      // the table cfg must exist)
  void collect_garbage();                     // Lua lets go of unreferenced tensors now
  lua_State* lua_state() const;               // the raw state, for advanced hosts

 private:
  static Tensor first_tensor(const std::string& name, const std::vector<Value>& results);
  struct Impl;
  Impl& impl() const;  // throws when moved from
  std::unique_ptr<Impl> impl_;
};

}  // namespace crescent
