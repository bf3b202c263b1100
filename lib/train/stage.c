/*
 * stage.c — the pipeline stages of a model on one rank (stage.h).
 */
#include "stage.h"

#include "titan/core.h"
#include "titan/train.h"

void titan_stages_init(struct titan_stages *s, const struct titan_pp_stages *st, int n_layers)
{
	s->n = 1;
	s->v[0] = (struct titan_pp_stage){0, n_layers, true, true, 0};
	s->first = s->last = true;
	s->staged = st->n > 0;
	if (!s->staged)
		return;
	TITAN_ASSERT(st->n <= TITAN_PP_MAX_STAGES_PER_RANK);
	s->n = st->n;
	for (int v = 0; v < s->n; v++)
		s->v[v] = st->v[v];
	s->first = s->v[0].first;
	s->last = s->v[s->n - 1].last;
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
