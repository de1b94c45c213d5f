/* tar_bind.c - the rest of a remote shard's sidecar binding (tar_bind.h). */
#include "source/tar_bind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

#define ST(b, i, v) __atomic_store_n(&(b)->state[i], (v), __ATOMIC_RELEASE)

const char *lade__tar_framing(const lade__tar_t *t) { return t->fmt->names ? "member headers" : "records' framing"; }

int lade__tar_bind_open(lade__tar_bind_t *b, lade__tar_t *t, const lade__tar_bind_ops_t *ops) {
  size_t ns = t->shards.n ? t->shards.n : 1;
  b->t = t;
  b->ops = *ops;
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  if (!(b->state = calloc(ns, sizeof *b->state)) || !(b->rest = calloc(ns, sizeof *b->rest)) ||
      !(b->pend = calloc(ns, sizeof *b->pend)))
    return lade__fail(LADE_ENOMEM, "tar source: out of memory");
  return 0;
}

void lade__tar_bind_close(lade__tar_bind_t *b) {
  if (!b->t) return; /* never opened */
  for (size_t i = 0; b->pend && i < b->t->shards.n; i++) {
    if (!b->pend[i]) continue;
    if (b->pend[i]->keep) unlink(b->pend[i]->keep); /* never found whole: not a later open's */
    free(b->pend[i]->keep);
    free(b->pend[i]->msg);
    free(b->pend[i]);
  }
  free(b->pend);
  free(b->state);
  free(b->rest);
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
}

int lade__tar_bind_keep(lade__tar_bind_t *b, size_t i, const lade__tar_index_t *x, const lade__tar_reads_t *r,
                        size_t nb, uint32_t now) {
  size_t bytes = 0;
  for (size_t q = 0; q < nb; q++) bytes += now >> q & 1 ? r->got[q].len : 0;
  lade__tar_pend_t *p = calloc(1, sizeof *p + bytes);
  if (!p) return lade__fail(LADE_ENOMEM, "%s: out of memory", lade__tar_strs_at(&b->t->shards, i));
  p->n = x->n;
  p->bind = x->bind;
  for (size_t j = 0; j < LADE__MIN(x->n, (size_t)LADE__TAR_BIND_ENTRIES); j++)
    p->e[j] = x->m[lade__tar_bind_at(x->n, j)];
  p->nr = (uint32_t)nb;
  for (size_t q = 0, at = 0; q < nb; q++) {
    p->off[q] = r->off[q];
    p->len[q] = (uint32_t)r->len[q];
    if (!(now >> q & 1)) continue;
    p->got[q] = (uint32_t)r->got[q].len;
    if (p->got[q]) memcpy(p->bytes + at, r->got[q].data, p->got[q]);
    at += p->got[q];
  }
  b->pend[i] = p;
  b->rest[i] = ~now & (uint32_t)((1ull << nb) - 1);
  ST(b, i, LADE__BIND_PENDING);
  __atomic_fetch_add(&b->pending, 1, __ATOMIC_RELAXED);
  return 0;
}

/* Sends the rest of shard si's binding (PENDING, mu held). */
static int ask_rest(lade__tar_bind_t *b, size_t si) {
  const lade__tar_pend_t *p = b->pend[si];
  lade__tar_reads_t r;
  memset(&r, 0, sizeof r);
  r.n = p->nr;
  for (size_t q = 0; q < p->nr; q++) r.off[q] = p->off[q], r.len[q] = p->len[q];
  int rc = b->ops.ask(b->t, si, &r, b->rest[si]);
  if (!rc) ST(b, si, LADE__BIND_ASKED);
  return rc;
}

/* Takes the rest's reads of shard si (CHECKING: this thread alone) and runs
 * bind() over all of them, the first and last entries' bytes kept from
 * open: 0 when it is the sidecar's, 1 when it differs, or an error fetching
 * them. */
static int check_rest(lade__tar_bind_t *b, size_t si) {
  const lade__tar_pend_t *p = b->pend[si];
  lade__tar_t *t = b->t;
  lade__tar_reads_t r;
  memset(&r, 0, sizeof r);
  r.n = p->nr;
  int rc = 0;
  for (size_t q = 0, at = 0; q < p->nr && !rc; q++) {
    r.off[q] = p->off[q], r.len[q] = p->len[q];
    if (b->rest[si] >> q & 1) continue;
    r.have |= 1u << q;
    rc = lade__buf_reserve(&r.got[q], p->got[q] ? p->got[q] : 1);
    if (!rc && p->got[q]) memcpy(r.got[q].data, p->bytes + at, p->got[q]);
    r.got[q].len = p->got[q];
    at += p->got[q];
  }
  if (!rc) rc = b->ops.take(t, si, &r, b->rest[si]);
  /* bind() over an index holding only the sampled entries: all it reads */
  lade__tar_index_t x = {.n = p->n, .cap = p->n, .bind = p->bind};
  if (!rc && !(x.m = calloc(p->n, sizeof *x.m))) rc = lade__fail(LADE_ENOMEM, "tar source: out of memory");
  for (size_t j = 0; !rc && j < LADE__MIN(p->n, (uint64_t)LADE__TAR_BIND_ENTRIES); j++)
    x.m[lade__tar_bind_at(p->n, j)] = p->e[j];
  if (!rc) rc = t->fmt->bind(t, &x, lade__tar_reads_served, &r) == p->bind ? 0 : 1;
  free(x.m);
  lade__tar_reads_free(&r);
  return rc;
}

