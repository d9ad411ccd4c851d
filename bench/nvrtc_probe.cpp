// NVRTC's compile time against the kernels in a program (bench/RESULTS.md, "Cold compile of the
// training step"): synthetic GPT-like kernels (pointwise GELU chains and warp-shuffle row
// reductions) after crescent's prelude, with crescent's NVRTC options. No GPU needed.
//   g++ -O1 -std=c++20 bench/nvrtc_probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64
//       -lnvrtc -lpthread -Wl,-rpath,/usr/local/cuda/lib64 -o /tmp/nvrtc_probe   (one line)
//   sed '/end of the prelude/q' vm/kernels/cuda/prelude.cuh > /tmp/prelude.cuh
//   /tmp/nvrtc_probe /tmp/prelude.cuh KERNELS one|split|par|seq [N]
// one: one program; split: one program with -split-compile=N (0: every core); par / seq: N
// programs of KERNELS / N kernels each, on N threads at once / one after another.
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string prelude;

double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string kernel(int i) {
  std::ostringstream s;
  s << "extern \"C\" __global__ void __launch_bounds__(256) k" << i
    << "(float* __restrict__ p0, const float* __restrict__ p1, const float* __restrict__ p2) {\n typedef int idx_t;\n";
  if (i % 2 == 0) {
    s << " for (idx_t x = blockIdx.x * 256 + threadIdx.x; x < 6291456; x += gridDim.x * 256) {\n"
      << "  const idx_t i1 = x % 3072;\n  float a = p1[x], t = a + p2[i1];\n"
      << "  float u = 0.5f * t * (1.0f + tanhf(0.7978845608f * (t + 0.044715f * t * t * t)));\n"
      << "  p0[x] = u * " << i + 1 << ".5f + expf(a * " << i << ".0f);\n }\n}\n";
  } else {
    s << " __shared__ float red[8];\n const idx_t row = blockIdx.x;\n float acc = 0.0f, acc2 = 0.0f;\n"
      << " for (idx_t c = threadIdx.x; c < 768; c += 256) { float v = p1[row * 768 + c] * p2[c]; acc += v; acc2 += v * v * " << i << ".0f; }\n"
      << " for (int o = 16; o > 0; o >>= 1) { acc += __shfl_xor_sync(0xffffffffu, acc, o); acc2 += __shfl_xor_sync(0xffffffffu, acc2, o); }\n"
      << " if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc + acc2;\n __syncthreads();\n"
      << " if (threadIdx.x == 0) { float t = 0; for (int w = 0; w < 8; ++w) t += red[w]; p0[row] = rsqrtf(t / 768.0f + 1e-5f); }\n}\n";
  }
  return s.str();
}

std::string program(int first, int n) {
  std::string s = prelude;
  for (int i = first; i < first + n; ++i) s += kernel(i);
  return s;
}

double compile_ms(const std::string& src, const std::vector<std::string>& extra) {
  const double t0 = now_ms();
  nvrtcProgram p;
  nvrtcCreateProgram(&p, src.c_str(), "probe.cu", 0, nullptr, nullptr);
  std::vector<const char*> opts = {"--gpu-architecture=sm_90", "-default-device", "--std=c++17", "-minimal"};
  for (const std::string& e : extra) opts.push_back(e.c_str());
  if (nvrtcCompileProgram(p, int(opts.size()), opts.data()) != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(p, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(p, log.data());
    std::fprintf(stderr, "%s\n", log.c_str());
    std::exit(1);
  }
  nvrtcDestroyProgram(&p);
  return now_ms() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: nvrtc_probe PRELUDE KERNELS one|split|par|seq [N]\n");
    return 2;
  }
  std::stringstream text;
  text << std::ifstream(argv[1]).rdbuf();
  prelude = text.str();
  const int kernels = std::atoi(argv[2]), n = argc > 4 ? std::atoi(argv[4]) : 0;
  const std::string mode = argv[3];
  compile_ms(program(0, 1), {});  // (loads NVRTC's libraries)
  const int per = n > 0 ? (kernels + n - 1) / n : kernels;
  const double t0 = now_ms();
  if (mode == "one") {
    std::printf("%d kernels, one program: %.0f ms\n", kernels, compile_ms(program(0, kernels), {}));
  } else if (mode == "split") {
    std::printf("%d kernels, -split-compile=%d: %.0f ms\n", kernels, n, compile_ms(program(0, kernels), {"-split-compile=" + std::to_string(n)}));
  } else if (mode == "par" || mode == "seq") {
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t) {
      auto one = [&, t] { compile_ms(program(t * per, std::min(per, kernels - t * per)), {}); };
      if (mode == "par") threads.emplace_back(one);
      else one();
    }
    for (std::thread& t : threads) t.join();
    std::printf("%d kernels as %d programs, %s: %.0f ms\n", kernels, n, mode == "par" ? "at once" : "one after another", now_ms() - t0);
  }
  return 0;
}
