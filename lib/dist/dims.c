/*
 * dims.c — torchtitan's ParallelDims (torchtitan/distributed/
 * parallel_dims.py): validation of the degrees against the world size and
 * the mesh coordinates, pp outermost, tp innermost.
 */
#include "titan/dist.h"

#include <stdio.h>
#include <string.h>

static const char *const dim_names[TITAN_DIM_NALL] = {
	"pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "fsdp", "loss", "world",
};

const char *titan_mesh_dim_name(enum titan_mesh_dim d)
{
	return (unsigned)d < TITAN_DIM_NALL ? dim_names[d] : "?";
}

size_t titan_dtype_size(enum titan_dtype t)
{
	switch (t) {
	case TITAN_DTYPE_F32: return 4;
	case TITAN_DTYPE_F64: return 8;
	case TITAN_DTYPE_I64: return 8;
	case TITAN_DTYPE_U8: return 1;
	}
	return 0;
}

int titan_parallel_dims_from_config(struct titan_parallel_dims *pd, const struct titan_config *c,
				    int64_t world_size)
{
	static const char *const key[TITAN_DIM_NDIMS] = {
		"pipeline_parallel_degree", "data_parallel_replicate_degree",
		"data_parallel_shard_degree", "context_parallel_degree", "tensor_parallel_degree",
	};
	int64_t *g = pd->degree, others = 1, product = 1;
	char desc[512];
	size_t n = 0;

	memset(pd, 0, sizeof(*pd));
	g[TITAN_DIM_PP] = c->parallelism.pipeline_parallel_degree;
	g[TITAN_DIM_DP_REPLICATE] = c->parallelism.data_parallel_replicate_degree;
	g[TITAN_DIM_DP_SHARD] = c->parallelism.data_parallel_shard_degree;
	g[TITAN_DIM_CP] = c->parallelism.context_parallel_degree;
	g[TITAN_DIM_TP] = c->parallelism.tensor_parallel_degree;
	pd->world_size = world_size;
	for (int d = 0; d < TITAN_DIM_NDIMS; d++) {
		if (d == TITAN_DIM_DP_SHARD && g[d] == -1)
			continue;
		if (g[d] < 1)
			return titan_error(TITAN_E_INVALID, "parallelism.%s %lld: degrees are >= 1 "
					   "(data_parallel_shard_degree may be -1)", key[d],
					   (long long)g[d]);
		if (d != TITAN_DIM_DP_SHARD)
			others *= g[d];
	}
	if (g[TITAN_DIM_DP_SHARD] == -1) {
		if (world_size % others != 0)
			return titan_error(TITAN_E_INVALID,
					   "parallelism: pipeline_parallel_degree %lld x "
					   "data_parallel_replicate_degree %lld x context_parallel_degree "
					   "%lld x tensor_parallel_degree %lld = %lld does not divide the "
					   "%lld rank%s started (data_parallel_shard_degree -1 takes the "
					   "ranks left over)", (long long)g[TITAN_DIM_PP],
					   (long long)g[TITAN_DIM_DP_REPLICATE], (long long)g[TITAN_DIM_CP],
					   (long long)g[TITAN_DIM_TP], (long long)others,
					   (long long)world_size, world_size == 1 ? "" : "s");
		g[TITAN_DIM_DP_SHARD] = world_size / others;
	}
	for (int d = 0; d < TITAN_DIM_NDIMS; d++) {
		product *= g[d];
		n += (size_t)snprintf(desc + n, sizeof(desc) - n, "%s%s %lld", d ? " x " : "", key[d],
				      (long long)g[d]);
		if (n >= sizeof(desc))
			n = sizeof(desc) - 1;
	}
	if (product != world_size)
		return titan_error(TITAN_E_INVALID, "parallelism: %s = %lld, but %lld rank%s started",
				   desc, (long long)product, (long long)world_size,
				   world_size == 1 ? " was" : "s were");
	/* torchtitan's rule: EP borrows its ranks from the sharded region,
	 * dp_shard x cp x tp, the ep innermost of it */
	pd->ep = c->parallelism.expert_parallel_degree;
	const int64_t fsdp = g[TITAN_DIM_DP_SHARD] * g[TITAN_DIM_CP], tp = g[TITAN_DIM_TP];

	if (pd->ep < 1 || (fsdp * tp) % pd->ep) {
		if (tp == 1)
			return titan_error(TITAN_E_INVALID, "parallelism.expert_parallel_degree "
					   "%lld: must divide data_parallel_shard_degree x "
					   "context_parallel_degree (%lld x %lld)", (long long)pd->ep,
					   (long long)g[TITAN_DIM_DP_SHARD], (long long)g[TITAN_DIM_CP]);
		return titan_error(TITAN_E_INVALID, "parallelism.expert_parallel_degree %lld: "
				   "must divide data_parallel_shard_degree x context_parallel_degree "
				   "x tensor_parallel_degree (%lld x %lld x %lld)", (long long)pd->ep,
				   (long long)g[TITAN_DIM_DP_SHARD], (long long)g[TITAN_DIM_CP],
				   (long long)tp);
	}
	/* EP x TP with one FSDP rank: the experts' replicas on the TP ranks
	 * of one EP rank would need an efsdp mesh (titan's FSDP runs only
	 * over more than one dp_shard x cp rank) */
	if (pd->ep > 1 && fsdp == 1 && pd->ep % tp)
		return titan_error(TITAN_E_INVALID, "parallelism.expert_parallel_degree %lld: "
				   "with tensor_parallel_degree %lld and one FSDP rank "
				   "(data_parallel_shard_degree x context_parallel_degree 1) it must "
				   "equal tensor_parallel_degree (an expert on several TP ranks needs "
				   "an efsdp mesh to sum its gradients)", (long long)pd->ep,
				   (long long)tp);
	return 0;
}

