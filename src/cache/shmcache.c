/*
 * shmcache.c - the node tier: one memory cache shared by the ranks of a
 * node through one file on a tmpfs (POSIX shared memory, /dev/shm by
 * default), mapped by every local rank. Each cached sample is in it once;
 * a rank's get copies it straight out of the mapping (no message, no
 * owner in between). docs/cache.md, "Node cache", gives the rules.
 *
 * Segment: {header page, index slots, arena}. The arena is a ring of
 * records {key, payload length, record bytes, kind, writer pid} + payload,
 * each aligned to 64 bytes, addressed by 64-bit logical positions that only
 * grow (physical = logical % arena bytes): `head` is where the next record
 * goes, `tail` the oldest record still owned. A put evicts at the tail
 * (FIFO) until its record fits before it, reserves [head, head + charge),
 * copies its payload in with no lock held, and then marks the entry ready.
 * The index is open addressing over slots {key, pos, len, ver, sum, state}
 * with backward-shift deletion; only ready entries are served.
 *
 * Plan mode (policy LADE__CACHE_PLAN: a node-aware plan's cache, docs/plan.md
 * "Nodes"): the plan decides every evict, so a put never evicts at the
 * tail. It frees dead records there and moves live ones forward to the head
 * (copy forward, as a log-structured store cleans), until its record fits
 * or every record that was in the ring has been passed once (refused then:
 * the plan's reads of it fall back). A moved entry keeps its checksum; a
 * reader of its old place sees the tail past it and asks again. The arena
 * is sized with room to spare (engine/resolve.c), so moves stay few. The
 * node's ranks publish the steps they finished reading (step_mark), so a
 * rank evicts only what no rank of its node still has to read, and a rank
 * waiting for another's admit knows when it will not come.
 *
 * Lock: one robust process-shared mutex in the header guards head, the
 * index, the records' headers, used/entries and the attach table. tail is
 * written under it and read without it (atomic). Payload copies run
 * unlocked, on both sides, as a seqlock whose sequence is the tail: a
 * reader takes (pos, len, sum) of a ready entry under the lock, copies, and
 * keeps the bytes only when the tail has not passed pos (the writer that
 * reuses those bytes advanced the tail first and published it with a
 * release fence) and their checksum matches. A rank that dies holding the
 * mutex leaves the index in an unknown state: the next locker gets
 * EOWNERDEAD and empties the cache (tail = head: every copy in flight fails
 * its check), so no torn entry is ever served and the others go on. A rank
 * that dies between its reservation and its ready mark leaves a record that
 * is never served; the tail evicts it once its writer is dead.
 *
 * Segments are named lade-<job key digest>-<dataset/settings digest>; open
 * removes segments whose creator and every attached process are dead
 * (pid + start time, same pid namespace; a zombie is dead), never a live
 * one, and unlinks only the inode it checked (flock on the segment + inode
 * compare). No other lock is taken while holding the mutex.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cache/tier.h"
#include "core/proc.h"

#define SEG_MAGIC "LADESHM1"
#define SEG_LAYOUT 2u
#define HDR_PAGE 8192
#define MAX_ATTACH 256
#define REC_HDR 32
#define ALIGN 64
#define SUM_SEED 0x4c4144454e4f44ull
#define STALE_EMPTY_S 60 /* a segment file without a header this old was left by a creator killed at once */

enum { SEG_CREATING = 0, SEG_READY = 1 };
/* LOADING: a process read the sample's miss and is reading it from storage
 * (no bytes yet); the node's other processes wait for its put instead of
 * reading the same sample again (lade__cache_get_claim) */
enum { SLOT_EMPTY = 0, SLOT_WRITING = 1, SLOT_READY = 2, SLOT_LOADING = 3 };
enum { REC_PAD = 1, REC_LIVE = 2, REC_DEAD = 3 };

typedef struct attach {
  _Atomic int32_t pid;
  uint32_t pad;
  uint64_t start; /* the process's start time (clock ticks after boot): a reused pid is not it */
} attach_t;

typedef struct seg_hdr {
  char magic[8];
  uint32_t layout;
  _Atomic uint32_t state;
  uint64_t total_bytes; /* the file's size */
  uint64_t nslots, slots_off, arena_off, arena_bytes;
  uint64_t digest; /* of the name's parts: what the segment caches */
  int32_t creator_pid;
  uint32_t pad0;
  uint64_t creator_start;
  uint64_t pidns; /* inode of the creator's pid namespace: liveness is judged only inside it */
  char name[128];
  /* under mu */
  pthread_mutex_t mu;
  uint64_t head;
  _Atomic uint64_t tail;
  uint64_t used, entries, seq;
  uint64_t loading; /* LOADING slots (they hold index slots, no bytes) */
  attach_t att[MAX_ATTACH];
  /* counters, node-wide (atomic) */
  _Atomic uint64_t hits, misses, inserts, evictions, rejected, corrupt, stale, recovered, bytes_written;
  _Atomic uint64_t waited; /* gets that waited for another process's load of the sample, then hit */
  uint32_t plan;           /* plan mode (policy LADE__CACHE_PLAN) */
  uint32_t pad1;
  _Atomic uint64_t moved;  /* plan mode: records moved forward to make room */
  _Atomic uint64_t step_mark[MAX_ATTACH]; /* plan mode: each local rank's 1 + last step read */
} seg_hdr_t;
_Static_assert(sizeof(seg_hdr_t) <= HDR_PAGE, "the header fits its page");

typedef struct slot {
  uint64_t key, pos, len, ver, sum;
  uint32_t state;
  int32_t writer;
} slot_t;

