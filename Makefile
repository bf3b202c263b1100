# titan — one top-level GNU Makefile.
#
#   make                 build build/libtitan.a and the tools into bin/
#   make test            install missing Debian packages, build, run every test
#   make demo            install missing packages, build, run the demo end to end
#   make deps            apt-get install what is missing (idempotent, seconds when done)
#   make check           build and run the tests (no package step)
#   make install PREFIX=/opt/titan     bin/, man pages, configs, titan.pc
#   make docs            regenerate the config key reference in docs/ from the schema
#
# Switches: V=1 (show commands), DEVELOPER=1 (-Werror), SANITIZE=address,undefined
# (instrumented tree in build/sanitize/), CUDA= MPI= HDF5= BLAS= NCCL= ZLIB= ZSTD= auto|yes|no,
# CUDA_HOME=, CUDA_ARCHS="80 90", CC=, CFLAGS=, PREFIX=.

.DEFAULT_GOAL := all
.SUFFIXES:
.DELETE_ON_ERROR:
comma := ,

CUDA ?= auto
MPI ?= auto
HDF5 ?= auto
BLAS ?= auto
NCCL ?= auto
ZLIB ?= auto
ZSTD ?= auto
CUDA_ARCHS ?= 80 90
CUDA_HOME ?=
PREFIX ?= /usr/local
CFLAGS ?= -O2 -g
NVCCFLAGS ?= -O2 -g
SANITIZE ?=
DEVELOPER ?=

ifneq ($(SANITIZE),)
BUILD ?= build/sanitize
BINDIR ?= $(BUILD)/bin
else
BUILD ?= build
BINDIR ?= bin
endif

ifeq ($(V),1)
Q :=
say :=
else
Q := @
say = @printf '  %-6s %s\n' $(1) $(2);
endif

# Goals that must work before the dependencies are installed: they do not
# read the configuration (test and demo install packages first, then recurse).
NOCONFIG_GOALS := deps clean distclean help test demo
ifneq ($(MAKECMDGOALS),)
ifeq ($(filter-out $(NOCONFIG_GOALS),$(MAKECMDGOALS)),)
SKIP_CONFIG := 1
endif
endif

.PHONY: all test check check-unit check-bats cuda-test demo demo-run deps install uninstall clean distclean help config docs man FORCE

help:
	@sed -n '2,14s/^# \{0,1\}//p' Makefile

deps:
	@mk/deps.sh mk/deps.txt

test: deps
	@$(MAKE) --no-print-directory check

demo: deps
	@$(MAKE) --no-print-directory demo-run

# clean keeps build/cache (the test peers and corpora, downloaded)
clean:
	if [ -d $(BUILD) ]; then find $(BUILD) -mindepth 1 -maxdepth 1 ! -path build/cache -exec rm -rf {} +; fi
	rm -rf $(patsubst tools/%,bin/titan-%,$(TOOL_MAINS:.c=))

distclean:
	rm -rf build bin

ifndef SKIP_CONFIG
# ---------------------------------------------------------------- configure
CONFIG_ARGS := CC='$(CC)' CUDA='$(CUDA)' MPI='$(MPI)' HDF5='$(HDF5)' BLAS='$(BLAS)' \
	NCCL='$(NCCL)' ZLIB='$(ZLIB)' ZSTD='$(ZSTD)' CUDA_HOME='$(CUDA_HOME)' CUDA_ARCHS='$(CUDA_ARCHS)'

$(BUILD)/config.args: FORCE
	@mkdir -p $(BUILD)
	@echo "$(CONFIG_ARGS)" | cmp -s - $@ || echo "$(CONFIG_ARGS)" > $@

$(BUILD)/config.mk: mk/configure $(BUILD)/config.args
	@rm -f $@
	@mk/configure $(BUILD) $(CONFIG_ARGS)

config: $(BUILD)/config.args
	@mk/configure $(BUILD) $(CONFIG_ARGS)

include $(BUILD)/config.mk

$(BUILD)/version.h: FORCE
	@mkdir -p $(BUILD)
	@mk/version.sh $@

