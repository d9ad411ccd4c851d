// Kernel -> libgccjit. The shape of every generated function:
//
//   load the size parameters from P (templates of dynamic graphs only)
//   for w in [w0, w1):                          work items: outer index (+ chunk of the innermost)
//     outer variables from w (div / mod, once per item)
//     for each stage d:                         Kernel::analyse: stage = reduction depth
//       outer-level values and stores           scalars, computed once per outer index
//       accumulators = init
//       for inner variables but the last:
//         for jb in blocks of kBlock (or a tuned block) of the innermost:
//           phase 0 loop: loads, inline arithmetic, stores, block temps
//           block calls (exp, erf, ...) on temps -> phase 1 loop -> ...
//           block reductions of temps (or straight from the buffer) into the accumulators
//
// Each phase loop is `for (j = 0; j < len; ++j)` over unit- or zero-stride addresses, which GCC
// vectorises (-O3, explicit -march from jit/cpu/target.cpp); the block functions are the eager
// kernels' own vectorised loops. -ffp-contract=off keeps a*b+c two roundings, as eager; where
// eager rounds once (sm::fma_), the loop IR says so (Arith "fma").
#include "jit/cpu/kernel_emitter.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "jit/cpu/builder.hpp"
#include "jit/cpu/fns.hpp"
#include "jit/cpu/helpers.hpp"
#include "jit/cpu/stream_rule.hpp"
#include "jit/cpu/target.hpp"

namespace cr::jit::cpu {

#if CRESCENT_HAVE_GCCJIT

namespace {

class KernelEmitter : FunctionBuilder {
 public:
  KernelEmitter(const GccJit& J, gcc_jit_context* c, const Types& t, const Kernel& k, const FnTable& fns,
                CodeShape shape)
      : FunctionBuilder(J, c, t), k_(k), fns_(fns), block_(shape.block), stream_from_(shape.streams_from()) {}

  gcc_jit_function* emit() {
    gcc_jit_param* ps[5];
    fn_ = new_kernel_function(J, c_, t_, k_.name, ps);
    bufs_ = J.param_as_rvalue(ps[0]);
    fnsp_ = J.param_as_rvalue(ps[1]);
    cur_ = J.function_new_block(fn_, "entry");
    typed_buffers();
    load_params(J.param_as_rvalue(ps[2]));
    load_numbers();
    start_check();
    gcc_jit_lvalue* w = local(t_.i64, "w");
    open_loop(w, J.param_as_rvalue(ps[3]), J.param_as_rvalue(ps[4]), 1);
    work_item(J.lvalue_as_rvalue(w));
    plan_row_cache();
    for (int d = 0; d <= k_.max_depth; ++d) stage(d);
    close_loop();
    if (any_streamed(k_, stream_from_)) {
      gcc_jit_rvalue* f = fn_ptr(kFenceName, t_.fence_fn);
      J.block_add_eval(cur_, nullptr, J.context_new_call_through_ptr(c_, nullptr, f, 0, nullptr));
    }
    flush_check();
    J.block_end_with_void_return(cur_, nullptr);
    return fn_;
  }

 private:
  // An integer field of the kernel (size, chunk, address coefficient): a literal, or the local
  // that holds its parameter (load_params).
  gcc_jit_rvalue* num(int64_t x) { return is_param(x) ? params_.at(param_slot(x)) : i64(x); }

  // The numbers that vary between calls (EOp::Number) are read once, at entry, into locals: loop
  // invariants, as the template parameters are (load_params).
  void load_numbers() {
    for (const Expr& e : k_.body.exprs)
      if (e.op == EOp::Number && !numbers_.count(e.site)) {
        gcc_jit_lvalue* at = J.context_new_array_access(c_, nullptr, ptrs_[size_t(k_.numbers)], i64(e.site));
        numbers_[e.site] = assign(J.lvalue_as_rvalue(at), t_.f64, "n");
      }
  }

