# Makefile - builds libnemotron, the nemotron command and the tests. `make` prints the targets.
#
# Objects go to build/ (release) and build/asan/ (AddressSanitizer + UBSan + the debug
# allocation guard). WERROR=1 turns warnings into errors (CI sets it).

CC      ?= cc
CXX     ?= c++
PKGS    := json-c libpcre2-8 zlib
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -ljson-c -lpcre2-8 -lz)

# -ffp-contract=off: the compiler must not fuse a*b+c on its own; kernels decide where FMA is
# used, so the arithmetic of a position is the same in every build of one backend.
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter
ifeq ($(WERROR),1)
WARN    += -Werror
endif
BASEFLAGS := -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Itests $(PKG_CFLAGS) $(WARN) -fopenmp \
             -ffp-contract=off -MMD -MP
# -O3 vectorises the element-wise loops (norms, conv, scan, attention's weighted sums); reductions
# keep their written order because no -ffast-math lets the compiler reassociate them.
CFLAGS_REL  := $(BASEFLAGS) -O3 -g
CFLAGS_ASAN := $(BASEFLAGS) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
               -fno-sanitize-recover=undefined -DNT_DEBUG
LDLIBS  := $(PKG_LIBS) -lm -fopenmp

LIB_SRC  := $(wildcard src/*.c src/model/*.c src/quant/*.c src/cpu/*.c src/engine/*.c src/text/*.c \
              src/convert/*.c)
TOOL_SRC := $(wildcard tools/*.c)
TEST_SRC := $(wildcard tests/unit/test_*.c)
# test support: a writer of random models in Hugging Face layout (tests and the benchmark)
SUPPORT_SRC := $(wildcard tests/support/*.c)

REL  := build
ASAN := build/asan

# The CUDA backend is built whenever nvcc is found (PATH, then /usr/local/cuda): sm_90 machine code
# plus compute_90 PTX, so newer GPUs run it through the driver's JIT. Only the release build has
# it (the ASan build stays host-only). CUDA=0 leaves it out. The runtime is linked statically:
# the binaries need only the driver (libcuda.so.1, opened at run time) where a GPU is used, and
# run unchanged on machines without one.
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
ifeq ($(CUDA),0)
override NVCC :=
endif
ifneq ($(NVCC),)
CUDA_ARCH  ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
# -fmad=false: no fused multiply-add unless a kernel writes one (__fmaf_rn), as -ffp-contract=off
# on the host: every chain of float operations is the one the source writes (the float products
# are then the CPU's bits, and every kernel of the packed products runs the same chain).
NVCCFLAGS  := -std=c++17 -O3 -lineinfo -fmad=false $(CUDA_ARCH) -Iinclude -Isrc \
              -Xcompiler "-Wall -Wno-unused-parameter $(if $(filter 1,$(WERROR)),-Werror)" \
              $(if $(filter 1,$(WERROR)),-Werror all-warnings) -MMD -MP
CUDA_SRC   := $(wildcard src/cuda/*.cu)
CUDA_OBJ   := $(CUDA_SRC:%.cu=$(REL)/%.o)
# The static runtime sits in lib64, lib or targets/<arch>/lib depending on how the toolkit was
# installed (runfile, Debian package, pip wheels). Without it the kernels are still compiled (so
# they are checked) but left out of the binaries, which then run host-only; make says so.
CUDA_HOME  := $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))
CUDART_DIR := $(patsubst %/libcudart_static.a,%,$(firstword $(wildcard \
              $(CUDA_HOME)/lib64/libcudart_static.a $(CUDA_HOME)/lib/libcudart_static.a \
              $(CUDA_HOME)/targets/*/lib/libcudart_static.a \
              $(CUDA_HOME)/../cuda_runtime/lib/libcudart_static.a \
              /usr/lib/x86_64-linux-gnu/libcudart_static.a /usr/lib/aarch64-linux-gnu/libcudart_static.a)))
