// safetensors (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON header {name: {dtype, shape, data_offsets: [begin, end]}, ...,
// "__metadata__": {string: string}}, then the data buffer. Offsets are relative to the buffer.
//
// The reader is as strict as the reference implementation: the header is UTF-8 JSON with no
// duplicate keys, every entry has exactly dtype / shape / data_offsets, each tensor's byte range
// is numel * itemsize long, and the ranges tile the buffer exactly (no overlap, no hole, no
// trailing bytes).
#include <algorithm>
#include <bit>

#include "vm/io/file.hpp"
#include "vm/io/io.hpp"
#include "vm/io/json.hpp"

namespace cr {
namespace {

static_assert(std::endian::native == std::endian::little, "the tensor file formats are little-endian");

constexpr uint64_t kMaxHeader = uint64_t(100) << 20;  // the reference implementation's limit

struct Code { const char* name; DType dtype; };
constexpr Code kCodes[] = {{"F32", DType::f32}, {"F64", DType::f64}, {"F16", DType::f16}, {"BF16", DType::bf16},
                           {"I32", DType::i32}, {"I64", DType::i64}, {"BOOL", DType::b8}};

const char* code_of(DType d) {
  for (const Code& c : kCodes)
    if (c.dtype == d) return c.name;
  return "?";
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  int64_t begin, end;
};

class Reader {
 public:
  Reader(const io::Source& src, const std::string& what) : src_(src), what_(what) {}

  // The header is read and checked against the file's size first; then each tensor's bytes are
  // read straight into its storage.
  std::vector<std::pair<std::string, Tensor>> read() {
    std::vector<Entry> entries = header();
    check_tiling(entries);
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
    std::vector<std::pair<std::string, Tensor>> out;
    for (const Entry& e : entries) {
      std::string problem;
      Tensor t = io::tensor_from_source(e.shape, e.dtype, src_, data_start_ + uint64_t(e.begin), &problem);
      if (!t.defined()) bad(cat("tensor \"", e.name, "\": ", problem));
      out.emplace_back(e.name, t);
    }
    return out;
  }

 private:
  const io::Source& src_;
  const std::string& what_;
  uint64_t data_start_ = 0;  // the data buffer's offset in the file
  int64_t data_size_ = 0;

  [[noreturn]] void bad(const std::string& problem) const { fail(cat("load: ", what_, ": ", problem)); }

  std::vector<Entry> header() {
    uint64_t size = src_.size();
    if (size < 8) bad(cat("file is ", size, " bytes long, too short for a safetensors file (8-byte header length + header)"));
    uint64_t n = io::read_le(src_.read(0, 8).data(), 8);
    if (n > size - 8)
      bad(cat("header length ", n, " exceeds the ", size - 8, " bytes after the length field (truncated or not a safetensors file)"));
    if (n > kMaxHeader) bad(cat("header length ", n, " exceeds the limit of ", kMaxHeader, " bytes"));
    std::string text = src_.read(8, size_t(n));
    if (n == 0 || text[0] != '{') bad("the header does not start with '{' (not a safetensors file)");
    data_start_ = 8 + n;
    data_size_ = int64_t(size - 8 - n);
    json::Value root;
    try {
      root = json::parse(text);
    } catch (const Error& e) {
      bad(cat("header: ", e.what()));
    }
    if (root.kind != json::Value::Object) bad(cat("header: expected a JSON object, got ", json::kind_name(root.kind)));
    std::vector<Entry> entries;
    for (const auto& [name, v] : root.members) {
      if (name == "__metadata__") check_metadata(v);
      else entries.push_back(entry(name, v));
    }
    return entries;
  }

  void check_metadata(const json::Value& v) const {
    if (v.kind == json::Value::Null) return;  // what writers emit for "no metadata"
    if (v.kind != json::Value::Object) bad(cat("__metadata__ expected an object or null, got ", json::kind_name(v.kind)));
    for (const auto& [k, x] : v.members)
      if (x.kind != json::Value::String)
        bad(cat("__metadata__ value \"", k, "\" expected a string, got ", json::kind_name(x.kind)));
  }

  Entry entry(const std::string& name, const json::Value& v) const {
    std::string where = cat("tensor \"", name, "\": ");
    if (v.kind != json::Value::Object) bad(cat(where, "expected an object, got ", json::kind_name(v.kind)));
    const json::Value *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto& [k, x] : v.members) {
      if (k == "dtype") dtype = &x;
      else if (k == "shape") shape = &x;
      else if (k == "data_offsets") offsets = &x;
      else bad(cat(where, "unexpected key \"", k, "\" (expected dtype, shape, data_offsets)"));
    }
    if (!dtype || !shape || !offsets)
      bad(cat(where, "missing key \"", !dtype ? "dtype" : !shape ? "shape" : "data_offsets", "\""));
    Entry e{name, parse_code(where, *dtype), parse_shape(where, *shape), 0, 0};
    parse_offsets(where, *offsets, &e);
    return e;
  }

  DType parse_code(const std::string& where, const json::Value& v) const {
    if (v.kind != json::Value::String) bad(cat(where, "dtype expected a string, got ", json::kind_name(v.kind)));
    for (const Code& c : kCodes)
      if (v.text == c.name) return c.dtype;
    bad(cat(where, "unsupported dtype \"", v.text, "\" (expected one of F32, F64, F16, BF16, I32, I64, BOOL)"));
  }

