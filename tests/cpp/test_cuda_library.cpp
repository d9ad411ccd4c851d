// jit/cuda's fixed code: NVRTC itself (loading, options) and the library kernels written once as
// CUDA C (cumsum, sort / topk, selections, scatter, fused attention, ...) compile to CUBIN for
// sm_90 in every dtype and head size, without a warning; the build's prebuilt CUBINs
// (vm/cuda/prebuilt.hpp) are those of the current sources. No GPU needed; skipped (with a
// warning) where NVRTC cannot be loaded. CRESCENT_TEST_CUDA_DUMP=dir writes the attention sources
// there. (Generated kernels: test_cuda_emit.cpp.)
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "graph_builder.hpp"
#include "jit/cache_entry.hpp"
#include "jit/cuda/backend.hpp"
#include "vm/kernels/cuda/attention.hpp"
#include "vm/kernels/cuda/attention_simt.hpp"
#include "vm/kernels/cuda/attention_bwd.hpp"
#include "vm/kernels/cuda/attention_decode.hpp"
#include "vm/kernels/cuda/bincount.hpp"
#include "vm/kernels/cuda/cross_entropy.hpp"
#include "vm/kernels/cuda/gemv.hpp"
#include "vm/kernels/cuda/int8_mm.hpp"
#include "vm/kernels/cuda/layer_norm.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/optim.hpp"
#include "vm/kernels/cuda/radix.hpp"
#include "vm/kernels/cuda/scatter.hpp"
#include "vm/kernels/cuda/select.hpp"
#include "vm/cuda/nvrtc.hpp"
#include "vm/cuda/prebuilt.hpp"
#include "jit/jit.hpp"

using namespace cr;
using namespace cr::testing;
using namespace cr::jit;

namespace {

bool have_nvrtc() { return available(nvrtc_for_tests, "NVRTC unavailable, CUDA library tests skipped"); }

// Whether `source` compiles to a CUBIN for sm_90 without a warning (NVRTC has no
// warnings-as-errors option: the log of a successful compile must be empty).
bool compiles_clean(const std::string& source, const char* name) {
  std::string log;
  const std::string bin = cr::cuda::compile_cubin(source, name, "sm_90", &log);
  INFO(name << ": " << log);
  CHECK(log.empty());
  return bin.compare(0, 4, "\x7f" "ELF") == 0 && log.empty();
}

}  // namespace

TEST_CASE("cuda: NVRTC loads and reports a version", "[cuda]") {
  if (!have_nvrtc()) return;
  CHECK(cr::cuda::nvrtc_version().rfind("nvrtc ", 0) == 0);
  WARN(cr::cuda::nvrtc_version());
  CHECK_THROWS_WITH(cr::cuda::compile_cubin("__global__ void f() { undefined_thing(); }", "bad.cu"),
                    Catch::Contains("bad.cu") && Catch::Contains("undefined_thing"));
  std::string log;  // (what compiles_clean reads: a warning lands in the log of a success)
  const char* warns = "extern \"C\" __global__ void f(float* p) { int unused; p[0] = 1.0f; }";
  cr::cuda::compile_cubin(warns, "warn.cu", "sm_90", &log);
  CHECK_THAT(log, Catch::Contains("unused"));
}

TEST_CASE("cuda: CRESCENT_NVRTC_OPTIONS reaches NVRTC", "[cuda]") {
  if (!have_nvrtc()) return;
  const char* src = "extern \"C\" __global__ void f(float* p) { p[threadIdx.x] = 1.0f; }";
  ::setenv("CRESCENT_NVRTC_OPTIONS", "  -lineinfo   --no-such-option ", 1);
  CHECK(cr::cuda::nvrtc_options() == "-lineinfo --no-such-option");
  CHECK_THROWS_WITH(cr::cuda::compile_cubin(src, "opts.cu"), Catch::Contains("no-such-option"));  // NVRTC refused it
  ::setenv("CRESCENT_NVRTC_OPTIONS", "-lineinfo", 1);
  CHECK(!cr::cuda::compile_cubin(src, "opts.cu").empty());
  ::unsetenv("CRESCENT_NVRTC_OPTIONS");
  CHECK(cr::cuda::nvrtc_options().empty());
}

