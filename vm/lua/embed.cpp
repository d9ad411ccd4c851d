// The C++ embedding API (include/crescent/crescent.hpp) on top of cr::LuaVM. Values cross into
// Lua as ordinary Lua values; a tensor becomes a Lua tensor handle through small Lua helpers
// (crescent.core's wrap / ptr), called protected so that no Lua error escapes into C++ frames.
// Nothing here is global: each VM keeps its state in its Impl and its lua_State.
#include <crescent/crescent.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <type_traits>

#include "vm/graph/recorder.hpp"
#include "vm/kernels/loop.hpp"
#include "vm/lua/lua_vm.hpp"
#include "vm/print.hpp"

extern "C" {
#include <lauxlib.h>
#include <lua.h>
}

namespace crescent {

namespace {

constexpr int kMaxDepth = 64;      // nested tables deeper than this are taken for cycles

// Turns the runtime's exceptions into crescent::Error; `what` names the API entry.
template <class F> auto guard(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const cr::Error& e) {
    throw Error(Status::InvalidArgument, std::string(what) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    throw Error(Status::OutOfMemory, std::string(what) + ": out of memory");
  } catch (const std::exception& e) {
    throw Error(Status::InternalError, std::string(what) + ": " + e.what());
  }
}

[[noreturn]] void throw_lua(const std::string& err) {
  size_t cut = err.find("\nstack traceback:");
  if (cut == std::string::npos) throw Error(Status::LuaError, err);
  throw Error(Status::LuaError, err.substr(0, cut), err.substr(cut + 1));
}

[[noreturn]] void type_error(const std::string& msg) { throw Error(Status::TypeError, msg); }

// Runs f inside lua_cpcall: a Lua error raised outside the helpers' pcalls - a __gc finalizer
// that errors in a collection step an allocation triggers - becomes a crescent::Error instead of
// LuaJIT's panic. Only C++ exceptions are caught in here: LuaJIT's own unwinding passes through.
// The VM's grad mode and autocast state are the thread's meanwhile (cr::ModesIn).
template <class F> auto protect(cr::Context& ctx, lua_State* L, F&& f) -> decltype(f()) {
  cr::ModesIn modes(ctx);
  using R = decltype(f());
  struct Job {
    F* f;
    std::exception_ptr failed;
    std::conditional_t<std::is_void_v<R>, bool, std::optional<R>> result;
  } job{&f, nullptr, {}};
  const int rc = lua_cpcall(L, [](lua_State* s) -> int {
    Job& j = *static_cast<Job*>(lua_touserdata(s, 1));
    try {
      if constexpr (std::is_void_v<R>) (*j.f)();
      else j.result.emplace((*j.f)());
    } catch (const std::exception&) {
      j.failed = std::current_exception();
    }
    return 0;
  }, &job);
  if (job.failed) std::rethrow_exception(job.failed);
  if (rc != 0) {
    const char* msg = lua_tostring(L, -1);
    std::string err = msg ? msg : "a Lua error with a non-string value";
    lua_pop(L, 1);
    throw_lua(err);
  }
  if constexpr (!std::is_void_v<R>) return std::move(*job.result);
}

cr::Tensor& raw(const Tensor& t, cr::Tensor& holder) {
  if (!t.defined()) throw Error(Status::InvalidArgument, "the tensor is undefined (default-constructed or moved from)");
  holder = cr::Tensor(t.get(), true);
  return holder;
}

// Where a value computed inside a compiled function may still be lazy (vm/graph/README.md: no
// storage yet, or a tracker that must learn the value escaped), `ctx` computes it now.
void make_real(cr::Context& ctx, cr_tensor* t) {
  if (t->_storage && !t->_lazy) return;
  cr::graph::ensure_real(ctx, t);
}

// raw(), for accessors that read values or layout (a lazy tensor's strides are not final).
// Tensors leaving Lua are computed by their VM (VM::Impl::pull); a cr_tensor* the host took
// otherwise (through lua_state) is computed here in a scratch context, which needs no VM.
cr::Tensor& real(const Tensor& t, cr::Tensor& holder, const char* what) {
  cr::Tensor& x = raw(t, holder);
  if (x.get()->_storage && !x.get()->_lazy) return x;
  guard(what, [&] {
    cr::Context scratch;
    make_real(scratch, x.get());
  });
  return x;
}

}  // namespace

// ---- errors, dtypes ---------------------------------------------------------------------------

Error::Error(Status status, const std::string& message, const std::string& traceback, int exit_code)
    : std::runtime_error(traceback.empty() ? message : message + "\n" + traceback),
      status_(status), exit_code_(exit_code), message_(message), traceback_(traceback) {}

const char* dtype_name(DType d) { return cr::dtype_name(cr::DType(d)); }
size_t dtype_size(DType d) { return cr::dtype_size(cr::DType(d)); }

static cr::DType check_dtype_value(int d) {
  if (d < 0 || d >= cr::kNumDTypes) cr::fail("unknown dtype " + std::to_string(d));
  return cr::DType(d);
}

// ---- tensors ----------------------------------------------------------------------------------

Tensor::Tensor(const Tensor& o) : p_(o.p_) {
  if (p_) cr::tensor_retain(p_);
}
Tensor::~Tensor() { cr::tensor_release(p_); }

Tensor Tensor::adopt(cr_tensor* p) {
  Tensor t;
  t.p_ = p;
  return t;
}
Tensor Tensor::borrow(cr_tensor* p) {
  if (p) cr::tensor_retain(p);
  return adopt(p);
}

Tensor Tensor::from_blob(void* data, const std::vector<int64_t>& sizes, DType dtype, const std::string& device) {
  return from_blob(data, sizes, {}, dtype, device);
}

namespace {

// Row-major strides, checked for sizes that are negative, too many, or overflow.
cr::Shape checked_strides(const std::vector<int64_t>& sizes) {
  if (sizes.size() > size_t(cr::kMaxDims))
    cr::fail(cr::cat("tensors have at most ", cr::kMaxDims, " dimensions, got ", sizes.size()));
  cr::Shape st(sizes.size());
  int64_t acc = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] < 0) cr::fail("sizes must be non-negative, got " + cr::shape_str(sizes));
    st[d] = acc;
    if (__builtin_mul_overflow(acc, sizes[d] ? sizes[d] : 1, &acc)) cr::fail("sizes " + cr::shape_str(sizes) + " overflow");
  }
  return st;
}

