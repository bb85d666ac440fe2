// Argument checks shared by the reference stages. They run before any worker thread starts, so
// that a bad argument is an exception for the caller rather than a std::terminate in a worker.
#pragma once

#include <stdexcept>
#include <string>

#include "layout/layout.cuh"

namespace fp8moe::ref::detail {

inline void require_groups(int64_t k, const char* who, const char* what = "K") {
  if (k <= 0 || k % layout::kGroup != 0)
    throw std::invalid_argument(std::string(who) + ": " + what + " must be a positive multiple of 128");
}

inline void require_format(layout::ScaleFormat f, const char* who) {
  if (f != layout::ScaleFormat::kFp32 && f != layout::ScaleFormat::kFp32Pow2 &&
      f != layout::ScaleFormat::kUe8m0Packed)
    throw std::invalid_argument(std::string(who) + ": unknown scale format");
}

}  // namespace fp8moe::ref::detail
