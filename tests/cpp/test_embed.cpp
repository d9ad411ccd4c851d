// The embedding APIs (API.md section 8): crescent::VM / Tensor / Value / Error in C++, and the C
// API where a test crosses both (the C API alone: test_embed_c.cpp).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <unistd.h>

#include <crescent/crescent.h>
#include <crescent/crescent.hpp>

#include "embed_test_util.hpp"

using crescent::DType;
using crescent::Status;
using crescent::Tensor;
using crescent::Value;
using crescent::VM;

TEST_CASE("embed: run_string returns the chunk's values") {
  VM vm;
  auto r = vm.run_string("return 1 + 2, 'x', true, nil, {1, 2}, {a = 3}");
  REQUIRE(r.size() == 6);
  REQUIRE(r[0].as_number() == 3);
  REQUIRE(r[1].as_string() == "x");
  REQUIRE(r[2].as_bool());
  REQUIRE(r[3].is_nil());
  REQUIRE(r[4].kind() == Value::Kind::List);
  REQUIRE(r[4][1].as_number() == 2);
  REQUIRE(r[5].field("a").as_number() == 3);
  REQUIRE(vm.run_string("x = 5").empty());
  REQUIRE(vm.get_global("x").as_number() == 5);
  // dotted paths both ways; a path that is not one, or through a non-table, raises
  vm.run_string("cfg = { opt = {} }");
  vm.set_global("cfg.opt.lr", 0.5);
  REQUIRE(vm.get_global("cfg.opt.lr").as_number() == 0.5);
  REQUIRE(vm.run_string("return cfg.opt.lr")[0].as_number() == 0.5);
  REQUIRE_THAT(error_of([&] { vm.set_global("cfg.opt.lr.x", 1); }).message(),
               Catch::Contains("set_global: 'cfg.opt.lr' is a number, not a table"));
  for (const char* bad : {"", ".a", "a.", "a..b"})
    REQUIRE_THAT(error_of([&] { vm.get_global(bad); }).message(), Catch::Contains("expected a global's name or a dotted path"));
  REQUIRE_THAT(error_of([&] { vm.call(""); }).message(), Catch::Contains("call: expected a global's name"));
}

TEST_CASE("embed: call passes tensors, numbers, strings, bools and tables") {
  VM vm;
  vm.run_string(R"(
    function f(x, a, s, b, list, dict)
      return x * a, s .. "!", not b, #list, dict.k, list[2]
    end
    M = { inner = { double = function(x) return x * 2 end } }
    obj = { scale = 3 }
    function obj:apply(x) return x * self.scale end
  )");
  std::vector<float> buf = {1, 2, 3};
  Tensor x = Tensor::from_blob(buf.data(), {3});
  Tensor t = Tensor::from_blob(buf.data(), {1});
  auto r = vm.call("f", x, 2, "hi", false, std::vector<Value>{1, 2.5, "z"}, Value::dict({{"k", t}}));
  REQUIRE(r.size() == 6);
  REQUIRE(r[0].as_tensor().to_vector<float>() == std::vector<float>{2, 4, 6});
  REQUIRE(r[1].as_string() == "hi!");
  REQUIRE(r[2].as_bool() == true);
  REQUIRE(r[3].as_number() == 3);
  REQUIRE(r[4].as_tensor().get() == t.get());  // the same tensor comes back
  REQUIRE(r[5].as_number() == 2.5);
  REQUIRE(vm.call_tensor("M.inner.double", x).to_vector<float>() == std::vector<float>{2, 4, 6});
  REQUIRE(vm.call_tensor("obj:apply", x).to_vector<float>() == std::vector<float>{3, 6, 9});
}

TEST_CASE("embed: from_blob is zero-copy in both directions") {
  VM vm;
  vm.run_string(R"(
    function write(x) x:copy_(crescent.tensor({{10, 20}, {30, 40}})); x:add_(1) end
    function total(x) return x:sum():item() end
    function keep(x) kept = x end
  )");
  float buf[4] = {0, 0, 0, 0};
  Tensor x = Tensor::from_blob(buf, {2, 2});
  REQUIRE(x.data_ptr() == buf);
  vm.call("write", x);
  REQUIRE(buf[0] == 11);
  REQUIRE(buf[3] == 41);
  buf[1] = 100;  // the host writes, Lua reads
  REQUIRE(vm.call("total", x)[0].as_number() == 11 + 100 + 31 + 41);
  // a tensor Lua made from the host's buffer still points at it
  vm.call("keep", x);
  REQUIRE(vm.get_global("kept").as_tensor().data_ptr() == buf);
}

