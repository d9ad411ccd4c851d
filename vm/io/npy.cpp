// NumPy .npy (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html): the magic
// "\x93NUMPY", version bytes, a 2-byte (v1) or 4-byte (v2, v3) little-endian header length, a
// Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } and the raw
// data. The header is read with a small parser of exactly that literal subset (strings, True,
// False, integers and tuples of integers), never with an evaluator.
//
// Accepted descrs: f2 f4 f8 i4 i8 b1 in either byte order (big-endian data is swapped), and the
// small integers i1 u1 i2 u2 (loaded as int32) and u4 (as int64), which widen without loss.
// Fortran-order arrays are loaded into C order. Trailing bytes after the data are an error.
#include <algorithm>
#include <bit>

#include "vm/io/file.hpp"
#include "vm/io/io.hpp"
#include "vm/kernels/loop.hpp"

namespace cr {
namespace {

static_assert(std::endian::native == std::endian::little, "the tensor file formats are little-endian");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// A value of the header literal.
struct PyValue {
  enum Kind { Str, Bool, Int, Tuple } kind = Str;
  std::string str;
  bool boolean = false;
  int64_t integer = 0;
  std::vector<int64_t> tuple;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& what) : s_(s), what_(what) {}

  std::vector<std::pair<std::string, PyValue>> dict() {
    skip_ws();
    expect('{', "'{' starting the header dict");
    std::vector<std::pair<std::string, PyValue>> items;
    skip_ws();
    while (peek() != '}') {
      if (peek() != '\'' && peek() != '"') error("expected a string key");
      std::string key = string();
      for (const auto& kv : items)
        if (kv.first == key) error(cat("duplicate key '", key, "'"));
      skip_ws();
      expect(':', "':' after a key");
      skip_ws();
      items.emplace_back(key, value());
      skip_ws();
      if (peek() != ',') break;
      ++pos_;
      skip_ws();
    }
    expect('}', "',' or '}' in the header dict");
    skip_ws();
    if (pos_ != s_.size()) error("unexpected text after the header dict");
    return items;
  }

 private:
  std::string_view s_;
  const std::string& what_;
  size_t pos_ = 0;

  [[noreturn]] void error(const std::string& problem) const {
    fail(cat("load_npy: ", what_, ": invalid header: ", problem, " at byte ", pos_, " of the header"));
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  void expect(char c, const char* what) {
    if (peek() != c || pos_ >= s_.size()) error(cat("expected ", what));
    ++pos_;
  }

  std::string string() {
    char q = s_[pos_++];
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != q) {
      uint8_t c = uint8_t(s_[pos_]);
      if (c == '\\' || c < 0x20 || c >= 0x7f) error("unsupported character in a string (escapes and non-ASCII)");
      ++pos_;
    }
    if (pos_ >= s_.size()) error("unterminated string");
    return std::string(s_.substr(start, pos_++ - start));
  }

  bool word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }

  // [-]digits, with Python 2's long suffix L that old numpy versions wrote
  int64_t integer() {
    bool neg = peek() == '-';
    if (neg) ++pos_;
    if (!(peek() >= '0' && peek() <= '9')) error("expected an integer");
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      if (__builtin_mul_overflow(v, int64_t(10), &v) || __builtin_add_overflow(v, int64_t(peek() - '0'), &v))
        error("integer too large");
      ++pos_;
    }
    if (peek() == 'L' || peek() == 'l') ++pos_;
    return neg ? -v : v;
  }

  PyValue value() {
    PyValue v;
    char c = peek();
    if (c == '\'' || c == '"') {
      v.str = string();
    } else if (word("True")) {
      v.kind = PyValue::Bool;
      v.boolean = true;
    } else if (word("False")) {
      v.kind = PyValue::Bool;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = PyValue::Int;
      v.integer = integer();
    } else if (c == '(') {
      v.kind = PyValue::Tuple;
      v.tuple = tuple();
    } else {
      error("expected a string, True, False, an integer or a tuple");
    }
    return v;
  }

  std::vector<int64_t> tuple() {
    ++pos_;  // '('
    std::vector<int64_t> r;
    bool trailing_comma = false;
    skip_ws();
    while (peek() != ')') {
      if (r.size() > size_t(kMaxDims)) error(cat("shape has more than ", kMaxDims, " dims"));
      r.push_back(integer());
      skip_ws();
      trailing_comma = peek() == ',';
      if (!trailing_comma) break;
      ++pos_;
      skip_ws();
    }
    expect(')', "',' or ')' in a tuple");
    if (r.size() == 1 && !trailing_comma) error("expected a tuple, got a parenthesised integer (a 1-tuple needs a comma)");
    return r;
  }
};