// Library kernels are launched to start while the previous kernel runs (vm/cuda/launch.hpp):
// each must wait for it (cr::grid_wait(), griddepcontrol.wait in PTX) or it reads stale inputs.
TEST_CASE("cuda: every library kernel waits for the previous kernel before it runs", "[cuda]") {
  if (!have_nvrtc()) return;
  const std::pair<const char*, std::string> modules[] = {
      {"cumsum", cr::cuda::cumsum_source(DType::f32)},
      {"sort", cr::cuda::sort_source(DType::f32)},
      {"radix", cr::cuda::radix_source(DType::f32)},
      {"optim", cr::cuda::optim_source(DType::f32)},
      {"scatter", cr::cuda::scatter_source(DType::f32)},
      {"scatter_reduce", cr::cuda::scatter_reduce_source(DType::f32)},
      {"bincount", cr::cuda::bincount_source(DType::i64, DType::f32)},
      {"select", cr::cuda::select_source(DType::f32)},
      {"layer_norm", cr::cuda::layer_norm_source(DType::f32)},
      {"cross_entropy", cr::cuda::cross_entropy_source(DType::bf16, DType::f32)},
      {"int8_mm", cr::cuda::int8_mm_source(DType::f32, DType::f32)},
      {"gemv", cr::cuda::gemv_source(DType::bf16, false, DType::f32)},
      {"gemv_int8", cr::cuda::gemv_source(DType::f32, true, DType::f32)},
      {"attention", cr::cuda::attention_source(DType::bf16, 64)},
      {"attention_f32", cr::cuda::attention_simt_source(64, 64, 227 << 10)},
      {"attention_decode", cr::cuda::attention_decode_source(DType::bf16, 64, 64)},
      {"attention_bwd", cr::cuda::attention_backward_source(DType::f32, 64, 64)},
      {"attention_bwd_tc", cr::cuda::attention_backward_tc_source(DType::bf16, 64)},
  };
  int entries = 0;
  for (const auto& [name, source] : modules) {
    const std::string ptx = cr::cuda::compile_ptx(source, name);
    for (size_t at = ptx.find(".entry "); at != std::string::npos;) {
      const size_t next = ptx.find(".entry ", at + 1);
      const std::string entry = ptx.substr(at, next == std::string::npos ? std::string::npos : next - at);
      INFO(name << ": " << entry.substr(0, entry.find('(')));
      CHECK(entry.find("griddepcontrol.wait") != std::string::npos);
      ++entries, at = next;
    }
  }
  CHECK(entries > 40);
}

TEST_CASE("cuda: the library kernels (cumsum, sort, radix sort) compile to CUBIN for every dtype", "[cuda]") {
  if (!have_nvrtc()) return;
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    INFO(cr::dtype_name(d));
    CHECK(compiles_clean(cr::cuda::cumsum_source(d), "cumsum"));
  }
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::b8}) {
    INFO(cr::dtype_name(d));
    CHECK(compiles_clean(cr::cuda::sort_source(d), "sort"));
    CHECK(compiles_clean(cr::cuda::radix_source(d), "radix"));
  }
}

TEST_CASE("cuda: the optimizer updates, scatter_add and scatter_reduce compile to CUBIN for every dtype", "[cuda]") {
  if (!have_nvrtc()) return;
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(cr::dtype_name(d));
    CHECK(compiles_clean(cr::cuda::optim_source(d), "optim"));
  }
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::b8}) {
    INFO(cr::dtype_name(d));
    CHECK(compiles_clean(cr::cuda::scatter_source(d), "scatter"));
    if (d != DType::b8) CHECK(compiles_clean(cr::cuda::scatter_reduce_source(d), "scatter_reduce"));
  }
}

TEST_CASE("cuda: bincount compiles to CUBIN for every value and result dtype", "[cuda]") {
  if (!have_nvrtc()) return;
  for (DType x : {DType::i32, DType::i64})
    for (DType out : {DType::i64, DType::f32, DType::f64}) {
      INFO(cr::dtype_name(x) << " values, " << cr::dtype_name(out) << " bins");
      CHECK(compiles_clean(cr::cuda::bincount_source(x, out), "bincount"));
    }
}

