#!/usr/bin/env bats
# The build: feature detection (auto|yes|no and the ✓/✗ table), V=1,
# DEVELOPER=1, SANITIZE=, make deps, make install and titan.pc.

bats_require_minimum_version 1.5.0

setup() {
	load helpers
	cd "$TITAN_SRCDIR"
}

@test "configure prints the feature table with the required libraries" {
	run -0 mk/configure "$BATS_TEST_TMPDIR/b" CC=cc
	assert_output --partial "libyaml    ✓"
	assert_output --partial "jansson    ✓"
	assert_line --regexp '^  (mpi|hdf5|openblas|cuda|nccl) +[✓✗]  '
	assert_line --regexp '^  zlib +[✓✗]  '
	assert_line --regexp '^  zstd +[✓✗]  '
	assert_file_exists "$BATS_TEST_TMPDIR/b/config.mk"
	assert_file_exists "$BATS_TEST_TMPDIR/b/config.h"
}

@test "a feature switched off is ✗ and leaves the build" {
	run -0 mk/configure "$BATS_TEST_TMPDIR/b" CC=cc MPI=no CUDA=no
	assert_line --regexp '^  mpi +✗  disabled \(MPI=no\)$'
	assert_line --regexp '^  cuda +✗  disabled \(CUDA=no\)$'
	assert_line --regexp '^  nccl +✗  needs CUDA$'
	run grep -E '^HAVE_(MPI|CUDA) := 0$' "$BATS_TEST_TMPDIR/b/config.mk"
	[ "${#lines[@]}" -eq 2 ]
	grep -q 'TITAN_HAVE_MPI 0' "$BATS_TEST_TMPDIR/b/config.h"
	grep -q -- '-mpi' "$BATS_TEST_TMPDIR/b/config.h"
}

@test "ZLIB=no / ZSTD=no leave compressed inputs out; yes fails when missing" {
	run -0 mk/configure "$BATS_TEST_TMPDIR/b" CC=cc CUDA=no ZLIB=no ZSTD=no
	assert_line --regexp '^  zlib +✗  disabled \(ZLIB=no\)$'
	assert_line --regexp '^  zstd +✗  disabled \(ZSTD=no\)$'
	grep -q 'TITAN_HAVE_ZLIB 0' "$BATS_TEST_TMPDIR/b/config.h"
	grep -q -- '-zlib -zstd' "$BATS_TEST_TMPDIR/b/config.h"
	run -1 --separate-stderr env PKG_CONFIG=/bin/false mk/configure "$BATS_TEST_TMPDIR/c" CC=cc CUDA=no ZSTD=yes
	[[ $stderr == *"ZSTD=yes but zstd is not usable: pkg-config libzstd not found"*"libzstd-dev"* ]]
}

@test "built without zlib/libzstd, a compressed input is an error saying what to install" {
	b=$BATS_TEST_TMPDIR
	printf '#define TITAN_HAVE_ZLIB 0\n#define TITAN_HAVE_ZSTD 0\n' > "$b/config.h"
	cat > "$b/m.c" <<'C'
#include <stdio.h>
#include "titan/core.h"
int main(int argc, char **argv)
{
	struct titan_instream *s;
	(void)argc;
	if (titan_instream_open(argv[1], NULL, &s) < 0) {
		fprintf(stderr, "%s\n", titan_errmsg());
		return 1;
	}
	titan_instream_close(s);
	return 0;
}
C
	# lib/core/instream.c with that config.h, ahead of the library's copy
	cc -std=c17 -D_GNU_SOURCE -I"$b" -Ilib -o "$b/m" "$b/m.c" lib/core/instream.c \
		"$TITAN_BUILD/libtitan.a" -fopenmp -pthread -lm
	printf '{"text": "a"}\n' > "$b/x.jsonl"
	run -0 "$b/m" "$b/x.jsonl"
	printf '\x1f\x8b\x08\x00' > "$b/x.gz"
	run -1 --separate-stderr "$b/m" "$b/x.gz"
	[[ $stderr == *"x.gz' is gzip-compressed, and this titan was built without zlib (install zlib1g-dev"* ]]
	printf '\x28\xb5\x2f\xfd' > "$b/x.zst"
	run -1 --separate-stderr "$b/m" "$b/x.zst"
	[[ $stderr == *"x.zst' is zstd-compressed, and this titan was built without libzstd (install libzstd-dev"* ]]
}

@test "HDF5 without MPI is the serial build (or ✗ when hdf5-serial is absent)" {
	run -0 mk/configure "$BATS_TEST_TMPDIR/b" CC=cc MPI=no CUDA=no
	assert_line --regexp '^  hdf5 +(✓  [0-9.]+ serial \(hdf5-serial\)|✗  pkg-config hdf5-serial)'
}

