// A small strict JSON (RFC 8259) reader and the string quoting of the writer, for the
// safetensors header. The reader takes untrusted bytes: it checks UTF-8, escapes, number syntax,
// duplicate keys and nesting depth, and never reads outside the given view.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cr::json {

struct Value {
  enum Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Null;
  bool boolean = false;
  std::string text;  // the decoded string, or the number's literal text
  std::vector<Value> items;                            // Array
  std::vector<std::pair<std::string, Value>> members;  // Object, in file order, keys unique

  // Defined below, once Value is complete: clang (C++20, constexpr std::vector) instantiates
  // the implicit ones inside the class, where std::pair<std::string, Value> is incomplete.
  Value();
  Value(const Value&);
  Value(Value&&) noexcept;
  Value& operator=(const Value&);
  Value& operator=(Value&&) noexcept;
  ~Value();
};
inline Value::Value() = default;
inline Value::Value(const Value&) = default;
inline Value::Value(Value&&) noexcept = default;
inline Value& Value::operator=(const Value&) = default;
inline Value& Value::operator=(Value&&) noexcept = default;
inline Value::~Value() = default;

// Parses one JSON value surrounded by optional whitespace. Throws cr::Error
// ("invalid JSON: <problem> at byte N") on anything else.
Value parse(std::string_view text);

// A Number holding a non-negative integer literal that fits in int64 (no sign, fraction or
// exponent); false otherwise.
bool to_index(const Value& v, int64_t* out);

// The kind's name for messages: "an object", "a string", ...
const char* kind_name(Value::Kind k);

// s as a JSON string literal (quotes, escapes). s must be valid UTF-8 (see valid_utf8).
std::string quote(std::string_view s);
bool valid_utf8(std::string_view s);

}  // namespace cr::json