typedef struct rec {
  uint64_t key, len, bytes;
  uint16_t kind;
  uint16_t busy; /* its writer is still copying the payload in (even when the entry was replaced meanwhile) */
  int32_t writer;
} rec_t;
_Static_assert(sizeof(rec_t) == REC_HDR, "record header");

typedef struct shmcache {
  lade__cache_t base; /* ops, st (local counters); mu and ix unused but initialised */
  int fd;
  seg_hdr_t *h;
  slot_t *slots;
  uint8_t *arena;
  size_t map_bytes;
  int att; /* this process's attach slot */
  uint64_t stale_removed; /* stale segments open removed */
  uint32_t timeout_ms;    /* the longest wait for another process's load (peer_timeout_ms) */
  _Atomic bool broken;    /* its lock was held past timeout_ms once: no longer used (seg_lock) */
  uint8_t *tmp;           /* plan mode: a record being moved */
  uint64_t tmp_cap;
  uint64_t test_stop_put; /* test hook LADE_TEST_HOOK_STOP_IN_NODE_LOCK (open): 0, unused */
  uint64_t test_puts;     /* under mu */
  char path[LADE__PATH_MAX];
  char dir[LADE__PATH_MAX];
} shmcache_t;

/* ---- the robust mutex */

static rec_t *rec_at(shmcache_t *s, uint64_t pos);

/* Empties the index. The records stay in the ring as dead ones while its
 * headers hold together: the tail still stops at a record a live writer
 * from before is copying into (evict_tail), so no later put is given bytes
 * that writer may still overwrite. A damaged ring (ring_ok false, or a
 * header that does not add up) is dropped whole: tail = head, and every
 * copy in flight fails its check. */
static void recover_locked(shmcache_t *s, bool ring_ok) {
  seg_hdr_t *h = s->h;
  uint64_t t = atomic_load_explicit(&h->tail, memory_order_relaxed);
  while (ring_ok && t < h->head) {
    rec_t *r = rec_at(s, t);
    if (r->bytes < ALIGN || r->bytes % ALIGN || r->bytes > h->head - t) ring_ok = false;
    else {
      if (r->kind == REC_LIVE) r->kind = REC_DEAD;
      t += r->bytes;
    }
  }
  if (!ring_ok) atomic_store(&h->tail, h->head);
  atomic_thread_fence(memory_order_release);
  memset(s->slots, 0, h->nslots * sizeof *s->slots);
  h->used = h->entries = h->loading = 0;
  atomic_fetch_add(&h->recovered, 1);
}

/* The lock, bounded by timeout_ms: a process of the node stopped (SIGSTOP,
 * a debugger) or hung while holding it would hold every other one up
 * without bound. After such a wait this process stops using the node cache
 * (every later call fails at once: seg_lock; reads then come from storage)
 * and says so once. detach waits so even then, so that the last process out
 * still removes the segment: a process stopped while one of its threads
 * held the lock finds another thread's wait expired when it resumes, and
 * stops using the cache though its own thread was the holder. */
static int seg_lock_wait(shmcache_t *s) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(s->timeout_ms ? s->timeout_ms : 1000) % 1000 * 1000000;
  ts.tv_sec += (s->timeout_ms ? s->timeout_ms : 1000) / 1000 + (time_t)(ns / 1000000000);
  ts.tv_nsec = (long)(ns % 1000000000);
  int r = pthread_mutex_timedlock(&s->h->mu, &ts);
  if (r == ETIMEDOUT) {
    if (!atomic_exchange(&s->broken, true)) /* said once */
      fprintf(stderr, "lade: node cache %s: its lock was held for more than peer_timeout_ms (%u ms) by another "
              "process of this node (stopped or hung); this process stops using the node cache\n", s->path,
              s->timeout_ms);
    return lade__fail(LADE_ETIMEOUT, "node cache %s: its lock was held for more than peer_timeout_ms (%u ms)",
                      s->path, s->timeout_ms);
  }
  if (r == EOWNERDEAD) {
    /* a rank died inside the lock: the index may be half-changed; drop it all */
    recover_locked(s, true);
    pthread_mutex_consistent(&s->h->mu);
    fprintf(stderr, "lade: node cache %s: a process died while holding its lock; the cache was emptied\n", s->path);
    return 0;
  }
  if (r) return lade__fail(LADE_ETHREAD, "node cache %s: cannot take its lock: %s", s->path, strerror(r));
  return 0;
}

/* The lock for a call that uses the cache (see seg_lock_wait). */
static int seg_lock(shmcache_t *s) {
  if (s->broken)
    return lade__fail(LADE_ETIMEOUT, "node cache %s: not used since its lock was held too long", s->path);
  return seg_lock_wait(s);
}

static void seg_unlock(shmcache_t *s) { pthread_mutex_unlock(&s->h->mu); }

/* ---- index (locked) */

static size_t slot_home(const shmcache_t *s, uint64_t key) { return (size_t)(lade__mix64(key) & (s->h->nslots - 1)); }

static slot_t *slot_find(shmcache_t *s, uint64_t key) {
  size_t mask = s->h->nslots - 1;
  for (size_t i = slot_home(s, key), n = 0; n <= mask; i = (i + 1) & mask, n++) {
    slot_t *e = &s->slots[i];
    if (e->state == SLOT_EMPTY) return NULL;
    if (e->key == key) return e;
  }
  return NULL;
}

static void slot_del(shmcache_t *s, slot_t *e) {
  size_t mask = s->h->nslots - 1, hole = (size_t)(e - s->slots);
  for (size_t j = (hole + 1) & mask; s->slots[j].state != SLOT_EMPTY; j = (j + 1) & mask) {
    size_t hm = slot_home(s, s->slots[j].key);
    bool stays = hole <= j ? (hole < hm && hm <= j) : (hole < hm || hm <= j);
    if (!stays) {
      s->slots[hole] = s->slots[j];
      hole = j;
    }
  }
  memset(&s->slots[hole], 0, sizeof s->slots[hole]);
}

