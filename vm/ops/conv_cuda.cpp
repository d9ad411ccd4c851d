// conv2d on CUDA tensors through cuDNN (vm/cuda/cudnn.hpp), and its two gradients as ops of
// their own, which conv2d's rule takes on CUDA (vm/ops/conv_grad.cpp):
//   _conv2d_input_grad(grad_output, weight, input_size, stride, padding, dilation, groups)
//   _conv2d_weight_grad(grad_output, input, weight_size, stride, padding, dilation, groups)
// (cuDNN's backward data / backward filter; F.conv_transpose2d is the first; on the CPU the
// im2col / col2im kernels of vm/ops/conv.cpp, so that their rules are checked everywhere). cuDNN's
// graph API (vm/cuda/cudnn_graph.hpp) takes NCHW or channels-last operands as they are (its
// engines pick their own layout); the legacy API (its fallback, or T.backends.cudnn.api =
// "legacy") takes them NCHW contiguous. CRESCENT_LOGS=perf names the engine or algorithm cuDNN
// runs for each new shape.
#include <algorithm>
#include <climits>

#include "vm/cuda/cudnn.hpp"
#include "vm/cuda/cudnn_graph.hpp"
#include "vm/devices.hpp"
#include "vm/kernels/loop.hpp"
#include "vm/log.hpp"
#include "vm/ops/conv.hpp"