ifeq ($(CUDART_DIR),)
$(warning nvcc found at $(NVCC) but no libcudart_static.a near it: the CUDA kernels are compiled, the binaries are host-only)
else
CUDA_LINKED := $(CUDA_OBJ)
CUDA_LIBS  := -L$(CUDART_DIR) -lcudart_static -ldl -lrt -lpthread -lstdc++
endif
endif

# The CUDA backend run on the host (tests/emu, below), built with the C++ compiler whether or not
# nvcc is here, so `make test` executes the kernels' code everywhere. Its fiber switch is x86-64
# assembly: other machines leave it out.
EMU_TEST := $(if $(filter x86_64,$(shell uname -m)),$(REL)/bin/test_cuda_emu $(REL)/bin/test_cuda_emu_checks \
              $(REL)/bin/test_cuda_ops_emu $(REL)/bin/test_cuda_faults $(REL)/bin/test_verify_emu $(REL)/bin/test_spec_emu $(REL)/emu/nemotron)
EMU_TEST_ASAN := $(subst $(REL)/,$(ASAN)/,$(EMU_TEST))

LIB_OBJ_REL  := $(LIB_SRC:%.c=$(REL)/%.o) $(CUDA_LINKED)
LIB_OBJ_ASAN := $(LIB_SRC:%.c=$(ASAN)/%.o)
TESTS_REL    := $(TEST_SRC:tests/unit/%.c=$(REL)/bin/%)
TESTS_ASAN   := $(TEST_SRC:tests/unit/%.c=$(ASAN)/bin/%)
SUPPORT_REL  := $(SUPPORT_SRC:%.c=$(REL)/%.o)
SUPPORT_ASAN := $(SUPPORT_SRC:%.c=$(ASAN)/%.o)

.PHONY: help cpu all test asan bench clean fixtures-check gpu-test gpu-bundle

help:
	@echo "nemotron.c - targets:"
	@echo "  make cpu      build build/libnemotron.a and build/nemotron (the command); with the CUDA"
	@echo "                backend when nvcc is found (CUDA=0: without it)"
	@echo "  make gpu-test build what tests/gpu/run.sh runs on a GPU machine (CUDA vs CPU checks)"
	@echo "  make test     build and run every test (release build)"
	@echo "  make asan     build and run every test under AddressSanitizer + UBSan, with the"
	@echo "                debug allocation guard (no allocation inside a pass)"
	@echo "  make bench    build and run the CPU benchmark (see docs/PERF.md)"
	@echo "  make clean    remove build/"
	@echo "  WERROR=1      treat warnings as errors (CI)"

all: cpu

cpu: $(REL)/nemotron $(REL)/libnemotron.a $(CUDA_OBJ)

$(REL)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) -c $< -o $@

# backend_open.c is the one file that knows whether this build holds the CUDA backend. The
# stamp records which compiler (if any) built it, so switching CUDA on or off in one tree rebuilds
# that file and the library rather than linking a stale CUDA object.
CUDA_STAMP := $(REL)/.cuda-backend
$(shell mkdir -p $(REL); echo '$(CUDA_LINKED)' | cmp -s - $(CUDA_STAMP) || echo '$(CUDA_LINKED)' > $(CUDA_STAMP))
$(REL)/src/backend_open.o: $(CUDA_STAMP)
ifneq ($(CUDA_LINKED),)
$(REL)/src/backend_open.o: CFLAGS_REL += -DNT_HAVE_CUDA
endif

$(REL)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(ASAN)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) -c $< -o $@

$(REL)/libnemotron.a: $(LIB_OBJ_REL) $(CUDA_STAMP)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $(LIB_OBJ_REL)

$(ASAN)/libnemotron.a: $(LIB_OBJ_ASAN)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(REL)/nemotron: $(TOOL_SRC:%.c=$(REL)/%.o) $(REL)/libnemotron.a
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

