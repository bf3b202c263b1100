# mk/fuzz.mk — libFuzzer harnesses (tests/fuzz/fuzz_*.c; docs/fuzzing.md).
# Included by the top Makefile after the configuration is read.
#
#   make fuzz-build               instrumented library + harnesses in build/fuzz/
#   make fuzz [FUZZ_TIME=300] [FUZZ=config,gguf]
#                                 run each harness (one at a time) FUZZ_TIME
#                                 seconds; prints executions per harness; a
#                                 crashing input is kept in build/fuzz/crashes/
#
# The library sources the readers need are compiled again with clang
# (FUZZ_CC) under -fsanitize=fuzzer-no-link,address,undefined into
# build/fuzz/lib/, archived as build/fuzz/libtitan.a, and each harness is
# linked with -fsanitize=fuzzer.  CUDA is left out (config.h with
# TITAN_HAVE_CUDA 0); MPI, HDF5 and BLAS are as configured.

FUZZ_CC ?= clang
FUZZ_TIME ?= 300
FUZZ ?=
FUZZ_DIR := build/fuzz
# the modules that read outside data, and what they call
FUZZ_LIB_DIRS := core config tok data ckpt model memprof trace cuda
FUZZ_LIB_SRCS := $(sort $(wildcard $(FUZZ_LIB_DIRS:%=lib/%/*.c)))
FUZZ_LIB_OBJS := $(FUZZ_LIB_SRCS:%.c=$(FUZZ_DIR)/%.o)
FUZZ_LIB := $(FUZZ_DIR)/libtitan.a
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_COMMON := tests/fuzz/fuzz_common.c
FUZZ_HARNESS_SRCS := $(filter-out $(FUZZ_COMMON),$(FUZZ_SRCS))
FUZZ_NAMES := $(FUZZ_HARNESS_SRCS:tests/fuzz/fuzz_%.c=%)
FUZZ_BINS := $(FUZZ_NAMES:%=$(FUZZ_DIR)/bin/fuzz_%)
# tool sources a harness compiles in (parsers that live in a tool)
FUZZ_TOOL_SRCS_memprof := $(filter-out %/titan-memprof.c,$(sort $(wildcard tools/memprof/*.c)))

FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=c17 -D_GNU_SOURCE $(WARN) -fopenmp -pthread -O1 -g -Ilib -I$(FUZZ_DIR) \
	-I$(BUILD) $(YAML_CFLAGS) $(JANSSON_CFLAGS) $(PCRE2_CFLAGS) $(MPI_CFLAGS) $(HDF5_CFLAGS) \
	$(BLAS_CFLAGS) $(ZLIB_CFLAGS) $(ZSTD_CFLAGS) $(FUZZ_SAN)
FUZZ_LIBS := $(YAML_LIBS) $(JANSSON_LIBS) $(PCRE2_LIBS) $(HDF5_LIBS) $(MPI_LIBS) $(BLAS_LIBS) \
	$(ZLIB_LIBS) $(ZSTD_LIBS) -lm

.PHONY: fuzz fuzz-build

fuzz-build: $(FUZZ_BINS) $(FUZZ_DIR)/seeds.stamp

fuzz: fuzz-build
	@FUZZ_BUILD=$(FUZZ_DIR) tests/fuzz/run.sh --time $(FUZZ_TIME) $(subst $(comma), ,$(FUZZ))

# clang with libFuzzer, the sanitizers and OpenMP, or a message saying what to install
$(FUZZ_DIR)/toolchain.ok:
	@mkdir -p $(@D)
	@printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' \
		> $(FUZZ_DIR)/probe.c
	@$(FUZZ_CC) -fsanitize=fuzzer,address,undefined -fopenmp $(FUZZ_DIR)/probe.c \
		-o $(FUZZ_DIR)/probe 2> $(FUZZ_DIR)/probe.log || { \
		echo "fuzz: error: '$(FUZZ_CC)' cannot build a libFuzzer harness (install clang," \
		     "libclang-rt-14-dev and libomp-14-dev; make deps does):" >&2; \
		sed 's/^/fuzz:   /' $(FUZZ_DIR)/probe.log | head -5 >&2; exit 1; }
	@rm -f $(FUZZ_DIR)/probe $(FUZZ_DIR)/probe.c $(FUZZ_DIR)/probe.log && touch $@

# the build configuration without CUDA
$(FUZZ_DIR)/config.h: $(BUILD)/config.mk
	@mkdir -p $(@D)
	@sed -e 's/^#define TITAN_HAVE_CUDA .*/#define TITAN_HAVE_CUDA 0/' \
	     -e 's/^#define TITAN_HAVE_NCCL .*/#define TITAN_HAVE_NCCL 0/' $(BUILD)/config.h > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@

$(FUZZ_DIR)/lib/%.o: lib/%.c $(FUZZ_DIR)/config.h | $(FUZZ_DIR)/toolchain.ok $(BUILD)/version.h
	@mkdir -p $(@D)
	$(call say,FUZZCC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/tools/%.o: tools/%.c $(FUZZ_DIR)/config.h | $(FUZZ_DIR)/toolchain.ok $(BUILD)/version.h
	@mkdir -p $(@D)
	$(call say,FUZZCC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/tests/%.o: tests/%.c $(FUZZ_DIR)/config.h | $(FUZZ_DIR)/toolchain.ok $(BUILD)/version.h
	@mkdir -p $(@D)
	$(call say,FUZZCC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -Itests/fuzz -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_LIB): $(FUZZ_LIB_OBJS)
	$(call say,AR,$@)rm -f $@ && $(AR) rcs $@ $^

define fuzz_rule
$(FUZZ_DIR)/bin/fuzz_$(1): $(FUZZ_DIR)/tests/fuzz/fuzz_$(1).o $(FUZZ_DIR)/tests/fuzz/fuzz_common.o \
		$(patsubst %.c,$(FUZZ_DIR)/%.o,$(FUZZ_TOOL_SRCS_$(1))) $(FUZZ_LIB)
	@mkdir -p $$(@D)
	$$(call say,LINK,$$@)$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -fopenmp -pthread -o $$@ \
		$$(filter %.o,$$^) $(FUZZ_LIB) $(FUZZ_LIBS)
endef
$(foreach n,$(FUZZ_NAMES),$(eval $(call fuzz_rule,$(n))))

# the seed generator: the library's writers make small valid files
$(FUZZ_DIR)/bin/mkseeds: $(FUZZ_DIR)/tests/fuzz/mkseeds.o $(FUZZ_LIB)
	@mkdir -p $(@D)
	$(call say,LINK,$@)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -fopenmp -pthread -o $@ \
		$(filter %.o,$^) $(FUZZ_LIB) $(FUZZ_LIBS)

$(FUZZ_DIR)/seeds.stamp: $(FUZZ_DIR)/bin/mkseeds tests/fuzz/seeds.sh $(wildcard tests/fixtures/*/*)
	$(call say,SEEDS,$(FUZZ_DIR)/seeds)rm -rf $(FUZZ_DIR)/seeds && \
		tests/fuzz/seeds.sh $(FUZZ_DIR)/bin/mkseeds $(FUZZ_DIR)/seeds && touch $@

-include $(FUZZ_LIB_OBJS:.o=.d) $(FUZZ_SRCS:%.c=$(FUZZ_DIR)/%.d) \
	$(FUZZ_DIR)/tests/fuzz/mkseeds.d $(FUZZ_TOOL_SRCS_memprof:%.c=$(FUZZ_DIR)/%.d)
