# Sourced by the scripts that run on the GPU machine (gpu-check.sh, ab.sh): puts CUDA's tools on
# PATH and finds the libraries the binaries load at run time, cuBLASLt (the FP8 ceiling) and CUPTI
# (fp8moe-bench's kernel timestamps), wherever this machine's CUDA keeps them (CUPTI often lives
# apart, in extras/CUPTI).
export PATH="$PATH:/usr/local/cuda/bin"
for lib in libcublasLt.so.13 libcupti.so.13; do
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/local/cuda/extras/CUPTI/lib64 /usr/local/cuda-*/targets/x86_64-linux/lib \
           /usr/local/cuda-*/lib64 /usr/local/cuda-*/extras/CUPTI/lib64; do
    if [[ -e $d/$lib ]]; then
      [[ ":${LD_LIBRARY_PATH:-}:" == *":$d:"* ]] || export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      break
    fi
  done
done