// The descr's element type in the file and the tensor dtype it loads as.
struct Descr {
  char kind;     // 'f', 'i', 'u', 'b'
  int size;      // bytes per element in the file
  bool swap;     // big-endian data
  DType dtype;   // the loaded dtype
  bool direct;   // the file's bytes are the tensor's bytes (after swapping)
};

bool parse_descr(const std::string& s, Descr* d) {
  if (s.size() != 3) return false;
  char order = s[0], kind = s[1];
  if (s[2] < '1' || s[2] > '8') return false;
  int size = s[2] - '0';
  if (order != '<' && order != '>' && order != '=' && order != '|') return false;
  if (order == '|' && size != 1) return false;  // '|' is "not applicable": 1-byte types only
  struct Row { char kind; int size; DType dtype; bool direct; };
  static const Row rows[] = {{'f', 2, DType::f16, true},  {'f', 4, DType::f32, true},  {'f', 8, DType::f64, true},
                             {'i', 4, DType::i32, true},  {'i', 8, DType::i64, true},  {'b', 1, DType::b8, true},
                             {'i', 1, DType::i32, false}, {'u', 1, DType::i32, false}, {'i', 2, DType::i32, false},
                             {'u', 2, DType::i32, false}, {'u', 4, DType::i64, false}};
  for (const Row& r : rows) {
    if (r.kind == kind && r.size == size) {
      *d = Descr{kind, size, order == '>' && size > 1, r.dtype, r.direct};
      return true;
    }
  }
  return false;
}

// The data at `offset` of `src` -> tensor of `shape` (C order), swapping and widening as the
// descr says. Direct types are read straight into the tensor; widened ones a block at a time.
Tensor convert(const Descr& d, const Shape& shape, const io::Source& src, uint64_t offset, const std::string& what) {
  if (d.direct) {
    std::string problem;
    Tensor t = io::tensor_from_source(shape, d.dtype, src, offset, &problem);
    if (!t.defined()) fail(cat("load_npy: ", what, ": ", problem));
    char* p = t.data_bytes();
    if (d.swap)
      for (size_t i = 0, n = size_t(t.numel()) * t.itemsize(); i < n; i += size_t(d.size)) std::reverse(p + i, p + i + d.size);
    return t;
  }
  Tensor t = Tensor::empty(shape, d.dtype);
  constexpr int64_t kBlock = 1 << 14;  // elements per read
  std::string buf;
  for (int64_t i0 = 0, n = t.numel(); i0 < n; i0 += kBlock) {
    int64_t m = std::min(kBlock, n - i0);
    buf = src.read(offset + uint64_t(i0 * d.size), size_t(m * d.size));
    if (d.swap)
      for (int64_t i = 0; i < m; ++i) std::reverse(&buf[size_t(i * d.size)], &buf[size_t(i * d.size)] + d.size);
    for (int64_t i = 0; i < m; ++i) {
      uint64_t u = io::read_le(buf.data() + i * d.size, d.size);
      int64_t v = d.kind == 'u' ? int64_t(u) : int64_t(u << (64 - 8 * d.size)) >> (64 - 8 * d.size);  // sign-extend
      if (d.dtype == DType::i32) t.data<int32_t>()[i0 + i] = int32_t(v);
      else t.data<int64_t>()[i0 + i] = v;
    }
  }
  return t;
}

