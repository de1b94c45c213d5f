/*
 * planner.c - every plan behind one step-at-a-time interface (lade/plan.h).
 *
 * Each step starts from the `regular` global batch of (shuffle epoch, step),
 * so invariant 1 of DESIGN.md holds by construction: plans only decide which
 * learner trains on which sample of that batch and where it comes from.
 * Sources are decided against the caches at the start of the step (phase 1);
 * cache admissions and evictions are then applied in batch order (phase 2)
 * and reported as the net change of the step.
 *
 * Cache state: distcache, locality and solar keep caches disjoint (a sample
 * lives in at most one learner's cache), so one owner[] array of N entries is
 * the whole directory. regular+lru and regular+belady let every learner cache
 * what it loads, so they key a hash map by (learner, sample) into a node pool.
 * Farthest-next-use eviction uses lazy max-heaps (cachestate.h): for solar the
 * next use of a sample is its position in the next training epoch (remapping
 * keeps it on the learner that caches it); for regular+belady it is the next
 * epoch whose regular slice gives the sample to the same learner.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "cachestate.h"
#include "core/core.h"
#include "lade/plan.h"
#include "regular.h"

#define NONE UINT64_MAX
#define INF_KEY (UINT64_MAX - 1)

typedef struct node {
  uint64_t sample, key, prev, next, adm_serial, pend;
} node_t;

struct lade_plan {
  lade_plan_settings_t s;
  lade__plan_params_t rp;
  lade__regular_t *reg;
  uint64_t N, G, B, steps, used; /* used: positions of an epoch trained (steps * G) */
  uint32_t p;
  uint64_t epoch, step, serial;  /* the next step to compute */
  uint64_t *order;
  lade_plan_step_t view;

  uint64_t *gb, *samples, *off;
  int32_t *from, *holder;
  uint64_t *cnt, *kept, *quota, *room;
  /* admit/evict events of the step: (learner, sample), netted and sorted into lists */
  uint32_t *ev_l;
  uint64_t *ev_s;
  int8_t *ev_t;
  uint64_t nev, evcap;
  uint64_t *admit, *admit_off, *evict, *evict_off;
  lade_plan_transfer_t *tr;
  int64_t *imb;
  uint64_t *sur, *sur_l, *sur_off, *sur_tmp;

  /* disjoint caches */
  int32_t *owner;
  uint64_t *ucount; /* cache occupancy per learner */
  uint64_t *key, *adm_serial, *pend;
  uint32_t *inv_next;
  uint64_t inv_next_epoch; /* training epoch whose successor's inverse is in inv_next (NONE: none) */
  uint64_t *perm_tmp;
  lade__kheap_t *heaps;

  /* overlapping caches */
  lade__hmap_t map;
  node_t *nodes;
  uint64_t nnodes, nodecap, freelist;
  uint64_t *head, *tail;
  uint32_t *inv_all; /* regular+belady: inverse permutations of every epoch */

  /* coalesced reads */
  uint64_t *rd_start, *rd_count, *rd_off, *rd_tmp;
};

static const char *const kind_names[LADE_PLAN_KIND_COUNT] = {"regular", "regular+lru", "regular+belady",
                                                              "distcache", "locality", "solar"};

void lade_plan_settings_default(lade_plan_settings_t *s) {
  memset(s, 0, sizeof *s);
  s->kind = LADE_PLAN_REGULAR;
  s->epochs = 1;
  s->drop_last = 1;
  s->balance_peer = 1;
  s->reorder = 1;
  s->order_algo = LADE_ORDER_AUTO;
  s->coalesce = 1;
}

const char *lade_plan_kind_name(int kind) {
  return kind >= 0 && kind < LADE_PLAN_KIND_COUNT ? kind_names[kind] : "unknown";
}

int lade_plan_kind_parse(const char *name) {
  for (int k = 0; k < LADE_PLAN_KIND_COUNT; k++)
    if (name && !strcmp(name, kind_names[k])) return k;
  return lade__fail(LADE_EINVAL,
                    "plan: unknown plan '%s' (known: regular, regular+lru, regular+belady, distcache, locality, solar)",
                    name ? name : "(null)");
}

