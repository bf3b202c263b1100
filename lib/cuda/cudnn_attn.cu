/*
 * cudnn_attn.cu — causal GQA attention through cuDNN 9's fused flash
 * attention (SDPA forward and backward), for attention_fwd/bwd in
 * TITAN_CUDA_MATMUL_BF16 mode (attention.cu dispatches here first).
 *
 * libcudnn is not linked: it is dlopen()ed on first use (TITAN_CUDNN_LIB,
 * else "libcudnn.so.9"), and the handful of functions used are looked up
 * with dlsym; the headers give only the types and enums.  Without it (or
 * with TITAN_CUDA_ATTN=titan, or for a shape cuDNN refuses) titan's own
 * kernels run, and one log line says which attention runs and why.
 *
 * The graphs are cuDNN's backend ("graph") API built as NVIDIA's
 * cudnn-frontend builds its composite SDPA nodes for cuDNN 9 (before the
 * unified SDPA operation): the runtime-fusion engines recognise exactly
 * that op sequence and run their flash-attention kernels.
 *
 *   forward:  S = Q·Kᵀ (fp32), S·scale, causal mask (GEN_INDEX row, col,
 *             row >= col, BINARY_SELECT with −inf), softmax as max /
 *             sub / exp / sum / div with Stats = max + log(sum) written
 *             out, P (bf16)·V = O.
 *   backward: softmax_sum = Σ dO∘O (fp32, workspace), S = Q·Kᵀ·scale −
 *             Stats, masked, P = exp; dV = Pᵀ·dO; dP = dO·Vᵀ; dS = (dP −
 *             softmax_sum)∘P·scale; dK = dSᵀ·Q; dQ = dS·K.  With GQA, dK
 *             and dV are full-head products reduced (ADD) over the group.
 *             dQ as the frontend's deterministic Hopper variant (its
 *             "dP workspace": dQ written by the matmul, so a run repeats
 *             itself bit for bit, titan/cuda.h's promise) — or, with
 *             TITAN_CUDA_ATTN=cudnn-fast, its default: dQ_accum = dS·K
 *             (fp32, workspace, accumulated with atomics, not
 *             bit-reproducible), dQ = identity(dQ_accum).
 *
 * Layouts: titan's q/out [B,T,H,D] are cuDNN's [b,h,s,d] with strides
 * (T·H·D, D, H·D, 1) — no copy; Stats [b,h,s,1] strides (H·T, T, 1, 1) is
 * titan's lse [B,H,T] (natural log of Σ exp of the scaled scores, the CPU
 * op's convention).  Activations are fp32 between titan's ops, so q, k, v
 * (and out, dout) are rounded into bf16 staging buffers first, and O, dQ,
 * dK, dV come back from bf16 into titan's fp32 buffers (overwritten).
 *
 * Plans are built once per shape (B, T, H, Hkv, D) and direction and kept
 * in a small table on the backend; the workspace (the plan's, plus the
 * backward's dQ_accum and softmax_sum) and staging come from the backend's
 * allocator and grow as needed.  Everything runs on the backend's stream;
 * nothing synchronizes the host.  TITAN_CUDNN_DEBUG=1 logs every step of a
 * graph build and every failing call with cudnnGetLastErrorString's text.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn_graph.h>

#include "cuda_impl.h"

/* ---- the library: dlopen once per process ---------------------------------- */

static struct {
	pthread_once_t once;
	bool ok;
	size_t version;
	char why[320];
	cudnnStatus_t (*create)(cudnnHandle_t *);
	cudnnStatus_t (*destroy)(cudnnHandle_t);
	cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
	size_t (*get_version)(void);
	const char *(*error_string)(cudnnStatus_t);
	void (*last_error)(char *, size_t); /* NULL when absent */
	cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
	cudnnStatus_t (*destroy_desc)(cudnnBackendDescriptor_t);
	cudnnStatus_t (*set_attr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
				  cudnnBackendAttributeType_t, int64_t, const void *);
	cudnnStatus_t (*get_attr)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
				  cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
	cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
	cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t,
				 cudnnBackendDescriptor_t);
} lib = {PTHREAD_ONCE_INIT, false, 0, "", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	 NULL, NULL, NULL, NULL};

static bool dnn_debug(void)
{
	static int on = -1;

	if (on < 0) {
		const char *e = getenv("TITAN_CUDNN_DEBUG");

		on = e && *e && strcmp(e, "0") != 0;
	}
	return on;
}

