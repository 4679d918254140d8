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

LIB_OBJ_REL  := $(LIB_SRC:%.c=$(REL)/%.o)
LIB_OBJ_ASAN := $(LIB_SRC:%.c=$(ASAN)/%.o)
TESTS_REL    := $(TEST_SRC:tests/unit/%.c=$(REL)/bin/%)
TESTS_ASAN   := $(TEST_SRC:tests/unit/%.c=$(ASAN)/bin/%)
SUPPORT_REL  := $(SUPPORT_SRC:%.c=$(REL)/%.o)
SUPPORT_ASAN := $(SUPPORT_SRC:%.c=$(ASAN)/%.o)

.PHONY: help cpu all test asan bench clean fixtures-check

help:
	@echo "nemotron.c - targets:"
	@echo "  make cpu      build build/libnemotron.a and build/nemotron (the command)"
	@echo "  make test     build and run every test (release build)"
	@echo "  make asan     build and run every test under AddressSanitizer + UBSan, with the"
	@echo "                debug allocation guard (no allocation inside a pass)"
	@echo "  make bench    build and run the CPU benchmark (see docs/PERF.md)"
	@echo "  make clean    remove build/"
	@echo "  WERROR=1      treat warnings as errors (CI)"

all: cpu

cpu: $(REL)/nemotron $(REL)/libnemotron.a

$(REL)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) -c $< -o $@

$(ASAN)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) -c $< -o $@

$(REL)/libnemotron.a: $(LIB_OBJ_REL)
	@mkdir -p $(dir $@)
	ar rcs $@ $^

$(ASAN)/libnemotron.a: $(LIB_OBJ_ASAN)
	@mkdir -p $(dir $@)
	ar rcs $@ $^

$(REL)/nemotron: $(TOOL_SRC:%.c=$(REL)/%.o) $(REL)/libnemotron.a
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS)

$(ASAN)/nemotron: $(TOOL_SRC:%.c=$(ASAN)/%.o) $(ASAN)/libnemotron.a
	$(CC) $(CFLAGS_ASAN) $^ -o $@ $(LDLIBS)

$(REL)/bin/%: $(REL)/tests/unit/%.o $(SUPPORT_REL) $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS)

$(ASAN)/bin/%: $(ASAN)/tests/unit/%.o $(SUPPORT_ASAN) $(ASAN)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) $^ -o $@ $(LDLIBS)

# make_model: writes a random model directory (tests/support/synth.h) for tests and benchmarks
$(REL)/make_model: $(REL)/tests/tools/make_model.o $(SUPPORT_REL) $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS)

# The public header must compile as C++ too.
$(REL)/tests/header_cxx.o: tests/header_cxx.cc include/nemotron.h
	@mkdir -p $(dir $@)
	$(CXX) -std=c++11 -Iinclude -Wall -Wextra $(if $(filter 1,$(WERROR)),-Werror) -c $< -o $@

# The 131072-token tokenizer fixture is committed xz-compressed (9.7 MB -> 0.9 MB).
$(REL)/fixtures/big.json: tests/fixtures/tokenizer/big.json.xz
	@mkdir -p $(dir $@)
	xz -dc $< > $@.tmp && mv $@.tmp $@

test: $(TESTS_REL) $(REL)/nemotron $(REL)/make_model $(REL)/tests/header_cxx.o $(REL)/fixtures/big.json
	@tests/run.sh $(REL)

asan: $(TESTS_ASAN) $(ASAN)/nemotron $(REL)/make_model $(REL)/fixtures/big.json
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 tests/run.sh $(ASAN)

bench: $(REL)/nemotron $(REL)/make_model
	tools/bench_cpu.sh $(REL)

clean:
	rm -rf build

-include $(LIB_OBJ_REL:.o=.d) $(LIB_OBJ_ASAN:.o=.d) $(SUPPORT_REL:.o=.d) $(SUPPORT_ASAN:.o=.d)
-include $(TEST_SRC:tests/unit/%.c=$(REL)/tests/unit/%.d) $(TEST_SRC:tests/unit/%.c=$(ASAN)/tests/unit/%.d)

# dev/: scratch benchmarks of single kernels (not part of the library or the tests)
$(REL)/dev/%: $(REL)/dev/cpu/%.o $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS)
$(REL)/dev/%: $(REL)/dev/text/%.o $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS)
$(REL)/dev/%: $(REL)/dev/quant/%.o $(REL)/libnemotron.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $^ -o $@ $(LDLIBS)