namespace cr {
namespace {

int fit(int64_t v, const char* what) {
  if (v > INT_MAX) fail(cat("convolutions through cuDNN take sizes below 2^31, got ", what, " ", v));
  return int(v);
}

// The cuDNN shape of x {N, C, H, W} * w {K, C/g, R, S} (checked), its output sizes computed.
cuda::ConvShape shape_of(const Shape& xs, const Shape& ws, DType d, const ConvParams& p) {
  cuda::ConvShape s;
  s.dtype = d;
  s.n = fit(xs[0], "batch"), s.c = fit(xs[1], "channels"), s.h = fit(xs[2], "height"), s.w = fit(xs[3], "width");
  s.k = fit(ws[0], "out_channels"), s.r = fit(ws[2], "kh"), s.s = fit(ws[3], "kw");
  s.pad_h = fit(p.ph, "padding"), s.pad_w = fit(p.pw, "padding"), s.stride_h = fit(p.sh, "stride");
  s.stride_w = fit(p.sw, "stride"), s.dil_h = fit(p.dh, "dilation"), s.dil_w = fit(p.dw, "dilation");
  s.groups = fit(p.groups, "groups");
  if (ws[0] % p.groups != 0) fail(cat("out_channels (", ws[0], ") expected to be divisible by groups (", p.groups, ")"));
  if (ws[1] * p.groups != xs[1])
    fail(cat("expected an input of ", ws[1] * p.groups, " channels (weight ", shape_str(ws), ", groups ", p.groups,
             "), got input ", shape_str(xs)));
  s.oh = fit(conv_blocks(xs[2], ws[2], p.dh, p.ph, p.sh, "height"), "output height");
  s.ow = fit(conv_blocks(xs[3], ws[3], p.dw, p.pw, p.sw, "width"), "output width");
  for (const Shape* t : {&xs, &ws}) fit(shape_numel(*t), "elements");
  fit(int64_t(s.n) * s.k * s.oh * s.ow, "output elements");
  return s;
}

void log_choice(const OpCall& c, const cuda::ConvShape& s, const std::string& chosen) {
  if (chosen.empty() || !c.ctx.logs.perf) return;
  log_line("perf", cat(c.def.name, ": ", cuda::cudnn_version_name(), " ", dtype_name(s.dtype), " input {", s.n, ",", s.c,
                       ",", s.h, ",", s.w, "} weight {", s.k, ",", s.c / s.groups, ",", s.r, ",", s.s, "} groups ",
                       s.groups, ": ", chosen));
}

// The channels-last view of a 4-D {N, C, H, W} tensor ({N, H, W, C}).
Tensor to_nhwc_view(const Tensor& t) {
  return Tensor::view_of(t, {t.size(0), t.size(2), t.size(3), t.size(1)},
                         {t.stride(0), t.stride(2), t.stride(3), t.stride(1)}, t.offset());
}

// A contiguous output (the dispatcher's are) or a contiguous buffer copied into it by `done`.
Tensor writable(const Tensor& out) {
  return out.is_contiguous() ? out : Tensor::empty(out.sizes(), out.dtype(), out.device());
}
void done(const Tensor& out, const Tensor& buffer) {
  if (buffer.data_bytes() != out.data_bytes()) copy_into(out, buffer);
}

// `t` as cuDNN's graph API takes it, with its strides in `st`: as it is when NCHW or channels-last
// dense, else a contiguous copy.
Tensor dense(const Tensor& t, int64_t* st) {
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  const bool last = !t.is_contiguous() && to_nhwc_view(t).is_contiguous();
  const int64_t nchw[4] = {c * h * w, h * w, w, 1}, nhwc[4] = {c * h * w, 1, w * c, c};
  std::copy(last ? nhwc : nchw, (last ? nhwc : nchw) + 4, st);
  return last || t.is_contiguous() ? t : contiguous(t);
}

// Runs `pass` on t = {x, w, y} (of NCHW sizes): the operand it writes (y, x or w) into a
// contiguous buffer, then into t[out]; the others as the graph API takes them (dense), NCHW
// contiguous for the legacy API, which runs when chosen or when the graph API gives no plan.
void run_pass(OpCall& c, cuda::ConvPass pass, const cuda::ConvShape& s, const Tensor (&t)[3],
              const Tensor& bias = Tensor()) {
  const int out = pass == cuda::ConvPass::forward ? 2 : pass == cuda::ConvPass::backward_data ? 0 : 1;
  const int index = t[out].device().index;
  Tensor use[3];
  cuda::ConvStrides st = cuda::contiguous_strides(s);  // (the written operand's)
  int64_t* strides[3] = {st.x, st.w, st.y};
  for (int i = 0; i < 3; ++i) use[i] = i == out ? writable(t[i]) : dense(t[i], strides[i]);
  const void* b = bias.defined() ? bias.data_bytes() : nullptr;
  std::string chosen;
  const bool ran = cuda::cudnn_api_setting() == cuda::CudnnApi::graph &&
                   cuda::cudnn_graph_conv(index, pass, s, st, use[0].data_bytes(), use[1].data_bytes(),
                                          use[2].data_bytes(), b, &chosen);
  log_choice(c, s, chosen);
  if (!ran) {
    for (int i = 0; i < 3; ++i)
      if (i != out) use[i] = contiguous(use[i]);
    cuda::cudnn_conv(index, pass, s, use[0].data_bytes(), use[1].data_bytes(), use[2].data_bytes(), b, &chosen);
    log_choice(c, s, chosen);
  }
  done(t[out], use[out]);
}

// ---- _conv2d_input_grad / _conv2d_weight_grad ------------------------------------------------------

struct GradCall {
  Tensor gy, other;  // grad_output, and the weight or the input
  Shape size;        // the input's or the weight's
  ConvParams p;
  cuda::ConvShape s;
};

// Checks grad_output {N, K, Ho, Wo} against the convolution of the input and weight sizes.
GradCall prepare_grad(const OpCall& c, bool input_grad) {
  GradCall g{c.tensor(0), c.tensor(1), {}, conv_params(c), {}};
  const std::vector<int64_t> size = c.ints(2);
  g.size.assign(size.begin(), size.end());
  const char* other = input_grad ? "weight" : "input";
  if (g.gy.dim() != 4 || g.other.dim() != 4 || g.size.size() != 4)
    fail(cat("expected 4-D grad_output and ", other, " and 4 sizes, got ", g.gy.describe(), ", ", g.other.describe(),
             " and ", g.size.size(), " sizes"));
  if (!is_floating(g.gy.dtype()) || g.other.dtype() != g.gy.dtype() || g.other.device() != g.gy.device())
    fail(cat("expected floating grad_output and ", other, " of one dtype and device, got ", g.gy.describe(), " and ",
             g.other.describe()));
  const Shape& xs = input_grad ? g.size : g.other.sizes();
  const Shape& ws = input_grad ? g.other.sizes() : g.size;
  g.s = shape_of(xs, ws, g.gy.dtype(), g.p);
  const Shape ys{xs[0], ws[0], g.s.oh, g.s.ow};
  if (g.gy.sizes() != ys)
    fail(cat("grad_output expected ", shape_str(ys), " (input ", shape_str(xs), ", weight ", shape_str(ws), "), got ",
             g.gy.describe()));
  return g;
}

std::vector<Meta> infer_grad(OpCall& c, bool input_grad) {
  GradCall g = prepare_grad(c, input_grad);
  return {{g.size, g.gy.dtype(), g.gy.device()}};
}
std::vector<Meta> infer_input_grad(OpCall& c) { return infer_grad(c, true); }
std::vector<Meta> infer_weight_grad(OpCall& c) { return infer_grad(c, false); }

void run_grad(OpCall& c, bool input_grad) {
  GradCall g = prepare_grad(c, input_grad);
  if (g.gy.device().is_cpu()) return conv2d_grad_cpu(g.gy, g.other, c.outs[0], input_grad, g.p);
  std::string why;
  if (!cuda::cudnn_available(&why)) fail("needs cuDNN: " + why);
  if (c.outs[0].numel() == 0) return;
  if (g.gy.numel() == 0 || g.other.numel() == 0) return fill_across(c.outs[0], 0);  // an empty sum
  if (input_grad) run_pass(c, cuda::ConvPass::backward_data, g.s, {c.outs[0], g.other, g.gy});
  else run_pass(c, cuda::ConvPass::backward_filter, g.s, {g.other, c.outs[0], g.gy});
}
void run_input_grad(OpCall& c) { run_grad(c, true); }
void run_weight_grad(OpCall& c) { run_grad(c, false); }

}  // namespace

void conv2d_cuda(OpCall& c, const Tensor& xin, const Tensor& win, const Tensor& bias, const ConvParams& p) {
  if (!cuda::cudnn_usable()) {
    std::vector<Tensor> r = run_on_host(c.ctx, c.def, c.args, c.nargs);
    copy_into(c.outs[0], r[0]);
    return;
  }
  const cuda::ConvShape s = shape_of(xin.sizes(), win.sizes(), xin.dtype(), p);
  const Tensor& out = c.outs[0];
  if (out.numel() == 0) return;
  if (xin.numel() == 0 || win.numel() == 0) {  // an empty sum
    if (!bias.defined()) fill_across(out, 0);
    else copy_into(out, Tensor::view_of(bias, {1, s.k, 1, 1}, {0, bias.stride(0), 0, 0}, bias.offset()));
  } else {
    run_pass(c, cuda::ConvPass::forward, s, {xin, win, out}, bias.defined() ? contiguous(bias) : Tensor());
  }
}

void register_conv_cuda(Registry& r) {
  const char* params = "stride:Is?, padding:Is?, dilation:Is?, groups:I?";
  static const std::string input = cat("grad_output:T, weight:T, input_size:Is, ", params);
  static const std::string weight = cat("grad_output:T, input:T, weight_size:Is, ", params);
  r.add(OpDef{"_conv2d_input_grad", input.c_str(), OpKind::Other, kNoMethod | kDeviceAware | kExtern, infer_input_grad,
              run_input_grad});
  r.add(OpDef{"_conv2d_weight_grad", weight.c_str(), OpKind::Other, kNoMethod | kDeviceAware | kExtern, infer_weight_grad,
              run_weight_grad});
  r.set_cast({"_conv2d_input_grad"}, CastPolicy::Lower);  // F.conv_transpose2d on CUDA (PyTorch's lower-precision list)
}

}  // namespace cr
