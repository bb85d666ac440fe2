// fp8moe-bench --act-only (bench/fp8moe_bench_act.cpp).
#pragma once

#include <string>

namespace fp8moe::bench {

// Activation + quantization alone, live vs padded, on ten fully occupied shapes. Prints a table,
// writes JSON when json_path is not empty; returns 1 if the arms' outputs differ.
int run_act_only(int samples_per_arm, const std::string& json_path);

}  // namespace fp8moe::bench
