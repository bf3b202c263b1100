/*
 * crc32c.c — CRC32C (Castagnoli, reflected polynomial 0x82F63B78) for shard
 * and checkpoint checksums: a slicing-by-8 software path and the SSE4.2
 * crc32 instruction, chosen at run time.  Both use the standard pre/post
 * inversion, so results chain: crc(crc(0, a), b) == crc(0, a || b).
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
__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const void *data, size_t n)
{
	const unsigned char *p = data;
	uint64_t c = ~crc;

	/* Align to 8 bytes so the 64-bit loads never straddle cache lines. */
	while (n && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		n--;
	}
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = _mm_crc32_u64(c, v);
		p += 8;
		n -= 8;
	}
	while (n--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}

static int have_hw;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

static void hw_init(void)
{
	__builtin_cpu_init();
	have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
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
