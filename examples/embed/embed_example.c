/* Embedding crescent in a C program (API.md section 8): the same steps as embed_example.cpp
 * through the plain C API - status codes, opaque handles and crescent_last_error(). */
#include <crescent/crescent.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                             \
  do {                                                                          \
    crescent_status st_ = (call);                                               \
    if (st_ != CRESCENT_OK) {                                                   \
      fprintf(stderr, "%s: %s\n", crescent_status_name(st_), crescent_last_error()); \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

static const char* kModel =
    "function affine(x, a, b)\n"
    "  return x * a + b, x:sum():item()\n"
    "end\n"
    "function fill_(x, v) x:fill_(v) end\n"
    "function broken(x)\n"
    "  local y = x:view(7)\n"
    "  return y\n"
    "end\n";

int main(void) {
  crescent_vm* vm = crescent_vm_create();
  if (!vm) {
    fprintf(stderr, "crescent_vm_create: %s\n", crescent_last_error());
    return 1;
  }
  CHECK(crescent_run_string(vm, kModel)); /* errors name it [string "function affine..."] */

  double data[4] = {1, 2, 3, 4};
  int64_t sizes[2] = {2, 2};
  crescent_tensor* x = NULL;
  CHECK(crescent_tensor_from_blob(data, 2, sizes, NULL, CRESCENT_FLOAT64, "cpu", NULL, NULL, &x));

  crescent_value args[3] = {crescent_tensor_value(x), crescent_number(2), crescent_number(0.5)};
  crescent_value res[2];
  int n = 0;
  CHECK(crescent_call(vm, "affine", args, 3, res, 2, &n));
  printf("affine returned %d values\n", n);
  crescent_tensor* y = res[0].tensor;
  printf("y: ndim %d, sizes {%lld, %lld}, dtype %d\n", crescent_tensor_ndim(y), (long long)crescent_tensor_size(y, 0),
         (long long)crescent_tensor_size(y, 1), crescent_tensor_dtype(y));
  double out[4];
  CHECK(crescent_tensor_copy_to(y, CRESCENT_FLOAT64, out, sizeof out));
  printf("values: %g %g %g %g\n", out[0], out[1], out[2], out[3]);
  printf("sum of x: %g\n", res[1].number);
  char* text = crescent_tensor_to_string(y);
  printf("%s\n", text);
  free(text);
  crescent_tensor_release(y);

  /* zero-copy: Lua writes into the host buffer */
  crescent_value fill_args[2] = {crescent_tensor_value(x), crescent_number(7)};
  CHECK(crescent_call(vm, "fill_", fill_args, 2, NULL, 0, NULL));
  printf("after fill_: data[0] = %g, data[3] = %g\n", data[0], data[3]);

  /* an error: a status code, and the message with its Lua traceback */
  crescent_status st = crescent_call(vm, "broken", args, 1, NULL, 0, NULL);
  printf("broken: %s\n%s\n", crescent_status_name(st), crescent_last_error());

  crescent_tensor_release(x);
  crescent_vm_destroy(vm); /* Lua lets go of its references to x before `data` goes away */
  return (out[0] == 2.5 && data[3] == 7 && st == CRESCENT_LUA_ERROR) ? 0 : 1;
}
