/* Compiled as C99 (tests/CMakeLists.txt): proves include/fp8moe/fp8moe.h is a valid C header and
 * that the C ABI links and answers from a C program. Needs no GPU. */
#include <stdio.h>
#include <string.h>

#include "fp8moe/fp8moe.h"

static int passed = 0, failed = 0;

static void check(int ok, const char* what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    printf("FAILED: %s (last error: \"%s\")\n", what, fp8moe_last_error());
  }
}

int main(void) {
  fp8moe_config_t config;
  size_t bytes = 1;

  check(fp8moe_config_init(&config) == FP8MOE_SUCCESS, "fp8moe_config_init succeeds");
  config.capacity = 512;
  config.hidden = 300; /* not a multiple of 128 */
  config.intermediate = 2048;
  config.num_experts = 32;
  config.top_k = 8;
  check(fp8moe_validate(&config, NULL) == FP8MOE_INVALID_SHAPE, "hidden=300 gives FP8MOE_INVALID_SHAPE");
  check(strstr(fp8moe_last_error(), "hidden=300") != NULL, "the message names hidden=300");
  check(fp8moe_workspace_size(&config, &bytes) == FP8MOE_INVALID_SHAPE && bytes == 0,
        "workspace size of a bad config is 0");

  config.hidden = 7168;
  check(fp8moe_workspace_size(&config, &bytes) == FP8MOE_SUCCESS && bytes > 0 && bytes % 256 == 0,
        "seed case has a 256-aligned workspace size");

  config.activation = 3;
  check(fp8moe_validate(&config, NULL) == FP8MOE_INVALID_ARGUMENT, "activation=3 gives FP8MOE_INVALID_ARGUMENT");
  check(strcmp(fp8moe_status_string(FP8MOE_INVALID_ARGUMENT), "invalid argument") == 0, "status string");

  printf("c_abi_smoke: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
