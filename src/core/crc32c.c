/*
 * crc32c.c - CRC-32C (crc32c.h) and the public lade_crc32c(). TFRecord
 * files carry a CRC-32C of every record's length and data, and the tfrecord
 * source checks the data's on every read, so it runs at the speed of the
 * reads: SSE4.2's crc32 instruction, 8 bytes per instruction, where the CPU
 * has it (checked once at run time, so one build serves every x86-64);
 * elsewhere slicing-by-8 (eight 256-entry tables, one byte of each of 8
 * lookups per 8 input bytes, about 1-2 GB/s). The tables are built once by
 * pthread_once, which also makes the choice; after it every call is
 * lock-free and thread-safe.
 */
#include "core/crc32c.h"

#include <pthread.h>
#include <string.h>

#include "core/core.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_X86_CRC 1
#endif

#define POLY 0x82F63B78u /* Castagnoli, reflected */

static uint32_t g_table[8][256];
static int g_hw;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_once(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
    g_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int k = 1; k < 8; k++) g_table[k][i] = (g_table[k - 1][i] >> 8) ^ g_table[0][g_table[k - 1][i] & 0xff];
#ifdef HAVE_X86_CRC
  __builtin_cpu_init();
  g_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t n) {
  uint32_t c = ~crc;
  while (n >= 8) { /* byte by byte into the words: the same on any byte order */
    uint32_t a = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    uint32_t b = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
    c = g_table[7][a & 0xff] ^ g_table[6][(a >> 8) & 0xff] ^ g_table[5][(a >> 16) & 0xff] ^ g_table[4][a >> 24] ^
        g_table[3][b & 0xff] ^ g_table[2][(b >> 8) & 0xff] ^ g_table[1][(b >> 16) & 0xff] ^ g_table[0][b >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xff];
  return ~c;
}

#ifdef HAVE_X86_CRC
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
  uint64_t c = (uint32_t)~crc;
  while (n && ((uintptr_t)p & 7)) {
    c = _mm_crc32_u8((uint32_t)c, *p++);
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
  return ~(uint32_t)c;
}
#endif

uint32_t lade__crc32c_sw(uint32_t crc, const void *p, size_t n) {
  pthread_once(&g_once, init_once);
  return crc_sw(crc, p, n);
}

int lade__crc32c_hw(void) {
  pthread_once(&g_once, init_once);
  return g_hw;
}

uint32_t lade__crc32c(uint32_t crc, const void *p, size_t n) {
  pthread_once(&g_once, init_once);
#ifdef HAVE_X86_CRC
  if (g_hw) return crc_hw(crc, p, n);
#endif
  return crc_sw(crc, p, n);
}

uint32_t lade_crc32c(const void *data, size_t size, uint32_t crc) {
  if (!data) return crc;
  return lade__crc32c(crc, data, size);
}