  // ---- buffers and variables ----
  void typed_buffers() {
    std::vector<DType> dt(k_.buffers.size(), DType::f32);
    for (const Expr& e : k_.body.exprs)
      if (e.op == EOp::Load) dt[size_t(e.value)] = e.dtype;
    for (const Store& s : k_.stores) dt[size_t(s.buffer)] = k_.body.exprs[size_t(s.expr)].dtype;
    if (k_.check >= 0) dt[size_t(k_.check)] = DType::i64;
    if (k_.runtime >= 0) dt[size_t(k_.runtime)] = DType::i64;
    if (k_.numbers >= 0) dt[size_t(k_.numbers)] = DType::f64;
    for (size_t b = 0; b < dt.size(); ++b) {
      gcc_jit_rvalue* raw = J.lvalue_as_rvalue(J.context_new_array_access(c_, nullptr, bufs_, i64(int64_t(b))));
      ptrs_.push_back(assign(J.context_new_cast(c_, nullptr, raw, J.type_get_pointer(type(dt[b]))), J.type_get_pointer(type(dt[b])), "buf"));
    }
  }
  // The parameters of a template (jit/loop_ir.hpp) are read from P once, at entry, into locals:
  // GCC keeps them in registers, and they stay loop invariants it can vectorise over, which
  // reads through P would not be (a store into an int64 buffer might alias P).
  void load_params(gcc_jit_rvalue* P) {
    for (size_t j = 0, n = param_count(k_); j < n; ++j) {
      gcc_jit_lvalue* at = J.context_new_array_access(c_, nullptr, P, i64(int64_t(j)));
      params_[j] = assign(J.lvalue_as_rvalue(at), t_.i64, "p");
    }
  }
  bool parametric_sizes() const {
    return std::any_of(k_.sizes.begin(), k_.sizes.end(), [](int64_t s) { return is_param(s); });
  }
  // ceil(size / chunk): folded when both are literals, computed at run time otherwise
  gcc_jit_rvalue* chunk_count(int64_t size, int64_t chunk) {
    if (!is_param(size) && !is_param(chunk)) return i64((size + chunk - 1) / chunk);
    gcc_jit_rvalue* up = bin(t_.i64, GCC_JIT_BINARY_OP_MINUS, bin(t_.i64, GCC_JIT_BINARY_OP_PLUS, num(size), num(chunk)), i64(1));
    return assign(bin(t_.i64, GCC_JIT_BINARY_OP_DIVIDE, up, num(chunk)), t_.i64, "nch");
  }
  void work_item(gcc_jit_rvalue* w) {
    size_t nv = k_.sizes.size(), last = nv - 1;
    vars_.assign(nv, nullptr);
    gcc_jit_rvalue* rem = w;
    gcc_jit_rvalue* inner = num(k_.sizes[last]);
    lo_ = i64(0);
    hi_ = inner;
    if (k_.chunk > 0) {
      gcc_jit_rvalue* nch = chunk_count(k_.sizes[last], k_.chunk);
      gcc_jit_rvalue* ch = assign(bin(t_.i64, GCC_JIT_BINARY_OP_MODULO, rem, nch), t_.i64, "chunk");
      rem = assign(bin(t_.i64, GCC_JIT_BINARY_OP_DIVIDE, rem, nch), t_.i64, "rem");
      lo_ = assign(bin(t_.i64, GCC_JIT_BINARY_OP_MULT, ch, num(k_.chunk)), t_.i64, "lo");
      gcc_jit_lvalue* hi = local(t_.i64, "hi");
      J.block_add_assignment(cur_, nullptr, hi, bin(t_.i64, GCC_JIT_BINARY_OP_PLUS, lo_, num(k_.chunk)));
      clamp_above(hi, inner);
      hi_ = J.lvalue_as_rvalue(hi);
    }
    for (int v = k_.n_outer; v-- > 0;) {
      if (v == 0) {
        vars_[0] = assign(rem, t_.i64, "o");
        break;
      }
      gcc_jit_rvalue* size = num(k_.sizes[size_t(v)]);
      vars_[size_t(v)] = assign(bin(t_.i64, GCC_JIT_BINARY_OP_MODULO, rem, size), t_.i64, "o");
      rem = assign(bin(t_.i64, GCC_JIT_BINARY_OP_DIVIDE, rem, size), t_.i64, "rem");
    }
  }
  gcc_jit_rvalue* address(const Affine& a) {
    gcc_jit_rvalue* r = num(a.c);
    for (size_t v = 0; v < a.k.size(); ++v)
      if (a.k[v]) r = bin(t_.i64, GCC_JIT_BINARY_OP_PLUS, r, a.k[v] == 1 ? vars_[v] : bin(t_.i64, GCC_JIT_BINARY_OP_MULT, num(a.k[v]), vars_[v]));
    return r;
  }
  gcc_jit_lvalue* element(int32_t slot, const Affine& a) {
    return J.context_new_array_access(c_, nullptr, ptrs_[size_t(slot)], address(a));
  }

  // ---- the check word of gathers (vm/checks.hpp) ----
  // A position outside 1..limit reads position 1 and is remembered in locals, with selects (the
  // loop still vectorises); the function stores the last one found in the word before it returns.
  void start_check() {
    if (k_.check < 0) return;
    bad_ = local(t_.bool_, "bad");
    J.block_add_assignment(cur_, nullptr, bad_, J.context_new_rvalue_from_int(c_, t_.bool_, 0));
    for (gcc_jit_lvalue*& l : bad_word_) {
      l = local(t_.i64, "badw");
      J.block_add_assignment(cur_, nullptr, l, i64(0));
    }
  }
  gcc_jit_rvalue* gathered(const Expr& e, gcc_jit_rvalue* p) {
    auto hoisted = offsets_.find(int32_t(&e - k_.body.exprs.data()));
    gcc_jit_rvalue* off = hoisted != offsets_.end() ? hoisted->second : offset(e, p);
    gcc_jit_rvalue* at = bin(t_.i64, GCC_JIT_BINARY_OP_PLUS, address(e.index[0]), off);
    return J.lvalue_as_rvalue(J.context_new_array_access(c_, nullptr, ptrs_[size_t(e.value)], at));
  }
  // (p - 1) * stride for a position p in 1..limit; another p gives 0 and is recorded
  gcc_jit_rvalue* offset(const Expr& e, gcc_jit_rvalue* p) {
    p = assign(p, t_.i64, "pos");
    gcc_jit_rvalue* ok = assign(bin(t_.bool_, GCC_JIT_BINARY_OP_LOGICAL_AND, J.context_new_comparison(c_, nullptr, GCC_JIT_COMPARISON_GE, p, i64(1)),
                                    J.context_new_comparison(c_, nullptr, GCC_JIT_COMPARISON_LE, p, num(e.limit))),
                                t_.bool_, "ok");
    J.block_add_assignment(cur_, nullptr, bad_, bin(t_.bool_, GCC_JIT_BINARY_OP_LOGICAL_OR, J.lvalue_as_rvalue(bad_),
                                                    J.context_new_unary_op(c_, nullptr, GCC_JIT_UNARY_OP_LOGICAL_NEGATE, t_.bool_, ok)));
    gcc_jit_rvalue* found[3] = {p, num(e.limit), i64(e.site + 1)};
    for (int w = 0; w < 3; ++w)
      J.block_add_assignment(cur_, nullptr, bad_word_[w], select(ok, J.lvalue_as_rvalue(bad_word_[w]), found[w], DType::i64));
    gcc_jit_rvalue* pos = select(ok, bin(t_.i64, GCC_JIT_BINARY_OP_MINUS, p, i64(1)), i64(0), DType::i64);
    return bin(t_.i64, GCC_JIT_BINARY_OP_MULT, pos, num(e.stride));
  }
  void flush_check() {
    if (k_.check < 0) return;
    gcc_jit_block* store = J.function_new_block(fn_, nullptr);
    gcc_jit_block* next = J.function_new_block(fn_, nullptr);
    J.block_end_with_conditional(cur_, nullptr, J.lvalue_as_rvalue(bad_), store, next);
    for (int w = 0; w < 3; ++w)
      J.block_add_assignment(store, nullptr, J.context_new_array_access(c_, nullptr, ptrs_[size_t(k_.check)], i64(w)), J.lvalue_as_rvalue(bad_word_[w]));
    J.block_end_with_jump(store, nullptr, next);
    cur_ = next;
  }