TEST_CASE("cuda: the selections (masked_select, nonzero, index, index_put) compile for every dtype", "[cuda]") {
  if (!have_nvrtc()) return;
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::b8}) {
    INFO(cr::dtype_name(d));
    std::string log;
    const std::string bin = cr::cuda::compile_cubin(cr::cuda::select_source(d), "select", "sm_90", &log);
    CHECK(log.empty());
    for (const char* fn :
         {"count_mask", "count_nonzero", "masked_select_write", "nonzero_write", "index_gather", "index_put"})
      CHECK(bin.find(std::string(1, '\0') + fn + std::string(1, '\0')) != std::string::npos);
  }
}

TEST_CASE("cuda: the layer_norm and cross_entropy kernels compile to CUBIN for every floating dtype", "[cuda]") {
  if (!have_nvrtc()) return;
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(cr::dtype_name(d));
    CHECK(compiles_clean(cr::cuda::layer_norm_source(d), "layer_norm"));
    CHECK(compiles_clean(cr::cuda::cross_entropy_source(d, d), "ce"));
  }
  for (DType d : {DType::f16, DType::bf16}) {  // (a 16-bit input's float32 loss: autocast)
    INFO(cr::dtype_name(d) << " scores, float32 loss");
    CHECK(compiles_clean(cr::cuda::cross_entropy_source(d, DType::f32), "ce"));
  }
}

TEST_CASE("cuda: the GEMV and int8 dequantisation kernels compile to CUBIN for every floating dtype", "[cuda]") {
  if (!have_nvrtc()) return;
  auto dump = [](const std::string& name, const std::string& src) {
    if (const char* dir = std::getenv("CRESCENT_TEST_CUDA_DUMP")) std::ofstream(cat(dir, "/", name, ".cu")) << src;
  };
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (DType s : {DType::f32, DType::f16, DType::bf16}) {
      INFO(cr::dtype_name(d) << " input, " << cr::dtype_name(s) << " scales");
      const std::string src = cr::cuda::int8_mm_source(d, s), gemv = cr::cuda::gemv_source(d, true, s);
      dump(cat("int8_mm_", cr::dtype_name(d), "_", cr::dtype_name(s)), src);
      dump(cat("gemv_", cr::dtype_name(d), "_int8_", cr::dtype_name(s)), gemv);
      CHECK(compiles_clean(src, "int8_mm"));
      CHECK(compiles_clean(gemv, "gemv"));
    }
    if (d == DType::f64) continue;  // (float64 products stay with cuBLAS)
    INFO(cr::dtype_name(d) << " weights");
    const std::string dense = cr::cuda::gemv_source(d, false, DType::f32);
    dump(cat("gemv_", cr::dtype_name(d)), dense);
    CHECK(compiles_clean(dense, "gemv"));
  }
}

TEST_CASE("cuda: the float32 attention kernel compiles to CUBIN for its head sizes", "[cuda]") {
  if (!have_nvrtc()) return;
  for (auto [e, ev] : {std::pair{64, 64}, {128, 128}, {4, 16}, {20, 48}, {96, 96}, {64, 32}, {128, 16}}) {
    INFO("head sizes " << e << " / " << ev);
    CHECK(cr::cuda::attention_takes(DType::f32, 32, e, ev, 0.125));
    const std::string src = cr::cuda::attention_simt_source(e, ev, 227 << 10);  // (an H100's block)
    CHECK(cr::cuda::simt_shape(e, ev, 227 << 10).rows() == 128);
    CHECK(cr::cuda::simt_shape(e, ev, 99 << 10).shared_bytes(ev) <= (99 << 10));  // (a GPU of less)
    if (const char* dir = std::getenv("CRESCENT_TEST_CUDA_DUMP")) std::ofstream(cat(dir, "/attention_f32_", e, "_", ev, ".cu")) << src;
    CHECK(compiles_clean(src, "attention"));
  }
  CHECK_FALSE(cr::cuda::attention_takes(DType::f32, 64, 64, 40, 0.125));   // (v's head size: a multiple of 16)
  CHECK_FALSE(cr::cuda::attention_takes(DType::f32, 64, 66, 64, 0.125));   // (q's: a multiple of 4)
  CHECK_FALSE(cr::cuda::attention_takes(DType::f32, 64, 256, 64, 0.125));  // (at most 128)
  CHECK_FALSE(cr::cuda::attention_takes(DType::f32, 64, 64, 64, 0.0));
  CHECK_FALSE(cr::cuda::attention_takes(DType::f32, 31, 64, 64, 0.125));  // (a few query rows: the composite)
  CHECK(cr::cuda::simt_shape(128, 128, 16 << 10).rows() == 0);  // (no block fits: the composite)
}

