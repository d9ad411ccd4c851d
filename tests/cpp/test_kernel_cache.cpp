// The kernel cache (jit/kernel_cache.hpp) with the CUDA backend's kind of entry (`.cubin`, loaded
// as the CUDA backend loads it) and a stand-in build, so that no GPU or NVRTC is needed: entries
// are sealed, and a truncated or damaged one is removed and built again, never loaded.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "jit/cache_entry.hpp"
#include "jit/cuda/backend.hpp"
#include "jit/kernel_cache.hpp"

using namespace cr;
using namespace cr::jit;
namespace fs = std::filesystem;

namespace {

int builds = 0;

// What NVRTC would write: an ELF image (its bytes do not matter to the cache).
void stand_in_build(const Unit& u, const std::string& out) {
  ++builds;
  std::ofstream(out, std::ios::binary) << "\x7f" "ELF" << std::string(3000, 'c') << u.key;
}

Backend cubin_kind() {
  Backend b = cuda::kBackend;
  b.build = stand_in_build;
  b.keep = false;  // (so that a released artifact is looked up on disk again)
  return b;
}

std::string body_of(const Artifact& a) { return *std::static_pointer_cast<const std::string>(a); }

// A case's cache directory (emptied before and removed after), the stand-in kind and its unit.
struct CacheCase {
  fs::path dir;
  Backend b = cubin_kind();
  Unit u;
  std::string path;  // the unit's entry
  explicit CacheCase(const std::string& name)
      : dir(fs::temp_directory_path() / cat("crescent_kernel_cache_", name, "_", ::getpid())) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    u.name = name;
    u.key = sha256_hex(cat("a stand-in CUBIN ", name, " ", ::getpid()));
    path = (dir / (u.key + ".cubin")).string();
  }
  ~CacheCase() { fs::remove_all(dir); }
  std::string load(Source* from) const { return body_of(cached_artifact(b, u, dir.string(), from)); }
};

}  // namespace

TEST_CASE("kernel cache: a truncated or damaged CUBIN-kind entry is removed and built again", "[cache]") {
  const CacheCase c("truncated");
  Source from;
  builds = 0;
  const std::string first = c.load(&from);
  CHECK(from == Source::Built);
  CHECK(builds == 1);
  std::string why, body;
  REQUIRE(check_entry(c.path, c.u.key, &why, &body));  // published sealed
  CHECK(body == first);

  CHECK(c.load(&from) == first);
  CHECK(from == Source::Disk);
  CHECK(builds == 1);

  const std::string whole = read_file(c.path);
  std::string flipped = whole;
  flipped[10] = char(flipped[10] ^ 1);
  for (const std::string& bad : {whole.substr(0, whole.size() / 2), whole.substr(0, first.size()), flipped}) {
    REQUIRE(publish_file(c.path, bad));
    REQUIRE(bad.compare(0, 4, "\x7f" "ELF") == 0);  // starts as a CUBIN does
    const CacheStats before = cache_stats();
    const int built = builds;
    CHECK(c.load(&from) == first);
    CHECK(from == Source::Built);
    CHECK(builds == built + 1);
    CHECK(cache_stats().rejected == before.rejected + 1);
    CHECK(cache_stats().last_rejection.find(c.path) == 0);
    CHECK(read_file(c.path) == whole);  // the entry is whole again
  }
}

TEST_CASE("kernel cache: an entry of another kind fails the CUDA backend's load and is rebuilt", "[cache]") {
  const CacheCase c("not_elf");
  REQUIRE(publish_file(c.path, sealed("PK zip, not a CUBIN", c.u.key)));  // sealed, but no CUBIN
  const CacheStats before = cache_stats();
  Source from;
  CHECK(c.load(&from).compare(0, 4, "\x7f" "ELF") == 0);
  CHECK(from == Source::Built);
  CHECK(cache_stats().rejected == before.rejected + 1);
  CHECK(cache_stats().last_rejection.find("no CUBIN") != std::string::npos);
}
