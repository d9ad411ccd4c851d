// The tensor files and the kernel cache against the file system (issue 32): a failed save never
// costs the previous file or a device node, a save through a link writes its target, and what is
// not a regular file (a FIFO, /dev/zero) is refused - or a cache miss - at once, never a hang.
// Everything happens in a temporary directory of this test; an alarm turns a hang into a failure.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "jit/cache_entry.hpp"
#include "io_helpers.hpp"
#include "vm/io/io.hpp"
#include "vm/kernels/loop.hpp"

using namespace cr;
using testing::error_of;
using testing::slurp;
namespace fs = std::filesystem;

namespace {

// A fresh directory, removed with everything in it at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/crescent_test_io_files_XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  std::vector<std::string> names() const {
    std::vector<std::string> r;
    for (const auto& e : fs::directory_iterator(path)) r.push_back(e.path().filename().string());
    std::sort(r.begin(), r.end());
    return r;
  }
};

// SIGALRM's default action ends the test run: a regression that blocks fails instead of hanging.
struct HangGuard {
  HangGuard() { ::alarm(60); }
  ~HangGuard() { ::alarm(0); }
};

Tensor filled(int64_t n, float v) {
  Tensor t = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = v;
  return t;
}

mode_t kind_of(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? st.st_mode & S_IFMT : 0;
}

// Runs f with writes past `bytes` failing (EFBIG; SIGXFSZ ignored), as a full disk would.
void with_file_size_limit(rlim_t bytes, const std::function<void()>& f) {
  struct rlimit old;
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  struct rlimit lim = old;
  lim.rlim_cur = bytes;
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
  try {
    f();
  } catch (...) {
    ::setrlimit(RLIMIT_FSIZE, &old);
    ::signal(SIGXFSZ, old_handler);
    throw;
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
}

}  // namespace