static void lib_load(void)
{
	const char *name = getenv("TITAN_CUDNN_LIB");
	void *h;

	if (!name || !*name)
		name = "libcudnn.so.9";
	if (!(h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
		const char *e = dlerror();

		snprintf(lib.why, sizeof(lib.why), "dlopen(%s): %s", name, e ? e : "failed");
		return;
	}
#define SYM(field, sym)                                                                        \
	do {                                                                                   \
		*(void **)&lib.field = dlsym(h, sym);                                          \
		if (!lib.field) {                                                              \
			snprintf(lib.why, sizeof(lib.why), "%s: no symbol %s", name, sym);     \
			return;                                                                \
		}                                                                              \
	} while (0)
	SYM(create, "cudnnCreate");
	SYM(destroy, "cudnnDestroy");
	SYM(set_stream, "cudnnSetStream");
	SYM(get_version, "cudnnGetVersion");
	SYM(error_string, "cudnnGetErrorString");
	SYM(create_desc, "cudnnBackendCreateDescriptor");
	SYM(destroy_desc, "cudnnBackendDestroyDescriptor");
	SYM(set_attr, "cudnnBackendSetAttribute");
	SYM(get_attr, "cudnnBackendGetAttribute");
	SYM(finalize, "cudnnBackendFinalize");
	SYM(execute, "cudnnBackendExecute");
#undef SYM
	*(void **)&lib.last_error = dlsym(h, "cudnnGetLastErrorString");
	lib.version = lib.get_version();
	if (lib.version < 90000) {
		snprintf(lib.why, sizeof(lib.why), "%s is cuDNN %zu.%zu.%zu, 9.0 or later needed",
			 name, lib.version / 10000, lib.version / 100 % 100, lib.version % 100);
		return;
	}
	lib.ok = true; /* the handle stays open for the process */
}

static bool lib_ok(void)
{
	pthread_once(&lib.once, lib_load);
	return lib.ok;
}

/* "cudnnX: STATUS_NAME: last error text" into buf */
static void dnn_msg(char *buf, size_t n, const char *call, cudnnStatus_t st)
{
	char last[512] = "";

	if (lib.last_error)
		lib.last_error(last, sizeof(last));
	snprintf(buf, n, "%s: %s%s%s", call, lib.error_string(st), last[0] ? ": " : "", last);
}

/* ---- per-backend state ------------------------------------------------------- */

#define DNN_PLANS 16
#define LEN_OF(a) (sizeof(a) / sizeof((a)[0]))
#define DNN_MAX_DESCS 160

enum { DNN_FWD, DNN_BWD };

/* tensor uids of a plan's variant pack; virtual tensors count up from 100 */
enum {
	UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_DO, UID_DQ, UID_DK, UID_DV,
	UID_DQ_ACCUM, UID_SOFTMAX_SUM, UID_NEG_INF, UID_ONE, UID_VIRTUAL = 100
};

struct dnn_plan {
	bool used, ok;
	int dir;
	bool det;                   /* backward: the deterministic dQ variant */
	int64_t B, T, H, Hkv, D;
	cudnnBackendDescriptor_t plan;
	cudnnBackendDescriptor_t descs[DNN_MAX_DESCS]; /* everything the plan was built from */
	int ndescs;
	int64_t ws;                 /* the plan's own workspace bytes */
	float scale, neg_inf, one;  /* by-value scalars (host memory the pack points at) */
};

struct cudnn_attn {
	int mode;                   /* TITAN_CUDA_ATTN_* */
	bool logged;                /* the one line saying which attention runs */
	bool handle_tried;
	cudnnHandle_t handle;
	cudaStream_t stream;        /* the backend's, which the handle runs on */
	char why[400];              /* why titan's kernels run (handle set-up failed) */
	struct dnn_plan plans[DNN_PLANS];
	int next;                   /* round-robin slot when the table is full */
	void *buf;                  /* staging (bf16) + workspace, grow-only */
	size_t buf_bytes;
	struct titan_cuda_attn_info info;
};

static struct cudnn_attn *dnn_of(struct titan_backend *be)
{
	struct cuda_impl *c = cuda_of(be);

	if (!c->dnn) {
		const char *e = getenv("TITAN_CUDA_ATTN");

		if (!(c->dnn = (struct cudnn_attn *)calloc(1, sizeof(*c->dnn))))
			return NULL;
		c->dnn->mode = !e ? TITAN_CUDA_ATTN_CUDNN
			       : strcmp(e, "titan") == 0 ? TITAN_CUDA_ATTN_TITAN
			       : strcmp(e, "cudnn-fast") == 0 ? TITAN_CUDA_ATTN_CUDNN_FAST
						       : TITAN_CUDA_ATTN_CUDNN;
	}
	return c->dnn;
}

static void plan_free(struct dnn_plan *p)
{
	if (p->plan)
		lib.destroy_desc(p->plan);
	for (int i = p->ndescs - 1; i >= 0; i--)
		lib.destroy_desc(p->descs[i]);
	memset(p, 0, sizeof(*p));
}

void cudnn_attn_release(struct titan_backend *be)
{
	struct cuda_impl *c = cuda_of(be);
	struct cudnn_attn *a = c->dnn;

	if (!a)
		return;
	for (int i = 0; i < DNN_PLANS; i++)
		if (a->plans[i].used)
			plan_free(&a->plans[i]);
	if (a->handle)
		lib.destroy(a->handle);
	cuda_buf_free(be, a->buf);
	free(a);
	c->dnn = NULL;
}

/* ---- graph building ------------------------------------------------------------ */

/* Builder: every descriptor goes into p->descs; the first failure stops the
 * rest (each helper is a no-op once err is set) and is kept in msg. */
struct gb {
	struct dnn_plan *p;
	cudnnHandle_t handle;
	int64_t next_uid;
	bool err;
	char msg[640];
	cudnnBackendDescriptor_t ops[48];
	int nops;
};

static void gb_fail(struct gb *g, const char *what, cudnnStatus_t st)
{
	if (g->err)
		return;
	g->err = true;
	dnn_msg(g->msg, sizeof(g->msg), what, st);
	if (dnn_debug())
		titan_log_warn("cuDNN attention: %s", g->msg);
}

static cudnnBackendDescriptor_t gb_new(struct gb *g, cudnnBackendDescriptorType_t type,
				       const char *what)
{
	cudnnBackendDescriptor_t d = NULL;
	cudnnStatus_t st;

	if (g->err)
		return NULL;
	if (g->p->ndescs == DNN_MAX_DESCS) {
		g->err = true;
		snprintf(g->msg, sizeof(g->msg), "%s: more than %d descriptors", what,
			 DNN_MAX_DESCS);
		return NULL;
	}
	if ((st = lib.create_desc(type, &d)) != CUDNN_STATUS_SUCCESS) {
		char w[160];

		snprintf(w, sizeof(w), "cudnnBackendCreateDescriptor(%s)", what);
		gb_fail(g, w, st);
		return NULL;
	}
	g->p->descs[g->p->ndescs++] = d;
	return d;
}

static void gb_set(struct gb *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr,
		   cudnnBackendAttributeType_t type, int64_t n, const void *val, const char *what)
{
	cudnnStatus_t st;

	if (g->err)
		return;
	if ((st = lib.set_attr(d, attr, type, n, val)) != CUDNN_STATUS_SUCCESS) {
		char w[160];

		snprintf(w, sizeof(w), "cudnnBackendSetAttribute(%s, attribute %d)", what, (int)attr);
		gb_fail(g, w, st);
	}
}

static void gb_fin(struct gb *g, cudnnBackendDescriptor_t d, const char *what)
{
	cudnnStatus_t st;

	if (g->err)
		return;
	if ((st = lib.finalize(d)) != CUDNN_STATUS_SUCCESS) {
		char w[160];

		snprintf(w, sizeof(w), "cudnnBackendFinalize(%s)", what);
		gb_fail(g, w, st);
	} else if (dnn_debug()) {
		titan_log_info("cuDNN attention: finalized %s", what);
	}
}

/* A 4-d tensor (dims, strides in elements); uid 0 = a fresh virtual one. */
static cudnnBackendDescriptor_t gb_tensor(struct gb *g, int64_t uid, cudnnDataType_t dt,
					  const int64_t dims[4], const int64_t strides[4],
					  const char *what)
{
	cudnnBackendDescriptor_t t = gb_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
	const bool virt = uid == 0;
	const int64_t align = 16;

	if (virt)
		uid = g->next_uid++;
	gb_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, what);
	gb_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, what);
	gb_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, what);
	gb_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
	gb_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
	gb_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, what);
	gb_fin(g, t, what);
	return t;
}