static rec_t *rec_at(shmcache_t *s, uint64_t pos) { return (rec_t *)(s->arena + pos % s->h->arena_bytes); }

static uint64_t charge_of(uint64_t len) { return (REC_HDR + len + ALIGN - 1) / ALIGN * ALIGN; }
uint64_t lade__shmcache_charge(uint64_t len) { return charge_of(len); }

static const lade__cache_ops_t shm_ops;

/* c as the node tier, or NULL when c is another tier (or NULL): the
 * lade__shmcache_* calls take any handle and do nothing with another's. */
static shmcache_t *node_tier(lade__cache_t *c) { return c && c->ops == &shm_ops ? (shmcache_t *)c : NULL; }

/* Removes the entry of slot e: its record becomes dead (the tail skips it),
 * its bytes no longer count. */
static void remove_entry(shmcache_t *s, slot_t *e) {
  if (e->state == SLOT_LOADING) { /* no record, no bytes */
    s->h->loading--;
    slot_del(s, e);
    return;
  }
  rec_t *r = rec_at(s, e->pos);
  if (r->kind == REC_LIVE && r->key == e->key) r->kind = REC_DEAD;
  s->h->used -= charge_of(e->len);
  s->h->entries--;
  slot_del(s, e);
}

/* Evicts the record at the tail. False when it cannot: a put still writing
 * it (its writer alive). */
static bool evict_tail(shmcache_t *s) {
  seg_hdr_t *h = s->h;
  uint64_t t = atomic_load_explicit(&h->tail, memory_order_relaxed);
  if (t == h->head) return false;
  rec_t *r = rec_at(s, t);
  uint64_t bytes = r->bytes;
  if (bytes < ALIGN || bytes % ALIGN || bytes > h->head - t) { /* not a record: the ring is damaged */
    recover_locked(s, false);
    return true;
  }
  /* a payload still being copied in, by a live writer: its bytes are not free yet */
  if (r->busy && lade__proc_alive(r->writer, 0)) return false;
  if (r->kind == REC_LIVE) {
    slot_t *e = slot_find(s, r->key);
    if (e && e->pos == t) {
      if (e->state == SLOT_WRITING && lade__proc_alive(e->writer, 0)) return false;
      remove_entry(s, e);
      atomic_fetch_add_explicit(&h->evictions, 1, memory_order_relaxed);
    }
  }
  atomic_store_explicit(&h->tail, t + bytes, memory_order_relaxed);
  return true;
}

/* ---- the tier's calls */

/* A free index slot for key (not present). Locked. */
static slot_t *slot_new(shmcache_t *s, uint64_t key) {
  size_t mask = s->h->nslots - 1, i = slot_home(s, key);
  while (s->slots[i].state != SLOT_EMPTY) i = (i + 1) & mask;
  return &s->slots[i];
}

/* The get, and with `claim` the single-flight miss: key is LOADING by
 * another live process -> wait (bounded by timeout_ms) and ask again;
 * absent (or its loader dead) -> mark it LOADING by this process and return
 * LADE_ENOENT with *claimed: the caller reads the sample and puts it (the
 * put ends the claim) or calls lade__cache_release. */
static int lookup(shmcache_t *s, uint64_t key, uint64_t ver, lade__buf_t *out, bool claim, bool *claimed) {
  seg_hdr_t *h = s->h;
  int32_t me = (int32_t)getpid();
  double t_end = 0;
  bool waited = false;
  *claimed = false;
  /* a record moved forward (plan mode) is still there: ask again, a few more times */
  for (int attempt = 0, most = h->plan ? 16 : 2; attempt < most;) {
    int rc = seg_lock(s);
    if (rc) return rc;
    slot_t *e = slot_find(s, key);
    if (e && e->state == SLOT_READY && e->ver != ver) { /* the sample changed since it was stored */
      remove_entry(s, e);
      atomic_fetch_add_explicit(&h->stale, 1, memory_order_relaxed);
      e = NULL;
    }
    /* another process is reading it (LOADING) or copying its bytes in
     * (WRITING, the put that ends a claim): they come soon, wait for them */
    if (claim && e && (e->state == SLOT_LOADING || e->state == SLOT_WRITING)) {
      if (t_end == 0) t_end = lade__now() + s->timeout_ms / 1000.0;
      if (lade__proc_alive(e->writer, 0) && lade__now() < t_end) {
        seg_unlock(s);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
        waited = true;
        continue;
      }
      if (e->state == SLOT_LOADING) { /* its loader died or is too slow: this process loads it */
        e->writer = me;
        *claimed = true;
      } /* a copy that does not end: a miss, read from storage without a claim */
      seg_unlock(s);
      break;
    }
    if (!e || e->state != SLOT_READY) {
      if (claim && !e && (h->entries + h->loading + 1) * 4 <= h->nslots * 3) {
        e = slot_new(s, key);
        *e = (slot_t){.key = key, .pos = UINT64_MAX, .ver = ver, .state = SLOT_LOADING, .writer = me};
        h->loading++;
        *claimed = true;
      }
      seg_unlock(s);
      break;
    }
    uint64_t pos = e->pos, len = e->len, sum = e->sum;
    seg_unlock(s);
    if ((rc = lade__buf_reserve(out, len ? len : 1)) != 0) return rc;
    memcpy(out->data, s->arena + pos % h->arena_bytes + REC_HDR, len);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&h->tail, memory_order_relaxed) > pos) { /* evicted while copied */
      attempt++;
      continue;
    }
    if (lade_checksum(out->data, len, SUM_SEED) != sum) {
      atomic_fetch_add_explicit(&h->corrupt, 1, memory_order_relaxed);
      if (seg_lock(s) == 0) {
        slot_t *x = slot_find(s, key);
        if (x && x->pos == pos) remove_entry(s, x);
        seg_unlock(s);
      }
      break;
    }
    out->len = len;
    atomic_fetch_add_explicit(&h->hits, 1, memory_order_relaxed);
    if (waited) atomic_fetch_add_explicit(&h->waited, 1, memory_order_relaxed);
    return 0;
  }
  atomic_fetch_add_explicit(&h->misses, 1, memory_order_relaxed);
  return LADE_ENOENT;
}

