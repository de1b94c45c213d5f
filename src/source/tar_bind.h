/*
 * tar_bind.h - the rest of a remote shard's sidecar binding, a piece of the
 * tar source's http backend (tar_http.c says why a sidecar is bound in two
 * steps): each shard's binding state, what its rest needs (the pend), and
 * the check made once, at the shard's first read, by one reader while the
 * others wait for its verdict.
 *
 * The piece sends no request itself: its owner gives the calls that do
 * (ops: send the rest's reads, take them) and the version a stored index of
 * a shard must name (a node's listing: another rank may have found the
 * shard whole meanwhile).
 *
 * A shard is BOUND (also every shard not indexed from a sidecar, and a
 * sidecar bound whole at open), PENDING (its first and last entries and its
 * end checked at open, the rest not asked), ASKED (the rest's reads sent,
 * by submit() or a read), CHECKING (one reader takes them and runs bind()),
 * or FAILED (the sidecar is not the shard's: every read of it fails).
 *
 * Lock: `mu` guards each shard's state changes and its pend (cv: a shard
 * left CHECKING); the state is also read without it (atomics: BOUND, the
 * common case, costs one load per read). During open, index threads write
 * only their own shard's state, rest and pend (keep), and add to `pending`
 * atomically. The reader that moves a shard to CHECKING takes its reads with
 * no lock held (waits bounded by the HTTP timeouts). Lock order: mu, then
 * what ops.ask takes (the http module's own lock; its hooks take no lock of
 * this piece or its owner).
 */
#ifndef LADE__TAR_BIND_H
#define LADE__TAR_BIND_H

#include <pthread.h>
#include <stdint.h>

#include "source/tar_impl.h"
#include "source/tar_reads.h"

enum { LADE__BIND_BOUND = 0, LADE__BIND_PENDING, LADE__BIND_ASKED, LADE__BIND_CHECKING, LADE__BIND_FAILED };

#define LADE__BIND_READS 16              /* the most bind() reads a two-step binding has (tar 8, tfrecord 16) */
#define LADE__BIND_PENDING_SUFFIX ".pending" /* an index kept in index_dir before its binding is whole */

/* What the rest of a sidecar's binding needs, from open to the shard's
 * first read (about 0.5 KB and the bytes of the reads made at open). */
typedef struct lade__tar_pend {
  uint64_t n, bind;                            /* the sidecar's entries and its bind() */
  lade__tar_entry_t e[LADE__TAR_BIND_ENTRIES]; /* its sampled entries (lade__tar_bind_at) */
  uint64_t off[LADE__BIND_READS];              /* bind()'s reads, in its order */
  uint32_t len[LADE__BIND_READS], got[LADE__BIND_READS]; /* their lengths; the bytes kept of those made at open */
  uint32_t nr;
  char *keep;                                  /* the index in index_dir, under its pending name (or NULL) */
  int node;                                    /* taken from the node's listing */
  char *msg;                                   /* FAILED: why, for every read of the shard */
  uint8_t bytes[];                             /* the bytes of the reads made at open, back to back */
} lade__tar_pend_t;

typedef struct lade__tar_bind_ops {
  /* sends the reads `mask` of r, of shard si (mu held) */
  int (*ask)(lade__tar_t *t, size_t si, const lade__tar_reads_t *r, uint32_t mask);
  /* takes them into r (no lock held) */
  int (*take)(lade__tar_t *t, size_t si, lade__tar_reads_t *r, uint32_t mask);
  /* the version a stored index of shard si names */
  lade__tar_ver_t (*version)(const lade__tar_t *t, size_t si);
} lade__tar_bind_ops_t;

typedef struct lade__tar_bind {
  lade__tar_t *t;
  lade__tar_bind_ops_t ops;
  pthread_mutex_t mu;
  pthread_cond_t cv;          /* a shard left CHECKING */
  uint8_t *state;             /* per shard (atomic) */
  uint32_t *rest;             /* per shard: bind()'s reads left for its first read (bit k: read k) */
  lade__tar_pend_t **pend;    /* per shard, while not BOUND (mu) */
  uint64_t pending;           /* shards left PENDING by open (atomic) */
} lade__tar_bind_t;

/* Every shard of t BOUND. */
int lade__tar_bind_open(lade__tar_bind_t *b, lade__tar_t *t, const lade__tar_bind_ops_t *ops);
/* Frees the pends; an index kept under its pending name was never found
 * whole, so it is removed (not a later open's). */
void lade__tar_bind_close(lade__tar_bind_t *b);

/* Open: keeps what the rest of shard i's binding needs (r: bind()'s nb
 * reads, those of `now` fetched) until its first read; the shard is PENDING. */
int lade__tar_bind_keep(lade__tar_bind_t *b, size_t i, const lade__tar_index_t *x, const lade__tar_reads_t *r,
                        size_t nb, uint32_t now);
static inline int lade__tar_bind_state(const lade__tar_bind_t *b, size_t si) {
  return __atomic_load_n(&b->state[si], __ATOMIC_ACQUIRE);
}
/* submit(): a PENDING shard's rest asked now, to travel with its samples'
 * reads; an error is left to the read. */
void lade__tar_bind_ask(lade__tar_bind_t *b, size_t si);
/* backend.check_shard: 0 once shard si is BOUND (fetching and checking the
 * rest if nobody has), else an error naming `shown` and `what` (the
 * sample); *fetch set when the error is the requests' (the caller names the
 * member in it). */
int lade__tar_bind_check(lade__tar_bind_t *b, size_t si, const char *what, int *fetch);

/* "member headers" or "records' framing": what a binding checks, in messages. */
const char *lade__tar_framing(const lade__tar_t *t);

#endif
