-- A minimal program found by tests/lua/test_compile_fuzz.lua (program 468 (CRESCENT_FUZZ_SEED=7147 CRESCENT_FUZZ_ONLY=468)).
-- Kept in tests/lua/fuzz_found/, it runs with the fuzzer as a regression test; alone:
--   CRESCENT_FUZZ_FILE=tests/lua/fuzz_found/row_cache_in_output_row.lua crescent tests/lua/run.lua tests/lua/test_compile_fuzz.lua
return {
  args_src = "return function(T, call)\n  T.manual_seed(21713 + call)\n  local x, y, z\n  x, y, z = T.randn({}, {dtype = \"float64\"}), T.randn({3, 2}, {dtype = \"float32\"}), T.randn({}, {dtype = \"float64\"})\n  return x, y, z, ({2.25, 2.25, 2.25, 2.25, 1.5, -0.75, -0.75, -0.75})[call]\nend",
  found = "call 2, at .rets.3.data.2.1.1: compiled 0.91119199991226, eager 1.9180438518524",
  opts = {
    "{mode = \"reduce-overhead\", hot = 0}",
    {
      hot = 0,
      mode = "reduce-overhead"
    }
  },
  plan = {
    alias = false,
    calls = 6,
    delayed = false,
    k = {
      2.25,
      2.25,
      2.25,
      2.25,
      1.5,
      -0.75,
      -0.75,
      -0.75
    },
    kint = false,
    mutate = true,
    variant = "scalar"
  },
  rets = {
    "t18"
  },
  stmts = {
    {
      code = "t1 = y % k",
      def = "t1"
    },
    {
      code = "t2 = t1:log_softmax(2)",
      def = "t2"
    },
    {
      code = "t3 = t1:atan2(t2)",
      def = "t3"
    },
    {
      code = "t5 = T.maximum(t3, y)",
      def = "t5"
    },
    {
      code = "t8 = t5:sub(-0.25)",
      def = "t8"
    },
    {
      code = "t10 = T.atan2(t8, t8)",
      def = "t10"
    },
    {
      code = "t13 = t10:std(1, true)",
      def = "t13"
    },
    {
      code = "t14 = t13:contiguous()\nif t13:sum():item() > 0 then\nelse\n  z:clamp_(-1, 1)\nend",
      def = "t14"
    },
    {
      code = "t15 = t1:atan2(t2)",
      def = "t15"
    },
    {
      code = "t18 = t14:reshape({2})",
      def = "t18"
    }
  }
}
