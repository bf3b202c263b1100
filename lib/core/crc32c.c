/*
 * crc32c.c — CRC32C (Castagnoli, reflected polynomial 0x82F63B78) for shard
 * and checkpoint checksums: a slicing-by-8 software path and the SSE4.2
 * crc32 instruction, chosen at run time.  Both use the standard pre/post
 * inversion, so results chain: crc(crc(0, a), b) == crc(0, a || b).
 * titan_crc32c_combine joins the CRCs of pieces computed apart (zlib's
 * crc32_combine): ranks checksum their slices of a tensor without
 * gathering the data.
 */
#include "titan/core.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TITAN_CRC32C_X86 1
#include <nmmintrin.h>
#endif

#define POLY 0x82F63B78u

static uint32_t crc_table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
		crc_table[0][i] = c;
	}
	for (int t = 1; t < 8; t++)
		for (int i = 0; i < 256; i++) {
			uint32_t c = crc_table[t - 1][i];
			crc_table[t][i] = (c >> 8) ^ crc_table[0][c & 0xff];
		}
}

/* a * b modulo P, bit-reflected (zlib's multmodp); a must be nonzero. */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;

	for (;;) {
		if (a & m) {
			p ^= b;
			if ((a & (m - 1)) == 0)
				break;
		}
		m >>= 1;
		b = (b & 1) ? (b >> 1) ^ POLY : b >> 1;
	}
	return p;
}

/* x^(8n) modulo P, by squaring. */
static uint32_t x8nmodp(uint64_t n)
{
	uint32_t p = 1u << 31, sq = 1u << 30; /* x^0, x^1 */

	for (int k = 0; k < 3; k++)
		sq = multmodp(sq, sq); /* x^8 */
	for (; n; n >>= 1) {
		if (n & 1)
			p = multmodp(sq, p);
		sq = multmodp(sq, sq);
	}
	return p;
}

uint32_t titan_crc32c_sw(uint32_t crc, const void *data, size_t n)
{
	const unsigned char *p = data;

	pthread_once(&table_once, table_init);
	crc = ~crc;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		v ^= crc;
		crc = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^
		      crc_table[5][(v >> 16) & 0xff] ^ crc_table[4][(v >> 24) & 0xff] ^
		      crc_table[3][(v >> 32) & 0xff] ^ crc_table[2][(v >> 40) & 0xff] ^
		      crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][v >> 56];
		p += 8;
		n -= 8;
	}
#endif
	while (n--)
		crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

#ifdef TITAN_CRC32C_X86
/*
 * The crc32 instruction has a latency of 3 cycles and a throughput of 1, so
 * one dependent chain runs at a third of its speed.  As in Mark Adler's
 * crc32c.c, three chains run over three adjacent blocks and are then
 * combined: the register after A || B is shift(reg after A, |B|) ^ crc of B
 * from 0, where shifting over n zero bytes multiplies by x^(8n) mod P.
 */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static uint32_t shift_long[4][256], shift_short[4][256];

static void shift_table(uint32_t t[4][256], size_t bytes)
{
	uint32_t xn = x8nmodp(bytes);
	for (int k = 0; k < 4; k++)
		for (uint32_t b = 0; b < 256; b++)
			t[k][b] = multmodp(xn, b << (8 * k));
}

static inline uint64_t shift(const uint32_t t[4][256], uint64_t c)
{
	return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^
	       t[3][(c >> 24) & 0xff];
}

static inline uint64_t load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const void *data, size_t n)
{
	const unsigned char *p = data;
	uint64_t c0 = ~crc;

	/* Align to 8 bytes so the 64-bit loads never straddle cache lines. */
	while (n && ((uintptr_t)p & 7)) {
		c0 = _mm_crc32_u8((uint32_t)c0, *p++);
		n--;
	}
	while (n >= 3 * LONG_BLOCK) {
		uint64_t c1 = 0, c2 = 0;
		const unsigned char *end = p + LONG_BLOCK;
		do {
			c0 = _mm_crc32_u64(c0, load64(p));
			c1 = _mm_crc32_u64(c1, load64(p + LONG_BLOCK));
			c2 = _mm_crc32_u64(c2, load64(p + 2 * LONG_BLOCK));
			p += 8;
		} while (p < end);
		c0 = shift(shift_long, c0) ^ c1;
		c0 = shift(shift_long, c0) ^ c2;
		p += 2 * LONG_BLOCK;
		n -= 3 * LONG_BLOCK;
	}
	while (n >= 3 * SHORT_BLOCK) {
		uint64_t c1 = 0, c2 = 0;
		const unsigned char *end = p + SHORT_BLOCK;
		do {
			c0 = _mm_crc32_u64(c0, load64(p));
			c1 = _mm_crc32_u64(c1, load64(p + SHORT_BLOCK));
			c2 = _mm_crc32_u64(c2, load64(p + 2 * SHORT_BLOCK));
			p += 8;
		} while (p < end);
		c0 = shift(shift_short, c0) ^ c1;
		c0 = shift(shift_short, c0) ^ c2;
		p += 2 * SHORT_BLOCK;
		n -= 3 * SHORT_BLOCK;
	}
	while (n >= 8) {
		c0 = _mm_crc32_u64(c0, load64(p));
		p += 8;
		n -= 8;
	}
	while (n--)
		c0 = _mm_crc32_u8((uint32_t)c0, *p++);
	return ~(uint32_t)c0;
}

static int have_hw;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

static void hw_init(void)
{
	__builtin_cpu_init();
	have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
	if (have_hw) {
		shift_table(shift_long, LONG_BLOCK);
		shift_table(shift_short, SHORT_BLOCK);
	}
}
#endif

uint32_t titan_crc32c(uint32_t crc, const void *data, size_t n)
{
#ifdef TITAN_CRC32C_X86
	pthread_once(&hw_once, hw_init);
	if (have_hw)
		return crc32c_hw(crc, data, n);
#endif
	return titan_crc32c_sw(crc, data, n);
}

/* The same n many times in a row (the rows of a tensor-parallel slice):
 * x^(8n) is computed once per thread and length. */
static _Thread_local uint64_t shift_n = 0;
static _Thread_local uint32_t shift_op = 1u << 31; /* x^0 */

uint32_t titan_crc32c_shift(uint32_t crc, uint64_t n)
{
	if (n != shift_n) {
		shift_op = x8nmodp(n);
		shift_n = n;
	}
	return crc ? multmodp(shift_op, crc) : 0;
}

uint32_t titan_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	return titan_crc32c_shift(crc_a, len_b) ^ crc_b;
}