void titan_parallel_dims_ep_group(const struct titan_parallel_dims *pd, int64_t rank, bool ep,
				  int64_t *first, int64_t *stride, int64_t *size, int64_t *index)
{
	const int64_t *g = pd->degree, P = pd->ep > 1 ? pd->ep : 1;
	const int64_t S = g[TITAN_DIM_DP_SHARD] * g[TITAN_DIM_CP] * g[TITAN_DIM_TP];
	const int64_t base = rank / S * S, f = rank % S; /* f: rank's place in the region */

	if (ep) {
		*first = base + f / P * P;
		*stride = 1;
		*size = P;
		*index = f % P;
	} else {
		*first = base + f % P;
		*stride = P;
		*size = S / P;
		*index = f / P;
	}
}

void titan_parallel_dims_coords(const struct titan_parallel_dims *pd, int64_t rank,
				int64_t coord[TITAN_DIM_NDIMS])
{
	for (int d = TITAN_DIM_NDIMS - 1; d >= 0; d--) {
		coord[d] = rank % pd->degree[d];
		rank /= pd->degree[d];
	}
}

int64_t titan_parallel_dims_rank(const struct titan_parallel_dims *pd,
				 const int64_t coord[TITAN_DIM_NDIMS])
{
	int64_t r = 0;

	for (int d = 0; d < TITAN_DIM_NDIMS; d++)
		r = r * pd->degree[d] + coord[d];
	return r;
}

int64_t titan_parallel_dims_degree(const struct titan_parallel_dims *pd, enum titan_mesh_dim d)
{
	const int64_t *g = pd->degree;

	switch (d) {
	case TITAN_DIM_DP:
		return g[TITAN_DIM_DP_REPLICATE] * g[TITAN_DIM_DP_SHARD];
	case TITAN_DIM_FSDP:
		return g[TITAN_DIM_DP_SHARD] * g[TITAN_DIM_CP];
	case TITAN_DIM_LOSS:
		return g[TITAN_DIM_DP_REPLICATE] * g[TITAN_DIM_DP_SHARD] * g[TITAN_DIM_CP];
	case TITAN_DIM_WORLD:
		return pd->world_size;
	default:
		return (unsigned)d < TITAN_DIM_NDIMS ? g[d] : 0;
	}
}
