/*
 * header_check.c — compiled (never run) by tests/abi/header_compile.cmake as C99 with
 * -pedantic -Werror and as C++17: pstate.h must be clean in both languages, including the
 * initializer macros users write in declarations, and its enumerations must be int-sized (with
 * int as their fixed underlying type in C++). The ABI rules (struct_size first, every function in
 * the dlopen table and the version script) are header_rules.py's (ctest header_check_abi_rules).
 */
#include <pstate/pstate.h>
#include <pstate/pstate.h> /* the include guard holds */

/* The enumerations are int-sized in both languages (the ABI), and in C++ their underlying type is
 * fixed to int, so that C++ may hold any int a C caller passes (the library validates it). */
#define PSTATE_CHECK_INT_SIZED(t) (sizeof(t) == sizeof(int))
typedef char pstate_enums_are_int_sized[PSTATE_CHECK_INT_SIZED(pstate_status_t) &&
                                                PSTATE_CHECK_INT_SIZED(pstate_dtype_t) &&
                                                PSTATE_CHECK_INT_SIZED(pstate_reduce_op_t) &&
                                                PSTATE_CHECK_INT_SIZED(pstate_device_t) &&
                                                PSTATE_CHECK_INT_SIZED(pstate_group_kind_t)
                                            ? 1
                                            : -1];
#ifdef __cplusplus
#include <type_traits>
static_assert(std::is_same<std::underlying_type<pstate_status_t>::type, int>::value &&
                  std::is_same<std::underlying_type<pstate_dtype_t>::type, int>::value &&
                  std::is_same<std::underlying_type<pstate_reduce_op_t>::type, int>::value &&
                  std::is_same<std::underlying_type<pstate_device_t>::type, int>::value &&
                  std::is_same<std::underlying_type<pstate_group_kind_t>::type, int>::value,
              "pstate.h: the enumerations have int as their fixed underlying type in C++");
#endif

static int uses_every_initializer(void) {
  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  pstate_p2p_op_t op = PSTATE_P2P_OP_INIT;
  pstate_tensor_t tensor = PSTATE_TENSOR_INIT;
  pstate_bytes_t bytes = {NULL, 0};
  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);
  pstate_status_t (*create)(int, const pstate_parallel_config_t *, pstate_layout_t **) = pstate_layout_create;
  return (int)params.struct_size + cfg.tensor_parallel_size + info.rank + (int)bytes.size + (api != NULL) +
         (create != NULL) + PSTATE_VERSION + PSTATE_GROUP_KIND_COUNT + PSTATE_DTYPE_COUNT + PSTATE_REDUCE_OP_COUNT +
         (int)tensor.struct_size + op.peer + PSTATE_GROUP_FIRST_NON_LAYOUT_KIND;
}

int main(void) {
  return uses_every_initializer() == 0;
}