/* Row-major strides of dims (the frontend's for its virtual tensors). */
static cudnnBackendDescriptor_t gb_virt(struct gb *g, cudnnDataType_t dt, int64_t d0, int64_t d1,
					int64_t d2, int64_t d3, const char *what)
{
	const int64_t dims[4] = {d0, d1, d2, d3}, st[4] = {d1 * d2 * d3, d2 * d3, d3, 1};

	return gb_tensor(g, 0, dt, dims, st, what);
}

/* A by-value fp32 scalar, 1x1x1x1 (a pointwise op wants its operands'
 * ranks equal: cuDNN 9.19 refuses the frontend's 1-d {1} form with
 * "xDesc.getNbDims() != bDesc.getNbDims()"). */
static cudnnBackendDescriptor_t gb_scalar(struct gb *g, int64_t uid, const char *what)
{
	cudnnBackendDescriptor_t t = gb_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
	const int64_t ones[4] = {1, 1, 1, 1}, align = 16;
	const int nd = 4;
	const cudnnDataType_t dt = CUDNN_DATA_FLOAT;
	const bool virt = false, byval = true;

	gb_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, what);
	gb_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nd, ones, what);
	gb_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nd, ones, what);
	gb_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
	gb_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
	gb_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, what);
	gb_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval, what);
	gb_fin(g, t, what);
	return t;
}

static void gb_op(struct gb *g, cudnnBackendDescriptor_t op, const char *what)
{
	gb_fin(g, op, what);
	if (g->err)
		return;
	if (g->nops == (int)(sizeof(g->ops) / sizeof(g->ops[0]))) {
		g->err = true;
		snprintf(g->msg, sizeof(g->msg), "%s: too many operations", what);
		return;
	}
	g->ops[g->nops++] = op;
}

/* y = mode(x[, b[, t]]); math precision `prec`; axis >= 0 for GEN_INDEX. */
static void gb_pw(struct gb *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
		  cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
		  cudnnBackendDescriptor_t y, int64_t axis, const char *what)
{
	cudnnBackendDescriptor_t pw = gb_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
	cudnnBackendDescriptor_t op;
	const float one = 1.0f;

	gb_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
	gb_set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
	if (axis >= 0)
		gb_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
	gb_fin(g, pw, what);
	op = gb_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
	gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR,
	       1, &pw, what);
	gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
	       what);
	gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
	       what);
	if (b)
		gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
		       &b, what);
	if (t)
		gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
		       &t, what);
	gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, what);
	gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, what);
	gb_op(g, op, what);
}

/* An operation of `type` whose descriptor attributes attr[i] are desc[i]. */
static void gb_op_of(struct gb *g, cudnnBackendDescriptorType_t type, int n,
		     const cudnnBackendAttributeName_t *attr, const cudnnBackendDescriptor_t *desc,
		     const char *what)
{
	cudnnBackendDescriptor_t op = gb_new(g, type, what);

	for (int i = 0; i < n; i++)
		gb_set(g, op, attr[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc[i], what);
	gb_op(g, op, what);
}

/* c = a·b (batched over the first two dims, fp32 compute) */
static void gb_mm(struct gb *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
		  cudnnBackendDescriptor_t c, const char *what)
{
	static const cudnnBackendAttributeName_t attr[4] = {
		CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
		CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_DESC};
	cudnnBackendDescriptor_t mm = gb_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
	const cudnnDataType_t ct = CUDNN_DATA_FLOAT;

	gb_set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct, what);
	gb_fin(g, mm, what);
	const cudnnBackendDescriptor_t desc[4] = {a, b, c, mm};
	gb_op_of(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 4, attr, desc, what);
}

/* y = reduce(x) over the dims where y is 1 (fp32 compute) */
static void gb_red(struct gb *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
		   cudnnBackendDescriptor_t y, const char *what)
{
	static const cudnnBackendAttributeName_t attr[3] = {
		CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
		CUDNN_ATTR_OPERATION_REDUCTION_YDESC};
	cudnnBackendDescriptor_t r = gb_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
	const cudnnDataType_t ct = CUDNN_DATA_FLOAT;

	gb_set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct, what);
	gb_set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
	       what);
	gb_fin(g, r, what);
	const cudnnBackendDescriptor_t desc[3] = {r, x, y};
	gb_op_of(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, 3, attr, desc, what);
}

/* y = x seen with y's dims and strides (no data moves) */
static void gb_reshape(struct gb *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
		       const char *what)
{
	static const cudnnBackendAttributeName_t attr[2] = {CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
							     CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
	const cudnnBackendDescriptor_t desc[2] = {x, y};

	gb_op_of(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2, attr, desc, what);
}

/* The causal mask of the frontend's diagonal_band_mask (right bound 0, top
 * left): row = GEN_INDEX(x, axis 2), col = GEN_INDEX(x, axis 3), keep =
 * row >= col, y = keep ? x : −inf.  Returns y (virtual fp32). */
static cudnnBackendDescriptor_t gb_causal(struct gb *g, cudnnBackendDescriptor_t x,
					  cudnnBackendDescriptor_t neg_inf, int64_t b, int64_t h,
					  int64_t sq, int64_t skv)
{
	cudnnBackendDescriptor_t row = gb_virt(g, CUDNN_DATA_INT32, b, h, sq, skv, "row index");
	cudnnBackendDescriptor_t col = gb_virt(g, CUDNN_DATA_INT32, b, h, sq, skv, "col index");
	cudnnBackendDescriptor_t keep = gb_virt(g, CUDNN_DATA_BOOLEAN, b, h, sq, skv, "row>=col");
	cudnnBackendDescriptor_t y = gb_virt(g, CUDNN_DATA_FLOAT, b, h, sq, skv, "masked");

	gb_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, row, 2, "gen_row_index");
	gb_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, col, 3, "gen_col_index");
	gb_pw(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1, "row>=col");
	gb_pw(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, neg_inf, keep, y, -1,
	      "binary_select");
	return y;
}