static int shm_get(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out) {
  bool claimed;
  return lookup((shmcache_t *)c, key, ver, out, false, &claimed);
}

static int shm_get_claim(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out, bool *claimed) {
  return lookup((shmcache_t *)c, key, ver, out, true, claimed);
}

/* A hit seen in place: the entry's bytes in the mapping, checksummed (a
 * read, no copy). The caller uses them (the engine transforms them straight
 * into the batch slot), then asks shm_view_ok whether they stayed the
 * entry's meanwhile (the seqlock's second half). */
static int shm_view(lade__cache_t *c, uint64_t key, uint64_t ver, const void **data, size_t *len, uint64_t *token) {
  shmcache_t *s = (shmcache_t *)c;
  seg_hdr_t *h = s->h;
  int rc = seg_lock(s);
  if (rc) return rc;
  slot_t *e = slot_find(s, key);
  if (!e || e->state != SLOT_READY || e->ver != ver) {
    seg_unlock(s);
    return LADE_ENOENT; /* the get that follows counts the miss (and drops a stale entry) */
  }
  uint64_t pos = e->pos, n = e->len, sum = e->sum;
  seg_unlock(s);
  const uint8_t *p = s->arena + pos % h->arena_bytes + REC_HDR;
  bool same = lade_checksum(p, n, SUM_SEED) == sum;
  atomic_thread_fence(memory_order_acquire);
  if (!same || atomic_load_explicit(&h->tail, memory_order_relaxed) > pos) return LADE_ENOENT;
  *data = p;
  *len = n;
  *token = pos;
  return 0;
}

static bool shm_view_ok(lade__cache_t *c, uint64_t token) {
  shmcache_t *s = (shmcache_t *)c;
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(&s->h->tail, memory_order_relaxed) > token) return false;
  atomic_fetch_add_explicit(&s->h->hits, 1, memory_order_relaxed);
  return true;
}

static void shm_release(lade__cache_t *c, uint64_t key) {
  shmcache_t *s = (shmcache_t *)c;
  if (seg_lock(s)) return;
  slot_t *e = slot_find(s, key);
  if (e && e->state == SLOT_LOADING && e->writer == (int32_t)getpid()) remove_entry(s, e);
  seg_unlock(s);
}

/* The bytes of padding a record of `charge` needs at head so it does not
 * cross the arena's end. */
static uint64_t pad_at(uint64_t head, uint64_t charge, uint64_t A) {
  return (head % A) + charge > A ? A - head % A : 0;
}

/* Plan mode: moves the live entry e, whose record is at the tail, to the
 * head (through tmp: the tail passes it first, so its bytes are free for
 * the copy whatever the ring's state; the pad it may need always fits, as
 * a record at the tail never crosses the arena's end). Locked. */
static bool move_tail(shmcache_t *s, slot_t *e) {
  seg_hdr_t *h = s->h;
  uint64_t A = h->arena_bytes, t = e->pos;
  rec_t *r = rec_at(s, t);
  uint64_t b = r->bytes;
  if (b > s->tmp_cap) {
    uint8_t *p = realloc(s->tmp, b);
    if (!p) return false;
    s->tmp = p;
    s->tmp_cap = b;
  }
  memcpy(s->tmp, r, b);
  atomic_store_explicit(&h->tail, t + b, memory_order_relaxed);
  atomic_thread_fence(memory_order_release); /* readers of its old place see the tail past it */
  uint64_t pad = pad_at(h->head, b, A);
  if (pad) {
    *rec_at(s, h->head) = (rec_t){.key = 0, .len = 0, .bytes = pad, .kind = REC_PAD};
    h->head += pad;
  }
  rec_t *n = rec_at(s, h->head);
  memcpy(n, s->tmp, b);
  n->busy = 0;
  n->writer = (int32_t)getpid();
  e->pos = h->head;
  h->head += b;
  atomic_fetch_add_explicit(&h->moved, 1, memory_order_relaxed);
  return true;
}

/* Plan mode: room for a record of `charge` bytes at the head without
 * evicting an entry (see the top). Locked. ROOM_BUSY: the tail reached a
 * record another live process is still copying into (it was put while the
 * ring went round once): worth asking again once that copy is done. */
enum { ROOM_OK = 0, ROOM_FULL, ROOM_BUSY };
static int plan_room(shmcache_t *s, uint64_t charge) {
  seg_hdr_t *h = s->h;
  uint64_t A = h->arena_bytes, stop = h->head;
  if (h->used + charge > A) return ROOM_FULL;
  for (;;) {
    uint64_t t = atomic_load_explicit(&h->tail, memory_order_relaxed);
    if (A - (h->head - t) >= pad_at(h->head, charge, A) + charge) return ROOM_OK;
    if (t >= stop || t == h->head) return ROOM_FULL; /* every record of before passed once */
    rec_t *r = rec_at(s, t);
    slot_t *e = r->kind == REC_LIVE && r->bytes >= ALIGN ? slot_find(s, r->key) : NULL;
    if (e && e->pos == t && e->state == SLOT_READY && !r->busy) {
      if (!move_tail(s, e)) return ROOM_FULL;
    } else if (!evict_tail(s)) {
      return ROOM_BUSY;
    }
  }
}

