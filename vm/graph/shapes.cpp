// Shape rules for replaying segments with symbolic sizes (dynamic shapes). A replayed event of
// a static segment hands Lua tensors with the recorded layouts; with symbolic sizes the layouts
// depend on this call's sizes, so they are derived here from the arguments - without running the
// op. Every rule is conservative: when it cannot vouch for the result (no rule for the op, or the
// call would not return what was recorded - a copy where a view was, another number of pieces),
// it answers false and the recorder treats the event as a guard failure: the op then runs
// eagerly and is recorded, which is always right. Every rule is the op's registry entry's:
//
//  - ops with an `infer` rule (pointwise, reductions, joins, linalg, creation, ...): infer,
//    whose outputs are contiguous (the dispatcher allocates them so);
//  - conversions: OpDef::conversion, a contiguous copy or the input itself;
//  - views, split and chunk: the op itself, on headers.
// Lazy arguments get "phantom" storage - a storage without memory - meanwhile, since views (and
// infer rules that take views, as matmul's) only compute headers; a reshape that must copy gives
// a copy without memory (PhantomScope).
// Ops with none (in-place ops, those whose sizes depend on values) are guard failures; an update
// that writes its arguments and returns nothing (the optimizers') has nothing to derive.

#include "vm/graph/segment.hpp"

namespace cr::graph {

namespace {

bool contiguous_meta(const ValueMeta& m) {
  return m.offset == 0 && m.strides == contiguous_strides(concrete(m.sizes));
}

ValueMeta contiguous_like(const Shape& sizes, const ValueMeta& recorded) {
  return ValueMeta{constant_shape(sizes), contiguous_strides(sizes), 0, recorded.dtype, recorded.device};
}

// The tensor arguments that have no storage yet (values of this segment) get phantom storage
// while `fn` runs, and lose it after.
template <typename F>
void with_phantoms(const cr_value* args, int nargs, F&& fn) {
  std::vector<cr_tensor*> lazy;
  for (cr_tensor* t : tensor_args(args, nargs))
    if (!t->_storage) lazy.push_back(t);
  std::vector<Storage*> phantoms;
  for (cr_tensor* t : lazy) {
    Storage* p = storage_wrap(nullptr, 0, Device{t->_dev_type, t->_dev_index}, [](void*, void*) {}, nullptr);
    phantoms.push_back(p);
    t->_storage = p;
  }
  auto restore = [&] {
    for (size_t i = 0; i < lazy.size(); ++i) {
      lazy[i]->_storage = nullptr;
      storage_release(phantoms[i]);
    }
  };
  try {
    fn();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

// Views, split, chunk: run on headers (phantom dispatch: a reshape that must copy gives its copy's
// layout). Each output must share an argument's storage exactly when it did when recorded: a view
// that became a copy, or the reverse, changes what writes reach.
bool derive_views(OpCall& c, const std::vector<guards::OutInfo>& recorded, std::vector<ValueMeta>& metas) {
  {
    PhantomScope phantom;
    c.def.run(c);
  }
  if (c.outs.size() != recorded.size()) return false;
  const std::vector<cr_tensor*> args = tensor_args(c.args, c.nargs);
  for (size_t i = 0; i < c.outs.size(); ++i) {
    if (!recorded[i].fresh) return false;
    bool view = false;
    for (cr_tensor* a : args) view = view || a->_storage == c.outs[i].get()->_storage;
    if (view != (recorded[i].views >= 0)) return false;
    metas[i] = meta_of(c.outs[i]);
  }
  return true;
}

// Conversions: the copy their rule (OpDef::conversion) says they make, or the input itself.
bool derive_conversion(OpCall& c, const std::vector<guards::OutInfo>& recorded, std::vector<ValueMeta>& metas) {
  Meta m;
  if (recorded.size() != 1 || c.def.conversion(c, &m) != recorded[0].fresh) return false;
  const guards::OutInfo& o = recorded[0];
  if (!o.fresh) return true;  // it returns its argument, as when recorded
  if (!contiguous_meta(o.meta) || m.dtype != o.meta.dtype || !(m.device == o.meta.device)) return false;
  metas[0] = contiguous_like(m.sizes, o.meta);
  return true;
}

// Ops with an infer rule: their fresh outputs are contiguous tensors of the inferred metadata.
bool derive_inferred(OpCall& c, const std::vector<guards::OutInfo>& recorded, std::vector<ValueMeta>& metas) {
  std::vector<Meta> inferred = c.def.infer(c);
  if (inferred.size() != recorded.size()) return false;
  for (size_t i = 0; i < inferred.size(); ++i) {
    const guards::OutInfo& o = recorded[i];
    if (!o.fresh) return false;
    if (!contiguous_meta(o.meta) || inferred[i].dtype != o.meta.dtype || !(inferred[i].device == o.meta.device))
      return false;
    metas[i] = contiguous_like(inferred[i].sizes, o.meta);
  }
  return true;
}

}  // namespace

bool derive_outputs(Context& ctx, int op, const cr_value* args, int nargs, const std::vector<guards::OutInfo>& recorded,
                    std::vector<ValueMeta>& metas) {
  const OpDef& def = Registry::get().ops()[size_t(op)];
  metas.assign(recorded.size(), ValueMeta{});
  if (def.writes && !def.infer && recorded.empty()) return true;  // (an update that returns nothing)
  OpCall c{ctx, def, args, nargs, {}, {}};
  bool ok = false;
  try {
    // (infer rules may take views of their arguments too, as matmul's does, or convert them:
    // phantom calls, which read no memory)
    PhantomScope phantom;
    with_phantoms(args, nargs, [&] {
      switch (output_rule(def)) {
        case OutputRule::Infer: ok = derive_inferred(c, recorded, metas); break;
        case OutputRule::Headers: ok = derive_views(c, recorded, metas); break;
        case OutputRule::Conversion: ok = derive_conversion(c, recorded, metas); break;
        case OutputRule::None: break;
      }
    });
  } catch (const Error&) {
    ok = false;  // the op would fail with these sizes: running it eagerly raises its own error
  }
  c.outs.clear();  // the headers made meanwhile (the last references to the phantoms)
  return ok;
}

}  // namespace cr::graph
