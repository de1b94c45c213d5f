/* rng.c - Philox4x32-10 (Salmon et al., SC'11), a counter-based generator:
 * output = bijection(key, counter), so any stream position is computable
 * directly and streams keyed by (seed, a, b) are independent. */
#include "core.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

uint64_t lade__mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void philox10(const uint32_t key_in[2], const uint32_t ctr_in[4], uint32_t out[4]) {
  uint32_t k0 = key_in[0], k1 = key_in[1];
  uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  for (int i = 0; i < 10; i++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

void lade__rng_init(lade__rng_t *r, uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t k = lade__mix64(seed ^ lade__mix64(b));
  r->key[0] = (uint32_t)k;
  r->key[1] = (uint32_t)(k >> 32);
  r->ctr[0] = 0;
  r->ctr[1] = (uint32_t)b;
  r->ctr[2] = (uint32_t)a;
  r->ctr[3] = (uint32_t)(a >> 32);
  r->pos = 4;
}

uint32_t lade__rng_u32(lade__rng_t *r) {
  if (r->pos == 4) {
    philox10(r->key, r->ctr, r->out);
    if (++r->ctr[0] == 0) ++r->ctr[1];
    r->pos = 0;
  }
  return r->out[r->pos++];
}

uint64_t lade__rng_u64(lade__rng_t *r) {
  uint64_t hi = lade__rng_u32(r);
  return (hi << 32) | lade__rng_u32(r);
}

double lade__rng_double(lade__rng_t *r) { return (double)(lade__rng_u64(r) >> 11) * 0x1.0p-53; }

uint64_t lade__rng_below(lade__rng_t *r, uint64_t n) {
  /* Lemire's nearly-divisionless method, 64-bit via 128-bit product. */
  uint64_t x = lade__rng_u64(r);
  __uint128_t m = (__uint128_t)x * n;
  uint64_t l = (uint64_t)m;
  if (l < n) {
    uint64_t t = (0 - n) % n;
    while (l < t) {
      x = lade__rng_u64(r);
      m = (__uint128_t)x * n;
      l = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}