  // ---- expressions ----
  // The value of expression i, built from `operand(j)` for its operands.
  gcc_jit_rvalue* build(int32_t i, const std::function<gcc_jit_rvalue*(int32_t)>& operand) {
    const Expr& e = k_.body.exprs[size_t(i)];
    auto dt = [&](int32_t j) { return k_.body.exprs[size_t(j)].dtype; };
    switch (e.op) {
      case EOp::Load: return e.gather() ? gathered(e, operand(e.a)) : J.lvalue_as_rvalue(element(e.value, e.index[0]));
      case EOp::Index: return cast(address(e.index[0]), DType::i64, e.dtype);
      case EOp::Runtime: return J.lvalue_as_rvalue(J.context_new_array_access(c_, nullptr, ptrs_[size_t(k_.runtime)], i64(e.site)));
      case EOp::Number: return numbers_.at(e.site);
      case EOp::Const: return constant(e.num, e.dtype);
      case EOp::Count: return J.context_new_cast(c_, nullptr, num(e.count), t_.f64);
      case EOp::Cast: return cast(operand(e.a), dt(e.a), e.dtype);
      case EOp::Reduced: return J.lvalue_as_rvalue(accs_.at(e.acc));
      case EOp::Select: return select(operand(e.a), operand(e.b), operand(e.c), e.dtype);
      case EOp::Arith: return arith(e, operand);
      case EOp::Call: break;
    }
    throw Error("internal: a block call built as a scalar");
  }
  gcc_jit_rvalue* arith(const Expr& e, const std::function<gcc_jit_rvalue*(int32_t)>& operand) {
    const std::string& op = e.name;
    DType in = k_.body.exprs[size_t(e.a)].dtype;
    if (op == "!") return J.context_new_unary_op(c_, nullptr, GCC_JIT_UNARY_OP_LOGICAL_NEGATE, t_.bool_, operand(e.a));
    if (e.b < 0) return J.context_new_unary_op(c_, nullptr, GCC_JIT_UNARY_OP_MINUS, type(e.dtype), operand(e.a));  // "-"
    if (op == "fma") {  // (GCC's builtin: one instruction with -mfma, vectorised as any arithmetic)
      gcc_jit_function* f = J.context_get_builtin_function(c_, e.dtype == DType::f32 ? "__builtin_fmaf" : "__builtin_fma");
      gcc_jit_rvalue* args[3] = {operand(e.a), operand(e.b), operand(e.c)};
      return J.context_new_call(c_, nullptr, f, 3, args);
    }
    gcc_jit_rvalue *a = operand(e.a), *b = operand(e.b);
    static const std::map<std::string, gcc_jit_comparison> cmp = {
        {"==", GCC_JIT_COMPARISON_EQ}, {"!=", GCC_JIT_COMPARISON_NE}, {"<", GCC_JIT_COMPARISON_LT},
        {"<=", GCC_JIT_COMPARISON_LE}, {">", GCC_JIT_COMPARISON_GT},  {">=", GCC_JIT_COMPARISON_GE}};
    if (auto it = cmp.find(op); it != cmp.end()) {
      if (in == DType::b8) {  // compare bools as integers
        a = cast(a, in, DType::i32);
        b = cast(b, in, DType::i32);
      }
      return J.context_new_comparison(c_, nullptr, it->second, a, b);
    }
    if (op == "%u") {  // int64 operands taken as unsigned (randint's bits % span)
      gcc_jit_rvalue* r = bin(t_.u64, GCC_JIT_BINARY_OP_MODULO, J.context_new_cast(c_, nullptr, a, t_.u64), J.context_new_cast(c_, nullptr, b, t_.u64));
      return J.context_new_cast(c_, nullptr, r, t_.i64);
    }
    if (op == "&&") return bin(t_.bool_, GCC_JIT_BINARY_OP_LOGICAL_AND, a, b);
    if (op == "||") return bin(t_.bool_, GCC_JIT_BINARY_OP_LOGICAL_OR, a, b);
    enum gcc_jit_binary_op bop = op == "+" ? GCC_JIT_BINARY_OP_PLUS : op == "-" ? GCC_JIT_BINARY_OP_MINUS : op == "*" ? GCC_JIT_BINARY_OP_MULT : GCC_JIT_BINARY_OP_DIVIDE;
    if (e.dtype == DType::b8) {  // bool arithmetic computes in int; the result is != 0
      gcc_jit_rvalue* r = bin(t_.i32, bop, cast(a, in, DType::i32), cast(b, in, DType::i32));
      return cast(r, DType::i32, DType::b8);
    }
    return bin(type(e.dtype), bop, a, b);
  }
  gcc_jit_rvalue* fn_ptr(const std::string& name, gcc_jit_type* ty) {
    int idx = fns_.index(name);
    gcc_jit_rvalue* raw = J.lvalue_as_rvalue(J.context_new_array_access(c_, nullptr, fnsp_, i64(idx)));
    return J.context_new_cast(c_, nullptr, raw, ty);
  }
  void call_block(const Expr& e, gcc_jit_rvalue* a, gcc_jit_rvalue* b, gcc_jit_rvalue* out, gcc_jit_rvalue* n) {
    gcc_jit_rvalue* f = fn_ptr(call_name(k_, e), t_.block_fn);
    gcc_jit_rvalue* args[4] = {a, b ? b : J.context_null(c_, t_.vptr), out, n};
    J.block_add_eval(cur_, nullptr, J.context_new_call_through_ptr(c_, nullptr, f, 4, args));
  }
  // stream_block(&buffer[store's address at the block start jb], src, n * element size)
  void stream(const Store& s, gcc_jit_rvalue* dst, gcc_jit_rvalue* src, gcc_jit_rvalue* n) {
    gcc_jit_rvalue* f = fn_ptr(kStreamName, t_.stream_fn);
    int64_t elem = int64_t(dtype_size(k_.body.exprs[size_t(s.expr)].dtype));
    gcc_jit_rvalue* args[3] = {dst, src, bin(t_.i64, GCC_JIT_BINARY_OP_MULT, n, i64(elem))};
    J.block_add_eval(cur_, nullptr, J.context_new_call_through_ptr(c_, nullptr, f, 3, args));
  }
  void call_reduce(const Accumulate& a, gcc_jit_rvalue* x, gcc_jit_rvalue* n, gcc_jit_lvalue* acc) {
    gcc_jit_rvalue* f = fn_ptr(reduce_fn_name(a), t_.reduce_fn);
    gcc_jit_rvalue* args[3] = {x, n, vptr(acc)};
    J.block_add_eval(cur_, nullptr, J.context_new_call_through_ptr(c_, nullptr, f, 3, args));
  }

