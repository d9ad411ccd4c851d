-- A minimal program found by tests/lua/test_compile_fuzz.lua (program 50 (CRESCENT_FUZZ_SEED=20445693 CRESCENT_FUZZ_ONLY=50)).
-- Kept in tests/lua/fuzz_found/, it runs with the fuzzer as a regression test; alone:
--   CRESCENT_FUZZ_FILE=tests/lua/fuzz_found/gelu_backward_broadcast.lua crescent tests/lua/run.lua tests/lua/test_compile_fuzz.lua
return {
  args_src = "return function(T, call)\n  T.manual_seed(2561 + call)\n  local x, y, z\n  x, y, z = T.randn({}, {dtype = \"float32\"}), T.randn({1, 3, 2}, {dtype = \"float32\"}):expand({5, 3, 2}), T.randn({4, 1}, {dtype = \"float32\"})\n  return x, y, z, ({-0.75, 1.5, -0.75, -0.75, 1.5, 2.25, -0.75, 1.5})[call]\nend",
  found = "torch accepts at call 16 (_gelu_backward, chain mode): crescent returns a result; torch raises RuntimeError: could not create a primitive descriptor for a reorder primitive",
  opts = {
    "{mode = \"reduce-overhead\"}",
    {
      mode = "reduce-overhead"
    }
  },
  plan = {
    alias = false,
    calls = 4,
    delayed = false,
    k = {
      -0.75,
      1.5,
      -0.75,
      -0.75,
      1.5,
      2.25,
      -0.75,
      1.5
    },
    kint = false,
    mutate = false,
    variant = "scalar"
  },
  rets = {},
  stmts = {
    {
      code = "t2 = T.stack({y, y}, 1)",
      def = "t2"
    },
    {
      code = "t5 = t2:softmax(4)",
      def = "t5"
    },
    {
      code = "t6 = y:log_softmax(1)",
      def = "t6"
    },
    {
      code = "t11 = T._gelu_backward(t6, t5)",
      def = "t11"
    }
  }
}
