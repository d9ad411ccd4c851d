// The tensor file readers over bytes (parse_safetensors / parse_npy, the fuzz entry points), the
// JSON reader, and format_tensor. Malformed input must raise cr::Error, never crash: truncations
// and random mutations of valid files run through both readers (run this under ASan/UBSan).
#include <catch2/catch.hpp>

#include <cstdio>
#include <random>

#include "io_helpers.hpp"
#include "vm/io/io.hpp"
#include "vm/io/json.hpp"
#include "vm/kernels/loop.hpp"
#include "vm/print.hpp"

using namespace cr;
using testing::error_of;
using testing::slurp;

namespace {

std::string temp_path(const char* name) { return std::string("/tmp/crescent_test_io_") + name; }

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(v >> (8 * i));
  return s;
}

std::string st(const std::string& header, const std::string& data = "") { return le64(header.size()) + header + data; }

Tensor iota(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  Tensor f = Tensor::empty(shape, DType::f64);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<double>()[i] = dtype == DType::b8 ? double(i % 2) : double(i) - 2.5;
  copy_into(t, f);
  return t;
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor x = cast(contiguous(a), DType::f64), y = cast(contiguous(b), DType::f64);
  for (int64_t i = 0; i < x.numel(); ++i)
    if (x.data<double>()[i] != y.data<double>()[i]) return false;
  return true;
}

// A valid file of each format, with several dtypes.
std::string valid_safetensors() {
  std::string p = temp_path("valid.safetensors");
  save_safetensors(p, {{"w", iota({3, 2}, DType::f32)}, {"b", iota({4}, DType::i64)}, {"m", iota({5}, DType::b8)},
                       {"h", iota({2, 2}, DType::f16)}, {"e", iota({0, 3}, DType::f64)}});
  std::string s = slurp(p);
  std::remove(p.c_str());
  return s;
}
std::string valid_npy(DType dtype = DType::f32) {
  std::string p = temp_path("valid.npy");
  save_npy(p, iota({3, 4}, dtype));
  std::string s = slurp(p);
  std::remove(p.c_str());
  return s;
}

// Runs both readers; anything but success or cr::Error fails the test (a crash fails the run).
void must_not_crash(const std::string& bytes) {
  try {
    parse_safetensors(bytes, "fuzz");
  } catch (const Error&) {
  }
  try {
    parse_npy(bytes, "fuzz");
  } catch (const Error&) {
  }
}

}  // namespace

TEST_CASE("safetensors: round trip of every dtype through a file") {
  std::vector<std::pair<std::string, Tensor>> items;
  for (int d = 0; d < kNumDTypes; ++d) items.emplace_back(dtype_name(DType(d)), iota({2, 3}, DType(d)));
  items.emplace_back("scalar", iota({}, DType::f64));
  items.emplace_back("empty", iota({0}, DType::i32));
  // non-contiguous: the transpose of a 3x4
  Tensor base = iota({3, 4}, DType::f32);
  items.emplace_back("transposed", Tensor::view_of(base, {4, 3}, {1, 4}, 0));
  std::string p = temp_path("rt.safetensors");
  save_safetensors(p, items);
  auto back = load_safetensors(p);
  std::remove(p.c_str());
  REQUIRE(back.size() == items.size());
  for (const auto& [name, t] : items) {
    auto it = std::find_if(back.begin(), back.end(), [&](const auto& kv) { return kv.first == name; });
    REQUIRE(it != back.end());
    CHECK(same_values(it->second, t));
  }
  // sorted by name
  for (size_t i = 1; i < back.size(); ++i) CHECK(back[i - 1].first < back[i].first);
}

TEST_CASE("safetensors: writer rejects duplicate and reserved names") {
  std::string p = temp_path("dup.safetensors");
  CHECK(error_of([&] { save_safetensors(p, {{"a", iota({1}, DType::f32)}, {"a", iota({1}, DType::f32)}}); })
            .find("appears twice") != std::string::npos);
  CHECK(error_of([&] { save_safetensors(p, {{"__metadata__", iota({1}, DType::f32)}}); }).find("reserved") !=
        std::string::npos);
}

