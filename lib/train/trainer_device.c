/*
 * trainer_device.c — what the trainer runs on: training.device resolved
 * (cuda or cpu), the backend opened on it, and the peak FLOP/s that MFU
 * is measured against (metrics.peak_flops, the GPU peak table, the CPU's
 * nominal peak, or an sgemm probe).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "titan/core.h"
#include "titan/cuda.h"
#include "titan/estimate.h"
#include "trainer_impl.h"

/* Peak fp32 FLOP/s of this CPU measured with an sgemm (1024^3, best of 3)
 * on the threads the run uses: OpenBLAS's own threading for the probe (the
 * training GEMMs run it on one thread per tile of C, lib/cpu/matmul.c).
 * Only with metrics.measure_peak_flops: it moves between runs (1.28e11 to
 * 1.93e11 on one machine), the nominal peak (lib/cpu/peak.c) does not. */
#define PROBE_N 1024 /* the probe's n x n matrices: A, B and C */

int64_t titan_trainer_peak_probe_bytes(void)
{
	return 3 * (int64_t)PROBE_N * PROBE_N * (int64_t)sizeof(float);
}

static double measure_peak(int nthreads)
{
	const int n = PROBE_N;
	float *a = titan_malloc((size_t)titan_trainer_peak_probe_bytes(), TITAN_MEM_WORKSPACE);
	double best = 0;

	if (!a)
		return 0;
	openblas_set_num_threads(nthreads);
	for (size_t i = 0; i < (size_t)n * n * 3; i++)
		a[i] = (float)(i % 7) * 0.1f;
	for (int r = 0; r < 3; r++) {
		uint64_t t0 = titan_time_ns();

		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n,
			    a + (size_t)n * n, n, 0.0f, a + 2 * (size_t)n * n, n);
		double s = (double)(titan_time_ns() - t0) * 1e-9;
		double f = 2.0 * n * n * (double)n / s;

		if (f > best)
			best = f;
	}
	openblas_set_num_threads(1);
	titan_free(a);
	return best;
}

const char *titan_trainer_device(const struct titan_config *c, int nranks)
{
	int n = 0;

	if (c->training.device_e == TITAN_DEVICE_CUDA)
		return "cuda";
	if (c->training.device_e == TITAN_DEVICE_CPU || nranks > 1 || !titan_cuda_built() ||
	    titan_cuda_device_count(&n) < 0 || n == 0) {
		titan_error_clear();
		return "cpu";
	}
	return "cuda";
}

/* The test hook TITAN_STAGED_COMM=1: a CPU run reaches the model's
 * buffers the way a CUDA run does (staged communicators, checkpoints
 * through buf_get/buf_set), so the multi-rank tests run the code of CUDA
 * ranks on the CPU (docs/design.md). */
static bool staged_hook(void)
{
	const char *e = getenv("TITAN_STAGED_COMM");

	return e && !strcmp(e, "1");
}

/* The mesh's communicators on the backend's buffers: staged through the
 * host (titan_comm_staged_new) for every group the engine and the loss
 * use; the world's stays (host scalars, and its MPI handle for parallel
 * HDF5). */
static int stage_comms(struct titan_trainer *t, const char *why)
{
	int rc;

	for (int d = 0; d < TITAN_DIM_NALL; d++)
		if (d != TITAN_DIM_WORLD && t->dist->comm[d] &&
		    (rc = titan_comm_staged_new(t->dist->comm[d], &t->be, &t->comm[d])) < 0)
			return rc;
	if (t->dist->size > 1)
		titan_log_info("Collectives: MPI staged through host memory (%s)", why);
	return 0;
}

/* training.device: cuda needs a GPU: each rank trains on its first one
 * (several ranks: collectives over MPI, staged through the host); auto
 * picks cuda on one rank when a GPU is there. */