@test "yes fails loudly when the feature is missing" {
	run -1 --separate-stderr mk/configure "$BATS_TEST_TMPDIR/b" CC=cc CUDA=yes CUDA_HOME=/nonexistent
	[[ $stderr == *"configure: error: CUDA=yes but cuda is not usable: nvcc not found"* ]]
	assert_file_not_exists "$BATS_TEST_TMPDIR/b/config.mk"
	run -1 --separate-stderr env PKG_CONFIG=false mk/configure "$BATS_TEST_TMPDIR/b" CC=cc CUDA=no BLAS=yes
	[[ $stderr == *"BLAS=yes but openblas is not usable"* ]]
}

@test "a bad switch value is a usage error" {
	run -2 --separate-stderr mk/configure "$BATS_TEST_TMPDIR/b" CUDA=maybe
	[[ $stderr == *"CUDA=maybe: expected auto, yes or no"* ]]
}

@test "make -n BUILD=...: quiet by default, full commands with V=1" {
	b=$BATS_TEST_TMPDIR/b
	run -0 make --no-print-directory BUILD="$b" "$b/lib/core/timer.o"
	assert_line "  CC     lib/core/timer.c"
	rm "$b/lib/core/timer.o"
	run -0 make --no-print-directory BUILD="$b" V=1 "$b/lib/core/timer.o"
	assert_line --regexp '^[^ ]*(cc|gcc|clang) .*-c lib/core/timer.c -o .*timer.o$'
}

@test "DEVELOPER=1 adds -Werror, SANITIZE= instruments a separate tree" {
	b=$BATS_TEST_TMPDIR/b
	run -0 make --no-print-directory -n BUILD="$b" DEVELOPER=1 V=1 "$b/lib/core/timer.o"
	assert_output --partial "-Werror"
	run -0 make --no-print-directory -n SANITIZE=address,undefined V=1 all
	assert_output --partial "-fsanitize=address,undefined"
	assert_output --partial "build/sanitize/lib/core/"
	refute_output --regexp ' -o bin/titan-'
}

@test "header dependencies are tracked" {
	b=$BATS_TEST_TMPDIR/b
	run -0 make --no-print-directory BUILD="$b" "$b/lib/core/timer.o"
	grep -q 'lib/titan/core.h' "$b/lib/core/timer.d"
}

@test "make deps is idempotent and quick when everything is present" {
	command -v dpkg-query >/dev/null || skip "not a Debian system"
	run -0 make --no-print-directory deps
	assert_output --regexp '^deps: all [0-9]+ packages present$'
}

@test "make install PREFIX=: tools, man pages, configs, headers and a working titan.pc" {
	p=$BATS_TEST_TMPDIR/prefix
	run -0 make --no-print-directory install PREFIX="$p"
	assert_file_executable "$p/bin/titan-config"
	assert_file_exists "$p/share/man/man1/titan-config.1"
	assert_file_exists "$p/share/titan/configs/llama3_8b.yaml"
	assert_file_exists "$p/include/titan/core.h"
	assert_file_exists "$p/lib/libtitan.a"
	run -0 "$p/bin/titan-config" -c "$p/share/titan/configs/llama3_8b.yaml" --check
	cat > "$BATS_TEST_TMPDIR/use.c" <<'C'
#include <stdio.h>
#include <titan/core.h>
int main(void) { printf("%s %u\n", titan_version(), titan_crc32c(0, "123456789", 9)); return 0; }
C
	export PKG_CONFIG_PATH=$p/lib/pkgconfig
	run -0 pkg-config --modversion titan
	assert_output "$(cat VERSION)"
	cc -o "$BATS_TEST_TMPDIR/use" "$BATS_TEST_TMPDIR/use.c" $(pkg-config --cflags --libs titan)
	run -0 "$BATS_TEST_TMPDIR/use"
	assert_output "$(cat VERSION) 3808858755"
}

@test "deps: a package is skipped when its 'unless-command' is on PATH" {
	command -v dpkg-query >/dev/null || skip "not a Debian system"
	printf '# comment\nno-such-package-xyz unless-command sh\ncoreutils\n' > "$BATS_TEST_TMPDIR/deps.txt"
	run -0 mk/deps.sh "$BATS_TEST_TMPDIR/deps.txt"
	assert_output "deps: all 1 packages present"
}

@test "shell scripts are shellcheck-clean: slurm/, the test fixtures, bench/" {
	command -v shellcheck >/dev/null || skip "no shellcheck (make deps installs it)"
	run -0 shellcheck slurm/multinode_trainer.slurm slurm/pipeline.slurm slurm/submit-pipeline \
		tests/slurm/cluster.sh bench/train_dist.sh bench/train_cpu.sh bench/moe_cpu.sh bench/lib.sh bench/blas_kernels.sh \
		tests/fuzz/run.sh tests/fuzz/seeds.sh
}