// The header is read and checked against the file's size before any data is read.
Tensor read_npy(const io::Source& src, const std::string& what) {
  auto bad = [&](const std::string& problem) { fail(cat("load_npy: ", what, ": ", problem)); };
  uint64_t size = src.size();
  std::string head = src.read(0, size_t(std::min<uint64_t>(size, kMagicLen + 2)));
  if (size < kMagicLen + 2 || head.compare(0, kMagicLen, kMagic, kMagicLen) != 0)
    bad("not a .npy file (it does not start with \"\\x93NUMPY\")");
  int major = uint8_t(head[6]), minor = uint8_t(head[7]);
  if (major < 1 || major > 3 || minor != 0) bad(cat("unsupported .npy version ", major, ".", minor, " (expected 1.0, 2.0 or 3.0)"));
  size_t len_bytes = major == 1 ? 2 : 4, prefix = 8 + len_bytes;
  if (size < prefix) bad(cat("file is ", size, " bytes long, truncated inside the header length"));
  uint64_t hlen = io::read_le(src.read(8, len_bytes).data(), int(len_bytes));
  if (hlen > size - prefix) bad(cat("header length ", hlen, " exceeds the ", size - prefix, " bytes after it (truncated file?)"));
  std::string text = src.read(prefix, size_t(hlen));
  auto items = HeaderParser(text, what).dict();

  const PyValue *descr = nullptr, *fortran = nullptr, *shape = nullptr;
  for (const auto& [k, v] : items) {
    if (k == "descr") descr = &v;
    else if (k == "fortran_order") fortran = &v;
    else if (k == "shape") shape = &v;
    else bad(cat("unexpected header key '", k, "' (expected descr, fortran_order, shape)"));
  }
  if (!descr || !fortran || !shape)
    bad(cat("header has no '", !descr ? "descr" : !fortran ? "fortran_order" : "shape", "' key"));
  Descr d;
  if (descr->kind != PyValue::Str) bad("descr expected a string (structured dtypes are not supported)");
  if (!parse_descr(descr->str, &d))
    bad(cat("unsupported dtype descr '", descr->str, "' (expected <f2 <f4 <f8 <i4 <i8 |b1, or |i1 |u1 <i2 <u2 <u4)"));
  if (fortran->kind != PyValue::Bool) bad("fortran_order expected True or False");
  if (shape->kind != PyValue::Tuple) bad("shape expected a tuple of integers");

  Shape dims(shape->tuple.begin(), shape->tuple.end());
  int64_t numel;
  std::string problem;
  if (!io::checked_numel(dims, &numel, &problem)) bad("the array " + problem);
  uint64_t need = uint64_t(numel) * uint64_t(d.size), have = size - prefix - hlen;
  if (have < need) bad(cat("truncated: shape ", shape_str(dims), " of '", descr->str, "' needs ", need, " bytes of data, the file has ", have));
  if (have > need) bad(cat("the file has ", have - need, " bytes after the array data (", need, " bytes expected)"));
  uint64_t data = prefix + hlen;
  if (!fortran->boolean) return convert(d, dims, src, data, what);
  // Fortran order: the data is the C-order array of the reversed shape, transposed.
  Shape rev(dims.rbegin(), dims.rend());
  Tensor r = convert(d, rev, src, data, what);
  Shape rs = r.strides();
  return contiguous(Tensor::view_of(r, dims, Shape(rs.rbegin(), rs.rend()), 0));
}

}  // namespace

Tensor parse_npy(const std::string& bytes, const std::string& what) { return read_npy(io::MemorySource(bytes), what); }

Tensor load_npy(const std::string& path) { return read_npy(io::FileSource("load_npy", path), path); }

void save_npy(const std::string& path, const Tensor& t) {
  static const char* descrs[kNumDTypes] = {"<f4", "<f8", "<f2", nullptr, "<i4", "<i8", "|b1"};
  if (!t.defined()) fail(cat("save_npy: ", path, ": the tensor is undefined"));
  const char* descr = descrs[int(t.dtype())];
  if (!descr) fail(cat("save_npy: ", path, ": NumPy has no bfloat16 dtype; convert first (x:float())"));
  if (!t.device().is_cpu()) fail(cat("save_npy: ", path, ": the tensor is on ", device_name(t.device()), "; move it to the cpu first"));
  std::string shape = "(";
  for (int i = 0; i < t.dim(); ++i) shape += cat(i ? ", " : "", t.size(i));
  shape += t.dim() == 1 ? ",)" : ")";
  std::string header = cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  // pad with spaces and end with '\n' so that the data starts 64-byte aligned, as NumPy does
  size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  io::FileWriter f("save_npy", path);
  f.write(std::string(kMagic, kMagicLen) + std::string("\x01\x00", 2) + io::le_bytes(header.size(), 2));
  f.write(header);
  f.write_tensor(t);
  f.commit();
}

}  // namespace cr
