/*
 * header_check.c — compiled (never run) by tests/special/header_compile.cmake as C99 with
 * -pedantic -Werror and as C++17: pstate.h must be clean in both languages, including the
 * initializer macros users write in declarations.
 */
#include <pstate/pstate.h>
#include <pstate/pstate.h> /* the include guard holds */

static int uses_every_initializer(void) {
  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  pstate_bytes_t bytes = {NULL, 0};
  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);
  pstate_status_t (*create)(int, const pstate_parallel_config_t *, pstate_layout_t **) = pstate_layout_create;
  return (int)params.struct_size + cfg.tensor_parallel_size + info.rank + (int)bytes.size + (api != NULL) +
         (create != NULL) + PSTATE_VERSION + PSTATE_GROUP_KIND_COUNT + PSTATE_DTYPE_COUNT + PSTATE_REDUCE_OP_COUNT;
}

int main(void) { return uses_every_initializer() == 0; }
