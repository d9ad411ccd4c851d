// The trace tree's helpers: sites, graphs built from recorded paths, and the explanations of
// guards and guard failures that CRESCENT_LOGS=guards,recompiles print.
#include "vm/guards/trace.hpp"

#include <cstring>

namespace cr::guards {

Site& Function::site(const std::string& name, bool train) {
  auto& s = sites[train ? "train: " + name : name];
  if (!s) {
    s = std::make_unique<Site>();
    s->name = name;
  }
  return *s;
}

std::vector<const TraceNode*> path_of(const TraceNode* last) {
  std::vector<const TraceNode*> p;
  for (const TraceNode* n = last; n && n->parent; n = n->parent) p.push_back(n);
  return {p.rbegin(), p.rend()};
}

std::shared_ptr<graph::Graph> build_graph(const Leaf& leaf) {
  auto g = std::make_shared<graph::Graph>();
  auto value = [&](int32_t vid) -> graph::Value& {
    if (size_t(vid) >= g->values.size()) g->values.resize(size_t(vid) + 1);
    return g->values[size_t(vid)];
  };
  for (const TraceNode* t : path_of(leaf.last)) {
    for (const NewInput& in : t->new_inputs) {
      graph::Node n;
      n.kind = graph::NodeKind::Input;
      n.input_index = int32_t(g->inputs.size());
      n.outs = {in.vid};
      g->inputs.push_back(in.vid);
      g->nodes.push_back(std::move(n));
      value(in.vid) = graph::Value{int32_t(g->nodes.size() - 1), in.meta, in.alias_of, -1};
    }
    if (!t->error.empty()) continue;
    g->nodes.push_back(t->node);
    for (const OutInfo& o : t->outs)
      if (o.fresh) value(o.vid) = graph::Value{int32_t(g->nodes.size() - 1), o.meta, -1, o.views};
  }
  g->name = leaf.where;
  return g;
}

// ---- explaining keys -------------------------------------------------------------------------

namespace {

// Reads a key back, one argument at a time. Symbolic sizes are named s0, s1... in the order the
// segment's inputs meet them (`sym`: the next one's number).
struct KeyReader {
  const Key& k;
  size_t i = 0;
  int sym = 0;
  uint64_t next() { return i < k.size() ? k[i++] : 0; }
};

struct ArgView {  // one decoded argument, as text pieces to compare
  std::string kind;    // "tensor", "new tensor", "number", ...
  std::string value;   // printable value or guard summary
  std::string dtype, sizes, strides, alias;
};

// n words of a list: sizes (a symbolic one is its symbol), strides ("contiguous" for those of a
// tensor with symbolic sizes) or integers (with dynamic shapes, any integer matches: "any").
enum class Ints { Sizes, Strides, List };
std::string ints_str(KeyReader& r, uint64_t n, Ints kind = Ints::List) {
  std::string s = "{";
  bool contiguous = n > 0;
  for (uint64_t j = 0; j < n; ++j) {
    const uint64_t w = r.next();
    contiguous = contiguous && w == kContiguousStride;
    s += j ? "," : "";
    s += w != kSymbolicSize ? std::to_string(int64_t(w)) : kind == Ints::Sizes ? cat("s", r.sym++) : std::string("any");
  }
  return kind == Ints::Strides && contiguous ? "contiguous" : s + "}";
}

double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

void read_tensor(KeyReader& r, ArgView& a) {
  uint64_t w = r.next();
  if (!(w & kNewTensor)) {
    a.kind = "tensor";
    a.value = cat("%", w);
    return;
  }
  a.kind = "new tensor";
  uint64_t h = r.next();
  int ndim = int((h >> 24) & 0xff);
  a.dtype = dtype_name(DType(h & 0xff));
  if ((h >> 8) & 0xff) a.dtype += cat(" cuda:", (h >> 16) & 0xff);
  if ((h >> 48) & 1) a.dtype += " requiring grad";
  a.value = cat("offset ", int64_t(r.next()));
  a.sizes = ints_str(r, uint64_t(ndim), Ints::Sizes);
  a.strides = ints_str(r, uint64_t(ndim), Ints::Strides);
  int64_t alias = int64_t(r.next()) - 1;
  a.alias = alias < 0 ? "no other input" : cat("input %", alias);
}

ArgView read_arg(KeyReader& r) {
  ArgView a;
  uint64_t tag = r.next();
  switch (tag) {
    case kNone: a.kind = "nil"; break;
    case kTensor: read_tensor(r, a); break;
    case kNumber: {
      const uint64_t w = r.next();
      a.kind = "number";
      a.value = w == kSymbolicSize            ? "any integer (a size)"
                : !is_varying_word(w)         ? cat(as_double(w))
                : varying_kind(w) == Varying::Number  ? "any number"
                : varying_kind(w) == Varying::Integer ? "any integer"
                                                      : "any non-integer";
      break;
    }
    case kBool: a.kind = "boolean"; a.value = as_double(r.next()) != 0 ? "true" : "false"; break;
    case kInts: { a.kind = "list"; uint64_t n = r.next(); a.value = ints_str(r, n); break; }
    case kTensors: {
      a.kind = "tensor list";
      uint64_t n = r.next();
      for (uint64_t j = 0; j < n; ++j) {
        ArgView e;
        read_tensor(r, e);
        if (j) a.value += ", ";
        a.value += e.value;
        if (!e.sizes.empty()) a.value += cat(" ", e.dtype, e.sizes, " strides ", e.strides);
      }
      break;
    }
    case kString: {
      a.kind = "string";
      uint64_t n = r.next();
      std::string s(size_t(n), '\0');
      for (uint64_t j = 0; j < n; j += 8) {
        uint64_t w = r.next();
        std::memcpy(s.data() + j, &w, std::min<uint64_t>(8, n - j));
      }
      a.value = "\"" + s + "\"";
      break;
    }
    case kDoubles: {
      a.kind = "data";
      uint64_t n = r.next();
      r.next();
      std::string s;
      for (uint64_t j = 0; j < n; ++j) {
      s += j ? "," : "";
      s += cat(as_double(r.next()));
    }
      a.value = "{" + s + "}";
      break;
    }
  }
  return a;
}

std::string arg_change(const ArgView& was, const ArgView& now) {
  if (was.kind != now.kind) return cat(was.kind, " ", was.value, " -> ", now.kind, " ", now.value);
  if (was.dtype != now.dtype) return cat("dtype ", was.dtype, " -> ", now.dtype);
  if (was.sizes != now.sizes) return cat("sizes ", was.sizes, " -> ", now.sizes);
  if (was.strides != now.strides) return cat("strides ", was.strides, " -> ", now.strides);
  if (was.alias != now.alias) return cat("aliasing ", was.alias, " -> ", now.alias);
  return cat(was.kind == "new tensor" ? "storage " : "value ", was.value, " -> ", now.value);
}

std::string op_name(int op) { return Registry::get().ops()[size_t(op)].name; }

// The symbolic sizes of the new inputs up to `at` (the next symbol's number).
int symbols_before(const TraceNode& at) {
  int n = 0;
  for (const TraceNode* t : path_of(&at))
    for (const NewInput& in : t->new_inputs) n += __builtin_popcount(in.symbolic);
  return n;
}

// Compares `key` with one recorded event: the first difference, or "" when equal.
std::string first_difference(const TraceNode& was, const Key& key, int* arg) {
  const int sym = was.parent ? symbols_before(*was.parent) : 0;
  KeyReader a{was.key, 0, sym}, b{key, 0, sym};
  int op_a = int(a.next()), op_b = int(b.next());
  if (op_a != op_b) return cat(op_name(op_b), " instead of ", op_name(op_a), " (another branch or op order)");
  uint64_t na = a.next(), nb = b.next();  // (bit 32: a training segment's grad mode)
  if (na >> 32 != nb >> 32) return cat(op_name(op_a), ": grad mode ", na >> 32 ? "on" : "off", " -> ", nb >> 32 ? "on" : "off");
  na &= 0xffffffff;
  nb &= 0xffffffff;
  for (uint64_t i = 0; i < std::max(na, nb); ++i) {
    ArgView va = read_arg(a), vb = read_arg(b);
    if (va.kind != vb.kind || va.value != vb.value || va.dtype != vb.dtype || va.sizes != vb.sizes ||
        va.strides != vb.strides || va.alias != vb.alias) {
      *arg = int(i);
      return cat(op_name(op_a), ": argument ", i + 1, " (", schema_arg_name(Registry::get().ops()[size_t(op_a)], int(i)),
                 "): ", arg_change(va, vb));
    }
  }
  return "";
}

}  // namespace

std::string describe_mismatch(const TraceNode& at, const Key& key, int op, int* arg) {
  *arg = -1;
  if (at.children.empty()) return cat("a new op ", op_name(op), " where the recorded segment ended");
  const TraceNode* best = at.children.front().get();
  for (const auto& c : at.children)
    if (!c->key.empty() && int(c->key[0]) == op) best = c.get();
  std::string d = first_difference(*best, key, arg);
  if (!best->node.where.empty()) d += " (recorded at " + best->node.where + ")";
  return d;
}

namespace {

// "input 2 (%1): float32{s0,3} strides contiguous": its symbolic sizes named from *sym on.
std::string input_guard(const NewInput& in, int ordinal, int* sym) {
  graph::ValueMeta m = in.meta;
  bool symbolic = false;
  for (size_t d = 0; d < m.sizes.size(); ++d)
    if (in.symbolic >> d & 1) m.sizes[d].sym = (*sym)++, symbolic = true;
  const Shape strides = m.strides;
  m.strides = contiguous_strides(concrete(m.sizes));  // (str() leaves them out: they follow)
  const bool contiguous = strides == m.strides;
  std::string s = cat("  input ", ordinal, " (%", in.vid, "): ", m.str(), " strides ",
                      symbolic && contiguous ? "contiguous" : shape_str(strides));
  if (in.alias_of >= 0) s += cat(", shares storage with %", in.alias_of);
  return s + "\n";
}

}  // namespace

std::string describe_guards(const Leaf& leaf) {
  std::string s = cat("guards of segment ending at ", leaf.where, " (variant ", leaf.variant, "):\n");
  int inputs = 0, sym = 0;
  for (const TraceNode* t : path_of(leaf.last)) {
    for (const NewInput& in : t->new_inputs) s += input_guard(in, ++inputs, &sym);
    const graph::Node& n = t->node;
    for (size_t i = 0; i < n.args.size(); ++i) {
      const graph::Arg& a = n.args[i];
      if (a.tag == kNumber && a.varying >= 0)
        s += cat("  ", n.def().name, " argument ", i + 1, " varies", n.where.empty() ? std::string() : cat("  (", n.where, ")"), "\n");
      else if (a.tag == kNumber || a.tag == kBool || a.tag == kInts || a.tag == kString)
        s += cat("  ", n.def().name, " argument ", i + 1, " == ",
                 a.tag == kInts ? shape_str(Shape(a.ints.begin(), a.ints.end()))
                 : a.tag == kString ? a.str : cat(a.num),
                 n.where.empty() ? std::string() : cat("  (", n.where, ")"), "\n");
    }
  }
  return s;
}

}  // namespace cr::guards