int titan_trainer_open_backend(struct titan_trainer *t, const struct titan_trainer_opts *o)
{
	const struct titan_config *c = &t->cfg;
	struct titan_cuda_opts co = {0};
	struct titan_cuda_device_info info;
	struct titan_mem_backend mb;
	int rc;

	t->mem = titan_host_allocator();
	if (!strcmp(titan_trainer_device(c, t->dist->size), "cpu")) {
		if ((rc = titan_backend_cpu_init(&t->be, o->threads)) < 0)
			return rc;
		t->be_ready = true;
		/* the docs promise no key is silently ignored: say what the
		 * CPU computes in (its kernels are float32; bf16 applies on
		 * CUDA, where it is the GEMM precision) */
		if (c->training.mixed_precision_param_e == TITAN_MP_PARAM_BFLOAT16)
			titan_log_info("training.mixed_precision_param bfloat16: the CPU computes in "
				       "float32 (mixed precision applies on CUDA)");
		t->staged = staged_hook();
		return t->staged ? stage_comms(t, "TITAN_STAGED_COMM=1") : 0;
	}
	if (c->training.enable_cpu_offload)
		return titan_error(TITAN_E_UNSUPPORTED, "training.enable_cpu_offload: not with "
				   "training.device: cuda");
	/* QK-norm runs on existing ops (rmsnorm over head_dim rows), but the
	 * Qwen3 block has not been checked against the CPU on a GPU yet */
	if (t->dims.qk_norm)
		return titan_error(TITAN_E_INVALID, "model.qk_norm: QK-norm (model.name %s) is not "
				   "checked on training.device: cuda yet; train it with "
				   "training.device: cpu", titan_model_family_name(t->dims.family));
	/* Llama 4's NoPE blocks only skip the RoPE ops, but the family has
	 * not been checked against the CPU on a GPU yet */
	if (t->dims.family == TITAN_MODEL_NAME_LLAMA4)
		return titan_error(TITAN_E_INVALID, "training.device: cuda: model.name llama4 is "
				   "not checked on a GPU yet; train it with training.device: cpu");
	/* multi-head latent attention moves its tensors with host loops */
	if (titan_model_mla(&t->dims))
		return titan_error(TITAN_E_INVALID, "training.device: cuda: multi-head latent "
				   "attention (model.name %s) runs on training.device: cpu only",
				   titan_model_family_name(t->dims.family));
	co.device = 0; /* the rank's first GPU (CUDA_VISIBLE_DEVICES picks it) */
	co.matmul = c->training.mixed_precision_param_e == TITAN_MP_PARAM_BFLOAT16
			    ? TITAN_CUDA_MATMUL_BF16 : TITAN_CUDA_MATMUL_FP32;
	if ((rc = titan_cuda_device_info(co.device, &info)) < 0 ||
	    (rc = titan_cuda_mem_backend(co.device, &mb)) < 0)
		return titan_error_prefix("training.device: cuda");
	if (!(t->dev_alloc = titan_allocator_new("cuda:0", &mb)))
		return titan_error(TITAN_E_NOMEM, "out of memory");
	if ((rc = titan_backend_cuda_init(&t->be, &co, t->dev_alloc)) < 0)
		return titan_error_prefix("training.device: cuda");
	t->be_ready = true;
	t->cuda = true;
	t->staged = true;
	if ((rc = stage_comms(t, "training.device: cuda; no NCCL yet")) < 0)
		return rc;
	t->mem = t->dev_alloc;
	t->total_mem = (double)info.total_memory;
	t->peak_flops = titan_gpu_peak_flops(info.name);
	titan_log_info("Device: %s (cuda:%d, compute capability %d.%d, %.1f GiB), GEMMs in %s",
		       info.name, co.device, info.cc_major, info.cc_minor,
		       (double)info.total_memory / 1073741824.0,
		       co.matmul == TITAN_CUDA_MATMUL_BF16 ? "bf16 (fp32 accumulate)" : "fp32");
	if (t->peak_flops == 0 && isnan(c->metrics.peak_flops))
		titan_log_warn("no bf16 peak known for '%s': MFU reads 0 (set "
			       "metrics.peak_flops)", info.name);
	return 0;
}

/* Before the model: the probe's 12 MiB are never on top of its arenas. */
void titan_trainer_choose_peak(struct titan_trainer *t)
{
	const struct titan_config *c = &t->cfg;

	if (!isnan(c->metrics.peak_flops)) {
		t->peak_flops = c->metrics.peak_flops;
		snprintf(t->peak_from, sizeof(t->peak_from), "metrics.peak_flops");
	} else if (t->cuda) { /* open_backend looked it up */
		snprintf(t->peak_from, sizeof(t->peak_from), "bf16 dense peak of the GPU");
	} else if (c->metrics.measure_peak_flops) {
		t->peak_flops = measure_peak(t->be.nthreads);
		snprintf(t->peak_from, sizeof(t->peak_from), "sgemm measured at start-up "
			 "(metrics.measure_peak_flops), %d threads", t->be.nthreads);
	} else {
		struct titan_cpu_peak cp;

		if (titan_cpu_peak_flops(NULL, t->be.nthreads, &cp) == 0) {
			t->peak_flops = cp.flops;
			snprintf(t->peak_from, sizeof(t->peak_from), "%s: %d threads x %.3f GHz (%s) "
				 "x %d FLOP/cycle, %s; override with metrics.peak_flops", cp.isa,
				 cp.threads, cp.clock_hz * 1e-9, cp.clock_from, cp.flops_per_cycle,
				 cp.kernel);
		} else {
			titan_log_warn("%s: no MFU", titan_errmsg());
			snprintf(t->peak_from, sizeof(t->peak_from), "unknown");
		}
	}
}