TEST_CASE("save: a failed save leaves the previous file whole and no temporary file", "[io]") {
  TempDir dir;
  const std::string st = dir / "m.safetensors", npy = dir / "m.npy";
  save_safetensors(st, {{"w", filled(4, 1.0f)}});
  save_npy(npy, filled(4, 1.0f));
  REQUIRE(::chmod(st.c_str(), 0640) == 0);
  REQUIRE(::symlink("m.safetensors", (dir / "link").c_str()) == 0);
  const std::string good_st = slurp(st), good_npy = slurp(npy);
  // 1 MiB of data against a 64 KiB limit: the write fails part way, as on a full disk
  with_file_size_limit(1 << 16, [&] {
    CHECK(error_of([&] { save_safetensors(st, {{"w", filled(1 << 18, 2.0f)}}); }).find("save: " + st + ": write error") == 0);
    CHECK(error_of([&] { save_npy(npy, filled(1 << 18, 2.0f)); }).find("save_npy: " + npy + ": write error") == 0);
    CHECK(error_of([&] { save_safetensors(dir / "link", {{"w", filled(1 << 18, 2.0f)}}); }).find("write error") != std::string::npos);
  });
  CHECK(slurp(st) == good_st);
  CHECK(slurp(npy) == good_npy);
  CHECK(kind_of(dir / "link") == S_IFLNK);
  CHECK(dir.names() == std::vector<std::string>{"link", "m.npy", "m.safetensors"});
  // a successful save replaces the file and keeps its permission bits
  save_safetensors(st, {{"w", filled(8, 3.0f)}});
  auto back = load_safetensors(st);
  REQUIRE(back.size() == 1);
  CHECK(back[0].second.numel() == 8);
  CHECK((fs::status(st).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  CHECK(dir.names() == std::vector<std::string>{"link", "m.npy", "m.safetensors"});
}

TEST_CASE("save: through a symbolic link the target is replaced and the link kept", "[io]") {
  TempDir dir;
  save_safetensors(dir / "real.safetensors", {{"w", filled(2, 1.0f)}});
  REQUIRE(::symlink("real.safetensors", (dir / "link").c_str()) == 0);  // relative, as ln -s makes
  REQUIRE(::symlink((dir / "link").c_str(), (dir / "link2").c_str()) == 0);  // a chain
  save_safetensors(dir / "link2", {{"w", filled(3, 5.0f)}});
  CHECK(kind_of(dir / "link") == S_IFLNK);
  CHECK(kind_of(dir / "link2") == S_IFLNK);
  CHECK(fs::read_symlink(dir / "link") == "real.safetensors");
  auto back = load_safetensors(dir / "real.safetensors");
  REQUIRE(back.size() == 1);
  CHECK(back[0].second.numel() == 3);
  // a dangling link: the save creates the file it points at
  REQUIRE(::symlink("new.npy", (dir / "dangling").c_str()) == 0);
  save_npy(dir / "dangling", filled(2, 7.0f));
  CHECK(kind_of(dir / "dangling") == S_IFLNK);
  CHECK(kind_of(dir / "new.npy") == S_IFREG);
  CHECK(load_npy(dir / "new.npy").numel() == 2);
  // a loop of links is an error that leaves both links
  REQUIRE(::symlink("loop_b", (dir / "loop_a").c_str()) == 0);
  REQUIRE(::symlink("loop_a", (dir / "loop_b").c_str()) == 0);
  CHECK(error_of([&] { save_npy(dir / "loop_a", filled(1, 0.0f)); }).find("cannot open for writing") != std::string::npos);
  CHECK(dir.names() == std::vector<std::string>{"dangling", "link", "link2", "loop_a", "loop_b", "new.npy", "real.safetensors"});
}

TEST_CASE("save: a FIFO or a directory is refused at once and left in place", "[io]") {
  TempDir dir;
  HangGuard guard;
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  REQUIRE(::mkdir((dir / "sub").c_str(), 0700) == 0);
  CHECK(error_of([&] { save_safetensors(dir / "fifo", {{"w", filled(1, 0.0f)}}); }) ==
        "save: " + (dir / "fifo") + ": not a regular file or a character device (a FIFO)");
  CHECK(error_of([&] { save_npy(dir / "sub", filled(1, 0.0f)); }) ==
        "save_npy: " + (dir / "sub") + ": not a regular file or a character device (a directory)");
  CHECK(kind_of(dir / "fifo") == S_IFIFO);
  CHECK(kind_of(dir / "sub") == S_IFDIR);
  CHECK(dir.names() == std::vector<std::string>{"fifo", "sub"});
}

// Device nodes made in the temporary directory (1,3 is /dev/null, 1,7 /dev/full), never the
// system's: a regression that unlinks its destination must not cost the machine /dev/full.
TEST_CASE("save: a character device is written in place, a failure leaves the node", "[io]") {
  TempDir dir;
  const std::string null = dir / "null", full = dir / "full";
  if (::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0 || ::mknod(full.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0) {
    WARN("cannot create device nodes here (not root): skipped");
    return;
  }
  int probe = ::open(full.c_str(), O_WRONLY);
  if (probe < 0) {
    WARN("device nodes cannot be opened here (a container's device policy): skipped");
    return;
  }
  ::close(probe);
  HangGuard guard;
  save_safetensors(null, {{"w", filled(1000, 1.0f)}});
  CHECK(error_of([&] { save_npy(full, filled(100000, 1.0f)); }) == "save_npy: " + full + ": write error (No space left on device)");
  REQUIRE(::symlink("full", (dir / "to_full").c_str()) == 0);
  CHECK(error_of([&] { save_safetensors(dir / "to_full", {{"w", filled(100000, 1.0f)}}); }).find("write error") != std::string::npos);
  struct stat st;
  REQUIRE(::lstat(full.c_str(), &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK(st.st_rdev == makedev(1, 7));
  CHECK(kind_of(null) == S_IFCHR);
  CHECK(dir.names() == std::vector<std::string>{"full", "null", "to_full"});
}

TEST_CASE("load: a FIFO, a device or a directory is refused at once with the kind named", "[io]") {
  TempDir dir;
  HangGuard guard;
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  CHECK(error_of([&] { load_safetensors(dir / "fifo"); }) == "load: " + (dir / "fifo") + ": not a regular file (a FIFO)");
  CHECK(error_of([&] { load_npy(dir / "fifo"); }) == "load_npy: " + (dir / "fifo") + ": not a regular file (a FIFO)");
  CHECK(error_of([&] { load_safetensors(dir.path); }) == "load: " + dir.path + ": not a regular file (a directory)");
  if (kind_of("/dev/zero") == S_IFCHR) {  // read, it never ends
    REQUIRE(::symlink("/dev/zero", (dir / "zero").c_str()) == 0);
    CHECK(error_of([&] { load_safetensors(dir / "zero"); }) == "load: " + (dir / "zero") + ": not a regular file (a character device)");
    CHECK(error_of([&] { load_npy("/dev/zero"); }) == "load_npy: /dev/zero: not a regular file (a character device)");
  }
  // a link to a regular file is fine
  save_npy(dir / "x.npy", filled(3, 2.0f));
  REQUIRE(::symlink("x.npy", (dir / "x_link").c_str()) == 0);
  CHECK(load_npy(dir / "x_link").numel() == 3);
}

TEST_CASE("load: the header is checked against the file size before the data is read", "[io]") {
  TempDir dir;
  const std::string p = dir / "big.safetensors";
  {  // a header that claims 2^40 bytes of data in a file of a few hundred bytes
    std::string h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[274877906944],\"data_offsets\":[0,1099511627776]}}";
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[size_t(i)] = char(h.size() >> (8 * i));
    std::ofstream(p, std::ios::binary) << len << h << "abcd";
  }
  CHECK(error_of([&] { load_safetensors(p); }).find("run past the 4-byte data buffer") != std::string::npos);
}

TEST_CASE("kernel cache entries: a FIFO, a device or a link is a miss, not a hang", "[io]") {
  TempDir dir;
  HangGuard guard;
  const std::string key = cr::sha256_hex("kernels");
  const std::string fifo = dir / "fifo.so", link = dir / "link.so", zero = dir / "zero.cubin";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string why;
  CHECK(jit::read_file(fifo).empty());
  CHECK_FALSE(jit::check_entry(fifo, key, &why));
  CHECK(why.find("a FIFO") != std::string::npos);
  // a sealed entry reached through a link is not followed (the cache holds its own files only)
  {
    std::ofstream(dir / "real.so", std::ios::binary) << "\x7f" "ELF body";
  }
  jit::seal_entry(dir / "real.so", key);
  REQUIRE(jit::check_entry(dir / "real.so", key, &why));
  REQUIRE(::symlink("real.so", link.c_str()) == 0);
  CHECK_FALSE(jit::check_entry(link, key, &why));
  CHECK(why.find("symbolic link") != std::string::npos);
  if (kind_of("/dev/zero") == S_IFCHR) {
    REQUIRE(::symlink("/dev/zero", zero.c_str()) == 0);
    CHECK(jit::read_file(zero).empty());
  }
  // publishing over the FIFO replaces it with a regular file
  CHECK(jit::publish_file(fifo, "\x7f" "ELF new"));
  CHECK(kind_of(fifo) == S_IFREG);
  CHECK(jit::read_file(fifo) == "\x7f" "ELF new");
  std::vector<std::string> want = {"fifo.so", "link.so", "real.so"};
  if (kind_of(zero) == S_IFLNK) want.push_back("zero.cubin");
  CHECK(dir.names() == want);
}
