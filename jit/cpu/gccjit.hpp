// libgccjit, loaded lazily: crescent never links against libgccjit (the GPU host has none), it
// dlopen()s "libgccjit.so.0" the first time gccjit() is called and resolves every entry point it
// uses into a table of function pointers. <libgccjit.h> is included for its types only.
//
// When the build did not find <libgccjit.h> (CMake sets CRESCENT_HAVE_GCCJIT=0), GccJit is only
// declared and gccjit() always returns nullptr; code that emits through the table must be inside
// `#if CRESCENT_HAVE_GCCJIT`.
//
// Usage:
//   std::string why;
//   const cr::jit::cpu::GccJit* jit = cr::jit::cpu::gccjit(&why);
//   if (!jit) { /* fall back to eager; `why` says why */ }
//   gcc_jit_context* ctxt = jit->context_acquire();
//   ...
#pragma once
#include <string>

#ifndef CRESCENT_HAVE_GCCJIT
#if __has_include(<libgccjit.h>)
#define CRESCENT_HAVE_GCCJIT 1
#else
#define CRESCENT_HAVE_GCCJIT 0
#endif
#endif

#if CRESCENT_HAVE_GCCJIT
#include <libgccjit.h>
#endif

namespace cr::jit::cpu {

#if CRESCENT_HAVE_GCCJIT

// Every libgccjit entry point crescent resolves, without the gcc_jit_ prefix. Adding one is one
// line here; all must exist in the loaded library or the whole load fails (checked against GCC
// 12's libgccjit, LIBGCCJIT_ABI_24, which exports all of these).
#define CRESCENT_GCCJIT_FUNCTIONS(X)                                                             \
  /* contexts and options */                                                                     \
  X(context_acquire)                                                                             \
  X(context_release)                                                                             \
  X(context_new_child_context)                                                                   \
  X(context_set_str_option)                                                                      \
  X(context_set_int_option)                                                                      \
  X(context_set_bool_option)                                                                     \
  X(context_set_bool_allow_unreachable_blocks)                                                   \
  X(context_set_bool_print_errors_to_stderr)                                                     \
  X(context_set_bool_use_external_driver)                                                        \
  X(context_add_command_line_option)                                                             \
  X(context_add_driver_option)                                                                   \
  X(context_set_logfile)                                                                         \
  X(context_dump_to_file)                                                                        \
  X(context_dump_reproducer_to_file)                                                             \
  X(context_enable_dump)                                                                         \
  X(context_get_first_error)                                                                     \
  X(context_get_last_error)                                                                      \
  /* compiling */                                                                                \
  X(context_compile)                                                                             \
  X(context_compile_to_file)                                                                     \
  X(result_get_code)                                                                             \
  X(result_get_global)                                                                           \
  X(result_release)                                                                              \
  /* objects (debug strings) */                                                                  \
  X(object_get_context)                                                                          \
  X(object_get_debug_string)                                                                     \
  X(type_as_object)                                                                              \
  X(rvalue_as_object)                                                                            \
  X(lvalue_as_object)                                                                            \
  X(param_as_object)                                                                             \
  X(function_as_object)                                                                          \
  X(block_as_object)                                                                             \
  X(field_as_object)                                                                             \
  X(context_new_location)                                                                        \
  /* types */                                                                                    \
  X(context_get_type)                                                                            \
  X(context_get_int_type)                                                                        \
  X(type_get_pointer)                                                                            \
  X(type_get_const)                                                                              \
  X(type_get_volatile)                                                                           \
  X(type_get_aligned)                                                                            \
  X(type_get_vector)                                                                             \
  X(type_get_size)                                                                               \
  X(type_unqualified)                                                                            \
  X(context_new_array_type)                                                                      \
  X(context_new_function_ptr_type)                                                               \
  X(context_new_field)                                                                           \
  X(context_new_struct_type)                                                                     \
  X(context_new_opaque_struct)                                                                   \
  X(context_new_union_type)                                                                      \
  X(struct_as_type)                                                                              \
  X(struct_set_fields)                                                                           \
  /* functions and blocks */                                                                     \
  X(context_new_param)                                                                           \
  X(param_as_lvalue)                                                                             \
  X(param_as_rvalue)                                                                             \
  X(context_new_function)                                                                        \
  X(context_get_builtin_function)                                                                \
  X(function_get_param)                                                                          \
  X(function_get_address)                                                                        \
  X(function_new_local)                                                                          \
  X(function_new_block)                                                                          \
  X(function_dump_to_dot)                                                                        \
  X(block_get_function)                                                                          \
  X(block_add_eval)                                                                              \
  X(block_add_assignment)                                                                        \
  X(block_add_assignment_op)                                                                     \
  X(block_add_comment)                                                                           \
  X(block_end_with_conditional)                                                                  \
  X(block_end_with_jump)                                                                         \
  X(block_end_with_return)                                                                       \
  X(block_end_with_void_return)                                                                  \
  X(block_end_with_switch)                                                                       \
  X(context_new_case)                                                                            \
  /* rvalues and lvalues */                                                                      \
  X(context_new_rvalue_from_int)                                                                 \
  X(context_new_rvalue_from_long)                                                                \
  X(context_new_rvalue_from_double)                                                              \
  X(context_new_rvalue_from_ptr)                                                                 \
  X(context_new_rvalue_from_vector)                                                              \
  X(context_new_string_literal)                                                                  \
  X(context_zero)                                                                                \
  X(context_one)                                                                                 \
  X(context_null)                                                                                \
  X(context_new_unary_op)                                                                        \
  X(context_new_binary_op)                                                                       \
  X(context_new_comparison)                                                                      \
  X(context_new_call)                                                                            \
  X(context_new_call_through_ptr)                                                                \
  X(context_new_cast)                                                                            \
  X(context_new_bitcast)                                                                         \
  X(context_new_array_access)                                                                    \
  X(context_new_array_constructor)                                                               \
  X(context_new_global)                                                                          \
  X(global_set_initializer)                                                                      \
  X(rvalue_get_type)                                                                             \
  X(rvalue_dereference)                                                                          \
  X(rvalue_access_field)                                                                         \
  X(rvalue_dereference_field)                                                                    \
  X(rvalue_set_bool_require_tail_call)                                                           \
  X(lvalue_access_field)                                                                         \
  X(lvalue_get_address)                                                                          \
  X(lvalue_as_rvalue)                                                                            \
  X(lvalue_set_alignment)                                                                        \
  /* timing (compile-time profiling) */                                                          \
  X(timer_new)                                                                                   \
  X(timer_release)                                                                               \
  X(context_set_timer)                                                                           \
  X(timer_print)                                                                                 \
  /* library version */                                                                          \
  X(version_major)                                                                               \
  X(version_minor)                                                                               \
  X(version_patchlevel)

// One function pointer per entry point: gcc_jit_context_acquire is `context_acquire`, etc.
struct GccJit {
#define CRESCENT_GCCJIT_MEMBER(name) decltype(&gcc_jit_##name) name = nullptr;
  CRESCENT_GCCJIT_FUNCTIONS(CRESCENT_GCCJIT_MEMBER)
#undef CRESCENT_GCCJIT_MEMBER
};

#else

struct GccJit;  // built without <libgccjit.h>: never loadable

#endif

// The loaded table, or nullptr when libgccjit cannot be used; then *why (when given) gets the
// reason: the dlerror() text, the first missing symbol, or "built without libgccjit headers".
// The library is loaded once (thread-safe) and never unloaded; later calls return the same result.
const GccJit* gccjit(std::string* why = nullptr);

}  // namespace cr::jit::cpu