TEST_CASE("embed: from_blob with strides, dtypes and a deleter") {
  VM vm;
  vm.run_string("function rows(x) return x:totable() end function neg(x) return -x end");
  // a transposed (column-major) view of a 2x3 buffer
  double buf[6] = {1, 2, 3, 4, 5, 6};
  Tensor xt = Tensor::from_blob(buf, {3, 2}, {1, 3}, DType::Float64);
  REQUIRE(!xt.is_contiguous());
  REQUIRE(xt.to_vector<double>() == std::vector<double>{1, 4, 2, 5, 3, 6});
  auto rows = vm.call("rows", xt)[0];
  REQUIRE(rows[0][1].as_number() == 4);
  REQUIRE(rows[2][0].as_number() == 3);
  // integer and bool buffers
  int32_t ib[3] = {1, -2, 3};
  Tensor it = Tensor::from_blob(ib, {3});
  REQUIRE(it.dtype() == DType::Int32);
  Tensor n = vm.call_tensor("neg", it);
  REQUIRE(n.dtype() == DType::Int32);
  REQUIRE(n.to_vector<int64_t>() == std::vector<int64_t>{-1, 2, -3});
  REQUIRE(n.to_vector<float>() == std::vector<float>{-1, 2, -3});
  REQUIRE(*n.data<int32_t>() == -1);
  REQUIRE(error_of([&] { n.data<float>(); }).status() == Status::TypeError);
  bool bb[2] = {true, false};
  REQUIRE(Tensor::from_blob(bb, {2}).to_vector<bool>() == std::vector<bool>{true, false});
  // the deleter runs once, after the host and Lua have both let go
  int deleted = 0;
  float* heap = new float[4]{1, 2, 3, 4};
  {
    Tensor h = Tensor::from_blob(heap, {4}, {}, DType::Float32, "cpu", [&](void* p) {
      ++deleted;
      delete[] static_cast<float*>(p);
    });
    vm.set_global("held", h);
  }
  vm.collect_garbage();
  REQUIRE(deleted == 0);  // the global still holds it
  vm.run_string("held = nil");
  vm.collect_garbage();
  REQUIRE(deleted == 1);
}

TEST_CASE("embed: tensor accessors") {
  VM vm;
  Tensor t = vm.run_string("return crescent.arange(6):view(2, 3):float()")[0].as_tensor();
  REQUIRE(t.dim() == 2);
  REQUIRE(t.sizes() == std::vector<int64_t>{2, 3});
  REQUIRE(t.strides() == std::vector<int64_t>{3, 1});
  REQUIRE(t.size(-1) == 3);
  REQUIRE(t.numel() == 6);
  REQUIRE(t.dtype() == DType::Float32);
  REQUIRE(t.device() == "cpu");
  REQUIRE(t.is_contiguous());
  REQUIRE(t.data<float>()[5] == 5.0f);
  REQUIRE(has(t.to_string(), "tensor("));
  REQUIRE(vm.run_string("return crescent.tensor(2.5)")[0].as_tensor().item() == 2.5);
  REQUIRE(std::string(crescent::dtype_name(DType::BFloat16)) == "bfloat16");
  REQUIRE(crescent::dtype_size(DType::Int64) == 8);
  REQUIRE(error_of([&] { t.size(2); }).status() == Status::InvalidArgument);
  REQUIRE(error_of([&] { t.item(); }).status() == Status::InvalidArgument);
  Tensor undefined;
  REQUIRE(!undefined.defined());
  REQUIRE(has(error_of([&] { undefined.numel(); }).message(), "undefined"));
  std::vector<float> small(2);
  REQUIRE(has(error_of([&] { t.copy_to(small.data(), DType::Float32, 8); }).message(), "needs 24"));
}