$(ASAN)/nemotron: $(TOOL_SRC:%.c=$(ASAN)/%.o) $(ASAN)/libnemotron.a
	$(CC) $(CFLAGS_ASAN) $^ -o $@ $(LDLIBS)

$(REL)/bin/%: $(REL)/tests/unit/%.o $(SUPPORT_REL) $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

$(ASAN)/bin/%: $(ASAN)/tests/unit/%.o $(SUPPORT_ASAN) $(ASAN)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) $^ -o $@ $(LDLIBS)

# make_model: writes a random model directory (tests/support/synth.h) for tests and benchmarks
$(REL)/make_model: $(REL)/tests/tools/make_model.o $(SUPPORT_REL) $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

# The public header must compile as C++ too.
$(REL)/tests/header_cxx.o: tests/header_cxx.cc include/nemotron.h
	@mkdir -p $(dir $@)
	$(CXX) -std=c++11 -Iinclude -Wall -Wextra $(if $(filter 1,$(WERROR)),-Werror) -c $< -o $@

# The 131072-token tokenizer fixture is committed xz-compressed (9.7 MB -> 0.9 MB).
$(REL)/fixtures/big.json: tests/fixtures/tokenizer/big.json.xz
	@mkdir -p $(dir $@)
	xz -dc $< > $@.tmp && mv $@.tmp $@

test: $(TESTS_REL) $(EMU_TEST) $(REL)/nemotron $(CUDA_OBJ) $(REL)/make_model $(REL)/tests/header_cxx.o $(REL)/fixtures/big.json
	@tests/run.sh $(REL)

asan: $(TESTS_ASAN) $(EMU_TEST_ASAN) $(ASAN)/nemotron $(REL)/make_model $(REL)/fixtures/big.json
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 tests/run.sh $(ASAN)

# tests/emu: the CUDA backend run on the host (tests/emu/cuda_emu.h stands in for the GPU,
# tests/emu/cuda_emu.cc is its runtime), so CI executes the kernels' code: its unit tests,
# gpu_test_ops and the nemotron command on it; in the ASan build too, where every kernel's memory
# access is checked against ASan's bounds. EMU_RULES' arguments: the build directory, its C++
# flags, its C flags, and what the objects that hold kernels add.
EMU_FLAGS = -std=c++20 -pthread -ffp-contract=off -DNT_CUDA_EMULATION -Iinclude -Isrc -Itests -Wall -Wextra \
            -Wno-unused-parameter -Wno-unknown-pragmas $(if $(filter 1,$(WERROR)),-Werror) -MMD -MP \
            -include tests/emu/cuda_emu.h
# Both builds: a kernel's local variables start as gcc's pattern (0xFE bytes), not as whatever
# the stack held, so a read of one never written shows (cuda_emu.h: nothing starts as zero).
EMU_REL_FLAGS  := -O2 -g -ftrivial-auto-var-init=pattern -DNT_EMU_CHECKED
EMU_ASAN_FLAGS := -O1 -g -ftrivial-auto-var-init=pattern -fno-omit-frame-pointer -fsanitize=address,undefined \
                  -fno-sanitize-recover=undefined
# The release build's pointer checks: every load and store of the objects that hold kernels calls
# cuda_emu.cc's __asan_*_noabort (call threshold 0: no inline shadow checks, so no ASan runtime;
# no stack or global redzones, which would need it). The ASan build has ASan instead.
EMU_CHECK_FLAGS := -fsanitize=kernel-address --param asan-instrumentation-with-call-threshold=0 \
                   --param asan-stack=0 --param asan-globals=0
# the library with the emulated CUDA backend: its .cu files compiled by the C++ compiler with the
# emulation's runtime, and backend_open.o built to offer it
EMU_CUDA = $(CUDA_SRC:src/cuda/%.cu=$(1)/emu/%.o) $(1)/emu/cuda_emu.o
EMU_LIBRARY = $(1)/emu/backend_open.o $(call EMU_CUDA,$(1)) $(filter-out $(1)/src/backend_open.o,$(LIB_SRC:%.c=$(1)/%.o))

