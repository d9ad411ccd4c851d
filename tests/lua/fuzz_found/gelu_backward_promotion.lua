-- A minimal program found by tests/lua/test_compile_fuzz.lua (program 251 (CRESCENT_FUZZ_SEED=20445693 CRESCENT_FUZZ_ONLY=251)).
-- Kept in tests/lua/fuzz_found/, it runs with the fuzzer as a regression test; alone:
--   CRESCENT_FUZZ_FILE=tests/lua/fuzz_found/gelu_backward_promotion.lua crescent tests/lua/run.lua tests/lua/test_compile_fuzz.lua
return {
  args_src = "return function(T, call)\n  T.manual_seed(64632 + call)\n  local x, y, z\n  x, y, z = T.randint(-5, 6, {20}):view({4, 5}), T.randn({}, {dtype = \"float32\"}), T.randn({}, {dtype = \"float64\"})\n  return x, y, z, ({2, 2, 2, 2, 2, 2, 2, 2})[call]\nend",
  found = "torch accepts at call 13 (_gelu_backward, chain mode): crescent returns a result; torch raises RuntimeError: itensor_view_from_dense expects float/bfloat16 tensor input",
  opts = {
    "default"
  },
  plan = {
    alias = false,
    calls = 6,
    delayed = true,
    k = {
      2,
      2,
      2,
      2,
      2,
      2,
      2,
      2
    },
    kint = true,
    mutate = false,
    variant = "none"
  },
  rets = {},
  stmts = {
    {
      code = "t1 = y:double()",
      def = "t1"
    },
    {
      code = "t2 = t1:mul(0.5)",
      def = "t2"
    },
    {
      code = "t4 = T.erf(x)",
      def = "t4"
    },
    {
      code = "t5 = t2:squeeze():sub_(t1)",
      def = "t5"
    },
    {
      code = "t7 = T._gelu_backward(t5, t4)",
      def = "t7"
    }
  }
}