static int shm_put(lade__cache_t *c, uint64_t key, uint64_t ver, const void *data, size_t len) {
  shmcache_t *s = (shmcache_t *)c;
  seg_hdr_t *h = s->h;
  uint64_t charge = charge_of(len), A = h->arena_bytes;
  int rc = seg_lock(s);
  if (rc) return rc;
  slot_t *old = slot_find(s, key);
  if (old) remove_entry(s, old); /* a writer of it finds its slot gone and leaves it; a claim ends */
  if (charge > A || (h->entries + h->loading + 1) * 4 > h->nslots * 3) goto rejected;
  if (h->plan) { /* a copy in progress at the tail ends soon: wait for it (at most 100 ms) rather than refuse */
    int room = plan_room(s, charge);
    for (int i = 0; room == ROOM_BUSY && i < 1000; i++) {
      seg_unlock(s);
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
      if ((rc = seg_lock(s)) != 0) return rc;
      room = plan_room(s, charge);
    }
    if (room != ROOM_OK) goto rejected;
  }
  uint64_t pad = pad_at(h->head, charge, A);
  while (A - (h->head - atomic_load_explicit(&h->tail, memory_order_relaxed)) < pad + charge)
    if (!evict_tail(s)) goto rejected;
  if (pad) { /* the record does not fit before the arena's end: skip to its start */
    rec_t *p = rec_at(s, h->head);
    *p = (rec_t){.key = 0, .len = 0, .bytes = pad, .kind = REC_PAD};
    h->head += pad;
  }
  /* the tail moved past bytes that this put (or another) will now write:
   * publish it before any of them changes */
  atomic_thread_fence(memory_order_release);
  uint64_t pos = h->head;
  rec_t *r = rec_at(s, pos);
  *r = (rec_t){.key = key, .len = len, .bytes = charge, .kind = REC_LIVE, .busy = 1, .writer = (int32_t)getpid()};
  h->head += charge;
  slot_t *e = slot_new(s, key);
  *e = (slot_t){.key = key, .pos = pos, .len = len, .ver = ver, .state = SLOT_WRITING, .writer = (int32_t)getpid()};
  h->used += charge;
  h->entries++;
  h->seq++;
  /* test hook: a process stopped (SIGSTOP) while it holds the lock, halfway through a put */
  if (s->test_stop_put && ++s->test_puts == s->test_stop_put) raise(SIGSTOP);
  seg_unlock(s);

  memcpy((uint8_t *)r + REC_HDR, data, len);
  uint64_t sum = lade_checksum(data, len, SUM_SEED);

  if ((rc = seg_lock(s)) != 0) return rc;
  if (atomic_load_explicit(&h->tail, memory_order_relaxed) <= pos) r->busy = 0; /* else a recovery took it */
  e = slot_find(s, key);
  if (e && e->pos == pos && e->state == SLOT_WRITING) {
    e->sum = sum;
    e->state = SLOT_READY; /* the unlock publishes the payload with it */
    atomic_fetch_add_explicit(&h->inserts, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->bytes_written, len, memory_order_relaxed);
  }
  seg_unlock(s);
  return 0;
rejected:
  seg_unlock(s);
  atomic_fetch_add_explicit(&h->rejected, 1, memory_order_relaxed);
  return 0;
}

static bool shm_contains(lade__cache_t *c, uint64_t key) {
  shmcache_t *s = (shmcache_t *)c;
  if (seg_lock(s)) return false;
  slot_t *e = slot_find(s, key);
  bool r = e && e->state == SLOT_READY;
  seg_unlock(s);
  return r;
}

static bool shm_evict(lade__cache_t *c, uint64_t key) {
  shmcache_t *s = (shmcache_t *)c;
  if (seg_lock(s)) return false;
  slot_t *e = slot_find(s, key);
  /* plan mode: each rank evicts what it put; an entry another rank put since
   * (the plan admitted the sample again there, ahead of this evict) stays */
  if (e && s->h->plan && e->writer != (int32_t)getpid()) e = NULL;
  if (e) {
    remove_entry(s, e);
    atomic_fetch_add_explicit(&s->h->evictions, 1, memory_order_relaxed);
  }
  seg_unlock(s);
  return e != NULL;
}

static void shm_clear(lade__cache_t *c) {
  shmcache_t *s = (shmcache_t *)c;
  if (seg_lock(s)) return;
  uint64_t n = s->h->entries;
  recover_locked(s, true);
  atomic_fetch_sub(&s->h->recovered, 1); /* asked for, not a recovery */
  atomic_fetch_add(&s->h->evictions, n);
  seg_unlock(s);
}

/* The segment's counters both stats calls report, as the cache's stats and as the node's. */
#define SHM_COUNTERS(X) X(hits) X(misses) X(inserts) X(evictions) X(rejected) X(corrupt)
#define LOAD_COUNTER(f) out->f = atomic_load(&h->f);

static void shm_stats(lade__cache_t *c, lade__cache_stats_t *out) {
  shmcache_t *s = (shmcache_t *)c;
  seg_hdr_t *h = s->h;
  memset(out, 0, sizeof *out); /* the node's counters: every local rank's gets and puts */
  if (seg_lock(s) == 0) {
    out->entries = h->entries;
    out->used = h->used;
    seg_unlock(s);
  }
  SHM_COUNTERS(LOAD_COUNTER)
  out->stale = atomic_load(&h->stale);
  out->bytes_written = atomic_load(&h->bytes_written);
  out->capacity = h->arena_bytes;
  out->stale_segments = s->stale_removed;
  out->waited = atomic_load(&h->waited);
}