  // Outer-level values: scalars, computed once per work item where first needed.
  gcc_jit_rvalue* outer(int32_t i) {
    if (auto it = outer_.find(i); it != outer_.end()) return it->second;
    const Expr& e = k_.body.exprs[size_t(i)];
    gcc_jit_rvalue* r;
    if (e.op == EOp::Call) {  // a block call of length 1 on scalars
      gcc_jit_lvalue* a = local(type(k_.body.exprs[size_t(e.a)].dtype), "ca");
      J.block_add_assignment(cur_, nullptr, a, outer(e.a));
      gcc_jit_lvalue* b = nullptr;
      if (e.b >= 0) {
        b = local(type(k_.body.exprs[size_t(e.b)].dtype), "cb");
        J.block_add_assignment(cur_, nullptr, b, outer(e.b));
      }
      gcc_jit_lvalue* o = local(type(e.dtype), "cr");
      call_block(e, vptr(a), b ? vptr(b) : nullptr, vptr(o), i64(1));
      r = J.lvalue_as_rvalue(o);
    } else if (e.op == EOp::Const) {
      r = constant(e.num, e.dtype);
    } else {
      r = assign(build(i, [this](int32_t j) { return outer(j); }), type(e.dtype), "s");
    }
    return outer_[i] = r;
  }

  // a block of block_ values: a local array, or (ptr) the block's first element in a buffer
  struct Slot {
    gcc_jit_lvalue* array = nullptr;
    gcc_jit_rvalue* ptr = nullptr;
  };

  // ---- prefetching ----
  // A kernel of several stages reads its input rows from memory in stage 0 (softmax's max,
  // layer norm's mean) and from the L1/L2 cache after that. While stage 1 computes, the block of
  // the next outer iteration's rows that stage 0 will read is prefetched, so the memory reads
  // overlap with the arithmetic of the later stages instead of stalling the next row's first
  // pass. Stage 1 rather than the last: the prefetches get all the later stages to complete in
  // (issued from the last stage they arrived late and stalled it: H35).
  void prefetch_next_row(gcc_jit_rvalue* jb, gcc_jit_rvalue* n) {
    if (k_.n_outer == 0) return;
    size_t last = k_.sizes.size() - 1, row_var = size_t(k_.n_outer - 1);
    std::set<std::pair<int32_t, std::vector<int64_t>>> seen;
    for (const Expr& e : k_.body.exprs) {
      if (e.op != EOp::Load || e.gather() || e.index[0].coef(last) != 1 || e.index[0].coef(row_var) == 0) continue;
      bool stage0 = false;  // read by stage 0 (its reductions or stores)
      for (const Accumulate& a : k_.accs) stage0 = stage0 || (k_.depth[size_t(a.expr)] == 0 && reads(a.expr, &e - k_.body.exprs.data()));
      if (!stage0 || !seen.insert({e.value, e.index[0].k}).second) continue;
      gcc_jit_rvalue* saved = vars_[last];
      vars_[last] = jb;
      gcc_jit_lvalue* first = next_row(e, row_var);
      vars_[last] = saved;
      prefetch_lines(first, n, e.dtype);
    }
  }
  // The last stage's plain stores write lines the cache must first read (write-allocate): the
  // stage before asks for the current row's lines for writing, so that those reads overlap its
  // work instead of stalling the stores (unless an earlier stage keeps its values in that row).
  void prefetch_row_stores(gcc_jit_rvalue* jb, gcc_jit_rvalue* n) {
    const size_t last = k_.sizes.size() - 1;
    auto cached = [&](const Store& s) {
      return std::any_of(row_cache_.begin(), row_cache_.end(), [&](const auto& rc) { return rc.second.output == &s; });
    };
    for (const Store& s : k_.stores) {
      if (k_.depth[size_t(s.expr)] != k_.max_depth || s.addr.coef(last) != 1 || streamed(k_, s, stream_from_) ||
          cached(s))
        continue;
      gcc_jit_rvalue* saved = vars_[last];
      vars_[last] = jb;
      gcc_jit_lvalue* first = element(s.buffer, s.addr);
      vars_[last] = saved;
      prefetch_lines(first, n, k_.body.exprs[size_t(s.expr)].dtype, true);
    }
  }
  // __builtin_prefetch of the n elements of dtype d from `first` on, one per cache line (for
  // writing: prefetchw)
  void prefetch_lines(gcc_jit_lvalue* first, gcc_jit_rvalue* n, DType d, bool write = false) {
    if (!prefetch_) prefetch_ = J.context_get_builtin_function(c_, "__builtin_prefetch");
    gcc_jit_rvalue* p = assign(J.lvalue_get_address(first, nullptr), J.type_get_pointer(type(d)), "pf");
    gcc_jit_lvalue* q = local(t_.i64, "q");
    open_loop(q, i64(0), n, 64 / int64_t(dtype_size(d)));
    gcc_jit_rvalue* at = J.lvalue_get_address(J.context_new_array_access(c_, nullptr, p, J.lvalue_as_rvalue(q)), nullptr);
    gcc_jit_rvalue* args[3] = {J.context_new_cast(c_, nullptr, at, t_.vptr),
                               J.context_new_rvalue_from_int(c_, t_.i32, 1),   // for writing
                               J.context_new_rvalue_from_int(c_, t_.i32, 3)};  // kept in every cache level
    J.block_add_eval(cur_, nullptr, J.context_new_call(c_, nullptr, prefetch_, write ? 3 : 1, args));
    close_loop();
  }
  // A pointwise kernel that calls block functions (sin, exp, ...) computes long enough per block
  // that its next reads stall if they start only when the block is done: each block prefetches
  // the unit-stride inputs 2 * block_ elements on, so that memory and arithmetic overlap.
  void prefetch_ahead(gcc_jit_rvalue* jb, gcc_jit_rvalue* n) {
    if (std::none_of(k_.body.exprs.begin(), k_.body.exprs.end(), [](const Expr& e) { return e.op == EOp::Call; })) return;
    size_t last = k_.sizes.size() - 1;
    std::set<std::pair<int32_t, std::vector<int64_t>>> seen;
    for (const Expr& e : k_.body.exprs) {
      if (e.op != EOp::Load || e.gather() || e.index[0].coef(last) != 1 || !seen.insert({e.value, e.index[0].k}).second) continue;
      gcc_jit_rvalue* saved = vars_[last];
      vars_[last] = bin(t_.i64, GCC_JIT_BINARY_OP_PLUS, jb, i64(2 * block_));
      gcc_jit_lvalue* first = element(e.value, e.index[0]);
      vars_[last] = saved;
      prefetch_lines(first, n, e.dtype);
    }
  }
  // load e's element one step further along the row variable: its constant moves by the row
  // variable's coefficient (folded, or added at run time when either is a parameter)
  gcc_jit_lvalue* next_row(const Expr& e, size_t row_var) {
    Affine next = e.index[0];
    int64_t step = next.coef(row_var);
    if (!is_param(next.c) && !is_param(step)) {
      next.c += step;
      return element(e.value, next);
    }
    gcc_jit_rvalue* at = bin(t_.i64, GCC_JIT_BINARY_OP_PLUS, address(next), num(step));
    return J.context_new_array_access(c_, nullptr, ptrs_[size_t(e.value)], at);
  }
  // whether expr `root` depends on expr `load` (each shared subexpression visited once: a walk
  // without the set is exponential in the depth of a DAG such as x = x * x repeated)
  bool reads(int32_t root, int64_t load) const {
    std::set<int32_t> seen;
    std::function<bool(int32_t)> walk = [&](int32_t i) {
      if (i == load) return true;
      if (!seen.insert(i).second) return false;
      const Expr& e = k_.body.exprs[size_t(i)];
      for (int32_t o : {e.a, e.b, e.c})
        if (o >= 0 && walk(o)) return true;
      return false;
    };
    return walk(root);
  }

