/*
 * cache.h - memory and disk cache tiers for sample bytes, keyed by dataset
 * index. The engine's fetch path asks the memory tier, then the disk tier,
 * then the source; the DELI prefetcher fills the disk tier ahead of the
 * consumer. Both tiers have a byte capacity that they never exceed, and one
 * of four eviction policies:
 *
 *   fifo         evict in insertion order (DELI's cache)
 *   lru          evict the least recently read or inserted entry
 *   clairvoyant  evict the entry whose next use is farthest in the future
 *                (Belady), asking the engine's plan through next_use(); an
 *                entry whose next use is farther than every resident's is
 *                not admitted when the tier is full
 *   plan         never evict by itself: the loader's plan says what to
 *                evict (lade__cache_evict) and a put that does not fit is
 *                refused, so the contents are exactly the plan's model
 *
 * The disk tier persists across runs (a second run of the same dataset
 * starts warm), lives in a folder created with mode 0700 and locked
 * (flock) by one process at a time, and is crash-safe: every entry carries
 * a checksum verified on each read, entries are written to a temporary file
 * and renamed into place, so a kill -9 at any moment leaves at worst an
 * orphan temporary (removed at the next open) and never a corrupt entry
 * served. A corrupt or truncated entry found on read is removed, counted,
 * and reported as a miss.
 *
 * Every function is thread-safe.
 */
#ifndef LADE__CACHE_H
#define LADE__CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/core.h"

/* The eviction policies above (the cache_policy setting's `auto` is
 * resolved to one of them by engine/resolve.c). */
enum { LADE__CACHE_FIFO = 1, LADE__CACHE_LRU, LADE__CACHE_CLAIRVOYANT, LADE__CACHE_PLAN };

/* Position (in the consumer's future access order) of the next use of key,
 * UINT64_MAX for never. Called with the cache's lock held: must not call
 * back into the cache. */
typedef uint64_t (*lade__next_use_fn)(void *ctx, uint64_t key);

typedef struct lade__cache_opts {
  const char *dir;       /* disk tier: the folder (created 0700 if missing); NULL: memory tier */
  const char *ns;        /* dataset identity (e.g. the source URL): entries live in dir/<hash of ns>/,
                          * so two datasets never share entries; the text is stored there too */
  uint64_t capacity;     /* bytes of entries (payload + per-entry overhead) kept at most; > 0 */
  int policy;            /* LADE__CACHE_FIFO | LRU | CLAIRVOYANT */
  lade__next_use_fn next_use; /* required for clairvoyant */
  void *next_use_ctx;
  int named_temporaries; /* disk tier: write named temporaries even where O_TMPFILE works (tests the fallback) */
  /* the node tier (shmcache.c, docs/cache.md "Node cache"): with node_dir set and dir NULL, one memory tier
   * shared by the processes of a node through a segment in node_dir (a tmpfs); evicts FIFO whatever `policy`,
   * except LADE__CACHE_PLAN: it never evicts by itself (a put that does not fit is refused; the ring's live
   * records are moved forward to make room), a process evicts only the entries it put, and the node's ranks
   * mark their steps (lade__shmcache_mark_step) */
  const char *node_dir;     /* the tmpfs folder (shm_dir); NULL: not shared */
  const char *node_job;     /* the job key: processes of one job agree on it without talking (engine/resolve.c);
                             * with dir: the disk tier's folder is shared by the node's processes of this job */
  uint64_t node_slots;      /* index slots to make room for (rounded up to a power of two; entries <= 3/4 of them) */
  uint32_t node_timeout_ms; /* how long a process waits for another to finish making the segment */
  uint32_t claim_timeout_ms; /* memory tier: the longest a claim-get waits for another thread's read of the
                              * sample (lade__cache_get_claim); 0: 60 s, peer_timeout_ms's default */
} lade__cache_opts_t;

typedef struct lade__cache lade__cache_t;

/* Opens a tier. The disk tier scans (or loads the index of) its folder, so
 * entries of an earlier run are found; entries over capacity (a smaller
 * capacity than last time) are evicted at once. Errors name the folder:
 * LADE_EIO (cannot create, not writable, mode not 0700 and not fixable),
 * LADE_ESTATE (locked by another live process). */
