/*
 * consumer.c — a program that links libpstate the ordinary way (built by the pkg-config and the
 * find_package consumers of tests/consumers/consumers.cmake): computes SGLang's docstring layout
 * through the C API and checks it. Exit 0 on success; prints what differed otherwise.
 */
#include <pstate/pstate.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  pstate_layout_t *l = NULL;
  int ranks[8];
  size_t count = 0;
  static const int want_attn_cp2[] = {2, 6};
  cfg.tensor_parallel_size = 8;
  cfg.attention_context_parallel_size = 2;
  cfg.expert_parallel_size = 4;
  cfg.moe_data_parallel_size = 2;
  if (pstate_version() / 10000 != PSTATE_VERSION_MAJOR) {
    fprintf(stderr, "library version %u does not match header major %d\n", (unsigned)pstate_version(),
            PSTATE_VERSION_MAJOR);
    return 1;
  }
  if (pstate_layout_create(8, &cfg, &l) != PSTATE_OK) {
    fprintf(stderr, "pstate_layout_create: %s\n", pstate_last_error());
    return 1;
  }
  if (pstate_layout_group_ranks(l, PSTATE_GROUP_ATTN_CP, 2, ranks, 8, &count) != PSTATE_OK || count != 2 ||
      memcmp(ranks, want_attn_cp2, sizeof want_attn_cp2) != 0) {
    fprintf(stderr, "attn_cp group 2 is wrong (%s)\n", pstate_last_error());
    pstate_layout_destroy(l);
    return 1;
  }
  pstate_layout_destroy(l);
  printf("consumer: pstate %u, attn_cp group 2 = [2,6]\n", (unsigned)pstate_version());
  return 0;
}
