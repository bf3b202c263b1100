/*
 * ckpt_impl.h — private to lib/ckpt: the HDF5 helpers shared by the
 * checkpoint writer (h5.c) and reader (h5read.c), and the flavor match
 * shared by checkpoint.c and hf.c.
 */
#ifndef TITAN_CKPT_IMPL_H
#define TITAN_CKPT_IMPL_H

#include "config.h"
#include "titan/ckpt.h"

#if TITAN_HAVE_HDF5
#include <hdf5.h>

/* Elements per conversion block for 16-bit tensors (1 Mi); bytes per
 * write or read call for float32 ones (64 MiB).  Variables so that tests
 * can make them small and cross block boundaries. */
extern int64_t titan_ckpt_block_elems_, titan_ckpt_block_bytes_;
#define BLOCK_ELEMS titan_ckpt_block_elems_
#define BLOCK_BYTES titan_ckpt_block_bytes_

/* Turn off HDF5's own error printing (once per process): errors are
 * reported through titan_error with the library's message appended. */
void titan_h5_quiet_(void);
/* Record an error, appending HDF5's innermost message, and clear the
 * HDF5 error stack.  Returns `code`. */
int titan_h5_fail_(int code, const char *fmt, ...) TITAN_PRINTF(2, 3);
/* The file (and memory) type of a storage dtype: float32 LE, IEEE half LE,
 * or bfloat16 as an HDF5 float (PLATFORM.md).  A new id to H5Tclose, or -1. */
hid_t titan_h5_type_(enum titan_ckpt_dtype dt);

#define quiet titan_h5_quiet_
#define h5fail titan_h5_fail_
#define file_type titan_h5_type_
#endif

/* The titan flavor whose dims equal d's (dim, layers, heads, kv heads,
 * vocab, ffn hidden, tied) into name; "custom" when none does. */
void titan_ckpt_match_flavor_(const struct titan_model_dims *d, char name[32]);

/* mkdir -p: 0 or TITAN_E_IO naming the folder that cannot be made. */
int titan_ckpt_mkdirs_(const char *folder);

#define NO_HDF5 titan_error(TITAN_E_UNSUPPORTED, "titan was built without HDF5: checkpoints " \
			    "need it (install libhdf5-mpich-dev and rebuild)")
#endif