/* titan's [B,T,heads,D] as cuDNN's [b,heads,s,d] (transposed: [b,heads,d,s]) */
static void bhsd(int64_t dims[4], int64_t st[4], int64_t B, int64_t T, int64_t nh, int64_t D,
		 bool transposed)
{
	dims[0] = B, dims[1] = nh, dims[2] = T, dims[3] = D;
	st[0] = T * nh * D, st[1] = D, st[2] = nh * D, st[3] = 1;
	if (transposed) {
		int64_t t = dims[2];

		dims[2] = dims[3], dims[3] = t;
		t = st[2], st[2] = st[3], st[3] = t;
	}
}

/* The tensors both directions share: Q, Kᵀ, V (Vᵀ for the backward), O,
 * Stats, the scale and −inf. */
struct sdpa_io {
	cudnnBackendDescriptor_t q, kt, v, o, stats, scale, ninf;
	int64_t dq[4], sq[4], dk[4], sk[4]; /* Q's and K's dims and strides */
};

static void gb_io(struct gb *g, struct sdpa_io *io, int64_t B, int64_t T, int64_t H,
		  int64_t Hkv, int64_t D, bool v_transposed)
{
	int64_t dkt[4], skt[4];
	const int64_t dst[4] = {B, H, T, 1}, sst[4] = {H * T, T, 1, 1};

	bhsd(io->dq, io->sq, B, T, H, D, false);
	bhsd(io->dk, io->sk, B, T, Hkv, D, false);
	bhsd(dkt, skt, B, T, Hkv, D, true);
	io->q = gb_tensor(g, UID_Q, CUDNN_DATA_BFLOAT16, io->dq, io->sq, "Q");
	io->kt = gb_tensor(g, UID_K, CUDNN_DATA_BFLOAT16, dkt, skt, "K^T");
	io->v = v_transposed ? gb_tensor(g, UID_V, CUDNN_DATA_BFLOAT16, dkt, skt, "V^T")
			     : gb_tensor(g, UID_V, CUDNN_DATA_BFLOAT16, io->dk, io->sk, "V");
	io->o = gb_tensor(g, UID_O, CUDNN_DATA_BFLOAT16, io->dq, io->sq, "O");
	io->stats = gb_tensor(g, UID_STATS, CUDNN_DATA_FLOAT, dst, sst, "Stats");
	io->scale = gb_scalar(g, UID_SCALE, "attn_scale");
	io->ninf = gb_scalar(g, UID_NEG_INF, "-inf");
}

static void build_fwd(struct gb *g, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D)
{
	struct sdpa_io io;

	gb_io(g, &io, B, T, H, Hkv, D, false);
	cudnnBackendDescriptor_t q = io.q, kt = io.kt, v = io.v, o = io.o, stats = io.stats;
	cudnnBackendDescriptor_t scale = io.scale, ninf = io.ninf;

	cudnnBackendDescriptor_t s = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "bmm1 out");
	cudnnBackendDescriptor_t ss = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "scaled");
	gb_mm(g, q, kt, s, "bmm1");
	gb_pw(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s, scale, NULL, ss, -1, "attn_scale");
	cudnnBackendDescriptor_t m = gb_causal(g, ss, ninf, B, H, T, T);

	/* softmax (the frontend's composite softmax node) */
	cudnnBackendDescriptor_t mx = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, 1, "max");
	cudnnBackendDescriptor_t sub = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "sub_M");
	cudnnBackendDescriptor_t ex = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "exp_sub_M");
	cudnnBackendDescriptor_t sum = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, 1, "SumExp");
	cudnnBackendDescriptor_t lg = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, 1, "log");
	cudnnBackendDescriptor_t p = gb_virt(g, CUDNN_DATA_BFLOAT16, B, H, T, T, "softmax out");
	gb_red(g, CUDNN_REDUCE_TENSOR_MAX, m, mx, "Max");
	gb_pw(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, m, mx, NULL, sub, -1, "sub");
	gb_pw(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, sub, NULL, NULL, ex, -1, "exp");
	gb_red(g, CUDNN_REDUCE_TENSOR_ADD, ex, sum, "sum");
	gb_pw(g, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, NULL, NULL, lg, -1, "log");
	gb_pw(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, mx, lg, NULL, stats, -1, "Stats = max+log");
	gb_pw(g, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, ex, sum, NULL, p, -1, "div");
	gb_mm(g, p, v, o, "bmm2");
}

/* A key-side gradient, out = xᵀ·y: x [b,H,T,T] (fp32, virtual) seen
 * transposed as bf16 (the frontend's reshape), times y [b,H,T,D]; with GQA
 * the full-head product (bf16, virtual) is reduced (ADD) over each group
 * into out [b,Hkv,T,D]. */
static void gb_kv_grad(struct gb *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
		       cudnnBackendDescriptor_t out, int64_t B, int64_t T, int64_t H, int64_t Hkv,
		       int64_t D, const char *xt_name, const char *mm_name)
{
	const int64_t tdim[4] = {B, H, T, T}, tst[4] = {H * T * T, T * T, 1, T};
	cudnnBackendDescriptor_t xt = gb_tensor(g, 0, CUDNN_DATA_BFLOAT16, tdim, tst, xt_name);

	gb_reshape(g, x, xt, xt_name);
	if (H != Hkv) {
		cudnnBackendDescriptor_t full = gb_virt(g, CUDNN_DATA_BFLOAT16, B, H, T, D,
							"full heads");

		gb_mm(g, xt, y, full, mm_name);
		gb_red(g, CUDNN_REDUCE_TENSOR_ADD, full, out, "reduce over the group");
	} else {
		gb_mm(g, xt, y, out, mm_name);
	}
}