# ------------------------------------------------------------------- flags
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
ifneq ($(DEVELOPER),)
WARN += -Werror
endif
SAN_FLAGS := $(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all)
DEP_CFLAGS := $(YAML_CFLAGS) $(JANSSON_CFLAGS) $(PCRE2_CFLAGS) $(MPI_CFLAGS) $(HDF5_CFLAGS) $(BLAS_CFLAGS) \
	$(ZLIB_CFLAGS) $(ZSTD_CFLAGS) \
	$(if $(filter 1,$(HAVE_CUDA)),$(CUDA_CFLAGS))
# -fno-math-errno: nothing reads errno after a math call, and with it sqrtf
# is one (correctly rounded) instruction that vectorises (the AdamW loop)
ALL_CFLAGS := -std=c17 -D_GNU_SOURCE $(WARN) -fopenmp -pthread -fno-math-errno -Ilib -I$(BUILD) \
	$(DEP_CFLAGS) $(CFLAGS) $(SAN_FLAGS) $(CPPFLAGS)
ALL_LDFLAGS := -fopenmp -pthread $(SAN_FLAGS) $(LDFLAGS)
LIBS := $(YAML_LIBS) $(JANSSON_LIBS) $(PCRE2_LIBS) $(HDF5_LIBS) $(MPI_LIBS) $(BLAS_LIBS) \
	$(ZLIB_LIBS) $(ZSTD_LIBS) \
	$(if $(filter 1,$(HAVE_CUDA)),$(CUDA_LIBS)) -lm
ALL_NVCCFLAGS := -std=c++17 $(NVCC_GENCODE) -Ilib -I$(BUILD) $(CUDA_CFLAGS) $(NVCCFLAGS) \
	-Xcompiler -Wall,-Wextra$(if $(DEVELOPER),$(comma)-Werror) -MMD -MP

# ----------------------------------------------------------------- sources
LIB_SRCS := $(sort $(wildcard lib/*/*.c))
CU_SRCS := $(if $(filter 1,$(HAVE_CUDA)),$(sort $(wildcard lib/cuda/*.cu)))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
LIBTITAN := $(BUILD)/libtitan.a

# tools/DIR/titan-NAME.c is the main of bin/titan-NAME; the other .c files in
# tools/DIR are linked into each tool of that folder.
TOOL_MAINS := $(sort $(wildcard tools/*/titan-*.c))
TOOLS := $(foreach m,$(TOOL_MAINS),$(BINDIR)/$(basename $(notdir $(m))))
tool_dir = $(dir $(filter %/$(notdir $(1)).c,$(TOOL_MAINS)))
tool_shared = $(filter-out $(TOOL_MAINS),$(wildcard $(1)*.c))

UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
UNIT_TESTS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)

all: $(LIBTITAN) $(TOOLS) $(UNIT_TESTS)

$(BUILD)/%.o: %.c $(BUILD)/config.mk | $(BUILD)/version.h
	@mkdir -p $(@D)
	$(call say,CC,$<)$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.cu.o: %.cu $(BUILD)/config.mk | $(BUILD)/version.h
	@mkdir -p $(@D)
	$(call say,NVCC,$<)$(NVCC) $(ALL_NVCCFLAGS) -c $< -o $@

$(BUILD)/lib/core/build.o: $(BUILD)/version.h

$(LIBTITAN): $(LIB_OBJS)
	$(call say,AR,$@)rm -f $@ && $(AR) rcs $@ $^

define tool_rule
$(BINDIR)/$(1): $(BUILD)/$(2)$(1).o $(patsubst %.c,$(BUILD)/%.o,$(call tool_shared,$(2))) $(LIBTITAN)
	@mkdir -p $$(@D)
	$$(call say,LINK,$$@)$$(CC) $$(ALL_LDFLAGS) -o $$@ $$(filter %.o,$$^) $(LIBTITAN) $$(LIBS)
endef
$(foreach m,$(TOOL_MAINS),$(eval $(call tool_rule,$(basename $(notdir $(m))),$(dir $(m)))))

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIBTITAN)
	@mkdir -p $(@D)
	$(call say,LINK,$@)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIBTITAN) $(CMOCKA_LIBS) $(LIBS)

# ------------------------------------------------------------------- tests
TEST_ENV := TITAN_SRCDIR=$(CURDIR) TITAN_BUILD=$(CURDIR)/$(BUILD) TITAN_BIN=$(CURDIR)/$(BINDIR)

