/* Prints the library version and checks it against the header's; exits 0
 * only if they agree and a compile-only context can be created. */
#include <stdio.h>

#include <sagejit.h>

int main(void) {
  if (sj_version_number() != SAGEJIT_VERSION_NUMBER) {
    fprintf(stderr, "header %d != library %d\n", SAGEJIT_VERSION_NUMBER,
            sj_version_number());
    return 1;
  }
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.device = SJ_DEVICE_NONE;
  cfg.target = "sm_90a";
  cfg.cache_disabled = 1;
  sj_context *ctx = NULL;
  if (sj_context_create(&ctx, &cfg) != SJ_OK) {
    fprintf(stderr, "create: %s\n", sj_context_create_error());
    return 1;
  }
  printf("sagejit %s target %s\n", sj_version(), sj_context_target(ctx));
  sj_context_destroy(ctx);
  return 0;
}
