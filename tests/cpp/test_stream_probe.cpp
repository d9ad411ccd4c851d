// The streaming-store probe (jit/cpu/stream_probe.hpp): it measures once per machine and keeps
// its answer in the cache directory; a kept answer for another machine is measured again.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "jit/cpu/stream_probe.hpp"
#include "vm/cpu_march.hpp"

using namespace cr;
using namespace cr::jit::cpu;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream s(text);
  for (std::string l; std::getline(s, l);) lines.push_back(l);
  return lines;
}

// one of the sizes probed, or never
bool a_decision(int64_t bytes) {
  const int64_t mib = int64_t(1) << 20;
  return bytes == 8 * mib || bytes == 32 * mib || bytes == std::clamp(cpu_large_block_bytes(), 8 * mib, 64 * mib) ||
         bytes == kNeverStream;
}

}  // namespace

TEST_CASE("the streaming-store probe times both kinds of pass") {
  const StreamProbe p = probe_streaming(int64_t(1) << 20, 3);
  CHECK(p.bytes == int64_t(1) << 20);
  CHECK(p.plain_ms > 0);
  CHECK(p.streamed_ms > 0);
  CHECK(p.ratio > 0);
}

#if defined(__SSE2__)  // (elsewhere nothing streams and nothing is measured)
TEST_CASE("the streaming-store decision is measured once and kept in the cache directory") {
  const fs::path dir = fs::temp_directory_path() / ("crescent_stream_probe_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const fs::path file = dir / "cpu-streaming";

  const int64_t first = measured_stream_bytes(dir.string());  // (the directory is created)
  CHECK(a_decision(first));
  std::vector<std::string> kept = lines_of(slurp(file));
  REQUIRE(kept.size() >= 4);  // (a line per size probed: 8 MiB, 32 MiB, maybe half the cache)
  CHECK(kept[0].rfind("crescent streaming-store probe 2; cpu ", 0) == 0);
  CHECK(kept[1] == std::to_string(first));
  CHECK(kept[2].rfind("8 MiB: plain stores ", 0) == 0);
  CHECK(kept[3].find("streamed / plain") != std::string::npos);

  SECTION("a kept answer for this machine is read, not measured") {
    std::ofstream(file) << kept[0] << "\n12345\n";
    CHECK(measured_stream_bytes(dir.string()) == 12345);
  }
  SECTION("one for another machine is measured again and replaced") {
    std::ofstream(file) << kept[0] << " (another)\n12345\n";
    CHECK(a_decision(measured_stream_bytes(dir.string())));
    CHECK(lines_of(slurp(file))[0] == kept[0]);
  }
  SECTION("a damaged one too") {
    std::ofstream(file) << kept[0] << "\nmany\n";
    CHECK(a_decision(measured_stream_bytes(dir.string())));
    CHECK(lines_of(slurp(file)).size() == kept.size());
  }
  SECTION("no cache directory: measured, nothing written") {
    CHECK(a_decision(measured_stream_bytes("0")));
  }
  fs::remove_all(dir);
}
#endif
