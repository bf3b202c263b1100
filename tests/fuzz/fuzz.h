/*
 * fuzz.h — helpers shared by titan's libFuzzer harnesses (tests/fuzz/fuzz_*.c,
 * built by mk/fuzz.mk, described in docs/fuzzing.md).
 *
 * Most readers take a path: a harness writes its input to a file in a
 * per-process folder (FUZZ_TMPDIR, else /dev/shm, else TMPDIR or /tmp),
 * removed at exit.  Inputs that are several files are split at
 * FUZZ_SEPARATOR lines (the seeds use it; mutations may move or break it).
 */
#ifndef TITAN_FUZZ_H
#define TITAN_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Between the files of a multi-file input. */
#define FUZZ_SEPARATOR "\n--8<--\n"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Set up once (quiet logs, the temporary folder): LLVMFuzzerInitialize
 * (fuzz_common.c) calls it.  Aborts when the folder cannot be made. */
void fuzz_init(void);
/* "FOLDER/name" in a static buffer (one of 4, used in turn: copy a path
 * that must outlive later calls). */
const char *fuzz_path(const char *name);
/* Write (replace) a file; aborts on failure (a full disk is no finding). */
void fuzz_write(const char *path, const void *data, size_t n);
/* Remove every file of the folder. */
void fuzz_clean(void);

/* One file of a multi-file input. */
struct fuzz_part {
	const uint8_t *p;
	size_t n;
};
/* Split data at FUZZ_SEPARATOR into at most `max` parts (the last one
 * takes the rest); returns the number of parts (>= 1). */
size_t fuzz_split(const uint8_t *data, size_t n, struct fuzz_part *parts, size_t max);

/* After a call: a failure must come with a message (printed when
 * FUZZ_VERBOSE=1, to see where seeds stop); the error is then cleared. */
void fuzz_check_error(int rc);
struct titan_config;
/* The oracle of the config harnesses: what titan_config_write_yaml prints
 * of `c`, titan_config_load_string reads back to equal values; aborts
 * saying which key differs. */
void fuzz_config_round_trip(const struct titan_config *c);

/* Bytes taken from the front of an input (0 when exhausted). */
struct fuzz_in {
	const uint8_t *p;
	size_t n;
};
uint8_t fuzz_u8(struct fuzz_in *in);
uint16_t fuzz_u16(struct fuzz_in *in);
uint32_t fuzz_u32(struct fuzz_in *in);
uint64_t fuzz_u64(struct fuzz_in *in);

#endif
