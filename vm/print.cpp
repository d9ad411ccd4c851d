// tostring(x): the layout and number formatting of PyTorch's torch/_tensor_str.py (its print
// options: PrintOptions, by default precision 4, threshold 1000, edgeitems 3, linewidth 80), so that crescent prints
// exactly what PyTorch prints for the same values. Only the printed elements are read: a summarised
// tensor of 10^9 elements costs a few dozen loads, not a conversion of the whole tensor.
#include "vm/print.hpp"

#include "vm/devices.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>

namespace cr {
namespace {

std::mutex options_mutex;
PrintOptions options;

// One element, as PyTorch sees it after .tolist(): floats widened to double, integers exact.
template <class T> double read_float(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return double(load(v));
}
template <class T> int64_t read_int(const char* p) {
  using S = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;  // never load a bool's byte as bool
  S v;
  std::memcpy(&v, p, sizeof v);
  return int64_t(v);
}

// Python's "{:.Nf}" / "{:.Ne}" / "{:.0f}" of a double. C's printf agrees with Python on finite
// values (both round the exact binary value correctly) and on infinities; NaN is always "nan" in
// Python whatever its sign bit.
std::string fmt_double(const char* spec, int precision, double v) {
  if (std::isnan(v)) return "nan";
  char buf[400];  // "%.60f" of DBL_MAX is 372 characters
  std::snprintf(buf, sizeof buf, spec, precision, v);
  return buf;
}

std::string pad_left(std::string s, size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

class Printer {
 public:
  Printer(const Tensor& t, const PrintOptions& o) : t_(t), o_(o), floating_(is_floating(t.dtype())) {
    visit(t.dtype(), [&](auto z) {
      using T = decltype(z);
      if constexpr (std::is_integral_v<T>) read_i_ = read_int<T>;
      else read_f_ = read_float<T>;
    });
    summarize_ = t.numel() > o.threshold;
  }

  std::string body(int indent) {
    measure();
    return format_dim(0, t_.data_bytes(), indent);
  }

 private:
  const Tensor& t_;
  const PrintOptions& o_;
  bool floating_;
  bool summarize_ = false;
  double (*read_f_)(const char*) = nullptr;
  int64_t (*read_i_)(const char*) = nullptr;
  // the _Formatter state
  bool int_mode_ = true, sci_mode_ = false;
  size_t max_width_ = 1;

  // Indices printed along dim d: all of them, or the edge items around "..." when summarising.
  bool elided(int d) const { return summarize_ && t_.size(d) > 2 * o_.edgeitems; }
  template <class F> void for_each_index(int d, F&& f) const {
    int64_t n = t_.size(d);
    if (!elided(d)) {
      for (int64_t i = 0; i < n; ++i) f(i);
      return;
    }
    for (int64_t i = 0; i < o_.edgeitems; ++i) f(i);
    for (int64_t i = n - o_.edgeitems; i < n; ++i) f(i);
  }
  const char* at(const char* p, int d, int64_t i) const {
    return p + i * t_.stride(d) * int64_t(t_.itemsize());
  }

  // Calls f(element pointer) for every printed element (get_summarized_data's set).
  template <class F> void for_each_printed(int d, const char* p, F& f) const {
    if (d == t_.dim()) {
      f(p);
      return;
    }
    for_each_index(d, [&](int64_t i) { for_each_printed(d + 1, at(p, d, i), f); });
  }

  // _Formatter.__init__: picks int / fixed / scientific mode and the column width.
  void measure() {
    if (!floating_) {
      auto f = [&](const char* p) { max_width_ = std::max(max_width_, int_str(read_i_(p)).size()); };
      for_each_printed(0, t_.data_bytes(), f);
      return;
    }
    double lo = INFINITY, hi = 0;
    bool any = false;
    auto stats = [&](const char* p) {
      double v = read_f_(p);
      if (!std::isfinite(v) || v == 0) return;
      any = true;
      lo = std::min(lo, std::fabs(v));
      hi = std::max(hi, std::fabs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    };
    for_each_printed(0, t_.data_bytes(), stats);
    if (!any) return;
    double ratio = hi / lo;
    sci_mode_ = ratio > 1000.0 || hi > 1.0e8 || (!int_mode_ && lo < 1.0e-4);
    auto width = [&](const char* p) {
      double v = read_f_(p);
      if (!std::isfinite(v) || v == 0) return;
      size_t w = sci_mode_ ? fmt_double("%.*e", o_.precision, v).size()
                 : int_mode_ ? fmt_double("%.*f", 0, v).size() + 1
                             : fmt_double("%.*f", o_.precision, v).size();
      max_width_ = std::max(max_width_, w);
    };
    for_each_printed(0, t_.data_bytes(), width);
    // (as PyTorch: the widths are the automatic mode's, the values then in the forced one)
    if (o_.sci_mode >= 0) sci_mode_ = o_.sci_mode == 1;
  }

  std::string int_str(int64_t v) const {
    if (t_.dtype() == DType::b8) return v ? "True" : "False";
    return std::to_string(v);
  }

  // _Formatter.format
  std::string format_value(const char* p) const {
    if (!floating_) return pad_left(int_str(read_i_(p)), max_width_);
    double v = read_f_(p);
    std::string s;
    if (sci_mode_) {
      s = fmt_double("%.*e", o_.precision, v);
    } else if (int_mode_) {
      s = fmt_double("%.*f", 0, v);
      if (std::isfinite(v)) s += ".";
    } else {
      s = fmt_double("%.*f", o_.precision, v);
    }
    return pad_left(s, max_width_);
  }

  // _tensor_str_with_formatter
  std::string format_dim(int d, const char* p, int indent) const {
    if (t_.dim() == 0) return format_value(p);
    if (d == t_.dim() - 1) return format_vector(d, p, indent);
    std::vector<std::string> slices;
    int64_t n = t_.size(d);
    for_each_index(d, [&](int64_t i) {
      if (elided(d) && i == n - o_.edgeitems) slices.push_back("...");
      slices.push_back(format_dim(d + 1, at(p, d, i), indent + 1));
    });
    if (elided(d) && o_.edgeitems == 0) slices.push_back("...");  // (no edge items: numpy's [...])
    std::string sep = ",";
    sep.append(size_t(t_.dim() - d - 1), '\n').append(size_t(indent + 1), ' ');
    std::string r = "[";
    for (size_t i = 0; i < slices.size(); ++i) {
      if (i) r += sep;
      r += slices[i];
    }
    return r + "]";
  }

  // _vector_str: as many elements per line as fit in the line width
  std::string format_vector(int d, const char* p, int indent) const {
    int64_t per_line = std::max<int64_t>(1, (o_.linewidth - indent) / int64_t(max_width_ + 2));
    std::vector<std::string> data;
    int64_t n = t_.size(d);
    for_each_index(d, [&](int64_t i) {
      if (elided(d) && i == n - o_.edgeitems) data.push_back(" ...");
      data.push_back(format_value(at(p, d, i)));
    });
    if (elided(d) && o_.edgeitems == 0) data.push_back("...");
    std::string r = "[";
    std::string line_sep = ",\n";
    line_sep.append(size_t(indent + 1), ' ');
    for (size_t i = 0; i < data.size(); ++i) {
      if (i) r += int64_t(i) % per_line == 0 ? line_sep : ", ";
      r += data[i];
    }
    return r + "]";
  }
};

// PyTorch prints dtype=torch.float16; in Lua the dtype is the string "float16"
std::string torch_dtype_name(DType d) { return dtype_name(d); }

std::string size_tuple(const Shape& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

// _add_suffixes: ", dtype=..." on the last line, or on a new line when it would pass the line width
std::string add_suffixes(std::string s, const std::vector<std::string>& suffixes, int indent, int linewidth) {
  size_t nl = s.rfind('\n');
  int64_t last = nl == std::string::npos ? int64_t(s.size()) + 2 : int64_t(s.size() - nl) + 1;
  for (const std::string& suffix : suffixes) {
    int64_t len = int64_t(suffix.size());
    if (last + len + 2 > linewidth) {
      s += ",\n" + std::string(size_t(indent), ' ') + suffix;
      last = indent + len;
    } else {
      s += ", " + suffix;
      last += len + 2;
    }
  }
  return s + ")";
}

}  // namespace

PrintOptions print_options() {
  std::lock_guard<std::mutex> g(options_mutex);
  return options;
}

void set_print_options(const PrintOptions& o) {
  std::lock_guard<std::mutex> g(options_mutex);
  options = o;
}

std::string format_tensor(const Tensor& shown) {
  const PrintOptions o = print_options();
  if (!shown.defined()) return "tensor(<undefined>)";
  const Tensor t = host_copy(shown);  // a CUDA tensor's values, read back
  const std::string prefix = "tensor(";
  const int indent = int(prefix.size());
  std::vector<std::string> suffixes;
  if (!shown.device().is_cpu()) suffixes.push_back("device='" + device_name(shown.device()) + "'");
  std::string body;
  if (t.numel() == 0) {
    // as NumPy: the shape is shown unless it is (0,); the dtype unless it is the default float
    if (t.dim() != 1) suffixes.push_back("size=" + size_tuple(t.sizes()));
    if (t.dtype() != DType::f32) suffixes.push_back("dtype=" + torch_dtype_name(t.dtype()));
    body = "[]";
  } else {
    DType d = t.dtype();
    if (d != DType::f32 && d != DType::i64 && d != DType::b8) suffixes.push_back("dtype=" + torch_dtype_name(d));
    body = Printer(t, o).body(indent);
  }
  return add_suffixes(prefix + body, suffixes, indent, o.linewidth);
}

}  // namespace cr