TEST_CASE("embed: errors carry the message, file:line and the Lua traceback") {
  TempFile script("model.lua", "local T = crescent\n"
                               "function inner(x)\n"
                               "  local y = x + T.ones(4)\n"
                               "  return y\n"
                               "end\n"
                               "function outer(x)\n"
                               "  local z = inner(x)\n"
                               "  return z\n"
                               "end\n");
  VM vm;
  vm.run_file(script.path);
  float buf[3] = {1, 2, 3};
  auto e = error_of([&] { vm.call("outer", Tensor::from_blob(buf, {3})); });
  REQUIRE(e.status() == Status::LuaError);
  INFO(e.what());
  REQUIRE(has(e.message(), script.path + ":3: add: shapes {3} and {4} cannot be broadcast"));
  REQUIRE(has(e.traceback(), "stack traceback:"));
  REQUIRE(has(e.traceback(), "in function 'inner'"));
  REQUIRE(has(e.traceback(), script.path + ":7: in function"));  // outer's frame
  REQUIRE(has(e.what(), e.message()));
  REQUIRE(has(e.what(), e.traceback()));
  // a plain Lua error
  auto e2 = error_of([&] { vm.run_string("error('boom')", "=chunk"); });
  REQUIRE(e2.message() == "chunk:1: boom");
  // syntax errors, missing files and functions
  REQUIRE(has(error_of([&] { vm.run_string("x = = 1", "=bad"); }).message(), "bad:1:"));
  REQUIRE(has(error_of([&] { vm.run_file("/nonexistent/x.lua"); }).message(), "cannot open"));
  REQUIRE(error_of([&] { vm.call("nope"); }).message() == "call: 'nope' is not a function (a nil value)");
  REQUIRE(has(error_of([&] { vm.call("nope:m"); }).message(), "'nope' is nil"));
  // the VM is still usable afterwards
  REQUIRE(vm.run_string("return 7")[0].as_number() == 7);
}

TEST_CASE("embed: run_file passes arg and ...") {
  TempFile script("args.lua", "local a, b = ...\nreturn arg[0], arg[1], a, b, #arg\n");
  VM vm;
  auto r = vm.run_file(script.path, {"one", "two"});
  REQUIRE(r[0].as_string() == script.path);
  REQUIRE(r[1].as_string() == "one");
  REQUIRE(r[2].as_string() == "one");
  REQUIRE(r[3].as_string() == "two");
  REQUIRE(r[4].as_number() == 2);
}

TEST_CASE("embed: results the host cannot take raise TypeError") {
  VM vm;
  vm.run_string(R"(
    function fn() return print end
    function mixed() return {1, 2, x = 3} end
    function cyc() local t = {} t.self = t return t end
    function num() return 1 end
    function cdata() return require("ffi").new("int[1]") end
    function sparse() return {[100] = 1} end
    function keyed() return {[1.5] = 1} end
    function holes() return {1, nil, 3} end
  )");
  auto e = error_of([&] { vm.call("fn"); });
  REQUIRE(e.status() == Status::TypeError);
  REQUIRE(has(e.message(), "result 1 is a function"));
  REQUIRE(has(error_of([&] { vm.call("mixed"); }).message(), "mixes list elements and string keys"));
  REQUIRE(has(error_of([&] { vm.call("cyc"); }).message(), "nested too deeply"));
  REQUIRE(has(error_of([&] { vm.call_tensor("num"); }).message(), "returned a number, not a tensor"));
  REQUIRE(has(error_of([&] { vm.call("cdata"); }).message(), "result 1 is a cdata"));
  REQUIRE(has(error_of([&] { vm.call("keyed"); }).message(), "result 1 has a key that is neither a positive integer nor a string"));
  REQUIRE(has(error_of([&] { vm.call("sparse"); }).message(), "result 1 is a sparse table (1 keys up to 100)"));
  auto h = vm.call("holes")[0];
  REQUIRE(h.size() == 3);
  REQUIRE(h[1].is_nil());
  REQUIRE(h[2].as_number() == 3);
  Value v(3);
  REQUIRE(error_of([&] { v.as_string(); }).status() == Status::TypeError);
  REQUIRE(has(error_of([&] { v.as_tensor(); }).message(), "expected a tensor, got a number"));
  REQUIRE(error_of([&] { Value::dict({{"a", 1}, {"a", 2}}); }).status() == Status::InvalidArgument);
}

