# Makefile - builds libnemotron, the nemotron command and the tests. `make` prints the targets.
#
# Objects go to build/ (release) and build/asan/ (AddressSanitizer + UBSan + the debug
# allocation guard). WERROR=1 turns warnings into errors (CI sets it).

CC      ?= cc
CXX     ?= c++
PKGS    := json-c libpcre2-8 zlib libmicrohttpd
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -ljson-c -lpcre2-8 -lz -lmicrohttpd)

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
LDLIBS  := $(PKG_LIBS) -lm -fopenmp -pthread
# the command alone links libedit (Debian's readline-compatible line editor): chat's line
# editing and history on a terminal; the library does not need it
TOOL_LIBS := $(shell pkg-config --libs libedit 2>/dev/null || echo -ledit)

# src/server: `nemotron serve` (libmicrohttpd); in the archive, a client that does not call it
# links none of it
LIB_SRC  := $(wildcard src/*.c src/model/*.c src/quant/*.c src/cpu/*.c src/engine/*.c src/text/*.c \
              src/convert/*.c src/server/*.c)
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
              $(REL)/bin/test_cuda_ops_emu $(REL)/bin/test_cuda_faults $(REL)/bin/test_verify_emu $(REL)/bin/test_spec_emu \
              $(REL)/emu/nemotron)
EMU_TEST_ASAN := $(subst $(REL)/,$(ASAN)/,$(EMU_TEST))

LIB_OBJ_REL  := $(LIB_SRC:%.c=$(REL)/%.o) $(CUDA_LINKED)
LIB_OBJ_ASAN := $(LIB_SRC:%.c=$(ASAN)/%.o)
TESTS_REL    := $(TEST_SRC:tests/unit/%.c=$(REL)/bin/%)
TESTS_ASAN   := $(TEST_SRC:tests/unit/%.c=$(ASAN)/bin/%)
SUPPORT_REL  := $(SUPPORT_SRC:%.c=$(REL)/%.o)
SUPPORT_ASAN := $(SUPPORT_SRC:%.c=$(ASAN)/%.o)

.PHONY: help cpu all test asan bench clean fixtures-check gpu-test gpu-bundle install shared fuzz

help:
	@echo "nemotron.c - targets:"
	@echo "  make cpu      build build/libnemotron.a and build/nemotron (the command); with the CUDA"
	@echo "                backend when nvcc is found (CUDA=0: without it)"
	@echo "  make gpu-test build what tests/gpu/run.sh runs on a GPU machine (CUDA vs CPU checks)"
	@echo "  make test     build and run every test (release build)"
	@echo "  make asan     build and run every test under AddressSanitizer + UBSan, with the"
	@echo "                debug allocation guard (no allocation inside a pass)"
	@echo "  make bench    build and run the CPU benchmark (see docs/PERF.md)"
	@echo "  make install  PREFIX=/usr/local (default): the header, libnemotron.a, libnemotron.so.0,"
	@echo "                nemotron.pc (pkg-config) and the nemotron command; DESTDIR for staging"
	@echo "  make fuzz     build the libFuzzer fuzzers with clang into build/fuzz/ (tests/fuzz/README.md)"
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
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(TOOL_LIBS) $(CUDA_LIBS)

$(ASAN)/nemotron: $(TOOL_SRC:%.c=$(ASAN)/%.o) $(ASAN)/libnemotron.a
	$(CC) $(CFLAGS_ASAN) $^ -o $@ $(LDLIBS) $(TOOL_LIBS)

$(REL)/bin/%: $(REL)/tests/unit/%.o $(SUPPORT_REL) $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

$(ASAN)/bin/%: $(ASAN)/tests/unit/%.o $(SUPPORT_ASAN) $(ASAN)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) $^ -o $@ $(LDLIBS)

# tests/fuzz: every libFuzzer target also replays its committed corpus (tests/fuzz/corpus/NAME:
# seeds and the inputs it once failed on) without libFuzzer, as test_fuzz_NAME in `make test` and
# under ASan in `make asan` (tests/fuzz/replay.c). `make fuzz` builds the real fuzzers with clang
# and libFuzzer (the library instrumented too) into build/fuzz/; tests/fuzz/README.md runs them.
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_REL  := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=$(REL)/bin/test_fuzz_%)
FUZZ_ASAN := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=$(ASAN)/bin/test_fuzz_%)
$(REL)/bin/test_fuzz_%: $(REL)/tests/fuzz/fuzz_%.o $(REL)/tests/fuzz/replay.o $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)
$(ASAN)/bin/test_fuzz_%: $(ASAN)/tests/fuzz/fuzz_%.o $(ASAN)/tests/fuzz/replay.o $(ASAN)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) $^ -o $@ $(LDLIBS)
FUZZ_CC    ?= clang
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Isrc -Itests $(PKG_CFLAGS) -fopenmp \
              -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
$(REL)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -c $< -o $@
# (the parsers only: the CPU kernels' run-time dispatch names features clang 14 does not know;
# of the server, the request parser and the sampler defaults it starts from, not libmicrohttpd)
FUZZ_LIB_SRC := $(wildcard src/common.c src/log.c src/model/*.c src/quant/*.c src/text/*.c) \
                src/server/request.c src/engine/sampler.c src/engine/sampler_api.c
$(REL)/fuzz/fuzz_%: $(REL)/fuzz/obj/tests/fuzz/fuzz_%.o $(FUZZ_LIB_SRC:%.c=$(REL)/fuzz/obj/%.o)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)
fuzz: $(FUZZ_SRC:tests/fuzz/fuzz_%.c=$(REL)/fuzz/fuzz_%)

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

test: $(TESTS_REL) $(FUZZ_REL) $(EMU_TEST) $(REL)/nemotron $(CUDA_OBJ) $(REL)/make_model $(REL)/tests/header_cxx.o $(REL)/fixtures/big.json \
      $(REL)/$(SHLIB)
	@tests/run.sh $(REL)

asan: $(TESTS_ASAN) $(FUZZ_ASAN) $(EMU_TEST_ASAN) $(ASAN)/nemotron $(REL)/make_model $(REL)/fixtures/big.json
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
# tests/unit/test_spec.c (the speculative decoder against plain decoding) on it, the CUDA backend
# alone (TEST_SPEC_CUDA_ONLY: test_spec runs the CPU's part)
$(1)/emu/test_spec.o: tests/unit/test_spec.c
	@mkdir -p $$(dir $$@)
	$$(CC) $(3) -DTEST_SPEC_CUDA_ONLY -c $$< -o $$@
$(1)/bin/test_spec_emu: $(1)/emu/test_spec.o $(call EMU_LIBRARY,$(1))
	@mkdir -p $$(dir $$@)
	$$(CXX) -pthread $(2) $$^ -o $$@ $$(LDLIBS)
# the nemotron command on it: tests/cli/test_cuda_emu.sh runs whole models with --device cuda
$(1)/emu/backend_open.o: src/backend_open.c
	@mkdir -p $$(dir $$@)
	$$(CC) $(3) -DNT_HAVE_CUDA -c $$< -o $$@
$(1)/emu/nemotron: $(TOOL_SRC:%.c=$(1)/%.o) $(call EMU_LIBRARY,$(1))
	@mkdir -p $$(dir $$@)
	$$(CXX) -pthread $(2) $$^ -o $$@ $$(LDLIBS) $$(TOOL_LIBS)
-include $(1)/emu/cuda_emu.d $(1)/emu/test_cuda_emu_checks.d $(1)/emu/test_spec.d $(patsubst src/cuda/%.cu,$(1)/emu/%.d,$(wildcard src/cuda/*.cu))
endef
$(eval $(call EMU_RULES,$(REL),$(EMU_REL_FLAGS),$(CFLAGS_REL),$(EMU_CHECK_FLAGS)))
$(eval $(call EMU_RULES,$(ASAN),$(EMU_ASAN_FLAGS),$(CFLAGS_ASAN),))

$(ASAN)/tests/gpu/%.o: tests/gpu/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) -c $< -o $@

# tests/gpu: programs that need a GPU (run by tests/gpu/run.sh on a GPU machine, never by `test`)
GPU_TEST_SRC := $(wildcard tests/gpu/test_*.c)
GPU_BENCH_SRC := $(wildcard tests/gpu/bench_*.c)
# (test_verify, test_spec, test_mtp: unit tests that run CUDA too where there is a GPU)
gpu-test: cpu $(GPU_TEST_SRC:tests/gpu/test_%.c=$(REL)/bin/gpu_test_%) $(GPU_BENCH_SRC:tests/gpu/bench_%.c=$(REL)/bin/gpu_bench_%) \
          $(REL)/bin/test_verify $(REL)/bin/test_spec $(REL)/bin/test_mtp

# dev/cuda/floors.cu: the card's floors (streaming reads, launch gaps, arithmetic rates) for
# docs/PERF.md's accounts; a standalone CUDA program, compiled wherever nvcc is (so `test` checks
# it) and linked where the runtime is
ifneq ($(NVCC),)
GPU_FLOORS_OBJ := $(REL)/dev/cuda/floors.o
$(GPU_FLOORS_OBJ): dev/cuda/floors.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
-include $(GPU_FLOORS_OBJ:.o=.d)
test: $(GPU_FLOORS_OBJ)
endif
ifneq ($(CUDA_LINKED),)
GPU_FLOORS := $(REL)/bin/gpu_floors
$(GPU_FLOORS): $(GPU_FLOORS_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(CUDA_LIBS)
gpu-test: $(GPU_FLOORS)
endif

# (their objects are kept: the emulated builds link them too)
.SECONDARY: $(GPU_TEST_SRC:%.c=$(REL)/%.o) $(GPU_BENCH_SRC:%.c=$(REL)/%.o)

$(REL)/bin/gpu_bench_%: $(REL)/tests/gpu/bench_%.o $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

$(REL)/bin/gpu_test_%: $(REL)/tests/gpu/test_%.o $(SUPPORT_REL) $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS) $(CUDA_LIBS)

# gpu-bundle: gpu-test plus the shared libraries the binaries load that a bare GPU machine may
# lack (all but the C and C++ runtimes: json-c, PCRE2, OpenMP, libedit, libmicrohttpd with GnuTLS), for NEMOTRON_PREBUILT=1 tests/gpu/run.sh there, and the hash of the sources they were
# built from (run.sh refuses binaries built from other sources)
gpu-bundle: gpu-test
	@scripts/gpu-verified.sh --hash > $(REL)/gpu-sources.sha256
	@mkdir -p $(REL)/gpu-libs
	@for l in $$(ldd $(REL)/nemotron $(REL)/bin/gpu_test_ops $(REL)/bin/gpu_bench_ops $(REL)/bin/test_verify $(REL)/bin/test_spec $(REL)/bin/test_mtp | \
	    awk '$$3 ~ /^\// && $$1 !~ /^((libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s)\.so|ld-linux)/ {print $$3}' | sort -u); \
	    do cp -L $$l $(REL)/gpu-libs/; done

# ---- the shared library and `make install` --------------------------------------------------
# libnemotron.so.MAJOR.MINOR.PATCH with the soname libnemotron.so.MAJOR, the version read from the
# public header (one place). Its objects are compiled again as position-independent code in
# build/pic (the static archive's are not), the CUDA backend's too when it is built; the CUDA
# runtime is linked in statically, as for the command. Only nemotron_* is exported
# (src/libnemotron.map).
VERSION := $(shell awk '/^\#define NEMOTRON_VERSION_(MAJOR|MINOR|PATCH)/ {printf "%s%s", s, $$3; s = "."}' include/nemotron.h)
SONAME  := libnemotron.so.$(firstword $(subst ., ,$(VERSION)))
SHLIB   := libnemotron.so.$(VERSION)
PIC     := $(REL)/pic
LIB_OBJ_PIC := $(LIB_SRC:%.c=$(PIC)/%.o) $(if $(CUDA_LINKED),$(CUDA_SRC:%.cu=$(PIC)/%.o))

shared: $(REL)/$(SHLIB)

$(PIC)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) -fPIC -c $< -o $@

$(PIC)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC -c $< -o $@

$(PIC)/src/backend_open.o: $(CUDA_STAMP)
ifneq ($(CUDA_LINKED),)
$(PIC)/src/backend_open.o: CFLAGS_REL += -DNT_HAVE_CUDA
endif

$(REL)/$(SHLIB): $(LIB_OBJ_PIC) src/libnemotron.map $(CUDA_STAMP)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=src/libnemotron.map -Wl,--no-undefined \
	    $(LIB_OBJ_PIC) -o $@ $(LDLIBS) $(CUDA_LIBS)

# What a program linking the static archive needs besides it (nemotron.pc's Libs.private): the
# CUDA runtime and libstdc++ (the .cu objects are C++) when the backend is built, json-c, PCRE2,
# zlib, libmicrohttpd (the server), OpenMP and libm always.
LIBS_PRIVATE := $(CUDA_LIBS) $(PKG_LIBS) -fopenmp -lm
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib

install: $(REL)/nemotron $(REL)/libnemotron.a $(REL)/$(SHLIB) nemotron.pc.in
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 include/nemotron.h $(DESTDIR)$(PREFIX)/include/nemotron.h
	install -m 644 $(REL)/libnemotron.a $(DESTDIR)$(LIBDIR)/libnemotron.a
	install -m 755 $(REL)/$(SHLIB) $(DESTDIR)$(LIBDIR)/$(SHLIB)
	ln -sf $(SHLIB) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libnemotron.so
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@VERSION@|$(VERSION)|; s|@LIBS_PRIVATE@|$(strip $(LIBS_PRIVATE))|' \
	    nemotron.pc.in | grep -v '^#' > $(DESTDIR)$(LIBDIR)/pkgconfig/nemotron.pc
	install -m 755 $(REL)/nemotron $(DESTDIR)$(PREFIX)/bin/nemotron

bench: $(REL)/nemotron $(REL)/make_model
	tools/bench_cpu.sh $(REL)

clean:
	rm -rf build

-include $(LIB_OBJ_REL:.o=.d) $(LIB_OBJ_ASAN:.o=.d) $(LIB_OBJ_PIC:.o=.d) $(SUPPORT_REL:.o=.d) $(SUPPORT_ASAN:.o=.d)
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