/* The verdict on shard si's binding (mu held): BOUND (the index kept in
 * index_dir becomes the shard's: renamed from its pending name), FAILED
 * (kept for every read of it), or PENDING again after a failed fetch (the
 * next read asks again). */
static void settle(lade__tar_bind_t *b, size_t si, int rc) {
  const lade__tar_t *t = b->t;
  lade__tar_pend_t *p = b->pend[si];
  const char *shown = lade__tar_strs_at(&t->shards, si);
  if (rc < 0) {
    ST(b, si, LADE__BIND_PENDING);
  } else if (rc == 1) {
    char msg[LADE__PATH_MAX + 1024];
    const char *e = t->fmt->names ? "members" : "records";
    snprintf(msg, sizeof msg, "its sidecar index %s" LADE__TAR_SIDECAR_SUFFIX " is not the shard's: its sampled %s "
             "differ from the shard's (another shard's index, or the shard was rewritten after it: open checked the "
             "shard's size, its first and last sampled %s and its end, the other sampled %s at this first read); "
             "none of its samples is served: delete the sidecar, or run `lade index` on the shard again and put the "
             "new sidecar beside it, then reopen", shown, lade__tar_framing(t), e, e);
    p->msg = lade__strdup(msg);
    if (p->keep) unlink(p->keep);
    free(p->keep);
    p->keep = NULL;
    ST(b, si, LADE__BIND_FAILED);
  } else {
    if (p->keep) {
      char to[LADE__PATH_MAX + 64];
      snprintf(to, sizeof to, "%.*s", (int)(strlen(p->keep) - strlen(LADE__BIND_PENDING_SUFFIX)), p->keep);
      if (rename(p->keep, to) != 0) unlink(p->keep);
    }
    free(p->keep);
    free(p);
    b->pend[si] = NULL;
    ST(b, si, LADE__BIND_BOUND);
  }
  pthread_cond_broadcast(&b->cv);
}

/* Whether pending shard si, taken from the node's listing, was found whole
 * meanwhile by the rank that made the listing: its index renamed from the
 * pending name to the final one, of this version (mu held). Then this rank
 * binds it with no request of its own. */
static int node_checked(lade__tar_bind_t *b, size_t si) {
  const lade__tar_pend_t *p = b->pend[si];
  char to[LADE__PATH_MAX + 64];
  if (!p || !p->node || !p->keep) return 0;
  snprintf(to, sizeof to, "%.*s", (int)(strlen(p->keep) - strlen(LADE__BIND_PENDING_SUFFIX)), p->keep);
  const char *hook = getenv("LADE_TEST_HOOK_PENDING_RENAMED"); /* that rank's first read, just now */
  if (hook && !strcmp(hook, "later")) rename(p->keep, to);
  lade__tar_index_t x = {0};
  int ok = lade__tar_index_load(b->t, &x, to, b->ops.version(b->t, si)) == 0 && x.n == p->n && x.bind == p->bind;
  lade__tar_index_free(&x);
  if (ok) settle(b, si, 0);
  return ok;
}

void lade__tar_bind_ask(lade__tar_bind_t *b, size_t si) {
  pthread_mutex_lock(&b->mu);
  if (lade__tar_bind_state(b, si) == LADE__BIND_PENDING && !node_checked(b, si) && ask_rest(b, si))
    lade__clear_error();
  pthread_mutex_unlock(&b->mu);
}

/* One thread fetches and checks the rest (the others wait for its verdict
 * on cv); a shard whose binding then differs fails every read, naming
 * shard, member and sidecar: its samples' offsets came from the sidecar, so
 * it cannot switch to others mid-run. */
int lade__tar_bind_check(lade__tar_bind_t *b, size_t si, const char *what, int *fetch) {
  *fetch = 0;
  if (lade__tar_bind_state(b, si) == LADE__BIND_BOUND) return 0;
  const char *shown = lade__tar_strs_at(&b->t->shards, si);
  pthread_mutex_lock(&b->mu);
  int st, rc = 0;
  while ((st = lade__tar_bind_state(b, si)) == LADE__BIND_CHECKING) pthread_cond_wait(&b->cv, &b->mu);
  if (st == LADE__BIND_FAILED)
    rc = lade__fail(LADE_EFORMAT, "%s: %s: %s", shown, what,
                    b->pend[si]->msg ? b->pend[si]->msg : "its sidecar index is not the shard's");
  if (st == LADE__BIND_PENDING && node_checked(b, si)) st = LADE__BIND_BOUND;
  if (st == LADE__BIND_PENDING) rc = ask_rest(b, si);
  if (!rc && st != LADE__BIND_BOUND && st != LADE__BIND_FAILED) ST(b, si, LADE__BIND_CHECKING);
  pthread_mutex_unlock(&b->mu);
  if (st == LADE__BIND_BOUND || st == LADE__BIND_FAILED) return rc;
  if (rc) {
    *fetch = 1;
    return rc;
  }
  rc = check_rest(b, si);
  *fetch = rc < 0;
  pthread_mutex_lock(&b->mu);
  settle(b, si, rc);
  const char *msg = rc == 1 ? b->pend[si]->msg : NULL;
  if (rc == 1) rc = lade__fail(LADE_EFORMAT, "%s: %s: %s", shown, what, msg ? msg : "its sidecar is not the shard's");
  pthread_mutex_unlock(&b->mu);
  return rc;
}