  // ---- values reused across stages ----
  // A block call's values needed by several stages of an outer iteration (softmax's exp(x - max):
  // summed in stage 1, scaled in stage 2) are kept in a per-row array by the first stage and read
  // back by the later ones, instead of being computed again. The row is small (at most
  // kRowCacheBytes for all such values), so it stays in L1/L2 between the stages.
  static constexpr int64_t kRowCacheBytes = 64 << 10;
  std::vector<int32_t> stage_roots(int d) const {
    std::vector<int32_t> roots;
    for (const Store& st : k_.stores)
      if (k_.depth[size_t(st.expr)] == d && store_inner(st)) roots.push_back(st.expr);
    for (const Accumulate& a : k_.accs)
      if (k_.depth[size_t(a.expr)] == d) roots.push_back(a.expr);
    return roots;
  }
  void plan_row_cache() {
    // A template's code serves every size, so its decisions cannot depend on the row's size:
    // with parameter sizes only a row of the output holds the values (it has room for any
    // length, as eager softmax's exps), never a local array sized by the byte budget.
    const bool parametric = parametric_sizes();
    int64_t row = 1;
    for (size_t v = size_t(k_.n_outer); v < k_.sizes.size() && !parametric; ++v) row *= k_.sizes[v];
    std::map<int32_t, std::vector<int>> stages_of;  // inner call -> the stages that need it
    for (int d = 0; d <= k_.max_depth; ++d) {
      std::set<int32_t> seen;
      std::function<void(int32_t)> walk = [&](int32_t i) {
        if (!k_.inner[size_t(i)] || !seen.insert(i).second) return;
        const Expr& e = k_.body.exprs[size_t(i)];
        if (e.op == EOp::Call) stages_of[i].push_back(d);
        for (int32_t o : {e.a, e.b, e.c})
          if (o >= 0) walk(o);
      };
      for (int32_t r : stage_roots(d)) walk(r);
    }
    int64_t bytes = 0;
    for (auto& [i, st] : stages_of) {
      DType dt = k_.body.exprs[size_t(i)].dtype;
      if (st.size() < 2) continue;
      if (parametric) {
        if (const Store* out = output_row(st.back(), dt)) row_cache_[i] = {nullptr, st.front(), out};
        continue;
      }
      if (bytes + row * int64_t(dtype_size(dt)) > kRowCacheBytes) continue;
      row_cache_[i] = {nullptr, st.front(), output_row(st.back(), dt)};
      if (!row_cache_[i].output) {
        bytes += row * int64_t(dtype_size(dt));
        row_cache_[i].array = local(J.context_new_array_type(c_, nullptr, type(dt), int(row)), "row");
      }
    }
  }
  // A store of the last stage that writes a whole contiguous row of dtype dt: the cache can live
  // there (the last stage reads each element before it writes it), as eager softmax keeps its
  // exps in the output. The output row is then written while the exps are computed and is in
  // cache when the last stage rewrites it, instead of a write-only pass at the end.
  const Store* output_row(int last_stage, DType dt) const {
    for (const Store& st : k_.stores) {
      bool taken = false;
      for (const auto& [i, rc] : row_cache_) taken = taken || rc.output == &st;
      if (taken || k_.depth[size_t(st.expr)] != last_stage || !store_inner(st) || k_.body.exprs[size_t(st.expr)].dtype != dt) continue;
      int64_t stride = 1;
      bool row_major = true, known = true;  // known: the stride is a literal (no parameter in it)
      for (size_t v = k_.sizes.size(); v-- > size_t(k_.n_outer);) {
        row_major = row_major && known && st.addr.coef(v) == stride;
        known = known && !is_param(k_.sizes[v]);
        if (known) stride *= k_.sizes[v];
      }
      if (row_major) return &st;
    }
    return nullptr;
  }
  // the block at jb of a row cache: its element at the inner variables' row-major position
  Slot row_slot(gcc_jit_lvalue* array, gcc_jit_rvalue* jb) {
    size_t last = k_.sizes.size() - 1;
    gcc_jit_rvalue* at = jb;
    int64_t stride = k_.sizes[last];
    for (size_t v = last; v-- > size_t(k_.n_outer);) {
      at = bin(t_.i64, GCC_JIT_BINARY_OP_PLUS, at, bin(t_.i64, GCC_JIT_BINARY_OP_MULT, i64(stride), vars_[v]));
      stride *= k_.sizes[v];
    }
    gcc_jit_lvalue* first = J.context_new_array_access(c_, nullptr, J.lvalue_as_rvalue(array), at);
    return Slot{nullptr, assign(J.lvalue_get_address(first, nullptr), J.type_get_pointer(J.rvalue_get_type(J.lvalue_as_rvalue(first))), "rp")};
  }
  struct RowCache {
    gcc_jit_lvalue* array;
    int first;             // the stage that computes it
    const Store* output;   // or: kept in this store's row (then array is null)
  };