check: all
	@$(TEST_ENV) tests/run

check-unit: all
	@$(TEST_ENV) tests/run --unit

check-bats: all
	@$(TEST_ENV) tests/run --bats

# On a GPU machine: the CUDA layer and every CUDA op against the CPU oracle
# with the model-sized cases and the timing table (docs/perf-cuda.md).  A GPU
# harness must not pass by skipping: no CUDA build, no GPU, or a skipped test
# is a failure.  Logs: $(BUILD)/tests/test_cuda*.gpu.log.
cuda-test: all
	@test "$(HAVE_CUDA)" = 1 || { echo "make cuda-test: titan was built without CUDA" \
		"(no nvcc found; install the CUDA toolkit or set CUDA_HOME, then make CUDA=yes)" >&2; exit 1; }
	@if command -v nvidia-smi >/dev/null 2>&1; then \
		nvidia-smi -L 2>/dev/null | grep '^GPU ' || { echo "make cuda-test: no GPU found" \
		"('nvidia-smi -L' lists none): run it on a machine with an NVIDIA GPU and driver;" \
		"make check skips the GPU tests" >&2; exit 1; }; \
	else echo "make cuda-test: no nvidia-smi; the tests fail if titan finds no device"; fi
	@for t in test_cuda test_cuda_ops; do \
		log=$(BUILD)/tests/$$t.gpu.log; echo "# $(BUILD)/tests/$$t"; \
		{ CMOCKA_MESSAGE_OUTPUT=TAP TITAN_CUDA_TEST_LARGE=1 TITAN_CUDA_TEST_TIME=1 \
		  TITAN_CUDA_TEST_REQUIRE=1 $(BUILD)/tests/$$t 2>&1; echo "# exit status $$?"; } | tee $$log; \
		grep -q '^# exit status 0$$' $$log || { echo "make cuda-test: $$t failed (see $$log)" >&2; exit 1; }; \
		if grep -Eqi '^(not )?ok .*# skip' $$log; then \
			echo "make cuda-test: $$t skipped tests, which a GPU run must not" \
				"(no usable device or driver? see $$log)" >&2; exit 1; fi; \
	done; echo "make cuda-test: passed"

demo-run: all
	@$(TEST_ENV) mk/demo.sh

# regenerate the config key reference of docs/config.md and the man pages
# (the blocks between "BEGIN/END titan-config --doc" markers) from the schema;
# tests/bats/docs.bats fails when they are out of date
docs: $(BINDIR)/titan-config
	mk/gen-docs.sh $(BINDIR)/titan-config docs
man: docs

# ----------------------------------------------------------------- install
MAN_PAGES := $(wildcard docs/*.1)
$(BUILD)/titan.pc: mk/titan.pc.in FORCE
	@sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(shell cat VERSION)|' \
	    -e 's|@LIBS@|$(strip $(LIBS))|' -e 's|@CFLAGS@|$(strip $(DEP_CFLAGS))|' $< > $@

install: all $(BUILD)/titan.pc
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/include/titan $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/titan/configs
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(LIBTITAN) $(DESTDIR)$(PREFIX)/lib
	install -m 644 lib/titan/*.h $(DESTDIR)$(PREFIX)/include/titan
	$(if $(MAN_PAGES),install -m 644 $(MAN_PAGES) $(DESTDIR)$(PREFIX)/share/man/man1)
	install -m 644 configs/*.yaml $(DESTDIR)$(PREFIX)/share/titan/configs
	install -m 644 $(BUILD)/titan.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(notdir $(TOOLS))) \
		$(DESTDIR)$(PREFIX)/lib/libtitan.a $(DESTDIR)$(PREFIX)/lib/pkgconfig/titan.pc \
		$(addprefix $(DESTDIR)$(PREFIX)/share/man/man1/,$(notdir $(MAN_PAGES)))
	rm -rf $(DESTDIR)$(PREFIX)/include/titan $(DESTDIR)$(PREFIX)/share/titan

-include $(LIB_OBJS:.o=.d) $(UNIT_SRCS:%.c=$(BUILD)/%.d) $(TOOL_MAINS:%.c=$(BUILD)/%.d)
include mk/fuzz.mk
endif