static int check_settings(lade_plan_settings_t *s) {
  if (s->kind < 0 || s->kind >= LADE_PLAN_KIND_COUNT) return lade__fail(LADE_EINVAL, "plan: unknown plan kind %d", s->kind);
  if (s->learners == 0) return lade__fail(LADE_EINVAL, "plan: zero learners");
  if (s->samples == 0) return lade__fail(LADE_EEMPTY, "plan: the dataset has no samples");
  if (s->batch_size == 0) return lade__fail(LADE_EINVAL, "plan: the local batch size is 0");
  if (s->epochs == 0) return lade__fail(LADE_EINVAL, "plan: zero epochs");
  if (s->batch_size > s->samples)
    return lade__fail(LADE_EINVAL, "plan: the local batch (%u samples) is larger than the dataset (%llu samples)",
                      s->batch_size, (unsigned long long)s->samples);
  if (s->cache_bytes) {
    if (!s->sample_bytes) return lade__fail(LADE_EINVAL, "plan: cache_bytes is set but sample_bytes is 0");
    s->cache = s->cache_bytes / s->sample_bytes;
  }
  if (s->cache > s->samples)
    return lade__fail(LADE_EINVAL, "plan: the cache (%llu samples per learner) is larger than the dataset (%llu samples)",
                      (unsigned long long)s->cache, (unsigned long long)s->samples);
  if (s->samples >= (1ull << 32) || s->learners >= (1u << 24))
    return lade__fail(LADE_ERANGE, "plan: at most 2^32-1 samples and 2^24-1 learners are supported");
  if (s->kind != LADE_PLAN_SOLAR) s->reorder = 0;
  return 0;
}

#define ALLOC(ptr, n)                                                                       \
  do {                                                                                      \
    size_t n_ = (size_t)(n);                                                                \
    (ptr) = calloc(n_ ? n_ : 1, sizeof *(ptr));                                             \
    if (!(ptr)) {                                                                           \
      lade_plan_destroy(pl);                                                                \
      return lade__fail(LADE_ENOMEM, "plan: out of memory (%s, %llu entries)", #ptr,        \
                        (unsigned long long)(n));                                           \
    }                                                                                       \
  } while (0)

static void reset_state(lade_plan_t *pl) {
  pl->epoch = pl->step = pl->serial = 0;
  if (pl->owner) memset(pl->owner, 0xff, pl->N * sizeof *pl->owner);
  if (pl->ucount) memset(pl->ucount, 0, pl->p * sizeof *pl->ucount);
  if (pl->adm_serial) memset(pl->adm_serial, 0xff, pl->N * sizeof *pl->adm_serial);
  if (pl->heaps)
    for (uint32_t r = 0; r < pl->p; r++) pl->heaps[r].n = 0;
  pl->inv_next_epoch = NONE;
  lade__hmap_clear(&pl->map);
  pl->nnodes = 0;
  pl->freelist = NONE;
  if (pl->head) {
    memset(pl->head, 0xff, pl->p * sizeof *pl->head);
    memset(pl->tail, 0xff, pl->p * sizeof *pl->tail);
  }
}

