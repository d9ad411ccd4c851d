// The plain C API over the embedding (API.md section 8): handles, status codes, the last error,
// ownership of results; the C++ API's tests are in test_embed.cpp.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <thread>

#include <crescent/crescent.h>
#include <crescent/crescent.hpp>

#include "embed_test_util.hpp"

TEST_CASE("embed C: create, run, call, from_blob and accessors") {
  crescent_vm* vm = crescent_vm_create();
  REQUIRE(vm);
  REQUIRE(std::string(crescent_version()) == CRESCENT_VERSION);
  REQUIRE(std::to_string(CRESCENT_VERSION_MAJOR) + "." + std::to_string(CRESCENT_VERSION_MINOR) + "." +
              std::to_string(CRESCENT_VERSION_PATCH) == CRESCENT_VERSION);
  REQUIRE(CRESCENT_VERSION_NUM == CRESCENT_VERSION_MAJOR * 10000 + CRESCENT_VERSION_MINOR * 100 + CRESCENT_VERSION_PATCH);
  REQUIRE(crescent_run_string(vm, "function f(x, a, s) x:mul_(a) return x:sum():item(), x + 1, s .. '?', x:t() end") ==
          CRESCENT_OK);
  float buf[6] = {1, 2, 3, 4, 5, 6};
  int64_t sizes[2] = {2, 3};
  crescent_tensor* x = nullptr;
  REQUIRE(crescent_tensor_from_blob(buf, 2, sizes, nullptr, CRESCENT_FLOAT32, nullptr, nullptr, nullptr, &x) == CRESCENT_OK);
  REQUIRE(crescent_tensor_data(x) == buf);
  crescent_value args[3] = {crescent_tensor_value(x), crescent_number(2), crescent_string("ok")};
  crescent_value res[4];
  int n = -1;
  REQUIRE(crescent_call(vm, "f", args, 3, res, 4, &n) == CRESCENT_OK);
  REQUIRE(n == 4);
  REQUIRE(buf[5] == 12);  // zero-copy: x:mul_ wrote into the host buffer
  REQUIRE(res[0].kind == CRESCENT_NUMBER);
  REQUIRE(res[0].number == 42);
  REQUIRE(res[1].kind == CRESCENT_TENSOR);
  REQUIRE(res[2].kind == CRESCENT_STRING);
  REQUIRE(std::string(res[2].string) == "ok?");
  crescent_tensor* y = res[1].tensor;
  REQUIRE(crescent_tensor_ndim(y) == 2);
  REQUIRE(crescent_tensor_size(y, 1) == 3);
  REQUIRE(crescent_tensor_stride(y, 0) == 3);
  REQUIRE(crescent_tensor_numel(y) == 6);
  REQUIRE(crescent_tensor_dtype(y) == CRESCENT_FLOAT32);
  REQUIRE(crescent_tensor_is_contiguous(y) == 1);
  double out[6];
  REQUIRE(crescent_tensor_copy_to(y, CRESCENT_FLOAT64, out, sizeof out) == CRESCENT_OK);
  REQUIRE(out[0] == 3);
  REQUIRE(out[5] == 13);
  crescent_tensor* xt = res[3].tensor;  // a transposed view of the host buffer
  REQUIRE(crescent_tensor_is_contiguous(xt) == 0);
  REQUIRE(crescent_tensor_data(xt) == buf);
  float tout[6];
  REQUIRE(crescent_tensor_copy_to(xt, CRESCENT_FLOAT32, tout, sizeof tout) == CRESCENT_OK);
  REQUIRE(tout[1] == 8);  // xt[0][1] == x[1][0] == 4 * 2
  char* s = crescent_tensor_to_string(y);
  REQUIRE(s);
  REQUIRE(has(s, "tensor("));
  std::free(s);
  // fewer result slots than results: the rest are dropped, n says how many there were
  REQUIRE(crescent_call(vm, "f", args, 3, res, 1, &n) == CRESCENT_OK);
  REQUIRE(n == 4);
  // globals
  crescent_value g = crescent_number(5);
  REQUIRE(crescent_set_global(vm, "five", &g) == CRESCENT_OK);
  crescent_value back;
  REQUIRE(crescent_get_global(vm, "five", &back) == CRESCENT_OK);
  REQUIRE(back.kind == CRESCENT_NUMBER);
  REQUIRE(back.number == 5);
  REQUIRE(crescent_collect_garbage(vm) == CRESCENT_OK);
  crescent_tensor_release(xt);
  crescent_tensor_release(y);
  crescent_tensor_release(x);
  crescent_vm_destroy(vm);
}