void lade__shmcache_node_stats(lade__cache_t *c, lade__node_cache_stats_t *out) {
  shmcache_t *s = node_tier(c);
  memset(out, 0, sizeof *out);
  if (!s) return;
  seg_hdr_t *h = s->h;
  if (seg_lock(s) == 0) {
    out->entries = h->entries;
    out->used = h->used;
    for (int i = 0; i < MAX_ATTACH; i++) out->attached += lade__proc_alive(atomic_load(&h->att[i].pid), h->att[i].start);
    seg_unlock(s);
  }
  out->capacity = h->arena_bytes;
  out->segment_bytes = h->total_bytes;
  SHM_COUNTERS(LOAD_COUNTER)
  out->recovered = atomic_load(&h->recovered);
  out->waited = atomic_load(&h->waited);
  out->moved = atomic_load(&h->moved);
  snprintf(out->path, sizeof out->path, "%s", s->path);
}

void lade__shmcache_hold_lock_for_test(lade__cache_t *c) {
  if (node_tier(c)) seg_lock(node_tier(c));
}

void lade__shmcache_mark_step(lade__cache_t *c, uint32_t local, uint64_t mark) {
  shmcache_t *s = node_tier(c);
  if (s && local < MAX_ATTACH) atomic_store_explicit(&s->h->step_mark[local], mark, memory_order_release);
}

uint64_t lade__shmcache_step_of(lade__cache_t *c, uint32_t local) {
  shmcache_t *s = node_tier(c);
  return s && local < MAX_ATTACH ? atomic_load_explicit(&s->h->step_mark[local], memory_order_acquire) : UINT64_MAX;
}

int lade__shmcache_wait_steps(lade__cache_t *c, uint32_t ranks, uint64_t mark, uint32_t timeout_ms, uint32_t *late) {
  double t_end = lade__now() + timeout_ms / 1000.0;
  for (uint32_t l = 0; l < ranks && l < MAX_ATTACH; l++)
    while (lade__shmcache_step_of(c, l) < mark) {
      if (lade__now() > t_end) {
        *late = l;
        return LADE_ETIMEOUT;
      }
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  return 0;
}

/* ---- segment files */

/* Unlinks path if it is still the inode fd has open; flock keeps two
 * removers of one inode apart, so a new segment created under the same
 * name is never removed by someone who judged the old one. */
static void unlink_same(const char *path, int fd) {
  struct stat a, b;
  if (flock(fd, LOCK_EX) != 0) return;
  if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) unlink(path);
  flock(fd, LOCK_UN);
}

/* Whether the segment open on fd belongs to nobody alive: its creator and
 * every process attached to it are dead (judged only in our pid
 * namespace), or it has no header and is older than STALE_EMPTY_S. */
static bool seg_stale(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) return false;
  seg_hdr_t *h = NULL;
  if ((size_t)st.st_size >= sizeof *h) h = mmap(NULL, sizeof *h, PROT_READ, MAP_SHARED, fd, 0);
  if (h == MAP_FAILED) h = NULL;
  bool stale;
  if (!h || memcmp(h->magic, SEG_MAGIC, 8) != 0) {
    stale = time(NULL) - st.st_mtime > STALE_EMPTY_S;
  } else if (h->pidns != lade__proc_pidns()) {
    stale = false; /* another container's: we cannot see its processes */
  } else if (atomic_load(&h->state) != SEG_READY) {
    stale = !lade__proc_alive(h->creator_pid, h->creator_start);
  } else {
    stale = true; /* ready: it is live while any attached process is */
    for (int i = 0; i < MAX_ATTACH && stale; i++) stale = !lade__proc_alive(atomic_load(&h->att[i].pid), h->att[i].start);
  }
  if (h) munmap(h, sizeof *h);
  return stale;
}

/* Removes the stale segments of killed jobs from dir (open's first step);
 * counts them in *removed. */
static void remove_stale(const char *dir, uint64_t *removed) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, "lade-", 5) != 0) continue;
    char p[LADE__PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p) continue;
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    if (seg_stale(fd)) {
      unlink_same(p, fd);
      if (access(p, F_OK) != 0) ++*removed;
    }
    close(fd);
  }
  closedir(d);
}

static int map_seg(shmcache_t *s, size_t bytes) {
  void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
  if (m == MAP_FAILED) return lade__fail(LADE_EIO, "node cache %s: cannot map %zu bytes: %s", s->path, bytes, strerror(errno));
  s->h = m;
  s->map_bytes = bytes;
  s->slots = (slot_t *)((uint8_t *)m + s->h->slots_off);
  s->arena = (uint8_t *)m + s->h->arena_off;
  return 0;
}

static void human(char *b, size_t n, uint64_t v) {
  if (v >= (1ull << 30)) snprintf(b, n, "%.1f GiB", (double)v / (1ull << 30));
  else if (v >= (1ull << 20)) snprintf(b, n, "%.1f MiB", (double)v / (1ull << 20));
  else snprintf(b, n, "%.1f KiB", (double)v / 1024);
}

static int too_small(shmcache_t *s, uint64_t need, uint64_t have, const char *why) {
  char a[32], b[32], cap[32];
  human(a, sizeof a, need);
  human(b, sizeof b, have);
  human(cap, sizeof cap, s->h ? s->h->arena_bytes : need);
  return lade__fail(LADE_ERANGE,
                    "node cache: %s (%s) %s: the node cache needs %s there (cache_mem_bytes, %s per node, plus its "
                    "index). Lower cache_mem_bytes, set node_cache=off, or give the node more shared memory "
                    "(docker/podman --shm-size, a larger /dev/shm mount, or shm_dir on another tmpfs)",
                    s->dir, b, why, a, cap);
}

/* Creates the segment (fd open O_EXCL): header first (so a concurrent
 * remover sees a live creator), then every byte reserved, so a full tmpfs
 * is an error now and never a SIGBUS later. */