int lade_plan_create(lade_plan_t **out, const lade_plan_settings_t *in) {
  lade_plan_settings_t s = *in;
  int rc = check_settings(&s);
  if (rc) return rc;
  lade_plan_t *pl = calloc(1, sizeof *pl);
  if (!pl) return lade__fail(LADE_ENOMEM, "plan: out of memory");
  pl->s = s;
  pl->rp.samples = s.samples;
  pl->rp.batch_size = s.batch_size;
  pl->rp.world_size = s.learners;
  pl->rp.epochs = s.epochs;
  pl->rp.seed = s.seed;
  pl->rp.shuffle = true;
  pl->rp.drop_last = s.drop_last != 0;
  rc = lade__plan_check(&pl->rp); /* the simulator needs at least one step */
  if (!rc) rc = lade__regular_create(&pl->reg, &pl->rp);
  if (rc) {
    free(pl);
    return rc;
  }
  pl->N = s.samples;
  pl->p = s.learners;
  pl->B = s.batch_size;
  pl->G = (uint64_t)s.batch_size * s.learners;
  pl->steps = lade__plan_steps(&pl->rp);
  pl->used = pl->steps * pl->G;
  uint64_t G = pl->G, p = pl->p, N = pl->N;
  ALLOC(pl->order, s.epochs);
  for (uint64_t e = 0; e < s.epochs; e++) pl->order[e] = e;
  ALLOC(pl->gb, G);
  ALLOC(pl->samples, G);
  ALLOC(pl->from, G);
  ALLOC(pl->holder, G);
  ALLOC(pl->off, p + 1);
  ALLOC(pl->cnt, p);
  ALLOC(pl->kept, p);
  ALLOC(pl->quota, p);
  ALLOC(pl->room, p);
  pl->evcap = 3 * G + 16;
  ALLOC(pl->ev_l, pl->evcap);
  ALLOC(pl->ev_s, pl->evcap);
  ALLOC(pl->ev_t, pl->evcap);
  ALLOC(pl->admit, pl->evcap);
  ALLOC(pl->evict, pl->evcap);
  ALLOC(pl->admit_off, p + 1);
  ALLOC(pl->evict_off, p + 1);
  ALLOC(pl->tr, p);
  ALLOC(pl->imb, p);
  int k = s.kind;
  if (k == LADE_PLAN_LOCALITY) {
    ALLOC(pl->sur, G);
    ALLOC(pl->sur_l, G);
    ALLOC(pl->sur_tmp, G);
    ALLOC(pl->sur_off, p + 1);
  }
  ALLOC(pl->ucount, p);
  if (k == LADE_PLAN_DISTCACHE || k == LADE_PLAN_LOCALITY || k == LADE_PLAN_SOLAR) ALLOC(pl->owner, N);
  if (k == LADE_PLAN_SOLAR) {
    ALLOC(pl->key, N);
    ALLOC(pl->adm_serial, N);
    ALLOC(pl->pend, N);
    ALLOC(pl->inv_next, N);
    ALLOC(pl->perm_tmp, N);
    ALLOC(pl->heaps, p);
    if (s.coalesce) {
      ALLOC(pl->rd_start, G);
      ALLOC(pl->rd_count, G);
      ALLOC(pl->rd_tmp, G);
      ALLOC(pl->rd_off, p + 1);
    }
    if (s.reorder && s.epochs > 1) {
      uint64_t *cost;
      ALLOC(cost, s.epochs * s.epochs);
      uint64_t buf = LADE_MIN(N, s.cache * p);
      rc = lade_plan_order_costs(&s, buf, cost);
      if (!rc) rc = lade_plan_order_solve(cost, s.epochs, s.order_algo, s.seed, pl->order, NULL);
      free(cost);
      if (rc) {
        lade_plan_destroy(pl);
        return rc;
      }
    }
  }
  if (k == LADE_PLAN_REGULAR_LRU || k == LADE_PLAN_REGULAR_BELADY) {
    rc = lade__hmap_init(&pl->map, LADE_MIN(s.cache * p, 1u << 20) + 16);
    if (rc) {
      lade_plan_destroy(pl);
      return rc;
    }
    ALLOC(pl->head, p);
    ALLOC(pl->tail, p);
  }
  if (k == LADE_PLAN_REGULAR_BELADY) {
    ALLOC(pl->heaps, p);
    ALLOC(pl->inv_all, s.epochs * N);
    ALLOC(pl->perm_tmp, N);
    for (uint64_t e = 0; e < s.epochs; e++) {
      lade__shuffle_epoch(&pl->rp, e, pl->perm_tmp);
      for (uint64_t i = 0; i < N; i++) pl->inv_all[e * N + pl->perm_tmp[i]] = (uint32_t)i;
    }
  }
  reset_state(pl);
  *out = pl;
  return 0;
}

void lade_plan_destroy(lade_plan_t *pl) {
  if (!pl) return;
  lade__regular_destroy(pl->reg);
  void *bufs[] = {pl->order, pl->gb, pl->samples, pl->off, pl->from, pl->holder, pl->cnt, pl->kept, pl->quota,
                  pl->room, pl->ev_l, pl->ev_s, pl->ev_t, pl->admit, pl->admit_off, pl->evict, pl->evict_off,
                  pl->tr, pl->imb, pl->sur, pl->sur_l, pl->sur_off, pl->sur_tmp, pl->owner, pl->ucount, pl->key,
                  pl->adm_serial, pl->pend, pl->inv_next, pl->perm_tmp, pl->nodes, pl->head, pl->tail,
                  pl->inv_all, pl->rd_start, pl->rd_count, pl->rd_off, pl->rd_tmp};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
  if (pl->heaps) {
    for (uint32_t r = 0; r < pl->p; r++) lade__kheap_free(&pl->heaps[r]);
    free(pl->heaps);
  }
  lade__hmap_free(&pl->map);
  free(pl);
}

const lade_plan_settings_t *lade_plan_settings(const lade_plan_t *pl) { return &pl->s; }
uint64_t lade_plan_steps_per_epoch(const lade_plan_t *pl) { return pl->steps; }
const uint64_t *lade_plan_epoch_order(const lade_plan_t *pl) { return pl->order; }

/* ---------------------------------------------------------------- events */

/* Records an admit (+1) or evict (-1) of sample s by learner r; returns its index. */
static uint64_t event(lade_plan_t *pl, uint32_t r, uint64_t s, int t) {
  assert(pl->nev < pl->evcap);
  pl->ev_l[pl->nev] = r;
  pl->ev_s[pl->nev] = s;
  pl->ev_t[pl->nev] = (int8_t)t;
  return pl->nev++;
}