TEST_CASE("embed C: Lua errors return a status and the traceback") {
  crescent_vm* vm = crescent_vm_create();
  REQUIRE(crescent_run_string(vm, "function g(x)\n  local y = x:view(5)\n  return y\nend") == CRESCENT_OK);
  float buf[4] = {};
  int64_t sizes[1] = {4};
  crescent_tensor* x = nullptr;
  REQUIRE(crescent_tensor_from_blob(buf, 1, sizes, nullptr, CRESCENT_FLOAT32, "cpu", nullptr, nullptr, &x) == CRESCENT_OK);
  crescent_value arg = crescent_tensor_value(x);
  crescent_value res[1];
  int n = -1;
  REQUIRE(crescent_call(vm, "g", &arg, 1, res, 1, &n) == CRESCENT_LUA_ERROR);
  REQUIRE(n == 0);
  std::string err = crescent_last_error();
  INFO(err);
  REQUIRE(has(err, ":2: view: shape {5} is invalid for a tensor of 4 elements"));
  REQUIRE(has(err, "stack traceback:"));
  REQUIRE(crescent_run_string(vm, "error('x'") == CRESCENT_LUA_ERROR);
  REQUIRE(has(crescent_last_error(), "expected near '<eof>'"));
  // a table result cannot cross the C API: TYPE_ERROR, and nothing leaks or needs releasing
  REQUIRE(crescent_run_string(vm, "function tbl(x) return x, {x} end") == CRESCENT_OK);
  REQUIRE(crescent_call(vm, "tbl", &arg, 1, res, 1, &n) == CRESCENT_OK);  // the table is not stored
  crescent_tensor_release(res[0].tensor);
  crescent_value two[2];
  REQUIRE(crescent_call(vm, "tbl", &arg, 1, two, 2, &n) == CRESCENT_TYPE_ERROR);
  REQUIRE(has(crescent_last_error(), "result 2 is a table"));
  crescent_tensor_release(x);
  crescent_vm_destroy(vm);
}

TEST_CASE("embed C: misuse returns an error status, never crashes") {
  crescent_vm* vm = crescent_vm_create();
  crescent_value res[1];
  int n = 7;
  REQUIRE(crescent_call(nullptr, "f", nullptr, 0, res, 1, &n) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(n == 0);
  REQUIRE(has(crescent_last_error(), "the VM is NULL"));
  REQUIRE(crescent_call(vm, nullptr, nullptr, 0, nullptr, 0, nullptr) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_call(vm, "print", nullptr, 2, nullptr, 0, nullptr) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_call(vm, "print", nullptr, -1, nullptr, 0, nullptr) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_call(vm, "print", nullptr, 0, nullptr, 3, nullptr) == CRESCENT_INVALID_ARGUMENT);
  crescent_value bad_kind = crescent_nil();
  int ninety_nine = 99;  // as a C caller may store it (an enum-typed store would be UB in C++)
  std::memcpy(&bad_kind.kind, &ninety_nine, sizeof ninety_nine);
  REQUIRE(crescent_call(vm, "print", &bad_kind, 1, nullptr, 0, nullptr) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(has(crescent_last_error(), "unknown kind 99"));
  crescent_value null_tensor = crescent_tensor_value(nullptr);
  REQUIRE(crescent_call(vm, "print", &null_tensor, 1, nullptr, 0, nullptr) == CRESCENT_INVALID_ARGUMENT);
  crescent_value null_string = crescent_string(nullptr);
  REQUIRE(crescent_call(vm, "print", &null_string, 1, nullptr, 0, nullptr) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_call(vm, "no_such_function", nullptr, 0, nullptr, 0, nullptr) == CRESCENT_LUA_ERROR);
  REQUIRE(crescent_run_string(nullptr, "x = 1") == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_run_string(vm, nullptr) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_run_file(vm, nullptr, 0, nullptr) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_run_file(vm, "/nonexistent.lua", 0, nullptr) == CRESCENT_LUA_ERROR);
  REQUIRE(crescent_run_file(vm, "x.lua", 2, nullptr) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_set_global(vm, "x", nullptr) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_get_global(vm, nullptr, res) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_collect_garbage(nullptr) == CRESCENT_INVALID_ARGUMENT);
  // from_blob
  float buf[4];
  int64_t sizes[2] = {2, -2};
  crescent_tensor* t = reinterpret_cast<crescent_tensor*>(&buf);  // must be reset to NULL on failure
  REQUIRE(crescent_tensor_from_blob(buf, 2, sizes, nullptr, CRESCENT_FLOAT32, "cpu", nullptr, nullptr, &t) ==
          CRESCENT_INVALID_ARGUMENT);
  REQUIRE(t == nullptr);
  REQUIRE(has(crescent_last_error(), "non-negative"));
  REQUIRE(crescent_tensor_from_blob(buf, 17, sizes, nullptr, CRESCENT_FLOAT32, "cpu", nullptr, nullptr, &t) ==
          CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_tensor_from_blob(buf, 2, nullptr, nullptr, CRESCENT_FLOAT32, "cpu", nullptr, nullptr, &t) ==
          CRESCENT_INVALID_ARGUMENT);
  sizes[1] = 2;
  REQUIRE(crescent_tensor_from_blob(buf, 2, sizes, nullptr, crescent_dtype(7)  /* no such dtype */, "cpu", nullptr, nullptr, &t) ==
          CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_tensor_from_blob(buf, 2, sizes, nullptr, CRESCENT_FLOAT32, "tpu", nullptr, nullptr, &t) ==
          CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_tensor_from_blob(nullptr, 2, sizes, nullptr, CRESCENT_FLOAT32, "cpu", nullptr, nullptr, &t) ==
          CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_tensor_from_blob(buf, 2, sizes, nullptr, CRESCENT_FLOAT32, "cpu", nullptr, nullptr, nullptr) ==
          CRESCENT_INVALID_ARGUMENT);
  // accessors on NULL or with bad dims
  REQUIRE(crescent_tensor_ndim(nullptr) == -1);
  REQUIRE(crescent_tensor_numel(nullptr) == -1);
  REQUIRE(crescent_tensor_dtype(nullptr) == -1);
  REQUIRE(crescent_tensor_is_contiguous(nullptr) == -1);
  REQUIRE(crescent_tensor_data(nullptr) == nullptr);
  REQUIRE(crescent_tensor_to_string(nullptr) == nullptr);
  REQUIRE(crescent_tensor_copy_to(nullptr, CRESCENT_FLOAT32, buf, 16) == CRESCENT_INVALID_ARGUMENT);
  crescent_tensor_release(nullptr);
  crescent_tensor_retain(nullptr);
  REQUIRE(crescent_tensor_from_blob(buf, 2, sizes, nullptr, CRESCENT_FLOAT32, "cpu", nullptr, nullptr, &t) == CRESCENT_OK);
  REQUIRE(crescent_tensor_size(t, 2) == -1);
  REQUIRE(has(crescent_last_error(), "dim 2 is out of range"));
  REQUIRE(crescent_tensor_stride(t, -3) == -1);
  REQUIRE(has(crescent_last_error(), "dim -3 is out of range for a tensor of 2 dims (expected -2 to 1)"));
  REQUIRE(crescent_tensor_copy_to(t, CRESCENT_FLOAT32, buf, 3) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_tensor_copy_to(t, CRESCENT_FLOAT32, nullptr, 16) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(crescent_tensor_copy_to(t, crescent_dtype(7), buf, 16) == CRESCENT_INVALID_ARGUMENT);
  REQUIRE(std::string(crescent_status_name(CRESCENT_TYPE_ERROR)) == "CRESCENT_TYPE_ERROR");
  crescent_tensor_release(t);
  crescent_vm_destroy(vm);
  crescent_vm_destroy(nullptr);
}

TEST_CASE("embed C: the deleter runs when the last reference goes") {
  struct Count { int n = 0; } count;
  auto del = [](void* ctx, void*) { ++static_cast<Count*>(ctx)->n; };
  crescent_vm* vm = crescent_vm_create();
  float buf[2] = {1, 2};
  int64_t sizes[1] = {2};
  crescent_tensor* t = nullptr;
  REQUIRE(crescent_tensor_from_blob(buf, 1, sizes, nullptr, CRESCENT_FLOAT32, "cpu", del, &count, &t) == CRESCENT_OK);
  crescent_value v = crescent_tensor_value(t);
  REQUIRE(crescent_set_global(vm, "held", &v) == CRESCENT_OK);
  crescent_tensor_release(t);
  REQUIRE(count.n == 0);
  crescent_vm_destroy(vm);  // closing the state releases Lua's reference
  REQUIRE(count.n == 1);
}

TEST_CASE("embed C: the last error is per thread") {
  REQUIRE(crescent_run_string(nullptr, "x") == CRESCENT_INVALID_ARGUMENT);
  std::string other;
  std::thread t([&] {
    crescent_vm* vm = crescent_vm_create();
    crescent_run_string(vm, "error('from the thread', 0)");
    other = crescent_last_error();
    crescent_vm_destroy(vm);
  });
  t.join();
  REQUIRE(has(other, "from the thread"));
  REQUIRE(has(crescent_last_error(), "the VM is NULL"));
}

TEST_CASE("embed C: os.exit returns CRESCENT_EXIT and the code") {
  crescent_vm* vm = crescent_vm_create();
  REQUIRE(crescent_run_string(vm, "os.exit(7)") == CRESCENT_EXIT);
  REQUIRE(crescent_last_exit_code() == 7);
  REQUIRE(std::string(crescent_last_error()) == "the script called os.exit(7)");
  REQUIRE(std::string(crescent_status_name(CRESCENT_EXIT)) == "CRESCENT_EXIT");
  REQUIRE(crescent_run_string(vm, "function f(n) os.exit(n) end") == CRESCENT_OK);
  crescent_value arg = crescent_boolean(0), res = crescent_nil();
  int n = -1;
  REQUIRE(crescent_call(vm, "f", &arg, 1, &res, 1, &n) == CRESCENT_EXIT);
  REQUIRE(crescent_last_exit_code() == 1);
  REQUIRE(n == 0);
  TempFile file("exit_c.lua", "os.exit(12)\n");
  REQUIRE(crescent_run_file(vm, file.path.c_str(), 0, nullptr) == CRESCENT_EXIT);
  REQUIRE(crescent_last_exit_code() == 12);
  REQUIRE(crescent_run_string(vm, "x = 1") == CRESCENT_OK);
  crescent_vm_destroy(vm);
}

TEST_CASE("embed C: a name may be a string of the last call's results") {
  crescent_vm* vm = crescent_vm_create();
  REQUIRE(crescent_run_string(vm, "function which() return 'a_rather_long_function_name_here' end "
                                  "function a_rather_long_function_name_here() return 7 end "
                                  "a_rather_long_global_name_here = 8 "
                                  "function which_global() return 'a_rather_long_global_name_here' end") == CRESCENT_OK);
  crescent_value r, r2;
  int n = 0;
  REQUIRE(crescent_call(vm, "which", nullptr, 0, &r, 1, &n) == CRESCENT_OK);
  REQUIRE(crescent_call(vm, r.string, nullptr, 0, &r2, 1, &n) == CRESCENT_OK);
  REQUIRE(r2.number == 7);
  REQUIRE(crescent_call(vm, "which_global", nullptr, 0, &r, 1, &n) == CRESCENT_OK);
  REQUIRE(crescent_get_global(vm, r.string, &r2) == CRESCENT_OK);
  REQUIRE(r2.number == 8);
  crescent_vm_destroy(vm);
}