TEST_CASE("cuda: the fused attention kernel compiles to CUBIN for each 16-bit dtype and head size", "[cuda]") {
  if (!have_nvrtc()) return;
  for (DType d : {DType::f16, DType::bf16})
    for (int e : {16, 32, 64, 128}) {
      INFO(dtype_name(d) << " head size " << e);
      CHECK(cr::cuda::attention_takes(d, 1, e, e, 0.125));
      const std::string src = cr::cuda::attention_source(d, e);
      if (const char* dir = std::getenv("CRESCENT_TEST_CUDA_DUMP")) std::ofstream(cat(dir, "/attention_", dtype_name(d), "_", e, ".cu")) << src;
      CHECK(compiles_clean(src, "attention"));
    }
  CHECK_FALSE(cr::cuda::attention_takes(DType::f64, 64, 64, 64, 0.125));
  CHECK_FALSE(cr::cuda::attention_takes(DType::f16, 64, 64, 32, 0.125));
  CHECK_FALSE(cr::cuda::attention_takes(DType::f16, 64, 96, 96, 0.125));
  CHECK_FALSE(cr::cuda::attention_takes(DType::f16, 64, 64, 64, -0.125));  // (a negative scale: the composite)
}

TEST_CASE("cuda: the split (decoding) attention kernel compiles to CUBIN for each dtype and head size", "[cuda]") {
  if (!have_nvrtc()) return;
  const std::pair<int, int> sizes[] = {{64, 64}, {128, 128}, {20, 48}, {1, 1}, {128, 16}};
  for (DType d : {DType::f32, DType::f16, DType::bf16})
    for (auto [e, ev] : sizes) {
      if (d != DType::f32 && e != 64) continue;  // (NVRTC's time: the other sizes once)
      INFO(dtype_name(d) << " head sizes " << e << " / " << ev);
      for (int64_t l : {1, 8}) CHECK(cr::cuda::attention_takes(d, l, e, ev, 0.125));
      const std::string src = cr::cuda::attention_decode_source(d, e, ev);
      if (const char* dir = std::getenv("CRESCENT_TEST_CUDA_DUMP"))
        std::ofstream(cat(dir, "/attention_decode_", dtype_name(d), "_", e, "_", ev, ".cu")) << src;
      CHECK(compiles_clean(src, "attention_decode"));
    }
  CHECK_FALSE(cr::cuda::attention_decode_takes(DType::f64, 1, 64, 64));
  CHECK_FALSE(cr::cuda::attention_decode_takes(DType::f32, 9, 64, 64));    // (at most 8 query rows)
  CHECK_FALSE(cr::cuda::attention_decode_takes(DType::f32, 1, 256, 64));   // (head sizes up to 128)
  CHECK_FALSE(cr::cuda::attention_takes(DType::f32, 1, 64, 64, -0.125));   // (a negative scale: the composite)
  // the key axis cut into whole tiles, about two blocks per SM, every split with keys
  for (int64_t bh : {1, 12, 192, 5000})
    for (int64_t s : {0, 1, 7, 64, 300, 1024, 2048, 100000}) {
      const cr::cuda::DecodeSplits sp = cr::cuda::attention_decode_splits(bh, s, 132);
      INFO(bh << " heads, " << s << " keys: " << sp.splits << " x " << sp.chunk);
      CHECK(sp.chunk % 32 == 0);
      CHECK(sp.splits * sp.chunk >= s);
      CHECK((sp.splits - 1) * sp.chunk < std::max<int64_t>(s, 1));
      CHECK((sp.splits == 1 || bh * (sp.splits - 1) < 2 * 132));
    }
  CHECK(cr::cuda::attention_decode_splits(12, 384, 132).splits == 12);  // (GPT-2's decode step: 144 blocks)
  // as thread-block clusters (sm_90, one query row): 1, 2, 4 or 8 splits whose chunks cover the
  // keys, trailing ones possibly empty; the CUBIN has a kernel for each cluster size
  const std::string cubin =
      cr::cuda::compile_cubin(cr::cuda::attention_decode_source(DType::f32, 64, 64), "clusters.cu", "sm_90");
  for (int64_t bh : {1, 12, 100, 192, 5000})
    for (int64_t s : {0, 1, 7, 64, 300, 384, 1024, 100000}) {
      const cr::cuda::DecodeSplits sp = cr::cuda::attention_decode_splits(bh, s, 132, true);
      INFO(bh << " heads, " << s << " keys, clusters: " << sp.splits << " x " << sp.chunk);
      CHECK(sp.chunk % 32 == 0);
      CHECK(sp.splits * sp.chunk >= s);
      CHECK((sp.splits == 1 || sp.splits == 2 || sp.splits == 4 || sp.splits == 8));
      CHECK(sp.cluster == (sp.splits > 1));
      if (sp.cluster) CHECK(cubin.find(cat("attention_row_1_c", sp.splits) + '\0') != std::string::npos);
    }
  const cr::cuda::DecodeSplits gpt2 = cr::cuda::attention_decode_splits(12, 384, 132, true);
  CHECK((gpt2.cluster && gpt2.splits == 8 && gpt2.chunk == 64));  // (96 blocks, the last 2 of a head idle)
  CHECK(cr::cuda::attention_decode_splits(192, 384, 132, true).splits == 2);  // (batch 16)
}

