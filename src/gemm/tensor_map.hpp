// TMA tensor maps (host): the driver's cuTensorMapEncodeTiled, reached through the runtime so that
// nothing links libcuda, and the row-major shapes fp8moe loads. Shared by the GEMM launcher and the
// investigation benches (bench/tma_stream.cu).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

namespace fp8moe::gemm {

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    cudaDriverEntryPointQueryResult status{};
    void* ptr = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status) ==
            cudaSuccess &&
        status == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  });
  return fn;
}

// A tensor of `rank` <= 3 dimensions, innermost first: dims[i] elements, strides[i] bytes between
// consecutive indices of dimension i + 1, box[i] elements per load.
inline bool encode_tiled(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base,
                         const uint64_t* dims, const uint64_t* strides, const uint32_t* box,
                         CUtensorMapSwizzle swizzle,
                         CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  auto encode = tensor_map_encoder();
  if (!encode || rank < 1 || rank > 3) return false;
  cuuint64_t d[3], s[2];
  cuuint32_t b[3], e[3] = {1, 1, 1};
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    if (i + 1 < rank) s[i] = strides[i];
  }
  return encode(map, type, rank, const_cast<void*>(base), d, s, b, e, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// 2-D row-major tensor [rows, cols] of `elem_bytes` elements, box [box_rows, box_cols].
inline bool encode_2d(CUtensorMap* map, CUtensorMapDataType type, int elem_bytes, const void* base, uint64_t rows,
                      uint64_t cols, uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle,
                      CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  const uint64_t dims[2] = {cols, rows};
  const uint64_t strides[1] = {cols * elem_bytes};
  const uint32_t box[2] = {box_cols, box_rows};
  return encode_tiled(map, type, 2, base, dims, strides, box, swizzle, promotion);
}

}  // namespace fp8moe::gemm
