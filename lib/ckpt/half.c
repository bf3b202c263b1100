/*
 * half.c — float32 <-> bfloat16 / float16 with round-to-nearest-even (the
 * rounding of torch's .to(torch.bfloat16) and .half()), and the checkpoint
 * dtype names.  HDF5's own float conversions do not round to nearest even
 * (docs/platform.md), so checkpoints round here and store raw bits.
 */
#include "titan/ckpt.h"

#include <string.h>

static const char *const dtype_names[] = {"float32", "bfloat16", "float16"};

const char *titan_ckpt_dtype_name(enum titan_ckpt_dtype dt)
{
	return (unsigned)dt < 3 ? dtype_names[dt] : NULL;
}

int titan_ckpt_dtype_parse(const char *name, enum titan_ckpt_dtype *out)
{
	static const struct {
		const char *name;
		enum titan_ckpt_dtype dt;
	} names[] = {
		{"float32", TITAN_CKPT_FLOAT32}, {"fp32", TITAN_CKPT_FLOAT32}, {"f32", TITAN_CKPT_FLOAT32},
		{"bfloat16", TITAN_CKPT_BFLOAT16}, {"bf16", TITAN_CKPT_BFLOAT16},
		{"float16", TITAN_CKPT_FLOAT16}, {"fp16", TITAN_CKPT_FLOAT16}, {"f16", TITAN_CKPT_FLOAT16},
	};

	for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcmp(name, names[i].name)) {
			*out = names[i].dt;
			return 0;
		}
	}
	return TITAN_E_INVALID;
}

int titan_ckpt_dtype_size(enum titan_ckpt_dtype dt)
{
	return dt == TITAN_CKPT_FLOAT32 ? 4 : 2;
}

static uint32_t bits_of(float x)
{
	uint32_t u;

	memcpy(&u, &x, 4);
	return u;
}

static float float_of(uint32_t u)
{
	float x;

	memcpy(&x, &u, 4);
	return x;
}

uint16_t titan_f32_to_bf16(float x)
{
	uint32_t u = bits_of(x);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and top payload, make it quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	/* adding 0x7fff plus the lowest kept bit rounds to nearest, ties to
	 * even; a carry out of the mantissa moves to the next binade (and
	 * past the largest finite value to infinity) as it should */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float titan_bf16_to_f32(uint16_t b)
{
	return float_of((uint32_t)b << 16);
}

uint16_t titan_f32_to_f16(float x)
{
	uint32_t u = bits_of(x), a = u & 0x7fffffffu, m, r, rem, half;
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	int e, shift;

	if (a > 0x7f800000u) /* NaN */
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* >= 65520 (halfway past 65504, ties to even): inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x33000000u) /* <= 2^-25 rounds to zero (2^-25 itself ties to even 0) */
		return sign;
	e = (int)(a >> 23) - 127;
	m = a & 0x7fffffu;
	if (e >= -14) { /* normal */
		r = (uint32_t)(e + 15) << 10 | m >> 13;
		rem = m & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
			r++; /* a carry into the exponent is right, up to 0x7bff + 1 = inf */
		return (uint16_t)(sign | r);
	}
	/* subnormal: units of 2^-24 */
	m |= 0x800000u;
	shift = -(e + 1); /* 14 .. 24 */
	r = m >> shift;
	rem = m & ((1u << shift) - 1u);
	half = 1u << (shift - 1);
	if (rem > half || (rem == half && (r & 1u)))
		r++;
	return (uint16_t)(sign | r);
}

float titan_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
	float x;

	if (exp == 0) { /* zero or subnormal: man · 2^-24 */
		x = (float)man * 0x1p-24f;
		return sign ? -x : x;
	}
	if (exp == 31)
		return float_of(sign | 0x7f800000u | man << 13);
	return float_of(sign | (exp + 112) << 23 | man << 13);
}

void titan_ckpt_cast(enum titan_ckpt_dtype dt, const float *in, void *out, size_t n)
{
	uint16_t *o = out;

	switch (dt) {
	case TITAN_CKPT_FLOAT32:
		memmove(out, in, n * sizeof(float));
		break;
	case TITAN_CKPT_BFLOAT16:
		for (size_t i = 0; i < n; i++)
			o[i] = titan_f32_to_bf16(in[i]);
		break;
	case TITAN_CKPT_FLOAT16:
		for (size_t i = 0; i < n; i++)
			o[i] = titan_f32_to_f16(in[i]);
		break;
	}
}

void titan_ckpt_uncast(enum titan_ckpt_dtype dt, const void *in, float *out, size_t n)
{
	const uint16_t *p = in;

	switch (dt) {
	case TITAN_CKPT_FLOAT32:
		memmove(out, in, n * sizeof(float));
		break;
	case TITAN_CKPT_BFLOAT16:
		for (size_t i = 0; i < n; i++)
			out[i] = titan_bf16_to_f32(p[i]);
		break;
	case TITAN_CKPT_FLOAT16:
		for (size_t i = 0; i < n; i++)
			out[i] = titan_f16_to_f32(p[i]);
		break;
	}
}
