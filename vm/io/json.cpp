#include "vm/io/json.hpp"

#include <set>

#include "vm/error.hpp"

namespace cr::json {
namespace {

constexpr int kMaxDepth = 64;  // deeper nesting is no safetensors header; it would only eat stack

// Length of the UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF), or 0 when it is malformed or runs past the end.
size_t utf8_len(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return i + k < s.size() ? uint8_t(s[i + k]) : 0; };
  auto cont = [&](size_t k) { return (byte(k) & 0xc0) == 0x80; };
  uint8_t c = byte(0);
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    uint8_t c1 = byte(1);
    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f)) return 0;  // overlong / surrogate
    return cont(1) && cont(2) ? 3 : 0;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    uint8_t c1 = byte(1);
    if ((c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 > 0x8f)) return 0;  // overlong / > U+10FFFF
    return cont(1) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Value document() {
    skip_ws();
    Value v = value(0);
    skip_ws();
    if (pos_ != s_.size()) error("unexpected character after the end of the value");
    return v;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;

  [[noreturn]] void error(const std::string& what) const { fail(cat("invalid JSON: ", what, " at byte ", pos_)); }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  void skip_ws() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  void expect(char c, const char* what) {
    if (at_end() || s_[pos_] != c) error(cat("expected ", what));
    ++pos_;
  }

  Value value(int depth) {
    if (at_end()) error("unexpected end of input, expected a value");
    char c = s_[pos_];
    if (c == '{') return object(depth + 1);
    if (c == '[') return array(depth + 1);
    Value v;
    if (c == '"') {
      v.kind = Value::String;
      v.text = string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Value::Number;
      v.text = number();
    } else if (literal("true")) {
      v.kind = Value::Bool;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = Value::Bool;
    } else if (!literal("null")) {
      error(cat("unexpected character '", printable(c), "', expected a value"));
    }
    return v;
  }

  static std::string printable(char c) {
    uint8_t u = uint8_t(c);
    if (u >= 0x20 && u < 0x7f) return std::string(1, c);
    static const char* hex = "0123456789abcdef";
    return std::string("\\x") + hex[u >> 4] + hex[u & 15];
  }

  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value object(int depth) {
    if (depth > kMaxDepth) error(cat("nesting deeper than ", kMaxDepth, " levels"));
    Value v;
    v.kind = Value::Object;
    ++pos_;  // '{'
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return v;
    }
    std::set<std::string> keys;
    while (true) {
      skip_ws();
      if (peek() != '"') error("expected a string key");
      size_t key_pos = pos_;
      std::string key = string();
      if (!keys.insert(key).second) {
        pos_ = key_pos;
        error(cat("duplicate key \"", key, "\""));
      }
      skip_ws();
      expect(':', "':' after an object key");
      skip_ws();
      v.members.emplace_back(std::move(key), value(depth));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}', "',' or '}' in an object");
      return v;
    }
  }

  Value array(int depth) {
    if (depth > kMaxDepth) error(cat("nesting deeper than ", kMaxDepth, " levels"));
    Value v;
    v.kind = Value::Array;
    ++pos_;  // '['
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return v;
    }
    while (true) {
      skip_ws();
      v.items.push_back(value(depth));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']', "',' or ']' in an array");
      return v;
    }
  }

  uint32_t hex4() {
    if (s_.size() - pos_ < 4) error("truncated \\u escape");
    uint32_t cp = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[pos_++];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) error("invalid hex digit in a \\u escape");
      cp = cp * 16 + uint32_t(d);
    }
    return cp;
  }

  uint32_t escaped_code_point() {
    uint32_t cp = hex4();
    if (cp >= 0xdc00 && cp <= 0xdfff) error("unpaired low surrogate in a \\u escape");
    if (cp < 0xd800 || cp > 0xdbff) return cp;
    if (s_.substr(pos_, 2) != "\\u") error("high surrogate not followed by a \\u low surrogate");
    pos_ += 2;
    uint32_t lo = hex4();
    if (lo < 0xdc00 || lo > 0xdfff) error("high surrogate not followed by a low surrogate");
    return 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
  }

  std::string string() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (at_end()) error("unterminated string");
      uint8_t c = uint8_t(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) error("unescaped control character in a string");
      if (c != '\\') {
        size_t n = utf8_len(s_, pos_);
        if (n == 0) error("invalid UTF-8 in a string");
        out.append(s_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      ++pos_;
      if (at_end()) error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': append_utf8(out, escaped_code_point()); break;
        default: --pos_; error(cat("invalid escape '\\", printable(e), "'"));
      }
    }
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  std::string number() {
    size_t start = pos_;
    auto digits = [&] {
      size_t d = pos_;
      while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (peek() >= '0' && peek() <= '9') error("leading zero in a number");
    } else if (digits() == 0) {
      error("expected digits in a number");
    }
    if (peek() == '.') {
      ++pos_;
      if (digits() == 0) error("expected digits after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) error("expected digits in the exponent");
    }
    return std::string(s_.substr(start, pos_ - start));
  }
};

}  // namespace

Value parse(std::string_view text) { return Parser(text).document(); }

bool to_index(const Value& v, int64_t* out) {
  if (v.kind != Value::Number || v.text.empty()) return false;
  int64_t r = 0;
  for (char c : v.text) {
    if (c < '0' || c > '9') return false;  // sign, fraction or exponent
    if (__builtin_mul_overflow(r, int64_t(10), &r) || __builtin_add_overflow(r, int64_t(c - '0'), &r)) return false;
  }
  *out = r;
  return true;
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Null: return "null";
    case Value::Bool: return "a boolean";
    case Value::Number: return "a number";
    case Value::String: return "a string";
    case Value::Array: return "an array";
    case Value::Object: return "an object";
  }
  return "a value";
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string quote(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string r = "\"";
  for (char ch : s) {
    uint8_t c = uint8_t(ch);
    if (c == '"' || c == '\\') {
      r += '\\';
      r += ch;
    } else if (c < 0x20) {
      r += "\\u00";
      r += hex[c >> 4];
      r += hex[c & 15];
    } else {
      r += ch;
    }
  }
  return r + "\"";
}

}  // namespace cr::json