TEST_CASE("cuda: a static KV cache's write found in the k and v views it fills (cache_row)", "[cuda]") {
  // GPT-2's layer: the cache {2, B, H, S, E}; index_put_'s self is it with the slot dim first,
  // its values the new k and v of c_attn's output {B, 1, 3 H E} laid out alike
  const int64_t H = 4, S = 10, E = 8;
  const Tensor kv = Tensor::empty({2, 1, H, S, E}, DType::f32, Device{});
  const Tensor c = Tensor::empty({1, 1, 3 * H * E}, DType::f32, Device{});
  const Tensor dst = Tensor::view_of(kv, {S, 2, 1, H, E}, {E, H * S * E, H * S * E, S * E, 1}, 0);
  const Tensor src = Tensor::view_of(c, {1, 2, 1, H, E}, {3 * H * E, H * E, 3 * H * E, E, 1}, H * E);
  const Tensor k = Tensor::view_of(kv, {1, H, S, E}, {H * S * E, S * E, E, 1}, 0);
  const Tensor v = Tensor::view_of(kv, {1, H, S, E}, {H * S * E, S * E, E, 1}, H * S * E);
  cr::cuda::CacheRow kr, vr;
  REQUIRE(cr::cuda::cache_row(dst, src, k, &kr));
  REQUIRE(cr::cuda::cache_row(dst, src, v, &vr));
  CHECK(kr.offset == H * E);  // (k's columns of c: after q's)
  CHECK(vr.offset == 2 * H * E);
  CHECK((kr.s0 == 0 && kr.s1 == E && vr.s1 == E));
  CHECK(kr.taken == std::vector<char>{0, 0, 0, 1, 1});
  CHECK(kr.fixed == std::vector<int64_t>{0, 0, 0, 0, 0});
  CHECK(vr.fixed == std::vector<int64_t>{0, 1, 0, 0, 0});
  // views the write does not fill row by row: another storage, another slot stride, elements
  // apart, a slot axis of another length
  const Tensor other = Tensor::empty({1, H, S, E}, DType::f32, Device{});
  CHECK_FALSE(cr::cuda::cache_row(dst, src, other, &kr));
  CHECK_FALSE(cr::cuda::cache_row(dst, src, Tensor::view_of(kv, {1, H, S, E}, {H * S * E, E, H * E, 1}, 0), &kr));
  CHECK_FALSE(cr::cuda::cache_row(dst, src, Tensor::view_of(kv, {1, H, E, S}, {H * S * E, S * E, 1, E}, 0), &kr));
  CHECK_FALSE(cr::cuda::cache_row(dst, src, Tensor::view_of(kv, {1, H, S - 1, E}, {H * S * E, S * E, E, 1}, 0), &kr));
  // new rows whose elements are not contiguous (a transposed c_attn output)
  const Tensor strided = Tensor::view_of(c, {1, 2, 1, H, E}, {3 * H * E, H * E, 3 * H * E, 1, H}, H * E);
  CHECK_FALSE(cr::cuda::cache_row(dst, strided, k, &kr));
}