// The bytes a view spans from its first element, or an error for sizes / strides that are
// negative, too many, or overflow.
size_t blob_extent(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, size_t itemsize) {
  if (strides.size() != sizes.size())
    cr::fail(cr::cat("expected ", sizes.size(), " strides (one per dim), got ", strides.size()));
  int64_t last = 0, numel = 1;  // offset of the last element, in elements
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0) cr::fail("sizes must be non-negative, got " + cr::shape_str(sizes));
    if (strides[d] < 0) cr::fail("strides must be non-negative, got " + cr::shape_str(strides));
    int64_t span;
    if (__builtin_mul_overflow(sizes[d] ? sizes[d] - 1 : 0, strides[d], &span) || __builtin_add_overflow(last, span, &last) ||
        __builtin_mul_overflow(numel, sizes[d], &numel))
      cr::fail("sizes " + cr::shape_str(sizes) + " with strides " + cr::shape_str(strides) + " overflow");
  }
  if (numel == 0) return 0;
  int64_t bytes;
  if (__builtin_mul_overflow(last + 1, int64_t(itemsize), &bytes)) cr::fail("the buffer size overflows");
  return size_t(bytes);
}

void free_nothing(void*, void*) {}
void run_deleter(void* ctx, void* data) {
  auto* f = static_cast<std::function<void(void*)>*>(ctx);
  (*f)(data);
  delete f;
}

}  // namespace

Tensor Tensor::from_blob(void* data, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, DType dtype,
                         const std::string& device, std::function<void(void*)> deleter) {
  return guard("from_blob", [&] {
    cr::DType dt = check_dtype_value(int(dtype));
    cr::Device dev = cr::parse_device(device);
    if (!dev.is_cpu()) cr::fail("only \"cpu\" buffers can be wrapped in this build, got \"" + device + "\"");
    cr::Shape st = checked_strides(sizes);
    if (!strides.empty()) st = cr::Shape(strides);
    size_t nbytes = blob_extent(sizes, st, cr::dtype_size(dt));
    if (!data && nbytes) cr::fail("data is NULL for a non-empty tensor of sizes " + cr::shape_str(sizes));
    auto* fn = deleter ? new std::function<void(void*)>(std::move(deleter)) : nullptr;
    cr::Storage* s = cr::storage_wrap(data, nbytes, dev, fn ? run_deleter : free_nothing, fn);
    return adopt(cr::Tensor::from_storage(s, sizes, st, 0, dt).release());
  });
}

