/* fp8moe C ABI: the same operation as the C++ API of fp8moe.hpp, for C and other languages.
 *
 *   fp8moe_config_t cfg;
 *   fp8moe_config_init(&cfg);              defaults: silu, fp32 scales, live schedule
 *   cfg.capacity = 512; cfg.hidden = 7168; cfg.intermediate = 2048; cfg.num_experts = 32; cfg.top_k = 8;
 *   size_t bytes; fp8moe_workspace_size(&cfg, &bytes);      the caller allocates the workspace
 *   fp8moe_status_t st = fp8moe_run(&cfg, &args, stream);   graph-capturable, no host sync
 *   if (st != FP8MOE_SUCCESS) fprintf(stderr, "%s\n", fp8moe_last_error());
 *
 * Every function validates first; on an error it touches nothing on the GPU and
 * fp8moe_last_error() says what was wrong. Enum values equal those of the C++ API. */
#ifndef FP8MOE_FP8MOE_H_
#define FP8MOE_FP8MOE_H_

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fp8moe_status {
  FP8MOE_SUCCESS = 0,
  FP8MOE_INVALID_SHAPE = 1,        /* H, I not multiples of 128, k > E, non-positive sizes, T > capacity */
  FP8MOE_INVALID_ARGUMENT = 2,     /* out-of-range enum or parameter */
  FP8MOE_NULL_POINTER = 3,         /* a required pointer is null */
  FP8MOE_MISALIGNED = 4,           /* a pointer is not 16-byte aligned */
  FP8MOE_UNSUPPORTED = 5,          /* arch / activation / scale format combination not implemented */
  FP8MOE_WORKSPACE_TOO_SMALL = 6,  /* workspace_bytes < fp8moe_workspace_size() */
  FP8MOE_CUDA_ERROR = 7            /* a CUDA call failed */
} fp8moe_status_t;

enum { FP8MOE_ACTIVATION_SILU = 0, FP8MOE_ACTIVATION_SWIGLU_OAI = 1 };
enum { FP8MOE_SCALE_FP32 = 0, FP8MOE_SCALE_FP32_POW2 = 1, FP8MOE_SCALE_UE8M0_PACKED = 2 };
enum { FP8MOE_SCHEDULE_LIVE = 0, FP8MOE_SCHEDULE_PADDED = 1 };

/* Field meanings as in fp8moe::Config. Initialize with fp8moe_config_init(). */
typedef struct fp8moe_config {
  int64_t capacity;           /* C: the most tokens one call may carry */
  int64_t hidden;             /* H, multiple of 128 */
  int64_t intermediate;       /* I, multiple of 128 */
  int32_t num_experts;        /* E: local experts */
  int32_t top_k;              /* k, 1 <= k <= E */
  int32_t num_global_experts; /* length of expert_map; 0 = no map */
  int32_t activation;         /* FP8MOE_ACTIVATION_* */
  float swiglu_alpha;         /* swiglu_oai only */
  float swiglu_beta;
  float swiglu_limit;
  int32_t scale_format;       /* FP8MOE_SCALE_* */
  int32_t schedule;           /* FP8MOE_SCHEDULE_* */
} fp8moe_config_t;

/* Device pointers, row-major, 16-byte aligned; T = num_rows. As fp8moe::Args. */
typedef struct fp8moe_args {
  int64_t num_rows;             /* T <= capacity */
  const void* hidden;           /* BF16 [T, H] */
  const int32_t* topk_ids;      /* int32 [T, k]; -1 = not routed here */
  const float* topk_weights;    /* FP32 [T, k] */
  const int32_t* num_tokens;    /* optional device scalar */
  const int32_t* expert_map;    /* int32 [num_global_experts], required iff num_global_experts > 0 */
  const void* w13;              /* FP8 E4M3 [E, 2I, H] */
  const float* w13_scale;       /* FP32 [E, 2I/128, H/128] */
  const void* w2;               /* FP8 E4M3 [E, H, I] */
  const float* w2_scale;        /* FP32 [E, H/128, I/128] */
  void* out;                    /* BF16 [T, H] */
  void* workspace;              /* fp8moe_workspace_size() bytes */
  size_t workspace_bytes;
} fp8moe_args_t;

/* Zeros the sizes and sets the defaults of fp8moe::Config. */
fp8moe_status_t fp8moe_config_init(fp8moe_config_t* config);
/* Checks config (and args unless args is NULL), exactly as fp8moe_run does before launching. */
fp8moe_status_t fp8moe_validate(const fp8moe_config_t* config, const fp8moe_args_t* args);
/* *bytes = workspace size of a valid config (a pure function: no GPU needed); 0 and an error otherwise. */
fp8moe_status_t fp8moe_workspace_size(const fp8moe_config_t* config, size_t* bytes);
fp8moe_status_t fp8moe_run(const fp8moe_config_t* config, const fp8moe_args_t* args, cudaStream_t stream);
/* Device address of the int32 invalid-expert-id counter in this workspace; NULL on a bad config. */
const int32_t* fp8moe_error_counter(const fp8moe_config_t* config, const void* workspace);
const char* fp8moe_status_string(fp8moe_status_t status);
/* Message of the last failed call on this thread ("" if none). */
const char* fp8moe_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FP8MOE_FP8MOE_H_ */