/* Groups the surviving events by learner (stable counting sort). */
static void finish_events(lade_plan_t *pl) {
  uint32_t p = pl->p;
  memset(pl->admit_off, 0, (p + 1) * sizeof *pl->admit_off);
  memset(pl->evict_off, 0, (p + 1) * sizeof *pl->evict_off);
  for (uint64_t i = 0; i < pl->nev; i++) {
    if (pl->ev_t[i] > 0) pl->admit_off[pl->ev_l[i] + 1]++;
    if (pl->ev_t[i] < 0) pl->evict_off[pl->ev_l[i] + 1]++;
  }
  for (uint32_t r = 0; r < p; r++) {
    pl->admit_off[r + 1] += pl->admit_off[r];
    pl->evict_off[r + 1] += pl->evict_off[r];
  }
  /* use quota/room as write cursors */
  for (uint32_t r = 0; r < p; r++) {
    pl->quota[r] = pl->admit_off[r];
    pl->room[r] = pl->evict_off[r];
  }
  for (uint64_t i = 0; i < pl->nev; i++) {
    if (pl->ev_t[i] > 0) pl->admit[pl->quota[pl->ev_l[i]]++] = pl->ev_s[i];
    if (pl->ev_t[i] < 0) pl->evict[pl->room[pl->ev_l[i]]++] = pl->ev_s[i];
  }
}

/* ---------------------------------------------------------------- overlapping caches (regular+lru/belady) */

static uint64_t mkey(uint32_t r, uint64_t s) { return ((uint64_t)r << 40) | s; }

static int node_new(lade_plan_t *pl, uint64_t *out) {
  if (pl->freelist != NONE) {
    *out = pl->freelist;
    pl->freelist = pl->nodes[*out].next;
    return 0;
  }
  if (pl->nnodes == pl->nodecap) {
    uint64_t nc = pl->nodecap ? pl->nodecap * 2 : 1024;
    node_t *nn = realloc(pl->nodes, nc * sizeof *nn);
    if (!nn) return lade__fail(LADE_ENOMEM, "plan: out of memory for %llu cache entries", (unsigned long long)nc);
    pl->nodes = nn;
    pl->nodecap = nc;
  }
  *out = pl->nnodes++;
  return 0;
}

static void lru_unlink(lade_plan_t *pl, uint32_t r, uint64_t n) {
  node_t *x = &pl->nodes[n];
  if (x->prev != NONE) pl->nodes[x->prev].next = x->next; else pl->head[r] = x->next;
  if (x->next != NONE) pl->nodes[x->next].prev = x->prev; else pl->tail[r] = x->prev;
}

static void lru_push_front(lade_plan_t *pl, uint32_t r, uint64_t n) {
  node_t *x = &pl->nodes[n];
  x->prev = NONE;
  x->next = pl->head[r];
  if (pl->head[r] != NONE) pl->nodes[pl->head[r]].prev = n; else pl->tail[r] = n;
  pl->head[r] = n;
}

/* Removes node n of learner r: an evict event, or cancels its admit of this step. */
static void drop_node(lade_plan_t *pl, uint32_t r, uint64_t n) {
  node_t *x = &pl->nodes[n];
  if (x->adm_serial == pl->serial) pl->ev_t[x->pend] = 0;
  else event(pl, r, x->sample, -1);
  lade__hmap_del(&pl->map, mkey(r, x->sample));
  pl->ucount[r]--;
  x->sample = NONE;
  x->next = pl->freelist;
  pl->freelist = n;
}

static int add_node(lade_plan_t *pl, uint32_t r, uint64_t s, uint64_t key, uint64_t *out) {
  uint64_t n = 0;
  int rc = node_new(pl, &n);
  if (rc) return rc;
  node_t *x = &pl->nodes[n];
  x->sample = s;
  x->key = key;
  x->adm_serial = pl->serial;
  x->pend = event(pl, r, s, +1);
  pl->ucount[r]++;
  *out = n;
  return lade__hmap_put(&pl->map, mkey(r, s), n);
}

/* Next epoch after e whose regular slice gives s to learner r, as a key (INF_KEY: never). */
static uint64_t belady_next(const lade_plan_t *pl, uint32_t r, uint64_t s, uint64_t e) {
  for (uint64_t f = e + 1; f < pl->s.epochs; f++) {
    uint64_t pos = pl->inv_all[f * pl->N + s];
    for (; pos < pl->used; pos += pl->N)
      if ((pos % pl->G) / pl->B == r) return f * pl->used + pos;
  }
  return INF_KEY;
}