  // ---- stages ----
  bool store_inner(const Store& s) const {
    bool in = k_.inner[size_t(s.expr)];
    for (size_t v = size_t(k_.n_outer); v < k_.sizes.size(); ++v) in = in || s.addr.coef(v) != 0;
    return in;
  }
  void stage(int d) {
    for (const Store& s : k_.stores)
      if (k_.depth[size_t(s.expr)] == d && !store_inner(s))
        J.block_add_assignment(cur_, nullptr, element(s.buffer, s.addr), outer(s.expr));
    std::vector<const Store*> stores;
    std::vector<int> accs;
    for (const Store& s : k_.stores)
      if (k_.depth[size_t(s.expr)] == d && store_inner(s)) stores.push_back(&s);
    for (size_t a = 0; a < k_.accs.size(); ++a)
      if (k_.depth[size_t(k_.accs[a].expr)] == d) accs.push_back(int(a));
    if (stores.empty() && accs.empty()) return;
    for (int a : accs) {
      const Accumulate& ac = k_.accs[size_t(a)];
      gcc_jit_lvalue* l = local(type(ac.acc), "acc");
      J.block_add_assignment(cur_, nullptr, l, constant(reduce_init(ac.kind, ac.in), ac.acc));
      accs_[a] = l;
    }
    // outer-level operands of the inner work are hoisted before the loops
    std::vector<int32_t> roots;
    for (const Store* s : stores) roots.push_back(s->expr);
    for (int a : accs) roots.push_back(k_.accs[size_t(a)].expr);
    hoist(roots);
    size_t last = k_.sizes.size() - 1;
    if (stores.empty() && last == size_t(k_.n_outer) && only_direct_folds(accs)) {
      // a stage that only folds unit-stride loads (row sums, layer norm's mean) hands each fold
      // the whole run in one call, instead of a call per block: as the eager reduction folds a
      // row (the same blocking, so the same sum), and without a per-block horizontal merge that
      // made a compiled sum of rows of 2048 floats 1.3-1.5x slower than the eager one
      vars_[last] = lo_;
      for (int a : accs) {
        const Expr& e = k_.body.exprs[size_t(k_.accs[size_t(a)].expr)];
        gcc_jit_rvalue* x = J.context_new_cast(c_, nullptr, J.lvalue_get_address(element(e.value, e.index[0]), nullptr), t_.vptr);
        call_reduce(k_.accs[size_t(a)], x, assign(bin(t_.i64, GCC_JIT_BINARY_OP_MINUS, hi_, lo_), t_.i64, "run"), accs_.at(a));
      }
      return;
    }
    std::vector<gcc_jit_lvalue*> ivars;
    for (size_t v = size_t(k_.n_outer); v < last; ++v) {
      gcc_jit_lvalue* iv = local(t_.i64, "i");
      open_loop(iv, i64(0), num(k_.sizes[v]), 1);
      vars_[v] = J.lvalue_as_rvalue(iv);
    }
    gcc_jit_lvalue* jb = local(t_.i64, "jb");
    open_loop(jb, lo_, hi_, block_);
    block(d, J.lvalue_as_rvalue(jb), stores, accs);
    close_loop();
    for (size_t v = size_t(k_.n_outer); v < last; ++v) close_loop();
  }
  bool only_direct_folds(const std::vector<int>& accs) const {
    size_t last = k_.sizes.size() - 1;
    return !accs.empty() && std::all_of(accs.begin(), accs.end(), [&](int a) {
      const Expr& e = k_.body.exprs[size_t(k_.accs[size_t(a)].expr)];
      return e.op == EOp::Load && !e.gather() && e.index[0].coef(last) == 1;
    });
  }
  void hoist(const std::vector<int32_t>& roots) {
    std::set<int32_t> seen;
    std::function<void(int32_t)> walk = [&](int32_t i) {
      if (!seen.insert(i).second) return;
      if (!k_.inner[size_t(i)]) {
        outer(i);
        return;
      }
      const Expr& e = k_.body.exprs[size_t(i)];
      for (int32_t o : {e.a, e.b, e.c})
        if (o >= 0) walk(o);
      // a gather whose position is the same along the inner loops (index_select / embedding
      // rows): checked once here, and its inner loop reads a contiguous run
      if (e.gather() && !k_.inner[size_t(e.a)] && !offsets_.count(i)) offsets_[i] = assign(offset(e, outer(e.a)), t_.i64, "goff");
    };
    for (int32_t r : roots) walk(r);
  }