static int create_seg(shmcache_t *s, const lade__cache_opts_t *o, uint64_t digest) {
  uint64_t nslots = 64;
  while (nslots < o->node_slots && nslots < (1ull << 40)) nslots <<= 1;
  uint64_t slots_off = HDR_PAGE, arena_off = (slots_off + nslots * sizeof(slot_t) + 4095) / 4096 * 4096;
  uint64_t arena = (o->capacity + ALIGN - 1) / ALIGN * ALIGN, total = arena_off + arena;
  struct statvfs v;
  if (statvfs(s->dir, &v) == 0 && (uint64_t)v.f_bavail * v.f_frsize < total)
    return too_small(s, total, (uint64_t)v.f_bavail * v.f_frsize, "has only this much free");
  seg_hdr_t h0;
  memset(&h0, 0, sizeof h0);
  memcpy(h0.magic, SEG_MAGIC, 8);
  h0.layout = SEG_LAYOUT;
  h0.state = SEG_CREATING;
  h0.total_bytes = total;
  h0.nslots = nslots;
  h0.slots_off = slots_off;
  h0.arena_off = arena_off;
  h0.arena_bytes = arena;
  h0.digest = digest;
  h0.plan = o->policy == LADE__CACHE_PLAN;
  h0.creator_pid = (int32_t)getpid();
  h0.creator_start = lade__proc_start(getpid());
  h0.pidns = lade__proc_pidns();
  snprintf(h0.name, sizeof h0.name, "%s", strrchr(s->path, '/') + 1);
  if (pwrite(s->fd, &h0, sizeof h0, 0) != (ssize_t)sizeof h0)
    return lade__fail(LADE_EIO, "node cache %s: cannot write its header: %s", s->path, strerror(errno));
  int e = posix_fallocate(s->fd, 0, (off_t)total);
  if (e == ENOSPC || e == EFBIG) {
    if (statvfs(s->dir, &v) != 0) v.f_bavail = 0;
    return too_small(s, total, (uint64_t)v.f_bavail * v.f_frsize, "could not reserve it");
  }
  if (e) return lade__fail(LADE_EIO, "node cache %s: cannot reserve %" PRIu64 " bytes: %s", s->path, total, strerror(e));
  int rc = map_seg(s, total);
  if (rc) return rc;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  int r = pthread_mutex_init(&s->h->mu, &a);
  pthread_mutexattr_destroy(&a);
  if (r) return lade__fail(LADE_ETHREAD, "node cache %s: cannot create its lock: %s", s->path, strerror(r));
  return 0;
}

/* Waits (bounded) until the creator has made the segment ready, then maps
 * it. LADE_ENOENT: it went away or its creator died (try again). */