static void build_bwd(struct gb *g, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D,
		      bool det)
{
	const int64_t dst[4] = {B, H, T, 1}, sst[4] = {H * T, T, 1, 1};
	struct sdpa_io io;

	gb_io(g, &io, B, T, H, Hkv, D, true);
	const int64_t *dq = io.dq, *sq = io.sq, *dk = io.dk, *sk = io.sk;
	cudnnBackendDescriptor_t q = io.q, kt = io.kt, vt = io.v, o = io.o, stats = io.stats;
	cudnnBackendDescriptor_t scale = io.scale, ninf = io.ninf;
	cudnnBackendDescriptor_t d_o = gb_tensor(g, UID_DO, CUDNN_DATA_BFLOAT16, dq, sq, "dO");
	cudnnBackendDescriptor_t d_q = gb_tensor(g, UID_DQ, CUDNN_DATA_BFLOAT16, dq, sq, "dQ");
	cudnnBackendDescriptor_t d_k = gb_tensor(g, UID_DK, CUDNN_DATA_BFLOAT16, dk, sk, "dK");
	cudnnBackendDescriptor_t d_v = gb_tensor(g, UID_DV, CUDNN_DATA_BFLOAT16, dk, sk, "dV");
	cudnnBackendDescriptor_t one = gb_scalar(g, UID_ONE, "one");

	/* softmax_sum = Σ_d dO∘O (× 1: the frontend's dropout-scale slot) */
	const int64_t dodim[4] = {B, H, T, D}, dost[4] = {H * T * D, T * D, H * D, 1};
	cudnnBackendDescriptor_t doo = gb_tensor(g, 0, CUDNN_DATA_FLOAT, dodim, dost, "dO*O");
	cudnnBackendDescriptor_t red = gb_tensor(g, 0, CUDNN_DATA_FLOAT, dst, sst, "reduce_dO_o");
	cudnnBackendDescriptor_t ssum = gb_tensor(g, UID_SOFTMAX_SUM, CUDNN_DATA_FLOAT, dst, sst,
						  "softmax_sum");
	gb_pw(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, d_o, o, NULL, doo, -1, "mul_dO_O");
	gb_red(g, CUDNN_REDUCE_TENSOR_ADD, doo, red, "reduce_dO_o");
	gb_pw(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, red, one, NULL, ssum, -1,
	      "scale_dropout_inv");

	/* P = exp(mask(Q·Kᵀ·scale − Stats)) */
	cudnnBackendDescriptor_t s = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "matmul_Q_KT out");
	cudnnBackendDescriptor_t ss = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "scaled");
	cudnnBackendDescriptor_t sm = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "sub_s_m");
	gb_mm(g, q, kt, s, "matmul_Q_KT");
	gb_pw(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s, scale, NULL, ss, -1, "mul_s_attn_scale");
	gb_pw(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, ss, stats, NULL, sm, -1, "sub_s_m");
	cudnnBackendDescriptor_t msk = gb_causal(g, sm, ninf, B, H, T, T);
	cudnnBackendDescriptor_t p = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "exp_s");
	gb_pw(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, msk, NULL, NULL, p, -1, "exp_s");

	/* dV = Pᵀ·dO */
	gb_kv_grad(g, p, d_o, d_v, B, T, H, Hkv, D, "P^T", "matmul_pT_dO");

	/* dS = (dO·Vᵀ − softmax_sum)∘P·scale */
	cudnnBackendDescriptor_t dp = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "dP");
	cudnnBackendDescriptor_t dps = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "dP-sum");
	cudnnBackendDescriptor_t dpp = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "dP*P");
	cudnnBackendDescriptor_t ds = gb_virt(g, CUDNN_DATA_FLOAT, B, H, T, T, "dS");
	gb_mm(g, d_o, vt, dp, "matmul_dO_VT");
	gb_pw(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, ssum, NULL, dps, -1,
	      "sub_dP_softmax_sum");
	gb_pw(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dps, p, NULL, dpp, -1, "mul_dP_exp_s");
	gb_pw(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dpp, scale, NULL, ds, -1,
	      "mul_dS_attn_scale");

	/* dK = dSᵀ·Q */
	gb_kv_grad(g, ds, q, d_k, B, T, H, Hkv, D, "dS^T", "matmul_dST_Q");

	/* dQ = dS·K (deterministic), or identity(dQ_accum = dS·K) */
	cudnnBackendDescriptor_t kr = gb_tensor(g, 0, CUDNN_DATA_FLOAT, dk, sk, "K (reshape_k)");
	gb_reshape(g, kt, kr, "reshape_k");
	if (det) {
		gb_mm(g, ds, kr, d_q, "matmul_dS_K");
	} else {
		const int64_t qacc[4] = {H * T * D, T * D, D, 1};
		cudnnBackendDescriptor_t acc = gb_tensor(g, UID_DQ_ACCUM, CUDNN_DATA_FLOAT, dq,
							 qacc, "dQ_accum");

		gb_mm(g, ds, kr, acc, "matmul_dS_K");
		gb_pw(g, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, acc, NULL, NULL, d_q, -1,
		      "identity_dQ");
	}
}

/* Operation graph, heuristics (mode A), and the first engine config whose
 * plan finalizes. */
static void build_plan(struct gb *g)
{
	struct dnn_plan *p = g->p;
	cudnnBackendDescriptor_t og, heur, cfgs[64];
	int64_t n = 0, got = 0;
	const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
	cudnnStatus_t st;

	og = gb_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
	if (g->handle) /* (none in titan_cuda_attention_graph_check) */
		gb_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle,
		       "operation graph");
	gb_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops,
	       "operation graph");
	gb_fin(g, og, "operation graph");
	heur = gb_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
	gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og,
	       "heuristics");
	gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics");
	gb_fin(g, heur, "heuristics");
	if (g->err || !g->handle)
		return;
	if ((st = lib.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
			       &n, NULL)) != CUDNN_STATUS_SUCCESS) {
		gb_fail(g, "cudnnBackendGetAttribute(heuristics, RESULTS count)", st);
		return;
	}
	if (n <= 0) {
		g->err = true;
		snprintf(g->msg, sizeof(g->msg), "heuristics (mode A) found no engine for the graph");
		return;
	}
	if (n > 64)
		n = 64;
	for (int64_t i = 0; i < n; i++)
		cfgs[i] = gb_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
	if (g->err)
		return;
	if ((st = lib.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n,
			       &got, cfgs)) != CUDNN_STATUS_SUCCESS) {
		gb_fail(g, "cudnnBackendGetAttribute(heuristics, RESULTS)", st);
		return;
	}
	if (dnn_debug())
		titan_log_info("cuDNN attention: heuristics gave %lld engine configs", (long long)got);
	for (int64_t i = 0; i < got; i++) {
		cudnnBackendDescriptor_t plan = NULL;
		char why[400];

		if ((st = lib.create_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan)) !=
		    CUDNN_STATUS_SUCCESS) {
			gb_fail(g, "cudnnBackendCreateDescriptor(execution plan)", st);
			return;
		}
		if ((st = lib.set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
				       &g->handle)) != CUDNN_STATUS_SUCCESS ||
		    (st = lib.set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
				       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i])) !=
			    CUDNN_STATUS_SUCCESS ||
		    (st = lib.finalize(plan)) != CUDNN_STATUS_SUCCESS) {
			dnn_msg(why, sizeof(why), "execution plan", st);
			if (dnn_debug())
				titan_log_info("cuDNN attention: engine config %lld refused: %s",
					       (long long)i, why);
			if (i == got - 1)
				snprintf(g->msg, sizeof(g->msg),
					 "none of %lld engine configs finalizes (last: %s)",
					 (long long)got, why);
			lib.destroy_desc(plan);
			continue;
		}
		if ((st = lib.get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
				       CUDNN_TYPE_INT64, 1, &n, &p->ws)) != CUDNN_STATUS_SUCCESS) {
			lib.destroy_desc(plan);
			gb_fail(g, "cudnnBackendGetAttribute(plan, WORKSPACE_SIZE)", st);
			return;
		}
		if (dnn_debug())
			titan_log_info("cuDNN attention: engine config %lld: plan with %lld bytes "
				       "of workspace", (long long)i, (long long)p->ws);
		p->plan = plan;
		return;
	}
	g->err = true;
	if (!g->msg[0])
		snprintf(g->msg, sizeof(g->msg), "no engine config finalizes");
}

