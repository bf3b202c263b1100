/* timer.c — monotonic and wall clocks, accumulating interval timers. */
#include "titan/core.h"

#include <time.h>

uint64_t titan_time_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t titan_unix_time_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void titan_timer_start(struct titan_timer *t)
{
	t->start_ns = titan_time_ns();
}

uint64_t titan_timer_stop(struct titan_timer *t)
{
	uint64_t d;

	if (!t->start_ns)
		return 0;
	d = titan_time_ns() - t->start_ns;
	t->total_ns += d;
	t->count++;
	t->start_ns = 0;
	return d;
}
