/*
 * kernel.c — the CPU GEMM kernel titan-train will run, and the rates the
 * step time of the cpu device is predicted from (docs/estimate.md,
 * "Step time on the CPU").
 *
 * The kernel is lib/cpu/select.c's choice for this machine: its flags,
 * the kernel OpenBLAS picked in this process and OPENBLAS_CORETYPE.  When
 * titan-train would set OPENBLAS_CORETYPE and re-execute itself, this
 * process does neither (it only asks OpenBLAS for its kernel's name) and
 * reports the one titan-train will run.  Its peak is
 * titan-train's MFU peak (lib/cpu/peak.c: threads x nominal clock x the
 * kernel's FLOPs/cycle), so the predicted MFU is the one the log will show.
 *
 * Rates, measured with titan-train on this machine kind's SkylakeX
 * kernel, 1 thread, as CPU seconds per step and perf's shares of them
 * (docs/performance.md, "titan-estimate's step time"), on the 25M model
 * of bench/train_cpu.sh and on torchtitan's debug model, which they fit
 * within a few percent:
 *  - GEMM FLOPs (the seven linears of a block and the classifier) at
 *    GEMM_EFF of the peak: OpenBLAS's kernel with its packing;
 *  - attention's products (Q·Kᵀ, P·V and their gradients, the register
 *    tiles of lib/cpu/attention.c) at ATTN_EFF of the peak, at head_dim
 *    64 and 16 alike;
 *  - the softmax passes over the causal score matrix (exp in the forward,
 *    P recomputed and dS in the backward) at SCORE_CYCLES per element and
 *    thread;
 *  - the elementwise ops (RMSNorm, SwiGLU, RoPE, residual adds, the loss
 *    rows: 4·dim + 2·ffn + vocab elements per token) and AdamW with the
 *    gradient norm (4 per parameter) at ELEM_CYCLES per element and
 *    thread: they are bound by memory, not by the kernel.
 * The same figures serve every kernel: they were measured with SkylakeX
 * (AVX-512) only; a slower kernel's peak, and so its GEMMs and products,
 * are slower in proportion.
 */
#include "est_impl.h"

#include "titan/ops.h"

#include <stdio.h>
#include <string.h>

#define GEMM_EFF 0.88
#define ATTN_EFF 0.55
#define SCORE_CYCLES 2.3
#define ELEM_CYCLES 4.3

static const char *how_word(enum titan_blas_how h)
{
	switch (h) {
	case TITAN_BLAS_NONE:
		return "none";
	case TITAN_BLAS_OWN:
		return "own";
	case TITAN_BLAS_SELECTED:
		return "titan";
	case TITAN_BLAS_USER:
		return "user";
	case TITAN_BLAS_FIXED:
		return "fixed";
	case TITAN_BLAS_FAILED:
		return "failed";
	}
	return "?";
}

void est_cpu_kernel(struct titan_estimate *e)
{
	struct titan_est_kernel *k = &e->kernel;
	const struct titan_blas_choice *c = titan_blas_choice();
	struct titan_cpu_peak p;

	memset(k, 0, sizeof(*k));
	if (!e->opts.dev.cpu)
		return;
	titan_blas_describe(k->describe, sizeof(k->describe));
	snprintf(k->how, sizeof(k->how), "%s", how_word(c->how));
	if (titan_cpu_peak_flops_for(NULL, c->core[0] ? c->core : NULL, e->opts.threads, &p) < 0) {
		titan_error_clear();
		return;
	}
	k->known = true;
	snprintf(k->core, sizeof(k->core), "%s", c->core[0] ? c->core : "none");
	snprintf(k->isa, sizeof(k->isa), "%s", p.isa);
	snprintf(k->clock_from, sizeof(k->clock_from), "%s", p.clock_from);
	k->flops_per_cycle = p.flops_per_cycle;
	k->threads = p.threads;
	k->clock_hz = p.clock_hz;
	k->peak_flops = p.flops;
	k->gemm_eff = GEMM_EFF;
	k->attn_eff = ATTN_EFF;
	k->score_cycles = SCORE_CYCLES;
	k->elem_cycles = ELEM_CYCLES;
}
