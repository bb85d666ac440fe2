# fp8moe: the two commands of the README.
#   make test   install missing build tools, configure, build everything, run every test (ctest)
#   make bench  build and run fp8moe-bench
# FP8MOE_ARCHS picks the CUDA architectures (default: CMake's default of this project, 90a;100a).
BUILD_DIR    ?= build
FP8MOE_ARCHS ?= 90a;100a
JOBS         ?= $(shell nproc)

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# nvcc comes with the CUDA toolkit, which Debian does not provide: find it, do not install it.
NVCC := $(shell command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })

.PHONY: test bench deps configure build

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

bench: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target fp8moe-bench
	$(BUILD_DIR)/bench/fp8moe-bench

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

configure: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER=$(NVCC) \
	  "-DCMAKE_CUDA_ARCHITECTURES=$(FP8MOE_ARCHS)"

# Debian packages, installed only when something is missing (apt-get update runs once, first).
deps:
	@missing=""; \
	command -v cmake >/dev/null || missing="$$missing cmake"; \
	command -v g++ >/dev/null || missing="$$missing g++"; \
	command -v gcc >/dev/null || missing="$$missing gcc"; \
	[ -f /usr/include/gtest/gtest.h ] || missing="$$missing libgtest-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y --no-install-recommends $$missing; \
	fi
	@[ -n "$(NVCC)" ] || { echo "error: nvcc not found (install the CUDA toolkit, 12.8 or newer, or put nvcc on PATH)"; exit 1; }