int Tensor::dim() const {
  cr::Tensor h;
  return raw(*this, h).dim();
}
std::vector<int64_t> Tensor::sizes() const {
  cr::Tensor h;
  return raw(*this, h).sizes();
}
std::vector<int64_t> Tensor::strides() const {
  cr::Tensor h;
  return real(*this, h, "strides").strides();
}
namespace {
// Dim d of an n-dim tensor, 0-based; negative dims count from the end, as in PyTorch.
int wrap_dim(const char* what, int d, int n) {
  if (d < -n || d >= n)
    throw Error(Status::InvalidArgument, n == 0 ? cr::cat(what, ": dim ", d, " is out of range for a tensor of 0 dims")
                                                : cr::cat(what, ": dim ", d, " is out of range for a tensor of ", n,
                                                          " dims (expected ", -n, " to ", n - 1, ")"));
  return d < 0 ? d + n : d;
}
}  // namespace

int64_t Tensor::size(int d) const {
  cr::Tensor h;
  cr::Tensor& t = raw(*this, h);
  return t.size(wrap_dim("size", d, t.dim()));
}
int64_t Tensor::stride(int d) const {
  cr::Tensor h;
  cr::Tensor& t = real(*this, h, "stride");
  return t.stride(wrap_dim("stride", d, t.dim()));
}
int64_t Tensor::numel() const {
  cr::Tensor h;
  return raw(*this, h).numel();
}
DType Tensor::dtype() const {
  cr::Tensor h;
  return DType(raw(*this, h).dtype());
}
std::string Tensor::device() const {
  cr::Tensor h;
  return cr::device_name(raw(*this, h).device());
}
bool Tensor::is_contiguous() const {
  cr::Tensor h;
  return real(*this, h, "is_contiguous").is_contiguous();
}
void* Tensor::data_ptr() const {
  cr::Tensor h;
  cr::Tensor& t = real(*this, h, "data_ptr");
  if (!t.device().is_cpu())
    throw Error(Status::InvalidArgument, "data_ptr: the tensor is on " + cr::device_name(t.device()) + ", not the CPU");
  // the host may write through it: lazy values a compiled function would recompute from this
  // storage are computed first, as before an in-place op (any left then report they are lost)
  cr::Storage* s = t.storage();
  if (s->pending_reads.load() > 0 && s->reader) guard("data_ptr", [&] { cr::graph::before_write(*s->reader, s); });
  s->version.fetch_add(1);
  return t.data_bytes();
}
void Tensor::check_dtype(DType want) const {
  if (dtype() != want)
    throw Error(Status::TypeError, std::string("data: the tensor is ") + dtype_name(dtype()) + ", not " + dtype_name(want));
}

void Tensor::copy_to(void* out, DType dtype, size_t out_bytes) const {
  cr::Tensor h;
  cr::Tensor& src = real(*this, h, "copy_to");
  guard("copy_to", [&] {
    cr::DType dt = check_dtype_value(int(dtype));
    size_t want = size_t(src.numel()) * cr::dtype_size(dt);
    if (out_bytes != want)
      cr::fail(cr::cat("the buffer has ", out_bytes, " bytes, the ", src.describe(), " needs ", want, " as ", cr::dtype_name(dt)));
    if (!out && want) cr::fail("the buffer is NULL");
    if (!src.device().is_cpu()) cr::fail("the tensor is on " + cr::device_name(src.device()) + ", not the CPU");
    if (!want) return;
    cr::Storage* s = cr::storage_wrap(out, want, cr::Device{}, free_nothing, nullptr);
    cr::Tensor dst = cr::Tensor::from_storage(s, src.sizes(), cr::contiguous_strides(src.sizes()), 0, dt);
    cr::copy_into(dst, src);
  });
}

double Tensor::item() const {
  if (numel() != 1)
    throw Error(Status::InvalidArgument, "item: expected a tensor with one element, got " + cr::Tensor(p_, true).describe());
  double v;
  copy_to(&v, DType::Float64, sizeof v);
  return v;
}

std::string Tensor::to_string() const {
  cr::Tensor h;
  cr::Tensor& t = real(*this, h, "to_string");
  return guard("to_string", [&] { return cr::format_tensor(t); });
}