TEST_CASE("embed: bad from_blob arguments raise InvalidArgument") {
  float buf[4] = {};
  auto check = [](auto f, const std::string& part) {
    auto e = error_of(f);
    REQUIRE(e.status() == Status::InvalidArgument);
    INFO(e.message());
    REQUIRE(has(e.message(), "from_blob: "));
    REQUIRE(has(e.message(), part));
  };
  check([&] { Tensor::from_blob(buf, {2, -1}); }, "non-negative");
  check([&] { Tensor::from_blob(buf, {2, 2}, {1}, DType::Float32); }, "expected 2 strides");
  check([&] { Tensor::from_blob(buf, {2, 2}, {-1, 1}, DType::Float32); }, "strides must be non-negative");
  check([&] { Tensor::from_blob(nullptr, {2}, DType::Float32); }, "NULL");
  check([&] { Tensor::from_blob(buf, {2}, DType::Float32, "gpu"); }, "expected a device");
  // "only \"cpu\" buffers ..." where a device is present, "CUDA is not available" elsewhere
  check([&] { Tensor::from_blob(buf, {2}, DType::Float32, "cuda"); }, "\"cuda\"");
  check([&] { Tensor::from_blob(buf, {int64_t(1) << 62, 8}); }, "overflow");
  check([&] { Tensor::from_blob(buf, std::vector<int64_t>(17, 1)); }, "at most 16");
  check([&] { Tensor::from_blob(buf, {2}, DType(42)); }, "unknown dtype");
  REQUIRE(Tensor::from_blob(nullptr, {0, 3}, DType::Float32).numel() == 0);  // empty is fine
}

TEST_CASE("embed: a moved-from VM raises instead of crashing") {
  VM a;
  VM b = std::move(a);
  REQUIRE(b.run_string("return 1")[0].as_number() == 1);
  REQUIRE(has(error_of([&] { a.run_string("return 1"); }).message(), "moved from"));
}

TEST_CASE("embed: a __gc finalizer that raises is an error of the call, not a panic") {
  // (LuaJIT rethrows a finalizer's error where the collection step ran: an allocation of the API's)
  VM vm;
  vm.run_string("local p = newproxy(true); getmetatable(p).__gc = function() error('gc boom') end; p = nil");
  crescent::Error e = error_of([&] { vm.collect_garbage(); });
  REQUIRE(e.status() == Status::LuaError);
  REQUIRE_THAT(e.message(), Catch::Contains("gc boom"));
  vm.run_string("for i = 1, 10 do getmetatable(newproxy(true)).__gc = function() error('gc boom') end end");
  int failed = 0;
  for (int i = 0; i < 20000 && failed == 0; ++i) {
    try {
      vm.set_global("s", std::string(1000, char('a' + i % 26)));
    } catch (const crescent::Error& err) {
      REQUIRE_THAT(err.message(), Catch::Contains("gc boom"));
      ++failed;
    }
  }
  REQUIRE(failed == 1);
  for (int i = 0; i < 20; ++i) {  // (each of the other finalizers raises once, in a later call)
    try {
      vm.collect_garbage();
      break;
    } catch (const crescent::Error&) {
    }
  }
  REQUIRE(vm.run_string("return 1 + 1")[0].as_number() == 2);  // the VM goes on
}

TEST_CASE("embed: two VMs on two threads run concurrently and stay separate") {
  auto work = [](int id, std::atomic<int>* failures) {
    try {
      VM vm;
      vm.run_string("who = " + std::to_string(id) +
                    "\nfunction step(x, k) local y = (x * k):add(who) ; x:add_(1) ; return y:sum():item(), who end");
      std::vector<float> buf(4096, 0.0f);
      Tensor x = Tensor::from_blob(buf.data(), {64, 64});
      for (int i = 0; i < 200; ++i) {
        auto r = vm.call("step", x, 2);
        // x holds i everywhere before this step: sum((i * 2) + id) over 4096 elements
        if (r[0].as_number() != 4096.0 * (2 * i + id) || r[1].as_number() != id) ++*failures;
      }
      if (buf[0] != 200.0f) ++*failures;
    } catch (const std::exception& e) {
      UNSCOPED_INFO(e.what());
      ++*failures;
    }
  };
  std::atomic<int> failures{0};
  std::thread t1(work, 1, &failures), t2(work, 2, &failures);
  t1.join();
  t2.join();
  REQUIRE(failures == 0);
}