static int step_regular_cached(lade_plan_t *pl) {
  int lru = pl->s.kind == LADE_PLAN_REGULAR_LRU;
  uint64_t C = pl->s.cache, v;
  for (uint64_t i = 0; i < pl->G; i++) {
    uint32_t r = (uint32_t)(i / pl->B);
    pl->from[i] = lade__hmap_get(&pl->map, mkey(r, pl->samples[i]), &v) ? LADE_FROM_CACHE : LADE_FROM_STORAGE;
  }
  if (!C) return 0;
  for (uint64_t i = 0; i < pl->G; i++) {
    uint32_t r = (uint32_t)(i / pl->B);
    uint64_t s = pl->samples[i], n = 0;
    int have = lade__hmap_get(&pl->map, mkey(r, s), &n);
    if (lru) {
      if (have) {
        lru_unlink(pl, r, n);
        lru_push_front(pl, r, n);
        continue;
      }
      if (pl->ucount[r] == C) {
        uint64_t t = pl->tail[r];
        lru_unlink(pl, r, t);
        drop_node(pl, r, t);
      }
      int rc = add_node(pl, r, s, 0, &n);
      if (rc) return rc;
      lru_push_front(pl, r, n);
      continue;
    }
    /* Belady */
    uint64_t nk = belady_next(pl, r, s, pl->epoch);
    lade__kheap_t *h = &pl->heaps[r];
    if (have) {
      if (nk == INF_KEY) {
        drop_node(pl, r, n);
        continue;
      }
      pl->nodes[n].key = nk;
      int rc = lade__kheap_push(h, nk, n);
      if (rc) return rc;
      continue;
    }
    if (nk == INF_KEY) continue;
    if (pl->ucount[r] == C) {
      /* find the live entry with the farthest next use */
      while (h->n) {
        uint64_t hn = h->val[0];
        node_t *x = &pl->nodes[hn];
        if (x->sample != NONE && x->key == h->key[0]) break;
        lade__kheap_pop(h);
      }
      assert(h->n);
      if (h->key[0] <= nk) continue; /* bypass: everything cached is needed sooner */
      uint64_t victim = h->val[0];
      lade__kheap_pop(h);
      drop_node(pl, r, victim);
    }
    int rc = add_node(pl, r, s, nk, &n);
    if (!rc) rc = lade__kheap_push(h, nk, n);
    if (rc) return rc;
    if (h->n > 2 * pl->ucount[r] + 64) {
      uint64_t w = 0;
      for (uint64_t j = 0; j < h->n; j++) {
        node_t *x = &pl->nodes[h->val[j]];
        if (x->sample != NONE && x->key == h->key[j]) {
          h->key[w] = h->key[j];
          h->val[w++] = h->val[j];
        }
      }
      h->n = w;
      lade__kheap_heapify(h);
    }
  }
  return 0;
}

/* ---------------------------------------------------------------- disjoint caches */

static void own(lade_plan_t *pl, uint32_t r, uint64_t s) {
  pl->owner[s] = (int32_t)r;
  pl->ucount[r]++;
  uint64_t ev = event(pl, r, s, +1);
  if (pl->adm_serial) {
    pl->adm_serial[s] = pl->serial;
    pl->pend[s] = ev;
  }
}

static void disown(lade_plan_t *pl, uint64_t s) {
  uint32_t r = (uint32_t)pl->owner[s];
  assert(pl->owner[s] >= 0);
  if (pl->adm_serial && pl->adm_serial[s] == pl->serial) pl->ev_t[pl->pend[s]] = 0;
  else event(pl, r, s, -1);
  pl->owner[s] = -1;
  pl->ucount[r]--;
}

static void step_distcache(lade_plan_t *pl) {
  for (uint64_t i = 0; i < pl->G; i++) {
    uint32_t r = (uint32_t)(i / pl->B);
    int32_t o = pl->owner[pl->samples[i]];
    pl->from[i] = o < 0 ? LADE_FROM_STORAGE : (uint32_t)o == r ? LADE_FROM_CACHE : o;
  }
  for (uint64_t i = 0; i < pl->G; i++) {
    uint32_t r = (uint32_t)(i / pl->B);
    uint64_t s = pl->samples[i];
    if (pl->owner[s] < 0 && pl->ucount[r] < pl->s.cache) own(pl, r, s);
  }
}

/* Cached samples of the batch per learner (holder[i] = owner or -1) and the deficit sum. */
static uint64_t count_holders(lade_plan_t *pl) {
  memset(pl->cnt, 0, pl->p * sizeof *pl->cnt);
  for (uint64_t i = 0; i < pl->G; i++) {
    int32_t o = pl->owner[pl->gb[i]];
    pl->holder[i] = o;
    if (o >= 0) pl->cnt[o]++;
  }
  uint64_t d = 0;
  for (uint32_t r = 0; r < pl->p; r++)
    if (pl->cnt[r] < pl->B) d += pl->B - pl->cnt[r];
  return d;
}