int lade__cache_open(lade__cache_t **out, const lade__cache_opts_t *o);
void lade__cache_close(lade__cache_t *c);

/* Copies the bytes of key into out (grown as needed). 0 on a hit,
 * LADE_ENOENT on a miss (also when a disk entry failed its checksum: it is
 * removed and counted in `corrupt`). Other errors are real I/O failures. */
int lade__cache_get(lade__cache_t *c, uint64_t key, lade__buf_t *out);

/* lade__cache_get for the version `ver` of the sample: an entry stored under
 * another version (the file was replaced, the object changed) is stale: it
 * is removed, counted in `stale` and in `misses`, and the get returns
 * LADE_ENOENT. lade__cache_get is this with version 0. The caller picks
 * what a version is (fetch.c: size, mtime and inode of a local file; the
 * listed size of an object) and must take it before reading the source, so
 * bytes read after a change are never stored under the older version. */
int lade__cache_get_ver(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out);

/* lade__cache_get_ver that, on a miss, makes the others wait for this
 * caller's read of the sample (single flight). The node tier: the node's
 * other processes (the ranks of a model-parallel group read each sample
 * once); a process that misses a sample another one is reading waits for
 * its put (bounded by node_timeout_ms; not when the reader died) and gets
 * it. The memory tier: the process's other threads (the fetch workers, at
 * an epoch's boundary); a thread that misses a sample another one is
 * reading waits for its put or release (bounded by claim_timeout_ms; past
 * it, a miss without a claim). *claimed: this caller must read the sample
 * and put it (any put of the key ends the claim, stored or refused) or call
 * lade__cache_release (the memory tier: from the same thread); a waiter
 * whose loader released gets a miss, claimed. The disk tier in node mode:
 * the node's other processes, through claim files (claims.h); a process
 * waits (at most 5 s, tier.c) only for another's read, not for another's
 * prefetch. The disk tier otherwise: lade__cache_get_ver, never claimed. */
int lade__cache_get_claim(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out, bool *claimed);
void lade__cache_release(lade__cache_t *c, uint64_t key);

/* The node tier's hit in place, with no copy: *data points at the entry's
 * bytes (version ver, checksum verified) in the shared segment, valid until
 * lade__cache_view_ok(token), which says whether they stayed the entry's
 * while the caller used them (then it counts the hit); when false, whatever
 * the caller made of them is to be thrown away (another process reused the
 * bytes: read the sample again). LADE_ENOENT: not resident (no miss counted:
 * the caller's get follows); LADE_EUNSUPPORTED: a tier without views. */
int lade__cache_view(lade__cache_t *c, uint64_t key, uint64_t ver, const void **data, size_t *len, uint64_t *token);
bool lade__cache_view_ok(lade__cache_t *c, uint64_t token);

/* A prefetch into the tier claimed node-wide (the disk tier in node mode:
 * cache/claims.h), so that the prefetchers of a node's ranks fetch a sample
 * once between them: true when this process is to fetch key (it then puts
 * it, or gives up, and calls lade__cache_end_fetch), false when another
 * process of the node has a fresh claim on it (its put is coming). Every
 * other tier: true, and end_fetch does nothing. (A reader's claim is
 * lade__cache_get_claim's.) */
bool lade__cache_claim_fetch(lade__cache_t *c, uint64_t key);
void lade__cache_end_fetch(lade__cache_t *c, uint64_t key);

/* True when key is resident (no I/O), whatever its version. */
bool lade__cache_contains(lade__cache_t *c, uint64_t key);

/* Counts a use of key served elsewhere (e.g. by the memory tier in front of
 * this one) without reading it: LRU moves it to the back, clairvoyant
 * refreshes its next use. No I/O. True when key is resident. */
bool lade__cache_touch(lade__cache_t *c, uint64_t key);

/* Removes key (the plan policy's evictions); counted in `evictions`. True
 * when it was resident. */