// ---- the C API --------------------------------------------------------------------------------

TEST_CASE("embed: compiled functions over host buffers keep values computed from them") {
  VM vm;
  vm.run_string(R"(
    store = {}
    f = crescent.compile(function(x) store.y = x * 3; return x + 1 end)
    function stored() return store.y end
  )");
  std::vector<float> buf = {1, 1, 1};
  Tensor x = Tensor::from_blob(buf.data(), {3});
  for (int i = 0; i < 4; ++i) vm.call("f", x);  // compiled: store.y is not a graph output
  buf = {100, 100, 100};                        // the host writes its buffer: no runtime call
  REQUIRE(vm.call_tensor("stored").to_vector<float>() == std::vector<float>{3, 3, 3});
  // the compiled function also sees the host's new values
  REQUIRE(vm.call("f", x)[0].as_tensor().to_vector<float>() == std::vector<float>{101, 101, 101});
  REQUIRE(vm.call_tensor("stored").to_vector<float>() == std::vector<float>{300, 300, 300});
}

namespace {
// A VM whose global `g` was computed by a compiled function whose graph did not keep it: a lazy
// tensor (vm/graph/README.md) until something reads it; lazy() says whether it still is. A fresh
// VM each time: once the host has read g, the function recompiles to keep it.
const char* kLazyScript = R"(
  local T = crescent
  local core = require "crescent.core"
  T.config.sync_compile = true
  f = T.compile(function(x) g = x * 3; return x + 1 end, { backend = "eager" })
  function make(n) local x = T.arange(n):float():view(2, -1); for _ = 1, 4 do f(x) end end
  function lazy() return core.ffi.cast("cr_tensor*", core.ptr(g))._storage == nil end
  function address() return tonumber(core.ffi.cast("intptr_t", core.ptr(g))) end
)";
VM lazy_vm(int n) {
  VM vm;
  vm.run_string(kLazyScript);
  vm.call("make", n);
  REQUIRE(vm.call("lazy")[0].as_bool());
  return vm;
}
}  // namespace

// issue 32 F4: the host accessors once read such a tensor's missing storage (a crash)
TEST_CASE("embed: tensors a compiled function did not keep reach the host computed") {
  VM vm = lazy_vm(6);
  Tensor g = vm.get_global("g").as_tensor();  // leaving Lua computes it
  REQUIRE(!vm.call("lazy")[0].as_bool());
  REQUIRE(g.to_vector<float>() == std::vector<float>{0, 3, 6, 9, 12, 15});
  REQUIRE(g.strides() == std::vector<int64_t>{3, 1});
  REQUIRE(g.data<float>()[5] == 15.0f);
  REQUIRE(has(g.to_string(), "15."));
  // results, and tensors inside tables
  VM vm2 = lazy_vm(4);
  auto r = vm2.run_string("return g, { inner = g }");
  REQUIRE(!vm2.call("lazy")[0].as_bool());
  REQUIRE(r[0].as_tensor().to_vector<float>() == std::vector<float>{0, 3, 6, 9});
  REQUIRE(r[1].field("inner").as_tensor().to_vector<float>() == std::vector<float>{0, 3, 6, 9});
  // the C API's globals and results
  for (bool global : {true, false}) {
    crescent_vm* cvm = crescent_vm_create();
    REQUIRE(crescent_run_string(cvm, kLazyScript) == CRESCENT_OK);
    REQUIRE(crescent_run_string(cvm, "make(4); assert(lazy()); function get() return g end") == CRESCENT_OK);
    crescent_value v = crescent_nil();
    REQUIRE((global ? crescent_get_global(cvm, "g", &v) : crescent_call(cvm, "get", nullptr, 0, &v, 1, nullptr)) == CRESCENT_OK);
    REQUIRE(v.kind == CRESCENT_TENSOR);
    float out[4];
    REQUIRE(crescent_tensor_copy_to(v.tensor, CRESCENT_FLOAT32, out, sizeof out) == CRESCENT_OK);
    REQUIRE(out[3] == 9.0f);
    crescent_tensor_release(v.tensor);
    crescent_vm_destroy(cvm);
  }
}