  // One block of the innermost loop: positions jb + j for j < len, in phases split by calls.
  void block(int d, gcc_jit_rvalue* jb, const std::vector<const Store*>& stores, const std::vector<int>& accs) {
    size_t last = k_.sizes.size() - 1;
    gcc_jit_lvalue* len = local(t_.i64, "len");
    J.block_add_assignment(cur_, nullptr, len, bin(t_.i64, GCC_JIT_BINARY_OP_MINUS, hi_, jb));
    clamp_above(len, i64(block_));
    gcc_jit_rvalue* n = J.lvalue_as_rvalue(len);
    if (d == 1) prefetch_next_row(jb, n);
    if (d == k_.max_depth - 1) prefetch_row_stores(jb, n);
    if (k_.accs.empty()) prefetch_ahead(jb, n);
    const auto& ex = k_.body.exprs;
    // phases and temporaries
    // a value an earlier stage left in its row cache: read like a load
    auto reused = [&](int32_t i) { auto it = row_cache_.find(i); return it != row_cache_.end() && it->second.first < d; };
    std::map<int32_t, int> phase;
    std::function<int(int32_t)> ph = [&](int32_t i) -> int {
      if (!k_.inner[size_t(i)] || reused(i)) return 0;
      if (auto it = phase.find(i); it != phase.end()) return it->second;
      const Expr& e = ex[size_t(i)];
      int p = 0;
      for (int32_t o : {e.a, e.b, e.c})
        if (o >= 0) p = std::max(p, ph(o));
      if (e.op == EOp::Call) ++p;
      return phase[i] = p;
    };
    // inner expr -> its block of values: a local array, or straight in a buffer (below)
    std::map<int32_t, Slot> temp;
    std::map<std::pair<int32_t, int>, gcc_jit_lvalue*> fill;  // outer value broadcast for a call
    auto array = [&](DType d) { return Slot{local(J.context_new_array_type(c_, nullptr, type(d), block_), "t"), nullptr}; };
    std::set<int32_t> needed;
    std::function<void(int32_t)> need = [&](int32_t i) {
      if (!k_.inner[size_t(i)] || !needed.insert(i).second || reused(i)) return;
      const Expr& e = ex[size_t(i)];
      for (int32_t o : {e.a, e.b, e.c})
        if (o >= 0) need(o);
    };
    for (const Store* s : stores) need(s->expr);
    std::vector<int> direct(accs.size(), 0);  // reductions read straight from a unit-stride buffer
    for (size_t a = 0; a < accs.size(); ++a) {
      const Expr& e = ex[size_t(k_.accs[size_t(accs[a])].expr)];
      direct[a] = e.op == EOp::Load && !e.gather() && e.index[0].coef(last) == 1;
      need(k_.accs[size_t(accs[a])].expr);
    }
    // Block calls read unit-stride loads where they lie and write their results straight into a
    // unit-stride store's buffer: no copy through a local array (a copy loop stalls on memory
    // with no arithmetic to overlap, which made a compiled exp slower than the eager one).
    std::map<int32_t, const Store*> stored_by;
    for (const Store* s : stores)
      if (ex[size_t(s->expr)].op == EOp::Call && k_.inner[size_t(s->expr)] && s->addr.coef(last) == 1 && !stored_by.count(s->expr))
        stored_by[s->expr] = s;
    auto in_buffer = [&](int32_t slot, const Affine& addr, DType d) {
      gcc_jit_rvalue* saved = vars_[last];
      vars_[last] = jb;
      gcc_jit_type* pt = J.type_get_pointer(type(d));
      gcc_jit_rvalue* p = assign(J.lvalue_get_address(element(slot, addr), nullptr), pt, "bp");
      vars_[last] = saved;
      return Slot{nullptr, p};
    };
    for (int32_t i : needed)  // the row cache's values: written by their first stage, read after
      if (auto it = row_cache_.find(i); it != row_cache_.end() && it->second.first <= d) {
        const Store* o = it->second.output;
        temp.emplace(i, o ? in_buffer(o->buffer, o->addr, ex[size_t(i)].dtype) : row_slot(it->second.array, jb));
        stored_by.erase(i);
      }
    int max_phase = 0;
    for (int32_t i : needed) {
      max_phase = std::max(max_phase, ph(i));
      const Expr& e = ex[size_t(i)];
      if (e.op == EOp::Call && !reused(i)) {
        if (temp.count(i)) {  // (its row cache)
        } else if (auto it = stored_by.find(i); it != stored_by.end()) temp.emplace(i, in_buffer(it->second->buffer, it->second->addr, e.dtype));
        else temp.emplace(i, array(e.dtype));
        for (int32_t o : {e.a, e.b}) {
          if (o < 0 || !k_.inner[size_t(o)] || temp.count(o)) continue;
          const Expr& oe = ex[size_t(o)];
          if (oe.op == EOp::Load && !oe.gather() && oe.index[0].coef(last) == 1) temp.emplace(o, in_buffer(oe.value, oe.index[0], oe.dtype));
          else temp.emplace(o, array(oe.dtype));
        }
      }
      for (int32_t o : {e.a, e.b, e.c})  // read in a later phase than it is computed in
        if (o >= 0 && k_.inner[size_t(o)] && ex[size_t(o)].op != EOp::Call && ph(o) < ph(i) && !temp.count(o))
          temp.emplace(o, array(ex[size_t(o)].dtype));
    }
    for (size_t a = 0; a < accs.size(); ++a) {
      int32_t i = k_.accs[size_t(accs[a])].expr;
      if (!direct[a] && !temp.count(i)) temp.emplace(i, array(ex[size_t(i)].dtype));
    }
    // A row cache kept in the row of a store of this stage is overwritten by that store: read
    // after the store is written (a later phase; the same one when the store is a call's), the
    // block's values are copied out first.
    std::vector<std::pair<int32_t, Slot>> copied;
    for (int32_t i : needed) {
      auto it = row_cache_.find(i);
      if (!reused(i) || !it->second.output || k_.depth[size_t(it->second.output->expr)] != d) continue;
      const int32_t w = it->second.output->expr;
      const bool call_writes = stored_by.count(w) && stored_by.at(w) == it->second.output;
      bool late = false;
      for (int32_t r : needed) {
        const Expr& e = ex[size_t(r)];
        if (e.a == i || e.b == i || e.c == i) late = late || ph(r) > ph(w) || (call_writes && ph(r) == ph(w));
      }
      if (late) copied.push_back({i, array(ex[size_t(i)].dtype)});
    }
    // streamed stores: the phase loop collects a block's values in a stack array (their kernels
    // call no block function, see streamed())
    std::map<const Store*, Slot> streams;
    for (const Store* s : stores)
      if (streamed(k_, *s, stream_from_)) streams.emplace(s, array(ex[size_t(s->expr)].dtype));
    gcc_jit_lvalue* j = local(t_.i64, "j");
    gcc_jit_rvalue* jr = J.lvalue_as_rvalue(j);
    auto at = [&](const Slot& s) {
      return s.array ? J.context_new_array_access(c_, nullptr, J.lvalue_as_rvalue(s.array), jr) : J.context_new_array_access(c_, nullptr, s.ptr, jr);
    };
    auto start = [&](const Slot& s) {
      if (!s.array) return J.context_new_cast(c_, nullptr, s.ptr, t_.vptr);
      return J.context_new_cast(c_, nullptr, J.lvalue_get_address(J.context_new_array_access(c_, nullptr, J.lvalue_as_rvalue(s.array), i64(0)), nullptr), t_.vptr);
    };
    if (!copied.empty()) {
      open_loop(j, i64(0), n, 1);
      for (auto& [i, to] : copied) J.block_add_assignment(cur_, nullptr, at(to), J.lvalue_as_rvalue(at(temp.at(i))));
      close_loop();
      for (auto& [i, to] : copied) temp[i] = to;
    }
    auto arg_ptr = [&](int32_t o, int p) -> gcc_jit_rvalue* {
      if (o < 0) return nullptr;
      if (k_.inner[size_t(o)]) return start(temp.at(o));
      return start(Slot{fill.at({o, p}), nullptr});
    };
    for (int p = 0; p <= max_phase; ++p) {
      // the calls of this phase, on arrays the previous phase filled
      for (int32_t i : needed) {
        const Expr& e = ex[size_t(i)];
        if (e.op == EOp::Call && ph(i) == p && !reused(i)) call_block(e, arg_ptr(e.a, p), arg_ptr(e.b, p), start(temp.at(i)), n);
      }
      // non-inner call arguments of the next phase are broadcast into arrays in this loop
      std::vector<std::pair<int32_t, gcc_jit_lvalue*>> fills;
      for (int32_t i : needed) {
        const Expr& e = ex[size_t(i)];
        if (e.op != EOp::Call || ph(i) != p + 1) continue;
        for (int32_t o : {e.a, e.b})
          if (o >= 0 && !k_.inner[size_t(o)] && !fill.count({o, p + 1})) fills.push_back({o, fill[{o, p + 1}] = array(ex[size_t(o)].dtype).array});
      }
      // non-direct reductions of a non-inner value fold a broadcast array
      vars_[last] = bin(t_.i64, GCC_JIT_BINARY_OP_PLUS, jb, jr);
      open_loop(j, i64(0), n, 1);
      std::map<int32_t, gcc_jit_rvalue*> val;
      std::function<gcc_jit_rvalue*(int32_t)> value = [&](int32_t i) -> gcc_jit_rvalue* {
        if (!k_.inner[size_t(i)]) return outer(i);
        if (auto it = val.find(i); it != val.end()) return it->second;
        const Expr& e = ex[size_t(i)];
        gcc_jit_rvalue* r;
        if (reused(i)) r = assign(J.lvalue_as_rvalue(at(temp.at(i))), type(e.dtype), "v");  // read once, before stores
        else if (e.op == EOp::Call || (temp.count(i) && ph(i) < p)) r = J.lvalue_as_rvalue(at(temp.at(i)));
        else r = assign(build(i, value), type(e.dtype), "v");
        return val[i] = r;
      };
      for (int32_t i : needed)  // row-cache reads first: a store below may reuse the row
        if (reused(i)) value(i);
      for (int32_t i : needed)  // (a load read in place has nothing to fill)
        if (ph(i) == p && temp.count(i) && temp.at(i).array && ex[size_t(i)].op != EOp::Call) J.block_add_assignment(cur_, nullptr, at(temp.at(i)), value(i));
      for (auto& [o, arr] : fills) J.block_add_assignment(cur_, nullptr, at(Slot{arr, nullptr}), outer(o));
      if (p == 0)  // a reduction of a value constant along the reduced dims folds it len times
        for (size_t a = 0; a < accs.size(); ++a) {
          int32_t i = k_.accs[size_t(accs[a])].expr;
          if (!k_.inner[size_t(i)] && !direct[a]) J.block_add_assignment(cur_, nullptr, at(temp.at(i)), outer(i));
        }
      for (const Store* s : stores) {  // (a call's store that the call wrote itself is done)
        if (ph(s->expr) != p || (stored_by.count(s->expr) && stored_by.at(s->expr) == s)) continue;
        auto st = streams.find(s);
        if (st == streams.end()) J.block_add_assignment(cur_, nullptr, element(s->buffer, s->addr), value(s->expr));
        else J.block_add_assignment(cur_, nullptr, at(st->second), value(s->expr));
      }
      close_loop();
      for (auto& [s, from] : streams)
        if (ph(s->expr) == p) stream(*s, start(in_buffer(s->buffer, s->addr, ex[size_t(s->expr)].dtype)), start(from), n);
      for (size_t a = 0; a < accs.size(); ++a) {
        const Accumulate& ac = k_.accs[size_t(accs[a])];
        if (ph(ac.expr) != p) continue;
        gcc_jit_rvalue* x;
        if (direct[a]) {
          vars_[last] = jb;
          x = J.context_new_cast(c_, nullptr, J.lvalue_get_address(element(ex[size_t(ac.expr)].value, ex[size_t(ac.expr)].index[0]), nullptr), t_.vptr);
        } else {
          x = start(temp.at(ac.expr));
        }
        call_reduce(ac, x, n, accs_.at(accs[a]));
      }
    }
  }

