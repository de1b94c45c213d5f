/*
 * core.h - internal services every module may use: errors, clocks, the
 * counter-based RNG, aligned allocation, small string helpers. No module
 * outside core/ is included from here.
 */
#ifndef LADE__CORE_H
#define LADE__CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "lade/lade.h"

#define LADE__UNUSED(x) ((void)(x))
/* Longest path or URL a setting or a listing keeps. */
#define LADE__PATH_MAX 4096
#define LADE__MIN(a, b) ((a) < (b) ? (a) : (b))
#define LADE__MAX(a, b) ((a) > (b) ? (a) : (b))
#define LADE__CACHELINE 64

/* ---- errors: set the thread's last error and return the code. */
int lade__fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int lade__vfail(int code, const char *fmt, va_list ap);
/* Prefixes the current last error with more context ("file x: " + old). */
int lade__fail_prefix(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lade__clear_error(void);
/* Copies the thread's last error into buf (for carrying an error to another thread). */
void lade__copy_error(char *buf, size_t size);
/* Sets the thread's last error text verbatim. */
void lade__set_error_text(const char *text);

/* ---- clocks */
double lade__now(void);       /* monotonic seconds */
uint64_t lade__now_us(void);  /* monotonic microseconds */

/* ---- growable public structs (lade.h: the size arguments) */
/* A caller's struct of `size` bytes into ours (`have` bytes, already holding
 * the defaults): its first min(size, have) bytes are copied, the fields it
 * lacks keep their defaults. A newer caller's longer struct is accepted when
 * the bytes this library does not know are zero, else LADE_EUNSUPPORTED.
 * Below `least` bytes: LADE_EINVAL. `what` names the function and struct. */
int lade__struct_in(void *ours, size_t have, const void *theirs, size_t size, size_t least, const char *what);
/* Ours (`have` bytes) into a caller's struct of `size` bytes: the first
 * min(size, have) bytes, zeros past ours. */
void lade__struct_out(void *theirs, size_t size, const void *ours, size_t have);

/* ---- memory */
void *lade__aligned_alloc(size_t size, size_t align);
void lade__aligned_free(void *p);
char *lade__strdup(const char *s);
/* Resizes the array *p to n entries (realloc); on failure *p is unchanged
 * and LADE_ENOMEM names `what`. For arrays grown side by side: a failure
 * leaves the ones resized before it larger, harmless while the count is
 * kept apart. */
int lade__resize_u64(uint64_t **p, size_t n, const char *what);
/* The same for an array of any type: LADE__RESIZE(t->sizes, cap, "what"). */
#define LADE__RESIZE(arr, n, what) lade__resize_array(&(arr), (n), sizeof *(arr), (what))
int lade__resize_array(void *arr, size_t n, size_t esize, const char *what);
/* Byte-wise order of two names given with their lengths, a name before any
 * longer one it begins ("a" < "a-b" < "a0"): strcmp's order, for names
 * that are not NUL-terminated. */
int lade__cmp_names(const char *a, size_t an, const char *b, size_t bn);
/* Room for `need` bytes in the byte array *a of *cap bytes: its capacity
 * doubled (from `first` when empty) until it holds them. LADE_ENOMEM names
 * `what`; *a and *cap are then unchanged. */
int lade__reserve_bytes(char **a, size_t *cap, size_t need, size_t first, const char *what);

/* ---- files: mkdir -p creating folders with mode 0700; the last component
 * must end up a directory of mode 0700 (chmod'ed when wider). LADE_EIO
 * naming the folder ("folder X: ...") otherwise. */
int lade__mkdir_private(const char *path);

/* Zeroes n bytes in a way the compiler cannot drop (secrets at destroy). */
void lade__wipe(void *p, size_t n);

/* ---- counter-based RNG (Philox4x32-10).
 * A stream is fully determined by (seed, a, b): the same triple gives the same
 * numbers on any thread, in any order of creation, which is what makes every
 * batch independent of thread count and resumable. */
typedef struct lade__rng {
  uint32_t key[2];
  uint32_t ctr[4];
  uint32_t out[4];
  int pos;
} lade__rng_t;

/* Domain tags for the b coordinate, so streams for different purposes never
 * collide. */
enum {
  LADE__RNG_SHUFFLE = 0x5348,   /* epoch permutation: a = epoch */
  LADE__RNG_AUGMENT = 0x4155,   /* per-sample augmentation: a = sample index */
  LADE__RNG_SUBST = 0x5355,     /* on_error=skip substitutes: a = sample index */
  LADE__RNG_PLAN = 0x504c,      /* planners: a = epoch */
  LADE__RNG_SHARDS = 0x5344,    /* shards order, shard list shuffle: a = epoch */
  LADE__RNG_SHARDBUF = 0x5342   /* shards order, shuffle buffer: a = epoch, seed mixed with the group */
};

void lade__rng_init(lade__rng_t *r, uint64_t seed, uint64_t a, uint64_t b);
uint32_t lade__rng_u32(lade__rng_t *r);
uint64_t lade__rng_u64(lade__rng_t *r);
/* Uniform double in [0, 1) with 53 random bits. */
double lade__rng_double(lade__rng_t *r);
/* Uniform integer in [0, n) without modulo bias (Lemire); n > 0. */
uint64_t lade__rng_below(lade__rng_t *r, uint64_t n);
/* 64-bit mixing function (splitmix64 finaliser). */
uint64_t lade__mix64(uint64_t x);

/* ---- hashing: FNV-1a 64 and a fast 64-bit checksum used for batch bytes. */
uint64_t lade__hash64(const void *data, size_t n, uint64_t h);

#endif