// ---- values -----------------------------------------------------------------------------------

Value Value::dict(std::vector<std::pair<std::string, Value>> fields) {
  std::sort(fields.begin(), fields.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Value v;
  v.kind_ = Kind::Dict;
  for (auto& [k, x] : fields) {
    if (!v.keys_.empty() && v.keys_.back() == k) throw Error(Status::InvalidArgument, "dict: the key '" + k + "' appears twice");
    v.keys_.push_back(std::move(k));
    v.items_.push_back(std::move(x));
  }
  return v;
}

const char* Value::type_name() const {
  static const char* const names[] = {"nil", "boolean", "number", "string", "tensor", "list", "dict"};
  return names[int(kind_)];
}

namespace {
[[noreturn]] void wrong_kind(const char* want, const Value& v) {
  type_error(std::string("expected a ") + want + ", got a " + v.type_name());
}
}  // namespace

bool Value::as_bool() const {
  if (kind_ != Kind::Boolean) wrong_kind("boolean", *this);
  return boolean_;
}
double Value::as_number() const {
  if (kind_ != Kind::Number) wrong_kind("number", *this);
  return number_;
}
const std::string& Value::as_string() const {
  if (kind_ != Kind::String) wrong_kind("string", *this);
  return string_;
}
const Tensor& Value::as_tensor() const {
  if (kind_ != Kind::Tensor) wrong_kind("tensor", *this);
  return tensor_;
}
const std::vector<Value>& Value::items() const {
  if (kind_ != Kind::List && kind_ != Kind::Dict) wrong_kind("list or dict", *this);
  return items_;
}
const std::vector<std::string>& Value::keys() const {
  if (kind_ != Kind::Dict) wrong_kind("dict", *this);
  return keys_;
}
const Value& Value::operator[](size_t i) const {
  if (kind_ != Kind::List) wrong_kind("list", *this);
  if (i >= items_.size())
    throw Error(Status::InvalidArgument, cr::cat("index ", i, " is out of range for a list of ", items_.size()));
  return items_[i];
}
const Value& Value::field(const std::string& key) const {
  const auto& ks = keys();
  auto it = std::lower_bound(ks.begin(), ks.end(), key);
  if (it == ks.end() || *it != key) throw Error(Status::InvalidArgument, "the dict has no key '" + key + "'");
  return items_[size_t(it - ks.begin())];
}

// ---- the VM -----------------------------------------------------------------------------------

namespace {

// Lua helpers of one VM. The chunk name starts with "[crescent]" so that crescent.core.fail
// reports errors at the user's code, not here.
const char* kHelpers = R"lua(
local core = require "crescent.core"
local ffi, api, wrap, is_tensor = core.ffi, core.api, core.wrap, core.is_tensor
local H = {}

-- A host tensor (a cr_tensor* as light userdata, a reference handed to Lua) as a Lua handle.
function H.push(p) return wrap(ffi.cast("cr_tensor*", p)) end

-- Stores a new reference of handle h into the cr_tensor* slot; false if h is not a tensor.
function H.take(h, slot)
  if not is_tensor(h) then return false end
  api.retain(core.ptr(h))
  ffi.cast("cr_tensor**", slot)[0] = core.ptr(h)
  return true
end

-- A global's name or a dotted path ("model.layer.w") as its parts; `what` names the API entry.
local function parts_of(what, path)
  if path == "" or path:find("^%.") or path:find("%.$") or path:find("..", 1, true) then
    error(string.format("%s: expected a global's name or a dotted path (a.b.c), got '%s'", what, path), 0)
  end
  local parts = {}
  for part in path:gmatch("[^.]+") do parts[#parts + 1] = part end
  return parts
end
local function lookup(path, what)
  local v = _G
  for _, part in ipairs(parts_of(what or "get_global", path)) do
    local t = type(v)
    if t ~= "table" and t ~= "cdata" and t ~= "userdata" then return nil end
    v = v[part]
  end
  return v
end
H.get = lookup

-- set_global: the last part of a dotted path is set in the table the others name
function H.set(path, v)
  local parts, t = parts_of("set_global", path), _G
  for i = 1, #parts - 1 do
    t = t[parts[i]]
    if type(t) ~= "table" then
      error(string.format("set_global: '%s' is a %s, not a table (setting '%s')", table.concat(parts, ".", 1, i), type(t), path), 0)
    end
  end
  t[parts[#parts]] = v
end

-- os.exit ends the script, not the host: an error that the host reports with the code
-- (VM::Impl::fail). A pcall in the script catches it, as Python's `except:` catches SystemExit.
local Exit = { __tostring = function(e) return e.message end }
function os.exit(code)
  if code == nil or code == true then code = 0 elseif code == false then code = 1 end
  if type(code) ~= "number" or code ~= math.floor(code) or math.abs(code) >= 2 ^ 31 then
    error("bad argument #1 to 'exit' (an integer or a boolean expected, got " .. tostring(code) .. ")", 2)
  end
  H.exit = setmetatable({ code = code, message = string.format("the script called os.exit(%d)", code) }, Exit)
  error(H.exit, 0)
end

local function callable(f)
  if type(f) == "function" then return true end
  local mt = (type(f) == "table" or type(f) == "cdata") and getmetatable(f)
  return mt and mt.__call ~= nil
end

-- Calls "f", "a.b.f" or "obj:method" with the arguments.
function H.call(name, ...)
  local obj, method = name:match("^(.+):([%w_]+)$")
  local self, f
  if obj then
    self = lookup(obj, "call")
    if self == nil then error(string.format("call: '%s' is nil", obj), 0) end
    f = self[method]
  else
    f = lookup(name, "call")
  end
  if not callable(f) then error(string.format("call: '%s' is not a function (a %s value)", name, type(f)), 0) end
  if obj then return f(self, ...) end
  return f(...)
end

return H
)lua";

// Restores the Lua stack top when a scope ends, however it ends.
class StackGuard {
 public:
  explicit StackGuard(lua_State* L) : L_(L), top_(lua_gettop(L)) {}
  ~StackGuard() { lua_settop(L_, top_); }
  StackGuard(const StackGuard&) = delete;
  StackGuard& operator=(const StackGuard&) = delete;

 private:
  lua_State* L_;
  int top_;
};

}  // namespace

struct VM::Impl {
  cr::LuaVM lua;
  int helpers = LUA_NOREF;
  lua_State* L() const { return lua.state(); }

  Impl() {
    lua_State* L = lua.state();
    if (luaL_loadbuffer(L, kHelpers, std::strlen(kHelpers), "=[crescent] embed") != 0 || !lua.pcall(0, 1))
      throw Error(Status::InternalError, "the embedding helpers failed to load: " + lua.error());
    helpers = luaL_ref(L, LUA_REGISTRYINDEX);
  }

  void push_helper(const char* name) const {
    lua_rawgeti(L(), LUA_REGISTRYINDEX, helpers);
    lua_pushstring(L(), name);
    lua_rawget(L(), -2);
    lua_remove(L(), -2);
  }

  // Calls helper `name` with the nargs values on top of the stack, protected; leaves nres.
  void call_helper(const char* name, int nargs, int nres) {
    push_helper(name);
    lua_insert(L(), -nargs - 1);
    if (!lua.pcall(nargs, nres)) fail();
  }

  // After a failed pcall: the script's os.exit when that is what ended it (H.exit holds the
  // error it raised; one a pcall caught does not count), else the Lua error.
  [[noreturn]] void fail() {
    lua_State* L = this->L();
    lua_rawgeti(L, LUA_REGISTRYINDEX, helpers);
    lua_getfield(L, -1, "exit");
    std::string message;
    int code = 0;
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "message");
      lua_getfield(L, -2, "code");
      message = lua_tostring(L, -2);
      code = int(lua_tointeger(L, -1));
      lua_pop(L, 2);
    }
    lua_pop(L, 1);
    lua_pushnil(L);
    lua_setfield(L, -2, "exit");
    lua_pop(L, 1);
    if (!message.empty() && message == lua.error()) throw Error(Status::Exit, message, "", code);
    throw_lua(lua.error());
  }

  // A new reference of t for Lua, which H.push wraps (or the runtime drops: cr::Context::handed).
  cr_tensor* hand(const Tensor& t) {
    cr_tensor* p = t.get();
    cr::tensor_retain(p);
    lua.context().handing(&p, 1);
    return p;
  }

  void push(const Value& v, int depth) {
    lua_State* L = this->L();
    if (depth > kMaxDepth) throw Error(Status::InvalidArgument, "a value is nested too deeply");
    lua_checkstack(L, 4);
    switch (v.kind()) {
      case Value::Kind::Nil: lua_pushnil(L); break;
      case Value::Kind::Boolean: lua_pushboolean(L, v.as_bool()); break;
      case Value::Kind::Number: lua_pushnumber(L, v.as_number()); break;
      case Value::Kind::String: lua_pushlstring(L, v.as_string().data(), v.as_string().size()); break;
      case Value::Kind::Tensor:
        if (!v.as_tensor().defined()) throw Error(Status::InvalidArgument, "a tensor argument is undefined");
        lua_pushlightuserdata(L, hand(v.as_tensor()));
        call_helper("push", 1, 1);
        break;
      case Value::Kind::List:
        lua_createtable(L, int(v.size()), 0);
        for (size_t i = 0; i < v.size(); ++i) {
          push(v.items()[i], depth + 1);
          lua_rawseti(L, -2, int(i + 1));
        }
        break;
      case Value::Kind::Dict:
        lua_createtable(L, 0, int(v.size()));
        for (size_t i = 0; i < v.size(); ++i) {
          lua_pushlstring(L, v.keys()[i].data(), v.keys()[i].size());
          push(v.items()[i], depth + 1);
          lua_rawset(L, -3);
        }
        break;
    }
  }

  // The Lua value at absolute index idx as a Value; `where` names it in errors ("result 2").
  Value pull(int idx, const std::string& where, int depth) {
    lua_State* L = this->L();
    switch (lua_type(L, idx)) {
      case LUA_TNIL: return {};
      case LUA_TBOOLEAN: return bool(lua_toboolean(L, idx));
      case LUA_TNUMBER: return lua_tonumber(L, idx);
      case LUA_TSTRING: {
        size_t n;
        const char* s = lua_tolstring(L, idx, &n);
        return std::string(s, n);
      }
      case LUA_TTABLE: return pull_table(idx, where, depth);
      case LUA_TUSERDATA: {  // tensor handles (the helper says whether it is one)
        StackGuard g(L);
        cr_tensor* slot = nullptr;
        lua_pushvalue(L, idx);
        lua_pushlightuserdata(L, &slot);
        call_helper("take", 2, 1);
        if (!lua_toboolean(L, -1)) break;
        Tensor t = Tensor::adopt(slot);
        make_real(lua.context(), slot);  // the host reads it without Lua: its value is due now
        return t;
      }
      default: break;
    }
    type_error(where + " is a " + luaL_typename(L, idx) +
               "; values returned to the host must be nil, booleans, numbers, strings, tensors or tables of them");
  }

  // A table is a list when its keys are positive integers (holes become nil), a dict when
  // they are strings; the length comes from the largest key, not the unreliable border #t.
  Value pull_table(int idx, const std::string& where, int depth) {
    lua_State* L = this->L();
    if (depth >= kMaxDepth) type_error(where + " is nested too deeply (a table that contains itself?)");
    StackGuard g(L);
    lua_checkstack(L, 8);
    size_t count = 0, strings = 0;
    double last = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      lua_pop(L, 1);
      ++count;
      if (lua_type(L, -1) == LUA_TSTRING) {
        ++strings;
        continue;
      }
      double k = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : 0;
      if (!(k >= 1 && k == std::floor(k))) type_error(where + " has a key that is neither a positive integer nor a string");
      last = std::max(last, k);
    }
    if (strings && strings != count) type_error(where + " mixes list elements and string keys");
    if (last > 2.0 * double(count) + 8) type_error(cr::cat(where, " is a sparse table (", count, " keys up to ", int64_t(last), ")"));
    std::vector<Value> items(strings ? 0 : size_t(last));
    std::vector<std::pair<std::string, Value>> fields;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      int top = lua_gettop(L);
      if (strings) {
        std::string key = lua_tostring(L, -2);
        fields.emplace_back(key, pull(top, where + "." + key, depth + 1));
      } else {
        size_t k = size_t(lua_tonumber(L, -2));
        items[k - 1] = pull(top, cr::cat(where, "[", k, "]"), depth + 1);
      }
      lua_pop(L, 1);
    }
    if (strings) return Value::dict(std::move(fields));
    return Value(std::move(items));
  }

  std::vector<Value> pull_results(int first, const char* what) {
    std::vector<Value> r;
    for (int i = first; i <= lua_gettop(L()); ++i) r.push_back(pull(i, cr::cat(what, " ", i - first + 1), 0));
    return r;
  }

  // Runs the function on the stack top-nargs with the nargs values above it; all its results.
  std::vector<Value> run(int nargs, const char* what) {
    int base = lua_gettop(L()) - nargs - 1;
    if (!lua.pcall(nargs, LUA_MULTRET)) fail();
    return pull_results(base + 1, what);
  }
};