static int step_locality(lade_plan_t *pl) {
  uint32_t p = pl->p;
  uint64_t B = pl->B, G = pl->G;
  pl->view.deficit = count_holders(pl);
  for (uint32_t r = 0; r <= p; r++) pl->off[r] = (uint64_t)r * B;
  memset(pl->kept, 0, p * sizeof *pl->kept);
  memset(pl->sur_off, 0, (p + 1) * sizeof *pl->sur_off);
  uint64_t nsur = 0, nmiss = 0;
  /* 1. every learner trains on its cached samples, up to its share */
  for (uint64_t i = 0; i < G; i++) {
    int32_t o = pl->holder[i];
    if (o >= 0 && pl->kept[o] < B) {
      uint64_t at = pl->off[o] + pl->kept[o]++;
      pl->samples[at] = pl->gb[i];
      pl->from[at] = LADE_FROM_CACHE;
    } else if (o >= 0) {
      pl->sur[nsur] = pl->gb[i];
      pl->sur_l[nsur++] = (uint64_t)o;
      pl->sur_off[o + 1]++;
    } else {
      pl->sur_tmp[nmiss++] = pl->gb[i];
    }
  }
  /* 2. uncached samples are read from storage by learners with a deficit,
   * first by those whose cache still has room (so the aggregate cache fills up) */
  uint64_t j = 0, C = pl->s.cache;
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t r = 0; r < p && j < nmiss; r++) {
      uint64_t take = B - pl->kept[r];
      if (pass == 0) take = LADE_MIN(take, pl->ucount[r] < C ? C - pl->ucount[r] : 0);
      for (; take > 0 && j < nmiss; take--, j++) {
        uint64_t at = pl->off[r] + pl->kept[r]++;
        pl->samples[at] = pl->sur_tmp[j];
        pl->from[at] = LADE_FROM_STORAGE;
      }
    }
  assert(j == nmiss);
  /* 3. Algorithm 1 moves the surplus to the remaining deficits */
  for (uint32_t q = 0; q < p; q++) {
    pl->imb[q] = (int64_t)pl->cnt[q] > (int64_t)B ? (int64_t)(pl->cnt[q] - B) : -(int64_t)(B - pl->kept[q]);
    pl->sur_off[q + 1] += pl->sur_off[q];
  }
  int rc = lade_plan_balance(p, pl->imb, pl->tr, &pl->view.transfers);
  if (rc) return rc;
  /* surplus samples grouped by holder, in batch order */
  for (uint32_t q = 0; q < p; q++) pl->quota[q] = pl->sur_off[q];
  for (uint64_t j = 0; j < nsur; j++) pl->sur_tmp[pl->quota[pl->sur_l[j]]++] = pl->sur[j];
  for (uint32_t q = 0; q < p; q++) pl->quota[q] = pl->sur_off[q];
  for (uint64_t t = 0; t < pl->view.transfers; t++) {
    lade_plan_transfer_t *x = &pl->tr[t];
    for (uint64_t c = 0; c < x->count; c++) {
      uint64_t at = pl->off[x->dst] + pl->kept[x->dst]++;
      assert(pl->quota[x->src] < pl->sur_off[x->src + 1]);
      pl->samples[at] = pl->sur_tmp[pl->quota[x->src]++];
      pl->from[at] = pl->s.balance_peer ? (int32_t)x->src : LADE_FROM_STORAGE;
    }
  }
  for (uint32_t q = 0; q < p; q++) assert(pl->kept[q] == B);
  /* phase 2: populate caches with what was read from storage (no replacement) */
  for (uint32_t q = 0; q < p; q++)
    for (uint64_t i = pl->off[q]; i < pl->off[q + 1]; i++) {
      uint64_t s = pl->samples[i];
      if (pl->from[i] == LADE_FROM_STORAGE && pl->owner[s] < 0 && pl->ucount[q] < pl->s.cache) own(pl, q, s);
    }
  return 0;
}

/* SOLAR load balancing: local batch sizes b_r in [lo, hi] summing to G that
 * minimise the largest storage load max(0, b_r - cached_r) (water filling). */
static void solar_quota(lade_plan_t *pl) {
  uint32_t p = pl->p;
  uint64_t B = pl->B, K = pl->s.imbalance;
  if (!K) {
    for (uint32_t r = 0; r < p; r++) pl->quota[r] = B;
    return;
  }
  uint64_t lo = B > K / 2 ? B - K / 2 : 0, hi = B + (K - K / 2);
  uint64_t a = 0, b = hi; /* smallest level L with sum clamp(cnt + L) >= G */
  while (a < b) {
    uint64_t L = (a + b) / 2, sum = 0;
    for (uint32_t r = 0; r < p; r++) sum += LADE_MAX(lo, LADE_MIN(hi, pl->cnt[r] + L));
    if (sum >= pl->G) b = L; else a = L + 1;
  }
  uint64_t sum = 0;
  for (uint32_t r = 0; r < p; r++) {
    pl->quota[r] = LADE_MAX(lo, LADE_MIN(hi, pl->cnt[r] + a));
    sum += pl->quota[r];
  }
  /* trim the excess: first learners exactly at the level (their load drops),
   * then round robin over any learner above lo (only when level 0 overshoots) */
  for (uint32_t r = 0; r < p && sum > pl->G && a > 0; r++)
    if (pl->quota[r] > lo && pl->quota[r] == pl->cnt[r] + a) {
      pl->quota[r]--;
      sum--;
    }
  while (sum > pl->G)
    for (uint32_t r = 0; r < p && sum > pl->G; r++)
      if (pl->quota[r] > lo) {
        pl->quota[r]--;
        sum--;
      }
  assert(sum == pl->G);
}