TEST_CASE("cuda: the fused attention backward compiles to CUBIN for each dtype and head size (tensor cores too)", "[cuda]") {
  if (!have_nvrtc()) return;
  const std::pair<int, int> sizes[] = {{32, 32}, {64, 64}, {128, 128}, {20, 48}, {1, 1}};
  for (DType d : {DType::f32, DType::f16, DType::bf16})
    for (auto [e, ev] : sizes) {
      if (d != DType::f32 && e != 64 && e != 128) continue;  // (NVRTC's time: the other sizes once)
      INFO(dtype_name(d) << " head sizes " << e << " / " << ev);
      CHECK(cr::cuda::attention_backward_takes(d, e, ev));
      const std::string src = cr::cuda::attention_backward_source(d, e, ev);
      if (const char* dir = std::getenv("CRESCENT_TEST_CUDA_DUMP"))
        std::ofstream(cat(dir, "/attention_bwd_", dtype_name(d), "_", e, "_", ev, ".cu")) << src;
      CHECK(compiles_clean(src, "attention_bwd"));
      if (!cr::cuda::attention_backward_tc_takes(d, e, ev)) continue;
      const std::string tc = cr::cuda::attention_backward_tc_source(d, e);
      if (const char* dir = std::getenv("CRESCENT_TEST_CUDA_DUMP"))
        std::ofstream(cat(dir, "/attention_bwd_tc_", dtype_name(d), "_", e, ".cu")) << tc;
      CHECK(compiles_clean(tc, "attention_bwd_tc"));
    }
  // tensor cores: 16-bit dtypes, equal head sizes 64 / 128 (the rest on the FMA pipes)
  CHECK(cr::cuda::attention_backward_tc_takes(DType::bf16, 128, 128));
  CHECK_FALSE(cr::cuda::attention_backward_tc_takes(DType::f32, 64, 64));
  CHECK_FALSE(cr::cuda::attention_backward_tc_takes(DType::f16, 32, 32));
  CHECK_FALSE(cr::cuda::attention_backward_tc_takes(DType::f16, 64, 128));
  CHECK_FALSE(cr::cuda::attention_backward_takes(DType::f64, 64, 64));
  CHECK_FALSE(cr::cuda::attention_backward_takes(DType::f32, 256, 64));
  CHECK_FALSE(cr::cuda::attention_backward_takes(DType::f16, 64, 0));
}