/* ---- running ------------------------------------------------------------------- */

/* 0 and the handle, or 1 (titan's kernels: a->why says why). */
static int dnn_handle(struct titan_backend *be, struct cudnn_attn *a)
{
	cudnnStatus_t st;

	if (a->handle)
		return 0;
	if (a->handle_tried)
		return 1;
	a->handle_tried = true;
	if (!lib_ok()) {
		snprintf(a->why, sizeof(a->why), "%s", lib.why);
		return 1;
	}
	if ((st = lib.create(&a->handle)) != CUDNN_STATUS_SUCCESS) {
		dnn_msg(a->why, sizeof(a->why), "cudnnCreate", st);
		a->handle = NULL;
		return 1;
	}
	a->stream = cuda_of(be)->stream;
	if ((st = lib.set_stream(a->handle, a->stream)) != CUDNN_STATUS_SUCCESS) {
		dnn_msg(a->why, sizeof(a->why), "cudnnSetStream", st);
		lib.destroy(a->handle);
		a->handle = NULL;
		return 1;
	}
	return 0;
}

bool cudnn_attn_qualifies(enum titan_cuda_matmul matmul, const struct titan_attn_dims *d)
{
	return matmul == TITAN_CUDA_MATMUL_BF16 && !d->doc && d->head_dim % 8 == 0 &&
	       d->head_dim >= 8 && d->head_dim <= 128 && d->n_kv_heads > 0 &&
	       d->n_heads % d->n_kv_heads == 0 && d->batch > 0 && d->seq > 0;
}

/* The plan of a shape and direction: built on first use; NULL when it
 * cannot be (logged once; the shape then runs titan's kernels). */
static struct dnn_plan *dnn_plan(struct cudnn_attn *a, int dir, const struct titan_attn_dims *d)
{
	const bool det = dir == DNN_BWD && a->mode != TITAN_CUDA_ATTN_CUDNN_FAST;
	struct dnn_plan *p = NULL;
	struct gb g;

	for (int i = 0; i < DNN_PLANS; i++) {
		struct dnn_plan *e = &a->plans[i];

		if (e->used && e->dir == dir && e->det == det && e->B == d->batch && e->T == d->seq &&
		    e->H == d->n_heads && e->Hkv == d->n_kv_heads && e->D == d->head_dim)
			return e->ok ? e : NULL;
	}
	for (int i = 0; i < DNN_PLANS && !p; i++)
		if (!a->plans[i].used)
			p = &a->plans[i];
	if (!p) { /* full: the oldest slot goes, once no queued work runs it */
		p = &a->plans[a->next];
		a->next = (a->next + 1) % DNN_PLANS;
		cudaStreamSynchronize(a->stream);
		plan_free(p);
	}
	p->used = true;
	p->dir = dir;
	p->det = det;
	p->B = d->batch, p->T = d->seq, p->H = d->n_heads, p->Hkv = d->n_kv_heads;
	p->D = d->head_dim;
	p->scale = (float)(1.0 / sqrt((double)d->head_dim));
	p->neg_inf = -INFINITY;
	p->one = 1.0f;
	memset(&g, 0, sizeof(g));
	g.p = p;
	g.handle = a->handle;
	g.next_uid = UID_VIRTUAL;
	if (dir == DNN_FWD)
		build_fwd(&g, p->B, p->T, p->H, p->Hkv, p->D);
	else
		build_bwd(&g, p->B, p->T, p->H, p->Hkv, p->D, det);
	if (!g.err)
		build_plan(&g);
	if (g.err) {
		titan_log_warn("cuDNN attention %s%s B=%lld T=%lld H=%lld Hkv=%lld D=%lld: %s; "
			       "titan's kernel runs this shape", dir == DNN_FWD ? "forward" : "backward",
			       det ? " (deterministic)" : "",
			       (long long)p->B, (long long)p->T, (long long)p->H, (long long)p->Hkv,
			       (long long)p->D, g.msg);
		for (int i = p->ndescs - 1; i >= 0; i--)
			lib.destroy_desc(p->descs[i]);
		p->ndescs = 0;
		a->info.fallbacks++;
		return NULL; /* p stays used, not ok: the shape is not tried again */
	}
	p->ok = true;
	return p;
}

/* Staging + workspace of `bytes`, grow-only (the old block may still be
 * read by queued work: the stream is synchronized before it goes). */
static void *dnn_buf(struct titan_backend *be, struct cudnn_attn *a, size_t bytes)
{
	return cuda_grow_buf(be, &a->buf, &a->buf_bytes, bytes, 0, CUDA_CUDNN_GROW_DIV,
			     "cuDNN attention staging and workspace");
}

static size_t align256(size_t n)
{
	return (n + 255) & ~(size_t)255;
}

