/*
 * estimate.c — titan_estimate_run: check the options, build the memory
 * model of each pipeline rank (cpu.c or gpu.c), its moments and peak, the
 * fit against the device, and the throughput (perf.c).
 */
#include "est_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

int64_t est_mul(struct est_num *n, int64_t a, int64_t b)
{
	int64_t r;

	if (n->overflow || __builtin_mul_overflow(a, b, &r) || r > INT64_MAX / 4) {
		n->overflow = true;
		return 0;
	}
	return r;
}

int64_t est_add(struct est_num *n, int64_t a, int64_t b)
{
	int64_t r;

	if (n->overflow || __builtin_add_overflow(a, b, &r) || r > INT64_MAX / 4) {
		n->overflow = true;
		return 0;
	}
	return r;
}

int64_t est_bytes(struct est_num *n, double v)
{
	if (!(v >= 0) || v >= 4611686018427387904.0) { /* 2^62 */
		n->overflow = true;
		return 0;
	}
	return (int64_t)llround(v);
}

int est_moment(struct titan_est_rank *r, enum titan_est_phase ph, const char *label,
	       const char *what)
{
	struct titan_est_moment *m;

	TITAN_ASSERT(r->nmoments < TITAN_EST_MAX_MOMENTS);
	m = &r->moments[r->nmoments];
	memset(m, 0, sizeof(*m));
	m->phase = ph;
	snprintf(m->label, sizeof(m->label), "%s", label);
	snprintf(m->what, sizeof(m->what), "%s", what);
	return r->nmoments++;
}

void est_item(struct titan_est_rank *r, const char *name, enum titan_mem_tag tag,
	      int64_t bytes, uint32_t moments)
{
	struct titan_est_item *it;

	TITAN_ASSERT(bytes >= 0);
	if (bytes == 0 || !moments)
		return;
	TITAN_ASSERT(r->nitems < TITAN_EST_MAX_ITEMS);
	it = &r->items[r->nitems++];
	snprintf(it->name, sizeof(it->name), "%s", name);
	it->tag = tag;
	it->bytes = bytes;
	it->moments = moments;
}

void est_rank_finish(struct titan_est_rank *r, double overhead, struct est_num *n)
{
	r->peak_moment = 0;
	r->peak_bytes = r->step_peak_bytes = 0;
	memset(r->tag_peak, 0, sizeof(r->tag_peak));
	for (int m = 0; m < r->nmoments; m++) {
		struct titan_est_moment *mo = &r->moments[m];

		memset(mo->by_tag, 0, sizeof(mo->by_tag));
		mo->total = 0;
		for (int i = 0; i < r->nitems; i++) {
			if (!(r->items[i].moments & EST_AT(m)))
				continue;
			mo->by_tag[r->items[i].tag] = est_add(n, mo->by_tag[r->items[i].tag],
							      r->items[i].bytes);
			mo->total = est_add(n, mo->total, r->items[i].bytes);
		}
		/* the allocator records the first time the total is largest */
		if (mo->total > r->peak_bytes) {
			r->peak_bytes = mo->total;
			r->peak_moment = m;
		}
		if (mo->phase != TITAN_EST_PHASE_STARTUP && mo->total > r->step_peak_bytes)
			r->step_peak_bytes = mo->total;
		for (int t = 0; t < TITAN_MEM_NTAGS; t++)
			if (mo->by_tag[t] > r->tag_peak[t])
				r->tag_peak[t] = mo->by_tag[t];
	}
	memcpy(r->at_peak, r->moments[r->peak_moment].by_tag, sizeof(r->at_peak));
	r->reserved_bytes = est_bytes(n, (double)r->peak_bytes * (1.0 + overhead));
}

void titan_estimate_release(struct titan_estimate *e)
{
	if (!e)
		return;
	free(e->ranks);
	e->ranks = NULL;
	e->nranks = 0;
}

int titan_estimate_run(const struct titan_model_dims *d, const struct titan_est_opts *o,
		       struct titan_estimate *e)
{
	struct est_num n = {false};
	double need;
	int rc;

	memset(e, 0, sizeof(*e));
	e->dims = *d;
	e->opts = *o;
	titan_model_count_params(d, &e->params);
	if ((rc = titan_est_check(&e->opts, d)) < 0)
		return rc;
	if (e->opts.dev.cpu && e->opts.threads <= 0)
		e->opts.threads = omp_get_max_threads() > 0 ? omp_get_max_threads() : 1;
	/* cpu: the kernel titan-train will run; with its rates (the options'
	 * default for cpu), its peak is titan-train's MFU peak unless
	 * metrics.peak_flops or --peak-flops set one */
	est_cpu_kernel(e);
	if (e->kernel.known && e->opts.cpu_kernel_rates && !(e->opts.dev.peak_flops > 0))
		e->opts.dev.peak_flops = e->kernel.peak_flops;
	if (!e->opts.dev.cpu && e->opts.model_of == TITAN_EST_MODEL_TITAN) {
		/* titan-train's CUDA path where it runs: one rank (several
		 * ranks stage collectives through the host: not modelled), not
		 * the models titan-train refuses on CUDA (lib/train/
		 * trainer_device.c, llama.c: QK-norm, llama4, MoE; MLA is
		 * refused by titan_est_check) */
		const char *why = e->opts.ngpu > 1 ? "titan's CUDA path is modelled on one GPU only" :
				  d->qk_norm ? "titan-train does not run QK-norm on CUDA yet" :
				  e->params.n_moe_layers > 0 ?
				  "titan-train runs a mixture of experts on the CPU only" :
				  d->family == TITAN_MODEL_NAME_LLAMA4 ?
				  "titan-train does not run llama4 on CUDA yet" : NULL;

		if (why)
			snprintf(e->model_note, sizeof(e->model_note), "%s", why);
		else
			e->titan_cuda = true;
	}
	if (e->titan_cuda) /* the allocator's own bytes are in the model */
		e->opts.dev.alloc_overhead = 0;
	rc = e->opts.dev.cpu ? est_cpu_model(d, &e->opts, e) :
	     e->titan_cuda ? est_gpu_titan_model(d, &e->opts, e) : est_gpu_model(d, &e->opts, e);
	if (rc < 0) {
		titan_estimate_release(e);
		return rc;
	}
	e->worst = 0;
	for (int i = 0; i < e->nranks; i++)
		if (e->ranks[i].reserved_bytes > e->ranks[e->worst].reserved_bytes)
			e->worst = i;
	need = (double)e->ranks[e->worst].reserved_bytes + e->opts.dev.reserve;
	e->required_bytes = est_bytes(&n, need);
	e->device_bytes = est_bytes(&n, e->opts.dev.memory);
	if (n.overflow) {
		titan_estimate_release(e);
		return titan_error(TITAN_E_INVALID, "the estimate does not fit in 64-bit byte counts "
				   "(batch, sequence or model far too large)");
	}
	e->margin_bytes = e->device_bytes - e->required_bytes;
	e->fits = e->margin_bytes >= 0;
	est_perf(d, e);
	return 0;
}
