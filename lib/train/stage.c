/*
 * stage.c — the pipeline stages of a model on one rank (stage.h).
 */
#include "stage.h"

#include "titan/core.h"
#include "titan/train.h"

void titan_stages_init(struct titan_stages *s, const struct titan_llama_opts *o, int n_layers,
		       struct titan_param_table_opts *to)
{
	s->n = 1;
	s->v[0] = (struct titan_stage){0, n_layers, true, true};
	s->first = s->last = true;
	s->staged = o->stage_l1 > 0;
	if (!s->staged)
		return;
	TITAN_ASSERT(o->nmore >= 0 && o->nmore < TITAN_PP_MAX_STAGES_PER_RANK);
	s->n = 1 + o->nmore;
	s->first = o->stage_first;
	s->last = o->stage_last;
	s->v[0].l0 = o->stage_l0;
	s->v[0].l1 = o->stage_l1;
	for (int v = 1; v < s->n; v++) {
		s->v[v].l0 = o->more_l0[v - 1];
		s->v[v].l1 = o->more_l1[v - 1];
		to->more_l0[v - 1] = s->v[v].l0;
		to->more_l1[v - 1] = s->v[v].l1;
	}
	for (int v = 0; v < s->n; v++) {
		s->v[v].first = s->first && v == 0;
		s->v[v].last = s->last && v == s->n - 1;
	}
	to->nmore = o->nmore;
	to->staged = true;
	to->stage_l0 = s->v[0].l0;
	to->stage_l1 = s->v[0].l1;
	to->stage_first = s->first;
	to->stage_last = s->last;
}

bool titan_stages_has_group(const struct titan_stages *s, int g, int ngroups)
{
	if (g == 0)
		return s->first;
	if (g == ngroups - 1)
		return s->last;
	for (int v = 0; v < s->n; v++)
		if (g - 1 >= s->v[v].l0 && g - 1 < s->v[v].l1)
			return true;
	return false;
}
