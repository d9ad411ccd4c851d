// Loop IR analysis and printing: the stage structure of a kernel and its readable rendering.
#include "jit/loop_ir.hpp"

#include <algorithm>
#include <sstream>

namespace cr::jit {

void Kernel::analyse() {
  size_t n = body.exprs.size();
  inner.assign(n, 0);
  depth.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const Expr& e = body.exprs[i];
    if (e.op == EOp::Load || e.op == EOp::Index) {
      for (size_t v = size_t(n_outer); v < sizes.size(); ++v) inner[i] = inner[i] || e.index[0].coef(v) != 0;
      if (!e.gather()) continue;
    }
    if (e.op == EOp::Reduced) {
      depth[i] = depth[size_t(accs[size_t(e.acc)].expr)] + 1;
      continue;
    }
    for (int32_t o : {e.a, e.b, e.c}) {
      if (o < 0) continue;
      inner[i] = inner[i] || inner[size_t(o)];
      depth[i] = std::max(depth[i], depth[size_t(o)]);
    }
  }
  max_depth = 0;
  for (const Store& s : stores) max_depth = std::max(max_depth, depth[size_t(s.expr)]);
  for (const Accumulate& a : accs) max_depth = std::max(max_depth, depth[size_t(a.expr)]);
}

int64_t Kernel::work_items() const {
  int64_t w = 1;
  for (int v = 0; v < n_outer; ++v) w *= sizes[size_t(v)];
  if (chunk > 0) w *= (sizes.back() + chunk - 1) / chunk;
  for (int64_t s : sizes) w = s == 0 ? 0 : w;
  return w;
}

std::string int_str(int64_t x) { return is_param(x) ? cat("P", param_slot(x)) : std::to_string(x); }

std::string affine_str(const Affine& a) {
  std::string s;
  for (size_t v = 0; v < a.k.size(); ++v) {
    if (!a.k[v]) continue;
    if (!s.empty()) s += " + ";
    s += a.k[v] == 1 ? cat("i", v) : cat(int_str(a.k[v]), "*i", v);
  }
  if (a.c || s.empty()) s += s.empty() ? int_str(a.c) : cat(" + ", int_str(a.c));
  return s;
}

namespace {

// Calls f(field, is_size) for every integer field parametrize() may slot, in its slot order:
// loop sizes, the chunk (when set), then the coefficients and constant of each load and store.
template <typename K, typename F>
void each_int(K& k, F&& f) {
  auto address = [&](auto& a) {
    for (auto& c : a.k) f(c, false);
    f(a.c, false);
  };
  for (auto& s : k.sizes) f(s, true);
  if (k.chunk > 0) f(k.chunk, true);
  for (auto& e : k.body.exprs)
    if (e.op == EOp::Load || e.op == EOp::Index) address(e.index[0]);
    else if (e.op == EOp::Count) f(e.count, true);
  for (auto& s : k.stores) address(s.addr);
}

}  // namespace

std::vector<int64_t> parametrize(Kernel& k) {
  std::vector<int64_t> params;
  each_int(k, [&](int64_t& x, bool size) {
    if (!size && x >= -1 && x <= 1) return;  // coefficients 0 and +-1 stay literal
    params.push_back(x);
    x = kParamBase + int64_t(params.size() - 1);
  });
  return params;
}

size_t param_count(const Kernel& k) {
  size_t n = 0;
  each_int(k, [&](int64_t x, bool) { n += is_param(x); });
  return n;
}

namespace {

std::string num_str(double x, DType d) {
  std::ostringstream o;
  o.precision(17);
  o << x;
  return d == DType::f32 ? o.str() + "f" : o.str();
}

}  // namespace

