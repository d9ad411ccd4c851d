#include "vm/dtype.hpp"

#include "vm/error.hpp"

namespace cr {

size_t dtype_size(DType d) {
  static const size_t sizes[kNumDTypes] = {4, 8, 2, 2, 4, 8, 1};
  return sizes[int(d)];
}

const char* dtype_name(DType d) {
  static const char* names[kNumDTypes] = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "bool"};
  return names[int(d)];
}

const char* ctype(DType d) {
  switch (d) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::i32: return "int32_t";
    case DType::i64: return "int64_t";
    case DType::b8: return "bool";
    default: return "?";
  }
}

bool parse_dtype(const std::string& s, DType* out) {
  struct Alias { const char* name; DType d; };
  static const Alias aliases[] = {
      {"float32", DType::f32}, {"float", DType::f32},   {"float64", DType::f64}, {"double", DType::f64},
      {"float16", DType::f16}, {"half", DType::f16},    {"bfloat16", DType::bf16}, {"int32", DType::i32},
      {"int", DType::i32},     {"int64", DType::i64},   {"long", DType::i64},    {"bool", DType::b8}};
  for (const Alias& a : aliases)
    if (s == a.name) { *out = a.d; return true; }
  return false;
}

DType dtype_named(const std::string& s) {
  DType d;
  if (!parse_dtype(s, &d))
    fail(cat("dtype expected one of float32, float64, float16, bfloat16, int32, int64, bool, got \"", s, "\""));
  return d;
}

int category(DType d) { return d == DType::b8 ? 0 : is_integral(d) ? 1 : 2; }

DType promote(DType a, DType b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1) return DType::i64;  // int32 + int64
  // two different floating types: float16 + bfloat16 -> float32, otherwise the wider one
  auto rank = [](DType d) { return d == DType::f64 ? 3 : d == DType::f32 ? 2 : 1; };
  if (rank(a) == 1 && rank(b) == 1) return DType::f32;
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace cr
