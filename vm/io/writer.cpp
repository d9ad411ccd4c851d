// FileWriter (vm/io/file.hpp): a save replaces its destination in one rename, never truncates it
// first, and never unlinks a path it did not create (a failed save to /dev/full once removed the
// device node).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "vm/io/file.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::io {
namespace {

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// `path` with its last component's symbolic links followed (a dangling link gives the path it
// points at, which the save creates); ELOOP in *err after 40 links.
std::string resolve_links(const std::string& path, int* err) {
  std::string p = path;
  for (int hops = 0; hops <= 40; ++hops) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::string link(size_t(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
    ssize_t n = ::readlink(p.c_str(), link.data(), link.size());
    if (n < 0 || size_t(n) >= link.size()) return p;  // changed under us: let open() report it
    link.resize(size_t(n));
    size_t slash = p.rfind('/');
    p = link[0] == '/' || slash == std::string::npos ? link : p.substr(0, slash + 1) + link;
  }
  *err = ELOOP;
  return p;
}

// A character device opened for writing in place; O_NONBLOCK until fstat confirms it is one (a
// FIFO swapped in would wait for a reader). -1 with errno set on failure.
int open_device(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  if (fd < 0) return -1;
  if (::fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) || ::fcntl(fd, F_SETFL, 0) != 0) {
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  return fd;
}

void ignore(int) {}

// The replaced file's permission bits and, where allowed, owner. Best effort: where they cannot
// be given back, the saved data is still there.
void keep_owner_and_mode(int fd, const struct stat& st) {
  if (st.st_uid != ::geteuid() || st.st_gid != ::getegid()) ignore(::fchown(fd, st.st_uid, st.st_gid));
  ignore(::fchmod(fd, st.st_mode & 07777));
}

}  // namespace

int create_temp(const std::string& target, mode_t mode, std::string* tmp_path) {
  static std::atomic<uint64_t> counter{0};
  size_t slash = target.rfind('/');
  std::string name = target.substr(slash == std::string::npos ? 0 : slash + 1).substr(0, 200);
  std::string prefix = cat(dir_of(target), "/.", name, ".tmp-", ::getpid(), "-");
  for (int attempt = 0; attempt < 100; ++attempt) {
    *tmp_path = cat(prefix, counter++);
    int fd = ::open(tmp_path->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST) return fd;  // EEXIST: left by a process of the same pid
  }
  return -1;
}

FileWriter::FileWriter(const std::string& op, const std::string& path) : op_(op), path_(path) {
  auto cannot = [&](const std::string& why) { fail(cat(op, ": ", path, ": cannot open for writing (", why, ")")); };
  if (path.empty()) cannot(std::strerror(ENOENT));
  int err = 0;
  target_ = resolve_links(path, &err);
  if (err) cannot(std::strerror(err));
  struct stat st;
  bool exists = ::stat(target_.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) cannot(std::strerror(errno));
  int fd = -1;
  if (exists && S_ISCHR(st.st_mode)) {
    fd = open_device(target_);
    if (fd < 0) cannot(std::strerror(errno));
  } else if (exists && !S_ISREG(st.st_mode)) {
    fail(cat(op, ": ", path, ": not a regular file or a character device (", file_kind(st.st_mode), ")"));
  } else if (exists && ::faccessat(AT_FDCWD, target_.c_str(), W_OK, AT_EACCESS) != 0) {
    cannot(std::strerror(errno));  // a read-only file stays so, as when it was written in place
  } else {
    fd = create_temp(target_, exists ? 0600 : 0666, &tmp_);
    int e = errno;
    if (fd < 0) cannot(cat("cannot create a temporary file in ", dir_of(target_), ": ", std::strerror(e)));
    if (exists) keep_owner_and_mode(fd, st);
  }
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    int e = errno;
    ::close(fd);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
    cannot(std::strerror(e));
  }
}

FileWriter::~FileWriter() { discard(); }

void FileWriter::discard() {
  if (f_) std::fclose(f_);
  f_ = nullptr;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
}

void FileWriter::error(const std::string& what, int err) {
  discard();
  fail(cat(op_, ": ", path_, ": ", what, " (", std::strerror(err), ")"));
}

void FileWriter::write(const void* data, size_t n) {
  if (n && std::fwrite(data, 1, n, f_) != n) error("write error", errno);
}

void FileWriter::write_tensor(const Tensor& t) {
  Tensor c = contiguous(t);
  write(c.data_bytes(), size_t(c.numel()) * c.itemsize());
}

void FileWriter::commit() {
  if (std::fflush(f_) != 0 || std::ferror(f_)) error("write error", errno);
  if (!tmp_.empty() && ::fsync(fileno(f_)) != 0) error("fsync failed", errno);
  FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) error("write error", errno);
  if (tmp_.empty()) return;
  if (std::rename(tmp_.c_str(), target_.c_str()) != 0) error(cat("cannot replace ", target_), errno);
  tmp_.clear();
  int dir = ::open(dir_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {  // the rename itself survives a crash once the directory is synced
    (void)::fsync(dir);
    ::close(dir);
  }
}

}  // namespace cr::io