TEST_CASE("safetensors: malformed headers raise errors naming the problem") {
  const std::string f8(8, '\0');
  struct Case { std::string bytes, message; };
  std::vector<Case> cases = {
      {"", "too short"},
      {le64(100) + "{}", "exceeds the 2 bytes"},
      {le64(~uint64_t(0)) + "{}", "exceeds"},
      {st("nope"), "does not start with '{'"},
      {st("{"), "invalid JSON"},
      {st("{\"a\":tru}"), "invalid JSON"},
      {st("{\"a\":1e}"), "digits in the exponent"},
      {st("{\"a\":-}"), "expected digits"},
      {st("{\"a\":\"\\u12\"}"), "hex digit"},
      {st("{\"a\":\"\\ud800x\"}"), "surrogate"},
      {st("{\"a\":\"x"), "unterminated string"},
      {st("{\"a\" 1}"), "expected ':'"},
      {st("{\"a\":[1 2]}"), "',' or ']'"},
      {st("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", f8 + "x"), "1 bytes after the last tensor"},
      {st("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,9]}}", f8), "run past"},
      {st("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,-8]}}", f8), "non-negative"},
      {st("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"y\":{\"dtype\":\"F32\",\"shape\":[0],"
          "\"data_offsets\":[4,4]}}",
          f8),
       "overlaps"},
      {st("{\"x\":{\"dtype\":\"BF16\",\"shape\":[3037000500,3037000500],\"data_offsets\":[0,8]}}", f8), "too large"},
      {st("{\"x\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "a"), "unsupported dtype"},
      {st("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}junk", f8), "invalid JSON"},
  };
  for (const Case& c : cases) {
    INFO("input: " << c.bytes);
    std::string msg = error_of([&] { parse_safetensors(c.bytes, "mem.safetensors"); });
    CHECK(msg.find("load: mem.safetensors: ") == 0);
    CHECK(msg.find(c.message) != std::string::npos);
  }
}

TEST_CASE("safetensors: zero-size tensors and padding are accepted") {
  auto r = parse_safetensors(st("{\"z\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,0]},"
                                "\"a\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}   \n\t",
                                std::string("\x07\0\0\0", 4)),
                             "mem");
  REQUIRE(r.size() == 2);
  CHECK(r[0].first == "a");
  CHECK(r[0].second.dim() == 0);
  CHECK(*r[0].second.data<int32_t>() == 7);
  CHECK(r[1].second.sizes() == Shape{0, 4});
}

TEST_CASE("npy: round trip, fortran order, widening, big-endian") {
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::i32, DType::i64, DType::b8}) {
    Tensor t = parse_npy(valid_npy(d), "mem");
    CHECK(same_values(t, iota({3, 4}, d)));
  }
  auto npy = [](const std::string& header, const std::string& data) {
    return std::string("\x93NUMPY\x01\x00", 8) + char(header.size()) + '\0' + header + data;
  };
  // 2x3 in Fortran order: memory holds columns
  std::string data;
  for (int32_t v : {0, 3, 1, 4, 2, 5}) data.append(reinterpret_cast<const char*>(&v), 4);
  Tensor f = parse_npy(npy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }\n", data), "mem");
  REQUIRE(f.sizes() == Shape{2, 3});
  REQUIRE(f.is_contiguous());
  for (int i = 0; i < 6; ++i) CHECK(f.data<int32_t>()[i] == i);
  Tensor u = parse_npy(npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }\n", "\xff\x01"), "mem");
  CHECK(u.dtype() == DType::i32);
  CHECK(u.data<int32_t>()[0] == 255);
  Tensor s = parse_npy(npy("{'descr': '<i2', 'fortran_order': False, 'shape': (1,), }\n", "\xfe\xff"), "mem");
  CHECK(s.data<int32_t>()[0] == -2);
  Tensor b = parse_npy(npy("{'descr': '>i4', 'fortran_order': False, 'shape': (), }\n", std::string("\0\0\1\2", 4)), "mem");
  CHECK(b.data<int32_t>()[0] == 258);
}

TEST_CASE("npy: malformed headers raise errors naming the problem") {
  auto npy = [](const std::string& header, const std::string& data = "") {
    return std::string("\x93NUMPY\x01\x00", 8) + char(header.size()) + '\0' + header + data;
  };
  struct Case { std::string bytes, message; };
  std::vector<Case> cases = {
      {"\x93NUMPY", "not a .npy file"},
      {std::string("\x93NUMPY\x01\x00\x05", 9), "truncated inside the header length"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", "abc"), "truncated"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }\n"), "',' or ')'"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,, ), }\n"), "expected an integer"},
      {npy("{'descr': '<f4', 'fortran_order': Fals, 'shape': (), }\n"), "expected a string, True"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': ('a',), }\n"), "expected an integer"},
      {npy("{'descr: '<f4'}"), "expected ':'"},
      {npy("{'descr': 1, 'fortran_order': False, 'shape': (), }\n"), "descr expected a string"},
      {npy("{'descr': '<f9', 'fortran_order': False, 'shape': (), }\n"), "unsupported dtype descr"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 0), }\n"), "negative dim"},
  };
  for (const Case& c : cases) {
    INFO("input: " << c.bytes);
    std::string msg = error_of([&] { parse_npy(c.bytes, "mem.npy"); });
    CHECK(msg.find("load_npy: mem.npy: ") == 0);
    CHECK(msg.find(c.message) != std::string::npos);
  }
}

