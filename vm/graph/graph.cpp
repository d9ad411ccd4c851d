// Graph IR helpers and the printer of CRESCENT_LOGS=graph: one node a line,
//   %3 = add(%1, %2, alpha=2) : float32{4,4}    -- model.lua:12
#include "vm/graph/graph.hpp"

namespace cr::graph {

SymShape constant_shape(const Shape& s) {
  SymShape r;
  for (int64_t d : s) r.push_back(SymInt{d, -1});
  return r;
}

Shape concrete(const SymShape& s) {
  Shape r;
  for (const SymInt& d : s) r.push_back(d.value);
  return r;
}

ValueMeta meta_of(const Tensor& t) {
  return ValueMeta{constant_shape(t.sizes()), t.strides(), t.offset(), t.dtype(), t.device()};
}

std::string ValueMeta::str() const {
  std::string s = cat(dtype_name(dtype), "{");
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) s += ",";
    s += sizes[i].str();
  }
  s += "}";
  if (strides != contiguous_strides(concrete(sizes))) s += cat(" strides ", shape_str(strides));
  if (!device.is_cpu()) s += cat(" ", device_name(device));
  return s;
}

int32_t Graph::add_value(int32_t node, const ValueMeta& m) {
  values.push_back(Value{node, m, -1, -1});
  return int32_t(values.size() - 1);
}

int Graph::op_count() const {
  int n = 0;
  for (const Node& nd : nodes) n += nd.kind == NodeKind::Op;
  return n;
}

namespace {

std::string arg_str(const Arg& a) {
  auto list = [](const auto& xs, auto fmt) {
    std::string s = "{";
    for (size_t i = 0; i < xs.size(); ++i) {
      if (i) s += ",";
      s += fmt(xs[i]);
    }
    return s + "}";
  };
  switch (a.tag) {
    case kNone: return "nil";
    case kTensor: return cat("%", a.value);
    case kNumber: return a.varying >= 0 ? cat("n", a.varying, "=", a.num) : cat(a.num);  // (n0=2.5: a number that varies)
    case kBool: return a.num != 0 ? "true" : "false";
    case kInts: return list(a.ints, [](int64_t v) { return std::to_string(v); });
    case kTensors: return list(a.values, [](int32_t v) { return cat("%", v); });
    case kString: return "\"" + a.str + "\"";
    case kDoubles: return cat("data[", a.doubles.size(), "]");
  }
  return "?";
}

}  // namespace

std::string Graph::node_str(size_t i) const {
  const Node& n = nodes[i];
  std::string lhs;
  for (size_t k = 0; k < n.outs.size(); ++k) lhs += cat(k ? ", %" : "%", n.outs[k]);
  std::string rhs;
  if (n.kind == NodeKind::Input) {
    rhs = cat("input ", n.input_index + 1);
    const Value& v = values[size_t(n.outs[0])];
    if (v.alias_of >= 0) rhs += cat(" (shares storage with %", v.alias_of, ")");
  } else if (n.kind == NodeKind::Const) {
    rhs = "constant";
  } else {
    rhs = std::string(n.def().name) + "(";
    for (size_t k = 0; k < n.args.size(); ++k) rhs += cat(k ? ", " : "", arg_str(n.args[k]));
    rhs += ")";
  }
  std::string types;
  for (int32_t o : n.outs) {
    if (!types.empty()) types += ", ";
    types += values[size_t(o)].meta.str();
  }
  return cat(lhs, " = ", rhs, " : ", types);
}

std::string Graph::str() const {
  std::string s = cat("graph ", name, ": ", inputs.size(), " inputs, ", op_count(), " ops\n");
  for (size_t i = 0; i < nodes.size(); ++i) {
    s += "  " + node_str(i);
    if (!nodes[i].where.empty()) s += "    -- " + nodes[i].where;
    s += "\n";
  }
  s += "  outputs:";
  for (int32_t o : outputs) s += cat(" %", o);
  return s + "\n";
}

}  // namespace cr::graph
