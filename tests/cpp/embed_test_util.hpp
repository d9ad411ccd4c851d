// Helpers of the embedding API's tests (test_embed.cpp: C++, test_embed_c.cpp: C).
#pragma once
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

#include <crescent/crescent.hpp>

namespace {

// A file in the temporary directory, removed at the end of the test.
struct TempFile {
  std::string path;
  TempFile(const std::string& name, const std::string& text)
      : path(std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/" + std::to_string(getpid()) + "_" + name) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

// Runs f, requires a crescent::Error and returns it.
template <class F> crescent::Error error_of(F&& f) {
  try {
    f();
  } catch (const crescent::Error& e) {
    return e;
  }
  FAIL("expected a crescent::Error");
  return crescent::Error(crescent::Status::Ok, "");
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace
