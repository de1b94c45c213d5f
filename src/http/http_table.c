/*
 * http_table.c - the results of submitted requests (http_impl.h), keyed by
 * sample index. Each index has a count of wants (parts submitted and not
 * yet read) and a list of arrived results in arrival order (a sample
 * wanted twice has two); all results are also on one list, oldest first,
 * so arrived-but-unread results stay within a count and a byte bound by
 * dropping the oldest together with their want (a later read() of it
 * fetches it again). read() takes a result and swaps its buffer with the
 * caller's: a whole-body sample is never copied. The table owns its
 * struct (http_impl.h); every function runs with the handle's mu held.
 */
#ifdef LADE_HAVE_CURL

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_impl.h"

int lade__http_table_init(lade__http_table_t *t, uint64_t n_idx, uint32_t conc, const char *what,
                          void (*name)(void *ctx, uint64_t obj, char *buf, size_t size), void *name_ctx) {
  t->what = what;
  t->name = name;
  t->name_ctx = name_ctx;
  t->n_idx = n_idx;
  t->wants = calloc(n_idx ? n_idx : 1, sizeof *t->wants);
  t->res = calloc(n_idx ? n_idx : 1, sizeof *t->res);
  if (!t->wants || !t->res) return lade__fail(LADE_ENOMEM, "%s: out of memory", what);
  t->max_count = 4 * (size_t)conc + 1024;
  t->max_bytes = (size_t)512 << 20;
  return 0;
}

void lade__http_table_free(lade__http_table_t *t) {
  for (lade__http_result_t *r = t->oldest, *n; r; r = n) {
    n = r->next;
    free(r->body.data);
    free(r->msg);
    free(r);
  }
  t->oldest = t->newest = NULL;
  t->count = t->bytes = 0;
  free(t->res);
  free(t->wants);
  t->res = NULL;
  t->wants = NULL;
  for (size_t i = 0; i < t->n_free_bufs; i++) free(t->free_bufs[i].data);
  t->n_free_bufs = 0;
}

bool lade__http_table_has(const lade__http_table_t *t, uint64_t idx) { return idx < t->n_idx; }

void lade__http_table_want(lade__http_table_t *t, uint64_t idx) { t->wants[idx]++; }

uint32_t lade__http_table_wants(const lade__http_table_t *t, uint64_t idx) { return t->wants[idx]; }

bool lade__http_table_ready(const lade__http_table_t *t, uint64_t idx) {
  return t->res[idx] != NULL || t->wants[idx] == 0;
}

void lade__http_table_reserve(lade__http_table_t *t, uint64_t results, uint64_t bytes) {
  if (results > t->max_count) t->max_count = (size_t)LADE__MIN(results, (uint64_t)SIZE_MAX / 2);
  if (bytes > t->max_bytes) t->max_bytes = (size_t)LADE__MIN(bytes, (uint64_t)SIZE_MAX / 2);
}

void lade__http_buf_recycle(lade__http_table_t *t, lade__buf_t *b) {
  if (b->data && t->n_free_bufs < sizeof t->free_bufs / sizeof t->free_bufs[0] && b->cap <= (8u << 20)) {
    b->len = 0;
    t->free_bufs[t->n_free_bufs++] = *b;
  } else {
    free(b->data);
  }
  memset(b, 0, sizeof *b);
}

void lade__http_buf_reuse(lade__http_table_t *t, lade__buf_t *b) {
  if (t->n_free_bufs) *b = t->free_bufs[--t->n_free_bufs];
}

static void result_unlink(lade__http_table_t *t, lade__http_result_t *r) {
  if (r->prev) r->prev->next = r->next;
  else t->oldest = r->next;
  if (r->next) r->next->prev = r->prev;
  else t->newest = r->prev;
  lade__http_result_t **pp = &t->res[r->idx];
  while (*pp != r) pp = &(*pp)->next_idx;
  *pp = r->next_idx;
  t->count--;
  t->bytes -= r->body.cap;
}

static void result_free(lade__http_table_t *t, lade__http_result_t *r) {
  lade__http_buf_recycle(t, &r->body);
  free(r->msg);
  free(r);
}

/* Stores the outcome of one part of a submitted request (locked): `body`
 * is taken (swapped out) when `take`, else the part's bytes are copied. */