static __global__ void bf16_to_f32_kernel(float *__restrict__ dst,
					  const __nv_bfloat16 *__restrict__ src, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		dst[i] = __bfloat162float(src[i]);
}

static int to_f32(struct titan_backend *be, float *dst, const __nv_bfloat16 *src, int64_t n)
{
	bf16_to_f32_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_of(be)->stream>>>(dst, src, n);
	CU_LAUNCHED("cuDNN attention bf16 -> fp32");
	return 0;
}

static int dnn_execute(struct cudnn_attn *a, struct dnn_plan *p, int n, const int64_t *uids,
		       void *const *ptrs, void *ws, const char *what)
{
	cudnnBackendDescriptor_t vp = NULL;
	cudnnStatus_t st;
	const char *call = "cudnnBackendCreateDescriptor(variant pack)";
	char msg[640];

	if ((st = lib.create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp)) ==
	    CUDNN_STATUS_SUCCESS) {
		call = "cudnnBackendSetAttribute(variant pack)";
		if ((st = lib.set_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
				       uids)) == CUDNN_STATUS_SUCCESS &&
		    (st = lib.set_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
				       n, ptrs)) == CUDNN_STATUS_SUCCESS &&
		    (st = lib.set_attr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
				       &ws)) == CUDNN_STATUS_SUCCESS) {
			call = "cudnnBackendFinalize(variant pack)";
			if ((st = lib.finalize(vp)) == CUDNN_STATUS_SUCCESS) {
				call = "cudnnBackendExecute";
				st = lib.execute(a->handle, p->plan, vp);
			}
		}
		lib.destroy_desc(vp);
	}
	if (st == CUDNN_STATUS_SUCCESS) {
		if (cuda_sync_debug()) {
			cudaError_t e = cudaDeviceSynchronize();

			if (e != cudaSuccess)
				return titan_error(TITAN_E_DEVICE, "cuDNN attention %s: %s (%s)", what,
						   cudaGetErrorString(e), cudaGetErrorName(e));
		}
		return 0;
	}
	dnn_msg(msg, sizeof(msg), call, st);
	return titan_error(TITAN_E_DEVICE, "cuDNN attention %s B=%lld T=%lld H=%lld Hkv=%lld "
			   "D=%lld: %s", what, (long long)p->B, (long long)p->T, (long long)p->H,
			   (long long)p->Hkv, (long long)p->D, msg);
}

/* The line saying which attention runs (once per backend, at first use). */
static void dnn_log(struct cudnn_attn *a, bool cudnn)
{
	if (a->logged)
		return;
	a->logged = true;
	if (cudnn)
		titan_log_info("Attention: cuDNN %zu.%zu.%zu fused flash attention (bf16 SDPA "
			       "forward and backward, %s)", lib.version / 10000,
			       lib.version / 100 % 100, lib.version % 100,
			       a->mode == TITAN_CUDA_ATTN_CUDNN_FAST
				       ? "TITAN_CUDA_ATTN=cudnn-fast: dQ accumulated with atomics"
				       : "deterministic backward");
	else
		titan_log_info("Attention: titan's kernels (%s)", a->why);
}

/* Common start of fwd/bwd: the plan to run, or NULL (titan's kernels). */
static struct dnn_plan *dnn_begin(struct titan_backend *be, int dir,
				  const struct titan_attn_dims *d, struct cudnn_attn **out)
{
	struct cuda_impl *c = cuda_of(be);
	struct cudnn_attn *a;

	if (c->matmul != TITAN_CUDA_MATMUL_BF16 || !(a = dnn_of(be)))
		return NULL;
	*out = a;
	if (a->mode == TITAN_CUDA_ATTN_TITAN) {
		snprintf(a->why, sizeof(a->why), "TITAN_CUDA_ATTN=titan");
		dnn_log(a, false);
		return NULL;
	}
	if (!cudnn_attn_qualifies(c->matmul, d))
		return NULL;
	if (dnn_handle(be, a)) {
		dnn_log(a, false);
		return NULL;
	}
	dnn_log(a, true);
	return dnn_plan(a, dir, d);
}

int cudnn_attn_fwd(struct titan_backend *be, float *out, float *lse, const float *q,
		   const float *k, const float *v, const struct titan_attn_dims *d)
{
	struct cudnn_attn *a = NULL;
	struct dnn_plan *p = dnn_begin(be, DNN_FWD, d, &a);
	const int64_t nq = d->batch * d->seq * d->n_heads * d->head_dim;
	const int64_t nk = d->batch * d->seq * d->n_kv_heads * d->head_dim;
	size_t off = 0, oq, ok, ov, oo, ows;
	char *buf;
	int rc;

	if (!p)
		return 1;
	oq = off, off = align256(off + (size_t)nq * 2);
	ok = off, off = align256(off + (size_t)nk * 2);
	ov = off, off = align256(off + (size_t)nk * 2);
	oo = off, off = align256(off + (size_t)nq * 2);
	ows = off, off += (size_t)p->ws;
	if (!(buf = (char *)dnn_buf(be, a, off)))
		return TITAN_E_NOMEM;
	__nv_bfloat16 *q16 = (__nv_bfloat16 *)(buf + oq), *k16 = (__nv_bfloat16 *)(buf + ok);
	__nv_bfloat16 *v16 = (__nv_bfloat16 *)(buf + ov), *o16 = (__nv_bfloat16 *)(buf + oo);
	if ((rc = cuda_to_bf16(be, q16, q, 1, nq, nq)) < 0 ||
	    (rc = cuda_to_bf16(be, k16, k, 1, nk, nk)) < 0 ||
	    (rc = cuda_to_bf16(be, v16, v, 1, nk, nk)) < 0)
		return rc;
	const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF};
	void *const ptrs[] = {q16, k16, v16, o16, lse, &p->scale, &p->neg_inf};
	if ((rc = dnn_execute(a, p, (int)LEN_OF(uids), uids, ptrs, p->ws ? buf + ows : NULL,
			      "forward")) < 0 ||
	    (rc = to_f32(be, out, o16, nq)) < 0)
		return rc;
	a->info.fwd_calls++;
	return 0;
}