TEST_CASE("cuda: the build's library CUBINs are those of the current sources, and the kernel cache serves them", "[cuda]") {
  if (!have_nvrtc()) return;
  if (cr::cuda::prebuilt_table().empty()) {
    WARN("this build has no prebuilt CUBINs (CRESCENT_PREBUILT_KERNELS=OFF, or no NVRTC at build time)");
    return;
  }
  const std::vector<cr::cuda::LibraryInstance> instances = cr::cuda::prebuilt_instances();
  REQUIRE(cr::cuda::prebuilt_table().size() == instances.size());
  for (const cr::cuda::LibraryInstance& li : instances) {
    INFO(li.name);
    const cr::cuda::PrebuiltCubin* p = cr::cuda::find_prebuilt(li.source, "sm_90");
    REQUIRE(p != nullptr);
    const std::string bin(reinterpret_cast<const char*>(p->data), p->size);
    CHECK(bin.compare(0, 4, "\x7f" "ELF") == 0);
    auto starts = [&](const char* p) { return li.name.rfind(p, 0) == 0; };
    const char* fn = starts("attention_decode_") ? "attention_combine"
                     : starts("attention_f32") ? "attention_simt"
                     : starts("attention_")  ? "attention_fwd"
                     : starts("cumsum_")     ? "cumsum_rows"
                     : starts("gemv_")       ? "gemv_kn_1_8_8"
                     : starts("optim_")      ? "fused_adam"
                     : starts("radix_")      ? "radix_onesweep"
                     : starts("scatter_")    ? "scatter_add"
                     : starts("select_")     ? "index_gather"
                                             : "sort_lines";
    CHECK(bin.find(std::string(1, '\0') + fn + std::string(1, '\0')) != std::string::npos);
    // another architecture, a changed source, extra NVRTC options: not this CUBIN
    CHECK(cr::cuda::find_prebuilt(li.source, "sm_80") == nullptr);
    CHECK(cr::cuda::find_prebuilt(li.source + "\n// changed\n", "sm_90") == nullptr);
    ::setenv("CRESCENT_NVRTC_OPTIONS", "-lineinfo", 1);
    CHECK(cr::cuda::find_prebuilt(li.source, "sm_90") == nullptr);
    ::unsetenv("CRESCENT_NVRTC_OPTIONS");
  }
  // the table holds what NVRTC makes of the source now (one instance: a float32 one takes seconds)
  const cr::cuda::LibraryInstance& f16 = instances[1];
  REQUIRE(f16.name == "attention_float16_64");
  const cr::cuda::PrebuiltCubin* p = cr::cuda::find_prebuilt(f16.source, "sm_90");
  REQUIRE(p != nullptr);
  CHECK(cr::cuda::compile_cubin(f16.source, "attention.cu", "sm_90") == std::string(reinterpret_cast<const char*>(p->data), p->size));
  // the kernel cache answers from the table: nothing compiled, counted as prebuilt
  const CacheStats before = cache_stats();
  CHECK(cuda_cubin(instances[0].source, "attention", "sm_90", "").size() == cr::cuda::find_prebuilt(instances[0].source, "sm_90")->size);
  const CacheStats after = cache_stats();
  CHECK(after.compiled == before.compiled);
  CHECK(after.prebuilt + after.memory_hits == before.prebuilt + before.memory_hits + 1);
}

TEST_CASE("cuda: a compiled CUBIN lands whole in the disk cache, no temporary file left", "[cuda]") {
  if (!have_nvrtc()) return;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / cat("crescent_cubin_cache_", ::getpid());
  fs::remove_all(dir);
  const std::string src = cat("extern \"C\" __global__ void f(float* p) { p[threadIdx.x] = ", ::getpid() % 1000, ".5f; }");
  const std::string bin = cuda_cubin(src, "disk.cu", "sm_90", dir.string());
  std::vector<fs::path> files;
  for (const fs::directory_entry& f : fs::directory_iterator(dir)) files.push_back(f.path());
  REQUIRE(files.size() == 1);
  CHECK(files[0].filename() == jit::cuda::cubin_key(src, "sm_90") + ".cubin");
  std::string why, body;
  CHECK(check_entry(files[0].string(), jit::cuda::cubin_key(src, "sm_90"), &why, &body));  // sealed
  CHECK(body == bin);
  fs::remove_all(dir);
}

// A truncated CUBIN that still starts with ELF (what a full disk or a killed writer leaves) is
// rejected by its seal, removed and compiled again; the entry is then whole.
TEST_CASE("cuda: a truncated CUBIN entry in the disk cache is compiled again", "[cuda]") {
  if (!have_nvrtc()) return;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / cat("crescent_cubin_truncated_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string src = cat("extern \"C\" __global__ void g(float* p) { p[threadIdx.x] = ", ::getpid() % 1000, ".25f; }");
  const std::string key = jit::cuda::cubin_key(src, "sm_90"), path = (dir / (key + ".cubin")).string();
  const std::string whole = sealed(std::string("\x7f" "ELF") + std::string(4000, 'x'), key);
  REQUIRE(publish_file(path, whole.substr(0, whole.size() / 2)));
  const CacheStats before = cache_stats();
  const std::string bin = cuda_cubin(src, "truncated.cu", "sm_90", dir.string());
  const CacheStats after = cache_stats();
  CHECK(bin.compare(0, 4, "\x7f" "ELF") == 0);
  CHECK(after.rejected == before.rejected + 1);
  CHECK(after.last_rejection.find("no cache trailer") != std::string::npos);
  CHECK(after.cuda_compiled == before.cuda_compiled + 1);
  std::string why, body;
  CHECK(check_entry(path, key, &why, &body));
  CHECK(body == bin);
  fs::remove_all(dir);
}