static int join_seg(shmcache_t *s, uint64_t digest, uint32_t timeout_ms) {
  double t0 = lade__now(), t_end = t0 + timeout_ms / 1000.0;
  for (;;) {
    struct stat st;
    if (fstat(s->fd, &st) != 0) return lade__fail(LADE_EIO, "node cache %s: %s", s->path, strerror(errno));
    seg_hdr_t h0;
    if (st.st_size >= (off_t)sizeof h0 && pread(s->fd, &h0, sizeof h0, 0) == (ssize_t)sizeof h0 &&
        memcmp(h0.magic, SEG_MAGIC, 8) == 0) {
      if (h0.layout != SEG_LAYOUT || h0.digest != digest)
        return lade__fail(LADE_ESTATE, "node cache %s: made by another lade version or for other settings", s->path);
      if (h0.state == SEG_READY) {
        if ((uint64_t)st.st_size != h0.total_bytes)
          return lade__fail(LADE_EFORMAT, "node cache %s: %lld bytes, its header says %" PRIu64, s->path,
                            (long long)st.st_size, h0.total_bytes);
        return map_seg(s, h0.total_bytes);
      }
      if (!lade__proc_alive(h0.creator_pid, h0.creator_start)) return LADE_ENOENT;
      /* reserving a large segment takes its time (tmpfs zeroes its pages: about 4 GB/s measured): a live
       * creator gets a second per GB beyond the timeout */
      double reserve = (double)h0.total_bytes / 1e9;
      if (t0 + timeout_ms / 1000.0 + reserve > t_end) t_end = t0 + timeout_ms / 1000.0 + reserve;
    } else if (time(NULL) - st.st_mtime > STALE_EMPTY_S) {
      return LADE_ENOENT;
    }
    if (lade__now() > t_end)
      return lade__fail(LADE_ETIMEOUT,
                        "node cache %s: not made ready by its creator (a live process) within peer_timeout_ms (%u "
                        "ms) plus a second per GB of the segment", s->path, timeout_ms);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}

static int attach_self(shmcache_t *s) {
  int rc = seg_lock(s);
  if (rc) return rc;
  int32_t me = (int32_t)getpid();
  uint64_t start = lade__proc_start(getpid());
  s->att = -1;
  for (int i = 0; i < MAX_ATTACH && s->att < 0; i++) {
    attach_t *a = &s->h->att[i];
    int32_t p = atomic_load(&a->pid);
    if (p == 0 || (p != me && !lade__proc_alive(p, a->start))) {
      a->start = start;
      atomic_store(&a->pid, me);
      s->att = i;
    }
  }
  seg_unlock(s);
  if (s->att < 0)
    return lade__fail(LADE_ERANGE, "node cache %s: more than %d processes attached", s->path, MAX_ATTACH);
  return 0;
}

/* Detaches; the last live process out removes the segment, under the
 * mutex, so a process attaching meanwhile either counts (we are not last)
 * or finds the name gone when it checks after attaching (and starts over). */
static void detach(shmcache_t *s) {
  if (!s->h || s->att < 0) return;
  if (atomic_load(&s->h->att[s->att].pid) != (int32_t)getpid()) return; /* a forked child's copy: not its slot */
  if (seg_lock_wait(s) == 0) {
    atomic_store(&s->h->att[s->att].pid, 0);
    bool last = true;
    for (int i = 0; i < MAX_ATTACH && last; i++) last = !lade__proc_alive(atomic_load(&s->h->att[i].pid), s->h->att[i].start);
    if (last) unlink_same(s->path, s->fd);
    seg_unlock(s);
  } else { /* its lock is held without end: out all the same, so an open finds it stale once the holder dies */
    atomic_store(&s->h->att[s->att].pid, 0);
    lade__clear_error();
  }
  s->att = -1;
}

static void shm_close(lade__cache_t *c) {
  shmcache_t *s = (shmcache_t *)c;
  detach(s);
  if (s->h) munmap(s->h, s->map_bytes);
  if (s->fd >= 0) close(s->fd);
  free(s->tmp);
  lade__cache_base_free(&s->base);
  free(s);
}

static void shm_drop(lade__cache_t *c, lade__centry_t *e) { (void)c, (void)e; }

static const lade__cache_ops_t shm_ops = {.close = shm_close, .get = shm_get, .put = shm_put, .drop = shm_drop,
                                          .contains = shm_contains, .touch = shm_contains, .evict = shm_evict,
                                          .clear = shm_clear, .stats = shm_stats, .get_claim = shm_get_claim,
                                          .release = shm_release, .view = shm_view, .view_ok = shm_view_ok};

int lade__shmcache_open(lade__cache_t **out, const lade__cache_opts_t *o) {
  shmcache_t *s = calloc(1, sizeof *s);
  if (!s) return lade__fail(LADE_ENOMEM, "node cache: out of memory");
  s->fd = -1;
  s->att = -1;
  s->timeout_ms = o->node_timeout_ms;
  /* a test hook (tests/python/test_node_cache.py, tests/unit/test_shmcache.c): this process's Nth put
   * stops it (SIGSTOP) while it holds the lock, as a debugger or a job scheduler's suspend can */
  const char *stop = getenv("LADE_TEST_HOOK_STOP_IN_NODE_LOCK");
  s->test_stop_put = stop ? strtoull(stop, NULL, 10) : 0;
  int rc = lade__cache_base_init(&s->base, &shm_ops, o, "node cache");
  if (rc) {
    free(s);
    return rc;
  }
  const char *ns = o->ns ? o->ns : "";
  uint64_t digest = lade_checksum(ns, strlen(ns), SUM_SEED) ^ lade__mix64(o->capacity) ^
                    (o->policy == LADE__CACHE_PLAN ? 0x504c414eull : 0); /* never a FIFO job's segment */
  snprintf(s->dir, sizeof s->dir, "%s", o->node_dir);
  /* the user too: two users' jobs never meet under one name */
  uint64_t jk = lade_checksum(o->node_job, strlen(o->node_job), SUM_SEED) ^ lade__mix64((uint64_t)geteuid() + 1);
  if (snprintf(s->path, sizeof s->path, "%s/lade-%016" PRIx64 "-%016" PRIx64, o->node_dir, jk, digest) >=
      (int)sizeof s->path) {
    rc = lade__fail(LADE_EINVAL, "shm_dir '%s': path too long", o->node_dir);
    goto fail;
  }
  struct stat dst;
  if (stat(s->dir, &dst) != 0 || !S_ISDIR(dst.st_mode)) {
    rc = lade__fail(LADE_EIO, "node cache: shm_dir %s: %s", s->dir, errno ? strerror(errno) : "not a folder");
    goto fail;
  }
  remove_stale(s->dir, &s->stale_removed);
  double t_end = lade__now() + o->node_timeout_ms / 1000.0;
  for (;;) {
    s->fd = open(s->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (s->fd >= 0) {
      rc = create_seg(s, o, digest);
      if (rc) {
        unlink_same(s->path, s->fd);
        goto fail;
      }
      if ((rc = attach_self(s)) != 0) goto fail;
      atomic_store_explicit(&s->h->state, SEG_READY, memory_order_release);
      break;
    }
    if (errno != EEXIST) {
      rc = lade__fail(LADE_EIO, "node cache %s: cannot create: %s", s->path, strerror(errno));
      goto fail;
    }
    s->fd = open(s->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (s->fd < 0 && errno == ENOENT) continue;
    if (s->fd < 0) {
      rc = lade__fail(LADE_EIO, "node cache %s: cannot open: %s", s->path, strerror(errno));
      goto fail;
    }
    rc = join_seg(s, digest, o->node_timeout_ms);
    if (rc == 0 && (rc = attach_self(s)) == 0) {
      struct stat a, b; /* still the one under that name (a remover may have judged it stale meanwhile) */
      if (fstat(s->fd, &a) == 0 && stat(s->path, &b) == 0 && a.st_ino == b.st_ino) break;
      detach(s);
      rc = LADE_ENOENT;
    }
    if (rc != LADE_ENOENT) goto fail;
    /* a dead creator's or a removed segment: take it away and start over */
    if (s->h) munmap(s->h, s->map_bytes), s->h = NULL;
    if (seg_stale(s->fd)) unlink_same(s->path, s->fd);
    close(s->fd);
    s->fd = -1;
    if (lade__now() > t_end) {
      rc = lade__fail(LADE_ETIMEOUT, "node cache %s: could not be opened within peer_timeout_ms (%u ms)", s->path,
                      o->node_timeout_ms);
      goto fail;
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  *out = &s->base;
  return 0;
fail:
  shm_close(&s->base);
  return rc;
}