# Objects with kernels are instrumented ($(4)), and their __shared__ variables are moved into
# the section emu_shared (tests/emu/shared_sections.sh says why and how).
define EMU_RULES
$(1)/emu/%.o: src/cuda/%.cu tests/emu/cuda_emu.h tests/emu/shared_sections.sh
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(EMU_FLAGS) $(2) $(4) -x c++ -c $$< -o $$@
	tests/emu/shared_sections.sh $$@
$(1)/emu/cuda_emu.o: tests/emu/cuda_emu.cc tests/emu/cuda_emu.h
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(EMU_FLAGS) $(2) -c $$< -o $$@
$(1)/emu/test_cuda_emu.o: tests/emu/test_cuda_emu.cc tests/emu/cuda_emu.h
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(EMU_FLAGS) $(2) -c $$< -o $$@
$(1)/emu/test_cuda_emu_checks.o: tests/emu/test_cuda_emu_checks.cc tests/emu/cuda_emu.h tests/emu/shared_sections.sh
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(EMU_FLAGS) $(2) $(4) -c $$< -o $$@
	tests/emu/shared_sections.sh $$@
$(1)/bin/test_cuda_emu: $(1)/emu/test_cuda_emu.o $(call EMU_LIBRARY,$(1))
	@mkdir -p $$(dir $$@)
	$$(CXX) -pthread $(2) $$^ -o $$@ $$(LDLIBS)
# the emulation itself: poison, pointer checks, NT_EMU_FAIL
$(1)/bin/test_cuda_emu_checks: $(1)/emu/test_cuda_emu_checks.o $(1)/emu/cuda_emu.o
	@mkdir -p $$(dir $$@)
	$$(CXX) -pthread $(2) $$^ -o $$@
# tests/gpu/test_ops.c (every operation of the CUDA backend against the CPU) on the emulation
$(1)/bin/test_cuda_ops_emu: $(1)/tests/gpu/test_ops.o $(SUPPORT_SRC:%.c=$(1)/%.o) $(call EMU_LIBRARY,$(1))
	@mkdir -p $$(dir $$@)
	$$(CXX) -pthread $(2) $$^ -o $$@ $$(LDLIBS)
# faults injected into the emulated device become errors; shapes past the kernels are refused
$(1)/bin/test_cuda_faults: $(1)/tests/emu/test_cuda_faults.o $(SUPPORT_SRC:%.c=$(1)/%.o) $(call EMU_LIBRARY,$(1))
	@mkdir -p $$(dir $$@)
	$$(CXX) -pthread $(2) $$^ -o $$@ $$(LDLIBS)
# tests/unit/test_verify.c (verify passes, snapshots, embeddings input on whole models) on it
$(1)/bin/test_verify_emu: $(1)/tests/unit/test_verify.o $(call EMU_LIBRARY,$(1))
	@mkdir -p $$(dir $$@)
	$$(CXX) -pthread $(2) $$^ -o $$@ $$(LDLIBS)
# tests/unit/test_spec.c (the speculative decoder against plain decoding) on it
$(1)/bin/test_spec_emu: $(1)/tests/unit/test_spec.o $(call EMU_LIBRARY,$(1))
	@mkdir -p $$(dir $$@)
	$$(CXX) -pthread $(2) $$^ -o $$@ $$(LDLIBS)
# the nemotron command on it: tests/cli/test_cuda_emu.sh runs whole models with --device cuda
$(1)/emu/backend_open.o: src/backend_open.c
	@mkdir -p $$(dir $$@)
	$$(CC) $(3) -DNT_HAVE_CUDA -c $$< -o $$@