  const Kernel& k_;
  const FnTable& fns_;
  const int64_t block_;  // elements per block of the innermost loop (kBlock unless tuned)
  const int64_t stream_from_;  // stores of at least these bytes stream (see streamed())
  gcc_jit_rvalue *bufs_ = nullptr, *fnsp_ = nullptr, *lo_ = nullptr, *hi_ = nullptr;
  std::vector<gcc_jit_rvalue*> ptrs_, vars_;
  std::map<int32_t, gcc_jit_rvalue*> outer_;
  std::map<size_t, gcc_jit_rvalue*> params_;  // parameter slot -> its local
  std::map<int32_t, gcc_jit_rvalue*> numbers_;  // EOp::Number site -> its local
  std::map<int, gcc_jit_lvalue*> accs_;
  std::map<int32_t, RowCache> row_cache_;
  gcc_jit_lvalue* bad_ = nullptr;            // the check word's locals (gathers)
  std::map<int32_t, gcc_jit_rvalue*> offsets_;  // gathers at an outer-level position: their offset
  gcc_jit_lvalue* bad_word_[3] = {};
  gcc_jit_function* prefetch_ = nullptr;
};

}  // namespace

gcc_jit_function* emit_kernel(const GccJit& J, gcc_jit_context* c, const Types& t, const Kernel& k, const FnTable& fns,
                              CodeShape shape) {
  return KernelEmitter(J, c, t, k, fns, shape).emit();
}

#endif

}  // namespace cr::jit::cpu
