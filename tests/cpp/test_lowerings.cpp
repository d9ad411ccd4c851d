// jit/lower.hpp: the lowering table, one entry per registry op, built from each lowering file's
// registrations (a name that is no registry op, or an op lowered twice, fails the build of it).
#include <catch2/catch.hpp>

#include "jit/lower.hpp"

using namespace cr;

namespace {
const jit::Lowering& of(const char* op) {
  const int i = Registry::get().index_of(op);
  REQUIRE(i >= 0);
  return jit::Lowerings::get().of(i);
}
}  // namespace

TEST_CASE("lowerings: one table keyed by registry op", "[lowering]") {
  // registered by name next to their handlers
  for (const char* op : {"sum", "mean", "softmax", "log_softmax", "argmax", "max", "var", "where", "pow", "gelu",
                         "masked_fill", "tril", "arange", "eye", "gather", "embedding", "rand", "randint"})
    CHECK(of(op).fn != nullptr);
  // the variants of one handler differ by their operand
  CHECK(of("amax").fn == of("prod").fn);
  CHECK(of("amax").form != of("prod").form);
  CHECK(of("tril").form != of("triu").form);
  // pointwise ops and conversions by their kind; only the random ops with a draw lowering draw
  CHECK(of("add").fn == of("exp").fn);
  CHECK(of("float").fn == of("contiguous").fn);
  CHECK(of("rand").draws);
  CHECK_FALSE(of("sum").draws);
  // library calls, joins and data-dependent ops run as Extern steps
  for (const char* op : {"matmul", "cat", "nonzero", "sort"}) CHECK(of(op).fn == nullptr);
}

// Each op has a loop lowering or runs as an Extern step by declaration (jit/lower.hpp): an op
// added without either is named here (and at start in debug builds).
TEST_CASE("lowerings: every registry op is lowered or declared an Extern", "[lowering]") {
  CHECK(jit::Lowerings::get().undeclared() == std::vector<std::string>{});
  for (const char* op : {"matmul", "cat", "sort", "zeros", "conv2d"}) {
    INFO(op);
    CHECK((Registry::get().find(op)->flags & kExtern) != 0);
  }
}
