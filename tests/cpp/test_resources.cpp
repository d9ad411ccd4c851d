// Resources: tensors freed while a thread (or the process) winds down, and the seal of the
// on-disk kernel cache entries (jit/cache_entry.hpp) that is checked before dlopen().
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "jit/cache_entry.hpp"
#include "vm/tensor.hpp"

using namespace cr;

namespace {

// Holds a tensor until the thread's thread_local objects are destroyed.
struct Holder {
  Tensor t;
};

std::string temp_path(const char* name) { return std::string("/tmp/crescent_test_resources_") + name; }

void write(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}
std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// check_entry's verdict on `bytes` for `key` ("" when the entry is whole).
std::string verdict(const std::string& bytes, const std::string& key) {
  std::string path = temp_path("entry.so"), why;
  write(path, bytes);
  bool ok = jit::check_entry(path, key, &why);
  std::remove(path.c_str());
  return ok ? "" : why;
}

}  // namespace

// Found by the fuzz_ops target: the main thread's thread-local block cache was destroyed before a
// static crescent::VM, whose tensors then went back into the freed cache (heap-use-after-free
// under ASan). A thread_local holder constructed before the cache is destroyed after it: the
// same order, in a thread of its own.
TEST_CASE("a tensor freed after its thread's block cache is gone goes back safely") {
  std::thread([] {
    thread_local Holder holder;           // constructed first, destroyed last
    holder.t = Tensor::empty({4}, DType::f32);  // the first allocation creates the block cache
    holder.t.data<float>()[3] = 1.0f;
  }).join();
  // the block went to the global cache: later allocations still work
  for (int i = 0; i < 100; ++i) REQUIRE(Tensor::empty({4}, DType::f32).numel() == 4);
}

TEST_CASE("kernel cache entries: sealed files pass, damaged ones fail with the reason") {
  const std::string key = cr::sha256_hex("kernels A"), other = cr::sha256_hex("kernels B");
  REQUIRE(key.size() == 64);
  REQUIRE(key != other);
  std::string body = "\x7f" "ELF not really, but any bytes will do";
  for (int i = 0; i < 200; ++i) body += char(i);
  std::string path = temp_path("seal.so");
  write(path, body);
  jit::seal_entry(path, key);
  std::string sealed = read(path);
  std::remove(path.c_str());
  REQUIRE(sealed.compare(0, body.size(), body) == 0);  // the object itself is unchanged

  CHECK(verdict(sealed, key).empty());
  CHECK(verdict(sealed, other).find("another key") != std::string::npos);
  CHECK(verdict(body, key).find("no cache trailer") != std::string::npos);
  CHECK(verdict("", key).find("no cache trailer") != std::string::npos);
  CHECK(verdict(sealed.substr(0, sealed.size() / 2), key).find("no cache trailer") != std::string::npos);
  CHECK(verdict(sealed.substr(1), key).find("damaged") != std::string::npos);  // the head cut off
  std::string flipped = sealed;
  flipped[100] = char(flipped[100] ^ 1);
  CHECK(verdict(flipped, key).find("damaged") != std::string::npos);
  std::string why;
  CHECK_FALSE(jit::check_entry(temp_path("missing.so"), key, &why));
  CHECK(why.find("cannot be read (") == 0);
}