  Shape parse_shape(const std::string& where, const json::Value& v) const {
    if (v.kind != json::Value::Array) bad(cat(where, "shape expected an array, got ", json::kind_name(v.kind)));
    if (v.items.size() > size_t(kMaxDims))
      bad(cat(where, "shape has ", v.items.size(), " dims (at most ", kMaxDims, " are supported)"));
    Shape s;
    for (const json::Value& d : v.items) {
      int64_t x;
      if (!json::to_index(d, &x))
        bad(cat(where, "shape expected non-negative integers below 2^63, got ",
                d.kind == json::Value::Number ? d.text : json::kind_name(d.kind)));
      s.push_back(x);
    }
    return s;
  }

  void parse_offsets(const std::string& where, const json::Value& v, Entry* e) const {
    if (v.kind != json::Value::Array || v.items.size() != 2)
      bad(cat(where, "data_offsets expected an array [begin, end], got ",
              v.kind == json::Value::Array ? cat("an array of ", v.items.size()) : json::kind_name(v.kind)));
    int64_t b, en;
    if (!json::to_index(v.items[0], &b) || !json::to_index(v.items[1], &en))
      bad(cat(where, "data_offsets expected two non-negative integers below 2^63"));
    if (b > en) bad(cat(where, "data_offsets [", b, ", ", en, "] has begin > end"));
    if (en > data_size_)
      bad(cat(where, "data_offsets [", b, ", ", en, "] run past the ", data_size_, "-byte data buffer (truncated file?)"));
    int64_t numel;
    std::string problem;
    if (!io::checked_numel(e->shape, &numel, &problem)) bad(where + problem);
    int64_t need = numel * int64_t(dtype_size(e->dtype));  // <= 2^49: no overflow
    if (en - b != need)
      bad(cat(where, "data_offsets [", b, ", ", en, "] hold ", en - b, " bytes, but shape ", shape_str(e->shape), " of ",
              code_of(e->dtype), " needs ", need));
    e->begin = b;
    e->end = en;
  }

  // The byte ranges, sorted, must follow each other from 0 to the end of the buffer.
  void check_tiling(const std::vector<Entry>& entries) const {
    std::vector<const Entry*> order;
    for (const Entry& e : entries) order.push_back(&e);
    std::sort(order.begin(), order.end(),
              [](const Entry* a, const Entry* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
    int64_t pos = 0;
    const Entry* prev = nullptr;
    for (const Entry* e : order) {
      if (e->begin < pos)
        bad(cat("tensor \"", e->name, "\" (bytes [", e->begin, ", ", e->end, ")) overlaps tensor \"", prev->name,
                "\" (bytes [", prev->begin, ", ", prev->end, "))"));
      if (e->begin > pos) bad(cat("bytes [", pos, ", ", e->begin, ") of the data buffer belong to no tensor"));
      pos = e->end;
      prev = e;
    }
    if (pos != data_size_)
      bad(cat("the data buffer has ", data_size_ - pos, " bytes after the last tensor (bytes [", pos, ", ", data_size_,
              ") belong to no tensor)"));
  }
};

std::string header_json(const std::vector<std::pair<std::string, Tensor>>& items) {
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
  int64_t offset = 0;
  for (const auto& [name, t] : items) {
    int64_t nbytes = t.numel() * int64_t(t.itemsize());
    h += cat(",", json::quote(name), ":{\"dtype\":\"", code_of(t.dtype()), "\",\"shape\":[");
    for (int d = 0; d < t.dim(); ++d) h += cat(d ? "," : "", t.size(d));
    h += cat("],\"data_offsets\":[", offset, ",", offset + nbytes, "]}");
    offset += nbytes;
  }
  return h + "}";
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> parse_safetensors(const std::string& bytes, const std::string& what) {
  return Reader(io::MemorySource(bytes), what).read();
}

std::vector<std::pair<std::string, Tensor>> load_safetensors(const std::string& path) {
  return Reader(io::FileSource("load", path), path).read();
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& items) {
  auto bad = [&](const std::string& problem) { fail(cat("save: ", path, ": ", problem)); };
  std::vector<std::pair<std::string, Tensor>> sorted = items;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [name, t] = sorted[i];
    if (!t.defined()) bad(cat("tensor \"", name, "\" is undefined"));
    if (name == "__metadata__") bad("\"__metadata__\" is reserved for the file's metadata and cannot name a tensor");
    if (!json::valid_utf8(name)) bad(cat("tensor name \"", name, "\" is not valid UTF-8"));
    if (i && sorted[i - 1].first == name) bad(cat("tensor name \"", name, "\" appears twice"));
    if (!t.device().is_cpu()) bad(cat("tensor \"", name, "\" is on ", device_name(t.device()), "; move it to the cpu first"));
  }
  std::string header = header_json(sorted);
  header.append((8 - header.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
  io::FileWriter f("save", path);
  f.write(io::le_bytes(header.size(), 8));
  f.write(header);
  for (const auto& item : sorted) f.write_tensor(item.second);
  f.commit();
}

}  // namespace cr
