/*
 * dlopen_consumer.c — a runtime that loads pstate by path at run time (argv[1], normally
 * libpstate.so.1), looks up only pstate_get_api, and computes SGLang's docstring layout through
 * the function table. Proves the one-dlsym contract of pstate.h, and that the table answers only
 * for the ABI major this header declares (an older major, 0 for 1.x, gets NULL). Built with the
 * header only.
 */
#include <dlfcn.h>
#include <pstate/pstate.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef const pstate_api_t *(*get_api_fn)(uint32_t);

static int check_layout(const pstate_api_t *api) {
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  pstate_layout_t *l = NULL;
  int ranks[8];
  size_t count = 0, index = 0;
  static const int want_moe_dp1[] = {1, 5};
  int ok;
  cfg.tensor_parallel_size = 8;
  cfg.attention_context_parallel_size = 2;
  cfg.expert_parallel_size = 4;
  cfg.moe_data_parallel_size = 2;
  if (api->layout_create(8, &cfg, &l) != PSTATE_OK) {
    fprintf(stderr, "layout_create: %s\n", api->last_error());
    return 1;
  }
  ok = api->layout_group_ranks(l, PSTATE_GROUP_MOE_DP, 1, ranks, 8, &count) == PSTATE_OK && count == 2 &&
       memcmp(ranks, want_moe_dp1, sizeof want_moe_dp1) == 0 &&
       api->layout_group_of(l, PSTATE_GROUP_MOE_EP, 6, &index) == PSTATE_OK && index == 1;
  api->layout_destroy(l);
  if (!ok) fprintf(stderr, "moe_dp group 1 or moe_ep group of rank 6 is wrong: %s\n", api->last_error());
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  void *lib;
  get_api_fn get_api;
  const pstate_api_t *api;
  int rc;
  if (argc != 2) {
    fprintf(stderr, "usage: dlopen_consumer PATH/libpstate.so.%d\n", PSTATE_ABI_MAJOR);
    return 2;
  }
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  *(void **)&get_api = dlsym(lib, "pstate_get_api"); /* the one symbol looked up */
  if (get_api == NULL) {
    fprintf(stderr, "dlsym pstate_get_api: %s\n", dlerror());
    return 1;
  }
  api = get_api(PSTATE_ABI_MAJOR);
  if (api == NULL || api->abi_major != PSTATE_ABI_MAJOR ||
      api->struct_size < offsetof(pstate_api_t, layout_destroy) + sizeof api->layout_destroy) {
    fprintf(stderr, "pstate_get_api(%d) gave no usable table\n", PSTATE_ABI_MAJOR);
    return 1;
  }
  if (get_api(PSTATE_ABI_MAJOR - 1) != NULL || get_api(PSTATE_ABI_MAJOR + 1) != NULL) {
    fprintf(stderr, "pstate_get_api answered for ABI major %d or %d; only %d is this library's\n",
            PSTATE_ABI_MAJOR - 1, PSTATE_ABI_MAJOR + 1, PSTATE_ABI_MAJOR);
    return 1;
  }
  rc = check_layout(api);
  if (rc == 0) printf("dlopen_consumer: %s version %u via the table\n", argv[1], (unsigned)api->version());
  dlclose(lib);
  return rc;
}