TEST_CASE("embed: accessors compute a lazy tensor the host took through lua_state") {
  using Read = std::function<void(const Tensor&)>;
  auto c = [](const Tensor& t) { return reinterpret_cast<crescent_tensor*>(t.get()); };
  const std::vector<std::pair<const char*, Read>> reads = {
      {"to_vector", [](const Tensor& t) { REQUIRE(t.to_vector<float>() == std::vector<float>{0, 3, 6, 9}); }},
      {"data_ptr", [](const Tensor& t) { REQUIRE(static_cast<float*>(t.data_ptr())[3] == 9.0f); }},
      {"to_string", [](const Tensor& t) { REQUIRE(has(t.to_string(), "9.")); }},
      {"strides", [](const Tensor& t) { REQUIRE(t.strides() == std::vector<int64_t>{2, 1}); }},
      {"stride", [](const Tensor& t) { REQUIRE(t.stride(-2) == 2); }},
      {"is_contiguous", [](const Tensor& t) { REQUIRE(t.is_contiguous()); }},
      {"C copy_to",
       [&](const Tensor& t) {
         float out[4];
         REQUIRE(crescent_tensor_copy_to(c(t), CRESCENT_FLOAT32, out, sizeof out) == CRESCENT_OK);
         REQUIRE(out[3] == 9.0f);
       }},
      {"C data", [&](const Tensor& t) { REQUIRE(static_cast<float*>(crescent_tensor_data(c(t)))[1] == 3.0f); }},
      {"C to_string",
       [&](const Tensor& t) {
         char* s = crescent_tensor_to_string(c(t));
         REQUIRE(s);
         REQUIRE(has(s, "9."));
         std::free(s);
       }},
      {"C stride", [&](const Tensor& t) { REQUIRE(crescent_tensor_stride(c(t), 0) == 2); }},
      {"C is_contiguous", [&](const Tensor& t) { REQUIRE(crescent_tensor_is_contiguous(c(t)) == 1); }},
  };
  for (const auto& [name, read] : reads) {
    INFO(name);
    VM vm = lazy_vm(4);
    read(Tensor::borrow(reinterpret_cast<cr_tensor*>(intptr_t(vm.call("address")[0].as_number()))));
    REQUIRE(!vm.call("lazy")[0].as_bool());
  }
}

// issue 32: crescent_tensor_size(t, -1) returned -1 while C++ size(-1) counted from the end
TEST_CASE("embed: C and C++ dims are 0-based and count from the end when negative") {
  VM vm;
  Tensor x = vm.run_string("return crescent.zeros(2, 3, 4):transpose(1, 3)")[0].as_tensor();  // 4 x 3 x 2
  auto* c = reinterpret_cast<crescent_tensor*>(x.get());
  for (int d = -3; d < 3; ++d) {
    INFO(d);
    REQUIRE(crescent_tensor_size(c, d) == x.size(d));
    REQUIRE(crescent_tensor_stride(c, d) == x.stride(d));
    REQUIRE(x.size(d) == x.sizes()[size_t((d + 3) % 3)]);
    REQUIRE(x.stride(d) == x.strides()[size_t((d + 3) % 3)]);
  }
  REQUIRE(x.size(0) == 4);
  REQUIRE(x.size(-1) == 2);
  REQUIRE(x.stride(0) == 1);
  for (int d : {3, -4, 100}) {
    INFO(d);
    const std::string want = "dim " + std::to_string(d) + " is out of range for a tensor of 3 dims (expected -3 to 2)";
    REQUIRE(crescent_tensor_size(c, d) == -1);
    REQUIRE(has(crescent_last_error(), want));
    REQUIRE(crescent_tensor_stride(c, d) == -1);
    REQUIRE(has(crescent_last_error(), want));
    crescent::Error e = error_of([&] { x.size(d); });
    REQUIRE(e.status() == Status::InvalidArgument);
    REQUIRE(has(e.message(), "size: " + want));
    REQUIRE(has(error_of([&] { x.stride(d); }).message(), "stride: " + want));
  }
  Tensor scalar = vm.run_string("return crescent.tensor(1.5)")[0].as_tensor();
  REQUIRE(crescent_tensor_size(reinterpret_cast<crescent_tensor*>(scalar.get()), 0) == -1);
  REQUIRE(has(crescent_last_error(), "dim 0 is out of range for a tensor of 0 dims"));
}