static void result_store_part(lade__http_table_t *t, const lade__http_part_t *p, int rc, const char *msg, lade__buf_t *body,
                              int take) {
  lade__http_result_t *r = calloc(1, sizeof *r);
  if (r && msg) r->msg = lade__strdup(msg);
  int ok = r && (!msg || r->msg);
  if (ok && !rc && !take) {
    ok = lade__buf_reserve(&r->body, p->len ? p->len : 1) == 0;
    if (ok) {
      memcpy(r->body.data, body->data + p->off, p->len);
      r->body.len = p->len;
    } else {
      lade__clear_error();
    }
  }
  if (!ok) {
    /* no memory to keep it: drop the want, a read() refetches */
    if (r) free(r->body.data), free(r->msg);
    free(r);
    if (t->wants[p->idx]) t->wants[p->idx]--;
    return;
  }
  r->idx = p->idx;
  r->rc = rc;
  if (!rc && take) {
    r->body = *body;
    memset(body, 0, sizeof *body);
  }
  lade__http_result_t **pp = &t->res[r->idx];
  while (*pp) pp = &(*pp)->next_idx;
  *pp = r;
  r->prev = t->newest;
  if (t->newest) t->newest->next = r;
  else t->oldest = r;
  t->newest = r;
  t->count++;
  t->bytes += r->body.cap;
  /* bound: drop the oldest unread results with their wants */
  while (t->oldest && t->oldest != r &&
         (t->count > t->max_count || t->bytes > t->max_bytes)) {
    lade__http_result_t *old = t->oldest;
    result_unlink(t, old);
    if (t->wants[old->idx]) t->wants[old->idx]--;
    result_free(t, old);
  }
}

/* A body that is exactly its one part is handed on without a copy. */
void lade__http_result_store(lade__http_table_t *t, lade__http_req_t *q, int rc, const char *msg) {
  const lade__http_get_t *g = &q->get;
  for (uint32_t i = 0; i < g->nparts; i++) {
    lade__http_part_t p = g->parts[i];
    if (!rc && q->parts) { /* written per part as it arrived (scatter) */
      lade__http_part_t one = {p.idx, 0, p.len};
      if (q->parts[i].len == p.len && p.off + p.len <= q->body.len) {
        result_store_part(t, &one, 0, NULL, &q->parts[i], 1);
        continue;
      }
    }
    int whole = !q->parts && (p.len == UINT64_MAX || (p.off == 0 && p.len == q->body.len));
    if (!rc && whole) p.off = 0, p.len = q->body.len;
    if (!rc && !whole && (q->parts || p.off > q->body.len || p.len > q->body.len - p.off)) {
      char name[1536], m[LADE__HTTP_MSG];
      t->name(t->name_ctx, q->get.obj, name, sizeof name);
      snprintf(m, sizeof m, "%s: sample %llu at bytes %llu..%llu is past the %zu-byte reply", name,
               (unsigned long long)p.idx, (unsigned long long)p.off, (unsigned long long)(p.off + p.len),
               q->body.len);
      result_store_part(t, &p, LADE_EFORMAT, m, &q->body, 0);
      continue;
    }
    result_store_part(t, &p, rc, msg, &q->body, !rc && whole && g->nparts == 1);
  }
  lade__http_buf_recycle(t, &q->body);
}

void lade__http_hand_over(lade__http_table_t *t, lade__buf_t *b, lade__buf_t *out) {
  lade__buf_t old = *out;
  size_t len = b->len;
  *out = *b;
  memset(b, 0, sizeof *b);
  if (old.data) lade__http_buf_recycle(t, &old);
  if (!out->data) { /* empty body: give the caller a valid buffer */
    out->data = malloc(1);
    out->cap = out->data ? 1 : 0;
  }
  out->len = len;
}

int lade__http_result_take(lade__http_table_t *t, uint64_t idx, lade__buf_t *out, int *rc) {
  lade__http_result_t *r = t->res[idx];
  if (!r) return 0;
  result_unlink(t, r);
  t->wants[idx]--;
  *rc = r->rc;
  if (r->rc) lade__set_error_text(r->msg);
  else lade__http_hand_over(t, &r->body, out);
  result_free(t, r);
  return 1;
}

#endif /* LADE_HAVE_CURL */