TEST_CASE("readers survive every truncation and random mutations of valid files") {
  std::vector<std::string> seeds = {valid_safetensors(), valid_npy(DType::f32), valid_npy(DType::b8)};
  for (const std::string& s : seeds) {
    for (size_t n = 0; n < s.size(); ++n) {
      CHECK_THROWS_AS(parse_safetensors(s.substr(0, n), "cut"), Error);
      CHECK_THROWS_AS(parse_npy(s.substr(0, n), "cut"), Error);
    }
  }
  std::mt19937_64 rng(1234);
  int parsed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s = seeds[size_t(iter) % seeds.size()];
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      size_t pos = rng() % s.size();
      switch (rng() % 5) {
        case 0: s[pos] = char(rng()); break;                                     // random byte
        case 1: s[pos] = char(s[pos] ^ char(1 << (rng() % 8))); break;           // bit flip
        case 2: s.erase(pos, 1 + rng() % 8); break;                              // deletion
        case 3: s.insert(pos, 1 + rng() % 4, "0123456789,[]{}:\"-eE."[rng() % 21]); break;  // JSON-ish insertion
        default: s = s.substr(0, pos); break;                                    // truncation
      }
    }
    try {
      parse_safetensors(s, "mut");
      ++parsed;
    } catch (const Error&) {
    }
    try {
      parse_npy(s, "mut");
      ++parsed;
    } catch (const Error&) {
    }
  }
  CHECK(parsed > 0);  // some mutations (e.g. of data bytes) stay valid
  must_not_crash(std::string(1 << 16, '{'));
  must_not_crash(st(std::string(100000, '[')));
}

TEST_CASE("json: strict syntax, escapes, duplicates, integers") {
  using json::Value;
  Value v = json::parse(" {\"a\\u00e9\\ud83d\\ude00\":[1,-2.5e3,true,false,null,\"\\n\\\"\"]} ");
  REQUIRE(v.kind == Value::Object);
  CHECK(v.members[0].first == "a\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(v.members[0].second.items.size() == 6);
  int64_t x;
  CHECK(json::to_index(v.members[0].second.items[0], &x));
  CHECK(x == 1);
  CHECK_FALSE(json::to_index(v.members[0].second.items[1], &x));
  Value big;
  big.kind = Value::Number;
  big.text = "9223372036854775808";
  CHECK_FALSE(json::to_index(big, &x));
  big.text = "9223372036854775807";
  CHECK(json::to_index(big, &x));
  for (const char* bad : {"", "{", "{\"a\":1,\"a\":2}", "[1,]", "01", "1.", ".5", "\"\\x\"", "tru", "[1] [2]", "\"\t\"", "+1",
                          "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\""})
    CHECK_THROWS_AS(json::parse(bad), Error);
  CHECK(json::quote("a\"b\\c\n\x01") == "\"a\\\"b\\\\c\\u000a\\u0001\"");
}

TEST_CASE("format_tensor: PyTorch layout on strided views") {
  Tensor base = iota({2, 3}, DType::f32);  // -2.5 .. 2.5
  Tensor t = Tensor::view_of(base, {3, 2}, {1, 3}, 0);
  CHECK(format_tensor(t) == "tensor([[-2.5000,  0.5000],\n        [-1.5000,  1.5000],\n        [-0.5000,  2.5000]])");
  Tensor i = iota({}, DType::i32);
  CHECK(format_tensor(i) == "tensor(-2, dtype=int32)");
  Tensor e = Tensor::view_of(iota({4}, DType::i64), {4}, {0}, 1);  // stride 0: one value repeated
  CHECK(format_tensor(e) == "tensor([-1, -1, -1, -1])");
  CHECK(format_tensor(iota({2, 0}, DType::f16)) == "tensor([], size=(2, 0), dtype=float16)");
}