std::string Kernel::str(int64_t block) const {
  std::ostringstream o;
  o << "// " << name << ": loops {";
  for (size_t v = 0; v < sizes.size(); ++v) o << (v ? ", " : "") << int_str(sizes[v]);
  o << "}, " << n_outer << " outer (parallel)";
  if (chunk) o << ", innermost in chunks of " << int_str(chunk);
  o << "\nvoid " << name << "(";
  for (size_t b = 0; b < buffers.size(); ++b)
    o << (b ? ", " : "") << "buf" << b << " /* #" << buffers[b] << (int32_t(b) == check ? ", check word" : int32_t(b) == runtime ? ", R" : "")
      << " */";
  o << ") {\n";
  std::string ind = "  ";
  for (int v = 0; v < n_outer; ++v) {
    o << ind << "for (int64_t i" << v << " = 0; i" << v << " < " << int_str(sizes[size_t(v)]) << "; ++i" << v << ")"
      << (v == 0 ? "  // parallel" : "") << "\n";
    ind += "  ";
  }
  o << ind.substr(2) << "{\n";
  std::vector<char> shown(body.exprs.size(), 0);
  // walked: bit 1 << want_inner once an expression's operands were visited for that side (a
  // second walk adds nothing; without it a shared operand is walked once per path: 2^depth)
  std::vector<char> walked(body.exprs.size(), 0);
  auto expr = [&](auto&& self, int32_t i, bool want_inner, std::ostream& out, const std::string& in) -> void {
    if (shown[size_t(i)] || (walked[size_t(i)] >> int(want_inner) & 1)) return;
    walked[size_t(i)] = char(walked[size_t(i)] | 1 << int(want_inner));
    const Expr& e = body.exprs[size_t(i)];
    for (int32_t op : {e.a, e.b, e.c})
      if (op >= 0) self(self, op, want_inner, out, in);
    if (bool(inner[size_t(i)]) != want_inner) return;
    shown[size_t(i)] = 1;
    out << in << ctype(e.dtype) << " e" << i << " = ";
    switch (e.op) {
      case EOp::Load:
        out << "buf" << e.value << "[" << affine_str(e.index[0]);
        if (e.gather()) out << " + (checked(e" << e.a << ", 1.." << int_str(e.limit) << ", site " << e.site << ") - 1)*" << int_str(e.stride);
        out << "]";
        break;
      case EOp::Const: out << num_str(e.num, e.dtype); break;
      case EOp::Count: out << "(double)" << int_str(e.count); break;
      case EOp::Cast: out << "(" << ctype(e.dtype) << ")e" << e.a; break;
      case EOp::Arith:
        out << (e.c >= 0 ? cat(e.name, "(e", e.a, ", e", e.b, ", e", e.c, ")")
                : e.b < 0 ? cat(e.name, "e", e.a) : cat("e", e.a, " ", e.name, " e", e.b));
        break;
      case EOp::Call: out << e.name << "(e" << e.a << (e.b >= 0 ? cat(", e", e.b) : "") << ")  /* block call */"; break;
      case EOp::Select: out << "e" << e.a << " ? e" << e.b << " : e" << e.c; break;
      case EOp::Reduced: out << "acc" << e.acc; break;
      case EOp::Index: out << "(" << ctype(e.dtype) << ")(" << affine_str(e.index[0]) << ")"; break;
      case EOp::Runtime: out << "R[" << e.site << "]"; break;
      case EOp::Number: out << "N[" << e.site << "]"; break;
    }
    out << ";\n";
  };
  for (int d = 0; d <= max_depth; ++d) {
    std::string in = ind;
    o << in << "// stage " << d << "\n";
    for (size_t s = 0; s < stores.size(); ++s) {
      const Store& st = stores[s];
      bool st_inner = inner[size_t(st.expr)];
      for (size_t v = size_t(n_outer); v < sizes.size(); ++v) st_inner = st_inner || st.addr.coef(v) != 0;
      if (depth[size_t(st.expr)] != d || st_inner) continue;
      expr(expr, st.expr, false, o, in);
      o << in << "buf" << st.buffer << "[" << affine_str(st.addr) << "] = e" << st.expr << ";\n";
    }
    std::ostringstream loop;
    std::string lin = in;
    for (size_t v = size_t(n_outer); v < sizes.size(); ++v) lin += "  ";
    bool any = false;
    for (size_t a = 0; a < accs.size(); ++a) {
      if (depth[size_t(accs[a].expr)] != d) continue;
      o << in << ctype(accs[a].acc) << " acc" << a << " = " << reduce_name(accs[a].kind) << "_init;\n";
      expr(expr, accs[a].expr, false, o, in);
      expr(expr, accs[a].expr, true, loop, lin);
      loop << lin << "acc" << a << " = " << reduce_name(accs[a].kind) << "(acc" << a << ", e" << accs[a].expr << ");\n";
      any = true;
    }
    for (const Store& st : stores) {
      bool st_inner = inner[size_t(st.expr)];
      for (size_t v = size_t(n_outer); v < sizes.size(); ++v) st_inner = st_inner || st.addr.coef(v) != 0;
      if (depth[size_t(st.expr)] != d || !st_inner) continue;
      expr(expr, st.expr, false, o, in);
      expr(expr, st.expr, true, loop, lin);
      loop << lin << "buf" << st.buffer << "[" << affine_str(st.addr) << "] = e" << st.expr << ";\n";
      any = true;
    }
    if (!any) continue;
    std::string li = in;
    for (size_t v = size_t(n_outer); v < sizes.size(); ++v) {
      o << li << "for (int64_t i" << v << " = 0; i" << v << " < " << int_str(sizes[v]) << "; ++i" << v << ")"
        << (v + 1 == sizes.size() && block > 0 ? "  // blocks of " + std::to_string(block) + ", vectorised" : "") << "\n";
      li += "  ";
    }
    o << in << "{\n" << loop.str() << in << "}\n";
  }
  o << ind.substr(2) << "}\n}\n";
  return o.str();
}

std::string LoopGraph::str() const {
  std::ostringstream o;
  const char* kinds[] = {"buffer", "view", "pointwise", "reduction"};
  for (size_t i = 0; i < values.size(); ++i) {
    const LoopValue& v = values[i];
    o << "v" << i << " = " << kinds[int(v.kind)] << " " << dtype_name(v.dtype) << shape_str(v.sizes);
    if (v.gv >= 0) o << " (graph %" << v.gv << ")";
    if (v.kind == LKind::View) o << " of v" << v.root << " strides " << shape_str(v.strides) << " offset " << v.offset;
    if (v.kind == LKind::Reduction) o << " " << reduce_name(v.reduce) << " over " << shape_str(v.in_sizes);
    o << "\n";
  }
  for (const LStep& s : steps)
    if (s.external) o << "extern: " << g->nodes[size_t(s.node)].def().name << "\n";
  return o.str();
}

}  // namespace cr::jit