VM::VM() : impl_(guard("VM", [] { return std::make_unique<Impl>(); })) {}
VM::~VM() = default;
VM::VM(VM&&) noexcept = default;
VM& VM::operator=(VM&&) noexcept = default;

VM::Impl& VM::impl() const {
  if (!impl_) throw Error(Status::InvalidArgument, "the VM was moved from");
  return *impl_;
}

std::vector<Value> VM::run_file(const std::string& path, const std::vector<std::string>& args) {
  Impl& vm = impl();
  lua_State* L = vm.L();
  StackGuard g(L);
  return guard("run_file", [&] { return protect(vm.lua.context(), L, [&] {
    lua_createtable(L, int(args.size()), 1);
    lua_pushstring(L, path.c_str());
    lua_rawseti(L, -2, 0);
    for (size_t i = 0; i < args.size(); ++i) {
      lua_pushlstring(L, args[i].data(), args[i].size());
      lua_rawseti(L, -2, int(i + 1));
    }
    lua_setglobal(L, "arg");
    if (luaL_loadfile(L, path.c_str()) != 0) throw_lua(lua_tostring(L, -1));
    for (const std::string& a : args) lua_pushlstring(L, a.data(), a.size());
    return vm.run(int(args.size()), "result");
  }); });
}

std::vector<Value> VM::run_string(const std::string& code, const std::string& chunkname) {
  Impl& vm = impl();
  lua_State* L = vm.L();
  StackGuard g(L);
  return guard("run_string", [&] { return protect(vm.lua.context(), L, [&] {
    const std::string& name = chunkname.empty() ? code : chunkname;
    if (luaL_loadbuffer(L, code.data(), code.size(), name.c_str()) != 0) throw_lua(lua_tostring(L, -1));
    return vm.run(0, "result");
  }); });
}

