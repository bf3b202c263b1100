/*
 * device.c — the devices titan-estimate knows: memory as PyTorch reports
 * it (torch.cuda.get_device_properties().total_memory, the "CUDA capacity"
 * of torchtitan's log), dense peak FLOP/s from the GPU peak table below
 * (torchtitan's get_peak_flops; titan-train's MFU reads the same table),
 * and default link bandwidths (NVLink per GPU and direction; one 400 Gb/s
 * NIC per GPU between nodes, 200 Gb/s for A100 systems).
 */
#include "est_impl.h"

#include <string.h>
#include <unistd.h>

#define GB 1e9

/* Dense peak FLOP/s by a word of the GPU's name, the first match wins
 * (torchtitan's get_peak_flops: "H20" is the H20 unless the name says
 * H200).  bf16, then float8 (NAN: none, or not in the table). */
static const struct gpu_peak {
	const char *key;
	double bf16, fp8;
} gpu_peaks[] = {
	{ "H200", 989e12, 1979e12 },
	{ "H20", 148e12, NAN },
	{ "H100", 989e12, 1979e12 },
	{ "H800", 989e12, NAN },
	{ "B200", 2.25e15, 4500e12 },
	{ "A100", 312e12, NAN },
	{ "A800", 312e12, NAN },
	{ "L40S", 362e12, NAN },
};

static const struct gpu_peak *gpu_peak(const char *name)
{
	for (size_t i = 0; i < sizeof(gpu_peaks) / sizeof(gpu_peaks[0]); i++)
		if (strstr(name, gpu_peaks[i].key))
			return &gpu_peaks[i];
	return NULL;
}

double titan_gpu_peak_flops(const char *name)
{
	const struct gpu_peak *p = gpu_peak(name);

	return p ? p->bf16 : 0;
}

double titan_gpu_peak_flops_fp8(const char *name)
{
	const struct gpu_peak *p = gpu_peak(name);

	return p ? p->fp8 : NAN;
}

/* The peaks come from gpu_peaks by the description (the GPU's name). */
static const struct titan_est_device devices[] = {
	{ "a100-80g", "NVIDIA A100-SXM4-80GB", false, 79.25 * GiB, NAN, NAN,
	  300 * GB, 25 * GB, 1.0 * GiB, 0.10 },
	{ "h100-80g", "NVIDIA H100 80GB HBM3", false, 79.18 * GiB, NAN, NAN,
	  450 * GB, 50 * GB, 1.0 * GiB, 0.10 },
	{ "h200", "NVIDIA H200", false, 139.81 * GiB, NAN, NAN,
	  450 * GB, 50 * GB, 1.0 * GiB, 0.10 },
	{ "b200", "NVIDIA B200", false, 178.35 * GiB, NAN, NAN,
	  900 * GB, 50 * GB, 1.0 * GiB, 0.10 },
	/* cpu links: MPICH shared memory within a node (a memcpy-bound few
	 * GB/s per rank), 100 Gb/s between nodes; --link-bandwidth overrides */
	{ "cpu", "this machine's CPU (titan-train's CPU path)", true, 0, NAN, NAN,
	  5 * GB, 12.5 * GB, 0, 0 },
};
#define NDEVICES ((int)(sizeof(devices) / sizeof(devices[0])))

int titan_est_ndevices(void)
{
	return NDEVICES;
}

const char *titan_est_device_name(int i)
{
	return i >= 0 && i < NDEVICES ? devices[i].name : NULL;
}

int titan_est_device_lookup(const char *name, struct titan_est_device *out)
{
	for (int i = 0; i < NDEVICES; i++) {
		if (strcmp(name, devices[i].name))
			continue;
		*out = devices[i];
		if (!out->cpu) {
			out->peak_flops = titan_gpu_peak_flops(out->description);
			out->peak_flops_fp8 = titan_gpu_peak_flops_fp8(out->description);
		} else {
			long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

			out->memory = pages > 0 && size > 0 ? (double)pages * (double)size : 0;
		}
		return 0;
	}
	return titan_error(TITAN_E_INVALID, "unknown device '%s' (known: a100-80g, h100-80g, "
			   "h200, b200, cpu)", name);
}

const char *titan_est_phase_name(enum titan_est_phase p)
{
	static const char *const names[] = { "startup", "forward", "loss", "backward",
					     "optimizer" };

	return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p] : "?";
}

const char *titan_est_schedule_name(enum titan_est_schedule s)
{
	return titan_schedule_name((enum titan_schedule)s);
}

const char *titan_est_layout_str(const struct titan_est_opts *o, char *buf, size_t n)
{
	const struct titan_est_layout *l = &o->layout;

	snprintf(buf, n, "dp_replicate %lld x dp_shard %lld x tp %lld x pp %lld x cp %lld",
		 (long long)l->dp_replicate, (long long)l->dp_shard, (long long)l->tp,
		 (long long)l->pp, (long long)l->cp);
	return buf;
}

const char *titan_est_ac_str(const struct titan_est_opts *o, char *buf, size_t n)
{
	switch (o->ac) {
	case TITAN_EST_AC_NONE:
		snprintf(buf, n, "none");
		break;
	case TITAN_EST_AC_SELECTIVE:
		snprintf(buf, n, "selective %d", o->ac_every);
		break;
	case TITAN_EST_AC_OP:
		snprintf(buf, n, "selective op");
		break;
	case TITAN_EST_AC_FULL:
		snprintf(buf, n, "full");
		break;
	}
	return buf;
}
