#!/usr/bin/env bash
# The embedding tests against an installed tree (tests/CMakeLists.txt, "embedding"):
#   hosts.sh install      BUILD PREFIX        cmake --install into PREFIX (a fresh one)
#   hosts.sh find_package SRC PREFIX WORK     a C host through find_package(crescent), static
#   hosts.sh pkg_config   SRC PREFIX WORK     the C++ host through pkg-config, libcrescent.so
#   hosts.sh subdirectory SRC WORK            a parent project that add_subdirectory()s crescent:
#                                             configured, and its embedded sources generated
# Each host is the embedding example (examples/embed/), which checks its own results.
set -euo pipefail
mode=$1
shift
run_host() {  # the host's exit status and one line of its output
  local out rc=0
  out=$("$1") || rc=$?
  echo "$out"
  [ "$rc" -eq 0 ] || { echo "FAIL: $1 exited with status $rc"; exit 1; }
  grep -q "$2" <<<"$out" || { echo "FAIL: no \"$2\" in the output of $1"; exit 1; }
}
case $mode in
  install)
    rm -rf "$2"
    cmake --install "$1" --prefix "$2"
    shared=lib/libcrescent.so
    [ -e "$1/libcrescent.so" ] || shared=  # (a build without CRESCENT_SHARED installs none)
    for f in bin/crescent include/crescent/crescent.h include/crescent/crescent.hpp lib/libcrescent.a \
             $shared lib/cmake/crescent/crescentConfig.cmake lib/pkgconfig/crescent.pc; do
      [ -e "$2/$f" ] || { echo "FAIL: $f is not installed"; exit 1; }
    done
    "$2/bin/crescent" -e 'assert(crescent.ones(2, 3):sum():item() == 6) print("installed crescent runs")'
    ;;
  find_package)
    src=$1 prefix=$2 work=$3
    rm -rf "$work"
    cmake -S "$src/tests/embed/host" -B "$work" -G Ninja -DCMAKE_BUILD_TYPE=Release \
          "-DCMAKE_PREFIX_PATH=$prefix" "-DEXAMPLE_C=$src/examples/embed/embed_example.c"
    cmake --build "$work"
    run_host "$work/host_c" "values: 2.5 4.5 6.5 8.5"
    ;;
  pkg_config)
    src=$1 prefix=$2 work=$3
    rm -rf "$work" && mkdir -p "$work"
    export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
    [ "$(pkg-config --modversion crescent)" = "$(sed -n 's/^#define CRESCENT_VERSION "\(.*\)"/\1/p' "$prefix/include/crescent/crescent.h")" ]
    # shellcheck disable=SC2046
    c++ -std=c++20 -o "$work/host_cpp" "$src/examples/embed/embed_example.cpp" $(pkg-config --cflags --libs crescent) \
        "-Wl,-rpath,$prefix/lib"
    needed=$(readelf -d "$work/host_cpp")
    grep -q 'NEEDED.*libcrescent\.so\.[0-9]*\.[0-9]*\]' <<<"$needed" ||
      { echo "FAIL: the host does not link libcrescent.so by its SONAME"; exit 1; }
    run_host "$work/host_cpp" "stats: sum 210, mean 35, ok"
    ;;
  subdirectory)
    src=$1 work=$2
    rm -rf "$work"
    cmake -S "$src/tests/embed/parent" -B "$work" -G Ninja "-DCRESCENT_SOURCE=$src" -DCRESCENT_PREBUILT_KERNELS=OFF
    # the generating commands alone (ninja would first build what the target depends on)
    for f in stdlib_embedded.cpp cuda_sources_embedded.cpp; do
      (cd "$work" && ninja -t commands -s "crescent/$f" | sh -e)
    done
    grep -q '{"ffi_api.h", R"crescent_embed(' "$work/crescent/stdlib_embedded.cpp"
    targets=$(ninja -C "$work" -t targets all)  # (not piped into grep -q: SIGPIPE under pipefail)
    grep -q '^host_c:' <<<"$targets" || { echo "FAIL: no host_c target"; exit 1; }
    echo "the parent project configures and generates crescent's sources"
    ;;
  *) echo "usage: hosts.sh install|find_package|pkg_config|subdirectory ..."; exit 2 ;;
esac
