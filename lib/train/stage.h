/*
 * stage.h — private to lib/train: the pipeline stages a model holds on
 * this rank (stage.c).  A stage is passed to the model's forward and
 * backward explicitly; nothing in the model remembers a "current" one.
 */
#ifndef TITAN_TRAIN_STAGE_H
#define TITAN_TRAIN_STAGE_H

#include <stdbool.h>

#include "titan/model.h"

/* The rank's stages, in order (the virtual stages of interleaved
 * schedules; one stage of every block without PP).  `first` / `last`:
 * the rank holds the embedding / the norm, output and loss (on its
 * stage 0 / its last stage). */
struct titan_stages {
	int n;
	struct titan_pp_stage v[TITAN_PP_MAX_STAGES_PER_RANK];
	bool first, last;
	bool staged; /* opts.stages.n > 0: pipeline stages, not the whole model */
};

/* From the layout's stages (titan_llama_opts.stages; the whole model of
 * `n_layers` blocks as one stage when there are none). */
void titan_stages_init(struct titan_stages *s, const struct titan_pp_stages *st, int n_layers);
/* Does the rank compute parameter group g (0 embedding, 1 + l block l,
 * n_layers + 1 norm and output)? */
bool titan_stages_has_group(const struct titan_stages *s, int g, int ngroups);

#endif