bool lade__cache_evict(lade__cache_t *c, uint64_t key);

/* Drops every entry (counted as evictions). */
void lade__cache_clear(lade__cache_t *c);

/* Bytes an entry of len payload bytes is charged in the memory / disk tier. */
uint64_t lade__memcache_charge(uint64_t len);
uint64_t lade__diskcache_charge(uint64_t len);

/* Stores a copy of the bytes under key (replacing an older entry), evicting
 * per policy to stay within capacity. An entry larger than the capacity, or
 * refused by clairvoyant admission, is not stored (returns 0; counted in
 * `rejected`). */
int lade__cache_put(lade__cache_t *c, uint64_t key, const void *data, size_t len);
/* lade__cache_put storing the sample's version with it (put is version 0). */
int lade__cache_put_ver(lade__cache_t *c, uint64_t key, uint64_t ver, const void *data, size_t len);

typedef struct lade__cache_stats {
  uint64_t hits, misses;
  uint64_t inserts, evictions, rejected, corrupt;
  uint64_t stale;         /* gets that found the entry stored under another version (also in misses) */
  uint64_t bytes_read;    /* payload bytes returned by get */
  uint64_t bytes_written; /* payload bytes stored by put */
  uint64_t unnamed_puts;  /* disk tier: puts written as new O_TMPFILE files */
  uint64_t recycled_puts; /* disk tier: puts written into the file of the entry they evicted */
  uint64_t from_index;    /* disk tier: entries listed by INDEX at open (0: the folder was scanned) */
  uint64_t entries;       /* resident now */
  uint64_t used;          /* bytes charged against capacity now */
  uint64_t capacity;
  uint64_t stale_segments; /* node tier: segments of dead jobs this open removed */
  uint64_t waited;         /* claim-gets that waited for another's read of the sample, then hit */
} lade__cache_stats_t;

void lade__cache_stats(lade__cache_t *c, lade__cache_stats_t *out);

/* The node tier's bytes per entry of len payload bytes. */
uint64_t lade__shmcache_charge(uint64_t len);

/* The node tier's own view: node-wide counters (every local rank's gets and
 * puts), its segment and who is attached. */
typedef struct lade__node_cache_stats {
  uint64_t hits, misses, inserts, evictions, rejected, corrupt;
  uint64_t recovered;     /* times the cache was emptied: a process died holding its lock, or the ring was damaged */
  uint64_t waited;        /* gets that waited for another process's read of the sample, then hit */
  uint64_t moved;         /* plan mode: records moved forward to make room */
  uint64_t entries, used, capacity;
  uint64_t segment_bytes; /* the segment file's size: capacity plus header and index */
  uint32_t attached;      /* live processes attached */
  char path[LADE__PATH_MAX];
} lade__node_cache_stats_t;
/* The node tier's calls below take any handle: on another tier (or NULL)
 * they do nothing (stats all 0, a step mark of UINT64_MAX). */
void lade__shmcache_node_stats(lade__cache_t *c, lade__node_cache_stats_t *out);
/* Tests only: takes the node tier's lock and returns holding it, so a test
 * process can die holding it (the others then recover: shmcache.c). */
void lade__shmcache_hold_lock_for_test(lade__cache_t *c);

/* A plan's node tier (policy LADE__CACHE_PLAN; docs/plan.md "Nodes"): the
 * node's ranks, numbered 0 .. ranks - 1 among themselves, each publish
 * `mark`, 1 + the last step whose reads they finished (set at a seek too). */
void lade__shmcache_mark_step(lade__cache_t *c, uint32_t local, uint64_t mark);
/* Rank `local`'s mark. */
uint64_t lade__shmcache_step_of(lade__cache_t *c, uint32_t local);
/* Waits until ranks 0 .. ranks - 1 all marked at least `mark`, polling,
 * at most timeout_ms: 0, or LADE_ETIMEOUT with *late the first one behind. */
int lade__shmcache_wait_steps(lade__cache_t *c, uint32_t ranks, uint64_t mark, uint32_t timeout_ms, uint32_t *late);

#endif