// issue 32: os.exit in an embedded script ended the host process
TEST_CASE("embed: os.exit ends the script with a status the host reads, not the host") {
  VM vm;
  auto exit_of = [&](const std::string& code) {
    crescent::Error e = error_of([&] { vm.run_string(code); });
    REQUIRE(e.status() == Status::Exit);
    return e;
  };
  crescent::Error e = exit_of("os.exit(3)");
  REQUIRE(e.exit_code() == 3);
  REQUIRE(e.message() == "the script called os.exit(3)");
  REQUIRE(e.traceback().empty());
  REQUIRE(exit_of("os.exit()").exit_code() == 0);
  REQUIRE(exit_of("os.exit(true)").exit_code() == 0);
  REQUIRE(exit_of("os.exit(false)").exit_code() == 1);
  REQUIRE(exit_of("os.exit(-2)").exit_code() == -2);
  // from deep inside a called function and a compiled one; the VM stays usable
  vm.run_string(R"(
    local T = crescent
    function quit(n) local function inner() os.exit(n) end; inner(); error("not reached") end
    cf = T.compile(function(x, n) local y = x + 1; if n then os.exit(n) end; return y end, { backend = "eager" })
    x = T.ones(2)
  )");
  crescent::Error c = error_of([&] { vm.call("quit", 9); });
  REQUIRE(c.status() == Status::Exit);
  REQUIRE(c.exit_code() == 9);
  for (int i = 0; i < 3; ++i) vm.call("cf", vm.get_global("x"));
  REQUIRE(error_of([&] { vm.call("cf", vm.get_global("x"), 5); }).exit_code() == 5);
  REQUIRE(vm.call("cf", vm.get_global("x"))[0].as_tensor().to_vector<float>() == std::vector<float>{2, 2});
  REQUIRE(vm.run_string("return 1 + 1")[0].as_number() == 2);
  // run_file
  TempFile f("exit.lua", "os.exit(4)\nerror('not reached')\n");
  crescent::Error r = error_of([&] { vm.run_file(f.path); });
  REQUIRE(r.status() == Status::Exit);
  REQUIRE(r.exit_code() == 4);
  // a pcall in the script catches it (as Python's except catches SystemExit); a later error is
  // then an ordinary one, and a re-raised exit is still an exit
  auto got = vm.run_string("local ok, e = pcall(os.exit, 2); return ok, tostring(e)");
  REQUIRE(!got[0].as_bool());
  REQUIRE(got[1].as_string() == "the script called os.exit(2)");
  crescent::Error later = error_of([&] { vm.run_string("pcall(os.exit, 2); error('other', 0)"); });
  REQUIRE(later.status() == Status::LuaError);
  REQUIRE(later.exit_code() == 0);
  REQUIRE(later.message() == "other");
  REQUIRE(exit_of("local ok, e = pcall(os.exit, 6); error(e)").exit_code() == 6);
  // misuse is an ordinary error
  crescent::Error bad = error_of([&] { vm.run_string("os.exit('x')", "=chunk"); });
  REQUIRE(bad.status() == Status::LuaError);
  REQUIRE(has(bad.message(), "chunk:1: bad argument #1 to 'exit'"));
  REQUIRE(error_of([&] { vm.run_string("os.exit(1.5)"); }).status() == Status::LuaError);
}

