#include "vm/kernels/reduce.hpp"

namespace cr {

namespace {

struct Dim {
  int64_t size, in, out;  // size, input stride, output stride (0 for reduced dims)
  bool red;
};

// Dims of `in` paired with `out`'s strides; size-1 dims are dropped (they move nothing).
std::vector<Dim> pair_dims(const Tensor& in, const Tensor& out, const std::vector<bool>& reduce, ReducePlan* p) {
  if (int(reduce.size()) != in.dim()) fail("internal error: reduce mask does not match the input rank");
  const bool keepdim = out.dim() == in.dim();
  std::vector<Dim> ds;
  int od = 0;
  for (int d = 0; d < in.dim(); ++d) {
    Dim x{in.size(d), in.stride(d), 0, reduce[size_t(d)]};
    if (!x.red) x.out = out.stride(keepdim ? d : od++);
    (x.red ? p->n_red : p->n_out) *= x.size;
    if (x.size != 1) ds.push_back(x);
  }
  if (!keepdim && od != out.dim()) fail("internal error: reduce output rank does not match the kept dims");
  return ds;
}

// Merges neighbours of the same kind whose strides nest (a contiguous block of dims).
std::vector<Dim> coalesce(const std::vector<Dim>& ds) {
  std::vector<Dim> r;
  for (const Dim& d : ds) {
    if (!r.empty()) {
      Dim& b = r.back();
      if (b.red == d.red && b.in == d.in * d.size && (d.red || b.out == d.out * d.size)) {
        b.size *= d.size;
        b.in = d.in;
        b.out = d.out;
        continue;
      }
    }
    r.push_back(d);
  }
  return r;
}

void fill_plan(const std::vector<Dim>& ds, ReducePlan* p) {
  p->nk = p->nr = 0;
  for (const Dim& d : ds) {
    if (d.red) {
      p->rsize[p->nr] = d.size;
      p->rin[p->nr++] = d.in;
    } else {
      p->ksize[p->nk] = d.size;
      p->kin[p->nk] = d.in;
      p->kout[p->nk++] = d.out;
    }
  }
}

}  // namespace

bool plan_reduce(const Tensor& in, const Tensor& out, const std::vector<bool>& reduce, bool ordered, ReducePlan* p) {
  *p = ReducePlan{};
  std::vector<Dim> ds = pair_dims(in, out, reduce, p);
  if (p->n_out == 0 || p->n_red == 0) {  // nothing is read: only the output offsets matter
    std::vector<Dim> kept;
    for (const Dim& d : ds)
      if (!d.red) kept.push_back(d);
    fill_plan(kept, p);
    return true;
  }
  if (!ordered)  // the fold does not care about order: walk memory in address order
    std::stable_sort(ds.begin(), ds.end(), [](const Dim& a, const Dim& b) { return a.in > b.in; });
  ds = coalesce(ds);
  if (ds.empty()) ds.push_back(Dim{1, 1, 0, false});  // a single element
  // the innermost dim must be the unit-stride one (ordered folds also need it to be last)
  if (ds.back().in != 1) return false;
  p->inner = ds.back().red;
  fill_plan(ds, p);
  return true;
}

int64_t ReducePlan::kept_in(int64_t o) const {
  int64_t off = 0;
  for (int d = nk - 1; d >= 0 && o; --d) {
    off += (o % ksize[d]) * kin[d];
    o /= ksize[d];
  }
  return off;
}

int64_t ReducePlan::kept_out(int64_t o) const {
  int64_t off = 0;
  for (int d = nk - 1; d >= 0 && o; --d) {
    off += (o % ksize[d]) * kout[d];
    o /= ksize[d];
  }
  return off;
}

int64_t ReducePlan::red_in(int64_t r) const {
  if (nr == 1) return r * rin[0];
  int64_t off = 0;
  for (int d = nr - 1; d >= 0 && r; --d) {
    off += (r % rsize[d]) * rin[d];
    r /= rsize[d];
  }
  return off;
}

}  // namespace cr