int cudnn_attn_bwd(struct titan_backend *be, float *dq, float *dk, float *dv, const float *dout,
		   const float *q, const float *k, const float *v, const float *out,
		   const float *lse, const struct titan_attn_dims *d)
{
	struct cudnn_attn *a = NULL;
	struct dnn_plan *p = dnn_begin(be, DNN_BWD, d, &a);
	const int64_t nq = d->batch * d->seq * d->n_heads * d->head_dim;
	const int64_t nk = d->batch * d->seq * d->n_kv_heads * d->head_dim;
	const int64_t nl = d->batch * d->n_heads * d->seq;
	size_t off = 0, o[10];
	char *buf;
	int rc;

	if (!p)
		return 1;
	/* q k v o dO dq dk dv (bf16), dQ_accum, softmax_sum (fp32), the plan's */
	const size_t sz[10] = {(size_t)nq * 2, (size_t)nk * 2, (size_t)nk * 2, (size_t)nq * 2,
			       (size_t)nq * 2, (size_t)nq * 2, (size_t)nk * 2, (size_t)nk * 2,
			       (size_t)nq * 4, (size_t)nl * 4};
	for (int i = 0; i < 10; i++)
		o[i] = off, off = align256(off + sz[i]);
	const size_t ows = off;
	off += (size_t)p->ws;
	if (!(buf = (char *)dnn_buf(be, a, off)))
		return TITAN_E_NOMEM;
	__nv_bfloat16 *b16[8];
	for (int i = 0; i < 8; i++)
		b16[i] = (__nv_bfloat16 *)(buf + o[i]);
	if ((rc = cuda_to_bf16(be, b16[0], q, 1, nq, nq)) < 0 ||
	    (rc = cuda_to_bf16(be, b16[1], k, 1, nk, nk)) < 0 ||
	    (rc = cuda_to_bf16(be, b16[2], v, 1, nk, nk)) < 0 ||
	    (rc = cuda_to_bf16(be, b16[3], out, 1, nq, nq)) < 0 ||
	    (rc = cuda_to_bf16(be, b16[4], dout, 1, nq, nq)) < 0)
		return rc;
	/* dQ_accum last: not in the deterministic graph's pack */
	const int64_t uids[] = {UID_Q,  UID_K,  UID_V,     UID_O,           UID_DO,
				UID_DQ, UID_DK, UID_DV,    UID_STATS,       UID_SOFTMAX_SUM,
				UID_SCALE, UID_NEG_INF, UID_ONE, UID_DQ_ACCUM};
	void *const ptrs[] = {b16[0], b16[1], b16[2], b16[3], b16[4], b16[5], b16[6],
			      b16[7], (void *)lse, buf + o[9], &p->scale, &p->neg_inf, &p->one,
			      buf + o[8]};
	const int npack = (int)LEN_OF(uids) - (p->det ? 1 : 0);
	if ((rc = dnn_execute(a, p, npack, uids, ptrs, p->ws ? buf + ows : NULL,
			      p->det ? "backward" : "backward (cudnn-fast)")) < 0 ||
	    (rc = to_f32(be, dq, b16[5], nq)) < 0 || (rc = to_f32(be, dk, b16[6], nk)) < 0 ||
	    (rc = to_f32(be, dv, b16[7], nk)) < 0)
		return rc;
	a->info.bwd_calls++;
	return 0;
}

/* ---- public: titan/cuda.h ----------------------------------------------------- */

extern "C" int titan_cuda_set_attention(struct titan_backend *be, enum titan_cuda_attn mode)
{
	struct cudnn_attn *a;

	if (!be || !be->impl ||
	    (mode != TITAN_CUDA_ATTN_CUDNN && mode != TITAN_CUDA_ATTN_TITAN &&
	     mode != TITAN_CUDA_ATTN_CUDNN_FAST))
		return titan_error(TITAN_E_INVALID, "titan_cuda_set_attention: bad arguments");
	if (!(a = dnn_of(be)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	a->mode = mode;
	a->logged = false;
	return 0;
}

extern "C" int titan_cuda_attention_info(struct titan_backend *be,
					 struct titan_cuda_attn_info *out)
{
	struct cudnn_attn *a;

	memset(out, 0, sizeof(*out));
	if (!be || !be->impl)
		return titan_error(TITAN_E_INVALID, "titan_cuda_attention_info: no backend");
	if (!(a = dnn_of(be)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if (a->mode != TITAN_CUDA_ATTN_TITAN && !dnn_handle(be, a)) {
		out->cudnn = true;
		out->version = (int)lib.version;
	} else {
		snprintf(out->why, sizeof(out->why), "%s",
			 a->mode == TITAN_CUDA_ATTN_TITAN ? "TITAN_CUDA_ATTN=titan" : a->why);
	}
	out->fwd_calls = a->info.fwd_calls;
	out->bwd_calls = a->info.bwd_calls;
	out->fallbacks = a->info.fallbacks;
	return 0;
}

/* The graphs of a shape, built and finalized as far as no device is needed
 * (every tensor and operation, the operation graph, the heuristics
 * descriptor); no engine is chosen.  Runs where libcudnn loads, GPU or
 * not: the unit test's check of the attribute types and op sequence. */
extern "C" int titan_cuda_attention_graph_check(const struct titan_attn_dims *d, char *why,
						size_t n)
{
	if (!lib_ok()) {
		snprintf(why, n, "%s", lib.why);
		return 1;
	}
	for (int dir = DNN_FWD; dir <= DNN_BWD + 1; dir++) { /* bwd: deterministic, fast */
		struct dnn_plan *p = (struct dnn_plan *)calloc(1, sizeof(*p));
		struct gb g;

		if (!p)
			return titan_error(TITAN_E_NOMEM, "out of memory");
		memset(&g, 0, sizeof(g));
		g.p = p;
		g.next_uid = UID_VIRTUAL;
		if (dir == DNN_FWD)
			build_fwd(&g, d->batch, d->seq, d->n_heads, d->n_kv_heads, d->head_dim);
		else
			build_bwd(&g, d->batch, d->seq, d->n_heads, d->n_kv_heads, d->head_dim,
				  dir == DNN_BWD);
		if (!g.err)
			build_plan(&g);
		plan_free(p);
		free(p);
		if (g.err)
			return titan_error(TITAN_E_DEVICE, "cuDNN attention %s graph: %s",
					   dir == DNN_FWD   ? "forward"
					   : dir == DNN_BWD ? "backward (deterministic)"
							    : "backward (cudnn-fast)",
					   g.msg);
	}
	return 0;
}