// issue 32 F12: a Lua stack overflow between an op's C call and the wrapping of its output in a
// handle (stdlib/core.lua wrap) leaked the output. The recursion starts at several depths so that
// the overflow lands on each call of an op's wrapper in turn; its outputs are views of a host
// buffer, whose deleter runs only when none is left.
TEST_CASE("embed: a stack overflow inside a compiled call leaks no tensor") {
  VM vm;
  vm.run_string(R"(
    local T = crescent
    T.config.sync_compile = true
    local pad = {}  -- locals that make a level of the recursion 64 slots larger: fewer levels
    for i = 1, 64 do pad[i] = "p" .. i end
    local rec = assert(loadstring(string.format([[
      local rec
      rec = function(t) local %s; local y = t:view(-1); local r = rec(y); return r end
      return rec]], table.concat(pad, ", "))))()
    local function at_depth(k, f, ...)
      if k == 0 then return f(...) end
      local r = at_depth(k - 1, f, ...)
      return r
    end
    function overflow(x, k, compiled)
      local f = compiled and T.compile(function(t) return rec(t) end, { backend = "eager" }) or rec
      local ok, err = pcall(at_depth, k, f, x)
      assert(not ok and tostring(err):find("stack overflow"), tostring(err))
    end
  )");
  for (bool compiled : {false, true}) {  // eager first: LuaJIT records its traces meanwhile
    INFO((compiled ? "compiled" : "eager"));
    int freed = 0;
    {
      std::vector<float> buf(4, 1.0f);
      Tensor x = Tensor::from_blob(buf.data(), {4}, {}, DType::Float32, "cpu", [&](void*) { ++freed; });
      for (int k = 0; k < 24; ++k) vm.call("overflow", x, k, compiled);
      vm.run_string("crescent.compiler.reset()");
    }
    vm.collect_garbage();
    vm.run_string("local _ = crescent.ones(1) + 1");  // the runtime's next handoff drops what Lua never took
    REQUIRE(freed == 1);
  }
}

// Two VMs on one thread: each keeps its own hooks (the engine calls a hook through its VM), its
// hook ids, and its grad mode; a VM that is gone leaves the others' hooks alone.
TEST_CASE("embed: VMs on one thread keep their own hooks and grad mode") {
  const char* script = R"(
    x = crescent.ones(3, {requires_grad = true})
    x:register_hook(function(g) return g * 2 end)
    function step() x.grad = nil; (x * 3):sum():backward(); return x.grad end
  )";
  VM a;
  a.run_string(script);
  REQUIRE(a.call_tensor("step").to_vector<float>() == std::vector<float>{6, 6, 6});
  {
    VM b;
    b.run_string("w = crescent.ones(1, {requires_grad = true}) w:register_hook(function(g) return g * 1000 end)");
    REQUIRE(a.call_tensor("step").to_vector<float>() == std::vector<float>{6, 6, 6});
    // b forgets a dead tensor's hook id, which a's live hook may share
    b.run_string("do local t = crescent.ones(1, {requires_grad = true}) t:register_hook(function(g) return g end) end "
                 "collectgarbage() collectgarbage() "
                 "local v = crescent.ones(1, {requires_grad = true}) v:register_hook(function(g) return g end)");
    a.run_string("local v = crescent.ones(1, {requires_grad = true}) v:register_hook(function(g) return g end)");
    REQUIRE(a.call_tensor("step").to_vector<float>() == std::vector<float>{6, 6, 6});
    b.run_string("crescent.set_grad_enabled(false)");
    REQUIRE(a.call_tensor("step").to_vector<float>() == std::vector<float>{6, 6, 6});
    REQUIRE_FALSE(b.run_string("return crescent.is_grad_enabled()")[0].as_bool());
    REQUIRE(a.run_string("return crescent.is_grad_enabled()")[0].as_bool());
  }
  REQUIRE(a.call_tensor("step").to_vector<float>() == std::vector<float>{6, 6, 6});  // (b is gone)
}

TEST_CASE("embed: the host's data_ptr computes first the lazy values that read the tensor") {
  VM vm;
  vm.run_string(R"(
    local T = crescent
    T.config.sync_compile = true
    x = T.arange(6):float()
    f = T.compile(function(x) g = x * 3; return x + 1 end, { backend = "eager" })
    for _ = 1, 4 do f(x) end
  )");
  Tensor x = vm.get_global("x").as_tensor();
  float* p = x.data<float>();  // (the host may write through it)
  p[1] = 100;
  REQUIRE(vm.get_global("g").as_tensor().to_vector<float>() == std::vector<float>{0, 3, 6, 9, 12, 15});
  const float c[3] = {1, 2, 3};
  REQUIRE(Tensor::from_blob(c, {3}).to_vector<float>() == std::vector<float>{1, 2, 3});
}

