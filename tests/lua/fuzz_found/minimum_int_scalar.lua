-- A minimal program found by tests/lua/test_compile_fuzz.lua (program 1571 (CRESCENT_FUZZ_SEED=8675309 CRESCENT_FUZZ_ONLY=1571)).
-- Kept in tests/lua/fuzz_found/, it runs with the fuzzer as a regression test; alone:
--   CRESCENT_FUZZ_FILE=tests/lua/fuzz_found/minimum_int_scalar.lua crescent tests/lua/run.lua tests/lua/test_compile_fuzz.lua
return {
  args_src = "return function(T, call)\n  T.manual_seed(96528 + call)\n  local x, y, z\n  if call == 3 or call == 4 then x, y, z = T.randn({4, 4}, {dtype = \"float32\"}):permute(2, 1), T.randn({3}, {dtype = \"float32\"}), T.randn({}, {dtype = \"float32\"}) else x, y, z = T.randn({4, 4}, {dtype = \"float32\"}), T.randn({3}, {dtype = \"float32\"}), T.randn({}, {dtype = \"float32\"}) end\n  return x, y, z, ({-1, -1, -1, -1, -1, -1, -1, -1})[call]\nend",
  found = "torch differs at call 29 (minimum, op mode): dtype int32, torch int64",
  opts = {
    "{hot = 0}",
    {
      hot = 0
    }
  },
  plan = {
    alias = false,
    alt = {
      {
        dtype = "float32",
        layout = "t",
        shape = {
          4,
          4
        }
      },
      {
        dtype = "float32",
        layout = "plain",
        shape = {
          3
        }
      },
      {
        dtype = "float32",
        layout = "expand",
        shape = {}
      }
    },
    calls = 6,
    delayed = true,
    k = {
      -1,
      -1,
      -1,
      -1,
      -1,
      -1,
      -1,
      -1
    },
    kint = true,
    mutate = true,
    variant = "layout"
  },
  rets = {},
  stmts = {
    {
      code = "t9 = T.where(z:eq(z), z, 0):clamp(-1e9, 1e9):int()",
      def = "t9"
    },
    {
      code = "t11 = t9:contiguous()",
      def = "t11"
    },
    {
      code = "t15 = t11:amax()",
      def = "t15"
    },
    {
      code = "t23 = T.minimum(t15, k)",
      def = "t23"
    }
  }
}
