// vm/cpu_blas.hpp: OpenBLAS loaded as the program starts, its core named from the instruction set
// the runtime uses unless the user named one, the environment left as the user's.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "vm/cpu_blas.hpp"
#include "vm/cpu_march.hpp"

using namespace cr;

TEST_CASE("cpu blas: the core follows the widest vectors the runtime may use", "[blas]") {
  CHECK(std::string(openblas_core_for(true, true, 0)) == "SkylakeX");
  CHECK(std::string(openblas_core_for(true, true, 64)) == "SkylakeX");
  CHECK(std::string(openblas_core_for(true, true, 32)) == "Haswell");  // CRESCENT_CPU_MARCH=x86-64-v3
  CHECK(std::string(openblas_core_for(false, true, 0)) == "Haswell");
  CHECK(openblas_core_for(true, true, 16) == nullptr);  // x86-64-v2: OpenBLAS's own choice
  CHECK(openblas_core_for(false, false, 0) == nullptr);
}

TEST_CASE("cpu blas: loaded with the core named for this CPU, the environment untouched", "[blas]") {
  const Cblas& blas = cblas("test");
  REQUIRE(blas.sgemm != nullptr);
  INFO("OpenBLAS core: " << blas.core);
  CHECK(blas.user_core == (std::getenv("OPENBLAS_CORETYPE") != nullptr));  // (set while it loaded, then unset)
  const char* want = openblas_core_for(cpu_has_avx512(), cpu_has_avx2_fma(), march_vector_bytes(cpu_march_override()));
  if (blas.named) CHECK(blas.core == want);  // (not named where OpenBLAS or another thread came first)
  CHECK(!(blas.named && blas.user_core));
  // a product through it
  const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
  float c[4] = {0, 0, 0, 0};
  blas.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 3, 1.f, a, 3, b, 2, 0.f, c, 2);
  CHECK(c[0] == 58.f);
  CHECK(c[1] == 64.f);
  CHECK(c[2] == 139.f);
  CHECK(c[3] == 154.f);
}