static void sort_u64(uint64_t *a, uint64_t n) {
  for (uint64_t i = 1; i < n; i++) {
    uint64_t x = a[i], j = i;
    while (j > 0 && a[j - 1] > x) {
      a[j] = a[j - 1];
      j--;
    }
    a[j] = x;
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void coalesce(lade_plan_t *pl) {
  uint64_t nr = 0;
  pl->rd_off[0] = 0;
  for (uint32_t r = 0; r < pl->p; r++) {
    uint64_t n = 0;
    for (uint64_t i = pl->off[r]; i < pl->off[r + 1]; i++)
      if (pl->from[i] == LADE_FROM_STORAGE) pl->rd_tmp[n++] = pl->samples[i];
    if (n <= 64) sort_u64(pl->rd_tmp, n); else qsort(pl->rd_tmp, n, sizeof *pl->rd_tmp, cmp_u64);
    for (uint64_t i = 0; i < n; i++) {
      if (nr > pl->rd_off[r] && pl->rd_start[nr - 1] + pl->rd_count[nr - 1] == pl->rd_tmp[i]) {
        pl->rd_count[nr - 1]++;
      } else if (nr > pl->rd_off[r] && pl->rd_start[nr - 1] + pl->rd_count[nr - 1] > pl->rd_tmp[i]) {
        /* a duplicate (padding): already covered */
      } else {
        pl->rd_start[nr] = pl->rd_tmp[i];
        pl->rd_count[nr++] = 1;
      }
    }
    pl->rd_off[r + 1] = nr;
  }
}

static int solar_prepare_epoch(lade_plan_t *pl) {
  if (pl->inv_next_epoch == pl->epoch) return 0;
  pl->inv_next_epoch = pl->epoch;
  if (pl->epoch + 1 >= pl->s.epochs) return 0;
  lade__shuffle_epoch(&pl->rp, pl->order[pl->epoch + 1], pl->perm_tmp);
  for (uint64_t i = 0; i < pl->N; i++) pl->inv_next[pl->perm_tmp[i]] = (uint32_t)i;
  return 0;
}

static int solar_valid_top(lade_plan_t *pl, uint32_t r) {
  lade__kheap_t *h = &pl->heaps[r];
  while (h->n) {
    uint64_t s = h->val[0];
    if (pl->owner[s] == (int32_t)r && pl->key[s] == h->key[0]) return 1;
    lade__kheap_pop(h);
  }
  return 0;
}

static int step_solar(lade_plan_t *pl) {
  uint32_t p = pl->p;
  uint64_t G = pl->G;
  solar_prepare_epoch(pl);
  pl->view.deficit = count_holders(pl);
  solar_quota(pl);
  pl->off[0] = 0;
  for (uint32_t r = 0; r < p; r++) pl->off[r + 1] = pl->off[r] + pl->quota[r];
  memset(pl->kept, 0, p * sizeof *pl->kept);
  /* remapping: a cached sample goes to the learner that caches it */
  uint64_t npool = 0;
  for (uint64_t i = 0; i < G; i++) {
    int32_t o = pl->holder[i];
    if (o >= 0 && pl->kept[o] < pl->quota[o]) {
      uint64_t at = pl->off[o] + pl->kept[o]++;
      pl->samples[at] = pl->gb[i];
      pl->from[at] = LADE_FROM_CACHE;
    } else {
      pl->holder[npool++] = (int32_t)i; /* reuse holder[] as the pool of batch positions */
    }
  }
  uint32_t r = 0;
  for (uint64_t j = 0; j < npool; j++) {
    while (pl->kept[r] >= pl->quota[r]) r++;
    uint64_t at = pl->off[r] + pl->kept[r]++;
    pl->samples[at] = pl->gb[pl->holder[j]];
    pl->from[at] = LADE_FROM_STORAGE;
  }
  if (pl->s.coalesce) coalesce(pl);
  /* phase 2: farthest-next-use caching over the aggregate of disjoint caches */
  uint64_t C = pl->s.cache;
  int last = pl->epoch + 1 >= pl->s.epochs;
  for (uint32_t q = 0; q < p; q++) {
    lade__kheap_t *h = &pl->heaps[q];
    for (uint64_t i = pl->off[q]; i < pl->off[q + 1]; i++) {
      uint64_t s = pl->samples[i];
      uint64_t nk = last ? INF_KEY : (pl->epoch + 1) * pl->used + pl->inv_next[s];
      if (pl->owner[s] == (int32_t)q) { /* hit, or a duplicate just admitted */
        if (nk == INF_KEY) {
          disown(pl, s);
        } else if (pl->key[s] != nk) {
          pl->key[s] = nk;
          int rc = lade__kheap_push(h, nk, s);
          if (rc) return rc;
        }
        continue;
      }
      if (pl->owner[s] >= 0) disown(pl, s); /* moved: its holder had no room in its batch */
      if (nk == INF_KEY || !C) continue;
      if (pl->ucount[q] >= C) {
        if (!solar_valid_top(pl, q) || h->key[0] <= nk) continue;
        uint64_t victim = h->val[0];
        lade__kheap_pop(h);
        disown(pl, victim);
      }
      own(pl, q, s);
      pl->key[s] = nk;
      int rc = lade__kheap_push(h, nk, s);
      if (rc) return rc;
      if (h->n > 2 * pl->ucount[q] + 64) {
        uint64_t w = 0;
        for (uint64_t j = 0; j < h->n; j++) {
          uint64_t x = h->val[j];
          if (pl->owner[x] == (int32_t)q && pl->key[x] == h->key[j]) {
            h->key[w] = h->key[j];
            h->val[w++] = x;
          }
        }
        h->n = w;
        lade__kheap_heapify(h);
      }
    }
  }
  return 0;
}

/* ---------------------------------------------------------------- driver */

int lade_plan_next(lade_plan_t *pl, const lade_plan_step_t **out) {
  if (pl->epoch >= pl->s.epochs)
    return lade__fail(LADE_ERANGE, "plan: past the last step (%llu epochs of %llu steps)",
                      (unsigned long long)pl->s.epochs, (unsigned long long)pl->steps);
  uint64_t se = pl->order[pl->epoch];
  int rc = lade__regular_global(pl->reg, se, pl->step, pl->gb);
  if (rc) return rc;
  lade_plan_step_t *v = &pl->view;
  memset(v, 0, sizeof *v);
  v->epoch = pl->epoch;
  v->step = pl->step;
  v->shuffle_epoch = se;
  v->learners = pl->p;
  v->total = pl->G;
  pl->nev = 0;
  int k = pl->s.kind;
  if (k == LADE_PLAN_LOCALITY) {
    rc = step_locality(pl);
  } else if (k == LADE_PLAN_SOLAR) {
    rc = step_solar(pl);
  } else {
    for (uint32_t r = 0; r <= pl->p; r++) pl->off[r] = (uint64_t)r * pl->B;
    memcpy(pl->samples, pl->gb, pl->G * sizeof *pl->samples);
    if (k == LADE_PLAN_REGULAR) {
      for (uint64_t i = 0; i < pl->G; i++) pl->from[i] = LADE_FROM_STORAGE;
    } else if (k == LADE_PLAN_DISTCACHE) {
      step_distcache(pl);
    } else {
      rc = step_regular_cached(pl);
    }
  }
  if (rc) return rc;
  finish_events(pl);
  v->samples = pl->samples;
  v->from = pl->from;
  v->offset = pl->off;
  v->admit = pl->admit;
  v->admit_offset = pl->admit_off;
  v->evict = pl->evict;
  v->evict_offset = pl->evict_off;
  v->transfer = pl->tr;
  if (k == LADE_PLAN_SOLAR && pl->s.coalesce) {
    v->read_start = pl->rd_start;
    v->read_count = pl->rd_count;
    v->read_offset = pl->rd_off;
  }
  pl->serial++;
  if (++pl->step == pl->steps) {
    pl->step = 0;
    pl->epoch++;
  }
  *out = v;
  return 0;
}

int lade_plan_seek(lade_plan_t *pl, uint64_t epoch, uint64_t step) {
  if (epoch >= pl->s.epochs || step >= pl->steps)
    return lade__fail(LADE_ERANGE, "plan: cannot seek to (epoch %llu, step %llu): %llu epochs of %llu steps",
                      (unsigned long long)epoch, (unsigned long long)step, (unsigned long long)pl->s.epochs,
                      (unsigned long long)pl->steps);
  uint64_t target = epoch * pl->steps + step;
  if (pl->s.kind == LADE_PLAN_REGULAR) { /* stateless */
    pl->epoch = epoch;
    pl->step = step;
    pl->serial = target;
    return 0;
  }
  if (target < pl->serial) reset_state(pl);
  const lade_plan_step_t *v;
  while (pl->serial < target) {
    int rc = lade_plan_next(pl, &v);
    if (rc) return rc;
  }
  return 0;
}