$(1)/emu/nemotron: $(TOOL_SRC:%.c=$(1)/%.o) $(call EMU_LIBRARY,$(1))
	@mkdir -p $$(dir $$@)
	$$(CXX) -pthread $(2) $$^ -o $$@ $$(LDLIBS)
-include $(1)/emu/cuda_emu.d $(1)/emu/test_cuda_emu_checks.d $(patsubst src/cuda/%.cu,$(1)/emu/%.d,$(wildcard src/cuda/*.cu))
endef
$(eval $(call EMU_RULES,$(REL),$(EMU_REL_FLAGS),$(CFLAGS_REL),$(EMU_CHECK_FLAGS)))
$(eval $(call EMU_RULES,$(ASAN),$(EMU_ASAN_FLAGS),$(CFLAGS_ASAN),))

$(ASAN)/tests/gpu/%.o: tests/gpu/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) -c $< -o $@

# tests/gpu: programs that need a GPU (run by tests/gpu/run.sh on a GPU machine, never by `test`)
GPU_TEST_SRC := $(wildcard tests/gpu/test_*.c)
GPU_BENCH_SRC := $(wildcard tests/gpu/bench_*.c)
# (test_verify: the unit test of verify passes and snapshots, which runs CUDA where there is a GPU)
gpu-test: cpu $(GPU_TEST_SRC:tests/gpu/test_%.c=$(REL)/bin/gpu_test_%) $(GPU_BENCH_SRC:tests/gpu/bench_%.c=$(REL)/bin/gpu_bench_%) \
          $(REL)/bin/test_verify $(REL)/bin/test_spec

# (their objects are kept: the emulated builds link them too)
.SECONDARY: $(GPU_TEST_SRC:%.c=$(REL)/%.o) $(GPU_BENCH_SRC:%.c=$(REL)/%.o)

$(REL)/bin/gpu_bench_%: $(REL)/tests/gpu/bench_%.o $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

$(REL)/bin/gpu_test_%: $(REL)/tests/gpu/test_%.o $(SUPPORT_REL) $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

# gpu-bundle: gpu-test plus the shared libraries the binaries load that a bare GPU machine may
# lack, for NEMOTRON_PREBUILT=1 tests/gpu/run.sh there, and the hash of the sources they were
# built from (run.sh refuses binaries built from other sources)
gpu-bundle: gpu-test
	@scripts/gpu-verified.sh --hash > $(REL)/gpu-sources.sha256
	@mkdir -p $(REL)/gpu-libs
	@for l in $$(ldd $(REL)/nemotron | awk '/json-c|pcre2|gomp/ {print $$3}'); do cp -L $$l $(REL)/gpu-libs/; done

bench: $(REL)/nemotron $(REL)/make_model
	tools/bench_cpu.sh $(REL)

clean:
	rm -rf build

-include $(LIB_OBJ_REL:.o=.d) $(LIB_OBJ_ASAN:.o=.d) $(SUPPORT_REL:.o=.d) $(SUPPORT_ASAN:.o=.d)
-include $(TOOL_SRC:%.c=$(REL)/%.d) $(TOOL_SRC:%.c=$(ASAN)/%.d)
-include $(CUDA_OBJ:.o=.d) $(GPU_TEST_SRC:tests/gpu/%.c=$(REL)/tests/gpu/%.d) $(GPU_BENCH_SRC:tests/gpu/%.c=$(REL)/tests/gpu/%.d)
-include $(foreach d,$(REL) $(ASAN),$(d)/emu/test_cuda_emu.d)
-include $(TEST_SRC:tests/unit/%.c=$(REL)/tests/unit/%.d) $(TEST_SRC:tests/unit/%.c=$(ASAN)/tests/unit/%.d)

# dev/: scratch benchmarks of single kernels (not part of the library or the tests)
$(REL)/dev/%: $(REL)/dev/cpu/%.o $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)
$(REL)/dev/%: $(REL)/dev/text/%.o $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)
$(REL)/dev/%: $(REL)/dev/quant/%.o $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)