std::vector<Value> VM::invoke(const std::string& name, const std::vector<Value>& args) {
  Impl& vm = impl();
  lua_State* L = vm.L();
  StackGuard g(L);
  return guard("call", [&] { return protect(vm.lua.context(), L, [&] {
    if (!lua_checkstack(L, int(args.size()) + 8)) throw Error(Status::InvalidArgument, "call: too many arguments");
    vm.push_helper("call");
    lua_pushlstring(L, name.data(), name.size());
    for (const Value& a : args) vm.push(a, 0);
    return vm.run(int(args.size()) + 1, "result");
  }); });
}

Tensor VM::first_tensor(const std::string& name, const std::vector<Value>& results) {
  if (results.empty() || !results[0].is_tensor())
    type_error("call_tensor: '" + name + "' returned " +
               (results.empty() ? std::string("nothing") : std::string("a ") + results[0].type_name()) + ", not a tensor");
  return results[0].as_tensor();
}

void VM::set_global(const std::string& name, const Value& value) {
  Impl& vm = impl();
  StackGuard g(vm.L());
  guard("set_global", [&] { protect(vm.lua.context(), vm.L(), [&] {
    lua_pushlstring(vm.L(), name.data(), name.size());
    vm.push(value, 0);
    vm.call_helper("set", 2, 0);
  }); });
}

Value VM::get_global(const std::string& name) {
  Impl& vm = impl();
  StackGuard g(vm.L());
  return guard("get_global", [&] { return protect(vm.lua.context(), vm.L(), [&] {
    lua_pushlstring(vm.L(), name.data(), name.size());
    vm.call_helper("get", 1, 1);
    return vm.pull(lua_gettop(vm.L()), "global '" + name + "'", 0);
  }); });
}

void VM::collect_garbage() {
  Impl& vm = impl();
  lua_State* L = vm.L();
  guard("collect_garbage", [&] { protect(vm.lua.context(), L, [&] { lua_gc(L, LUA_GCCOLLECT, 0); }); });
}

lua_State* VM::lua_state() const { return impl().L(); }

}  // namespace crescent
