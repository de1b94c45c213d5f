/* pool.c - the batch pool (pool.h): the slots, their growth and shrink, the
 * handles. No lock of its own: the loader's mu (pool.h). */
#include "engine/pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/cuda.h"

int lade__pool_open(lade__pool_t *p, struct lade_loader *L, const struct lade_config *cfg) {
  memset(p, 0, sizeof *p);
  p->L = L;
  p->window = cfg->prefetch + 1;
  p->ahead = LADE__MAX(cfg->prefetch, 2u) - 1;
  p->max = cfg->pool_max;
  p->has_allocator = cfg->has_allocator;
  p->allocator = cfg->allocator;
  p->pin = cfg->pin_memory;
  p->cap = p->window;
  p->slots = calloc(p->cap, sizeof *p->slots);
  if (!p->slots) return lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
  for (uint32_t i = 0; i < p->window; i++) {
    slot_t *s = calloc(1, sizeof *s);
    if (!s) return lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
    p->slots[p->n++] = s;
  }
  return 0;
}

static void *buf_alloc(lade__pool_t *p, size_t size) {
  if (p->has_allocator) return p->allocator.alloc(p->allocator.ctx, size, 4096);
  return lade__aligned_alloc(size, 4096);
}

static void buf_free(lade__pool_t *p, void *b, size_t size) {
  if (!b) return;
  if (p->has_allocator)
    p->allocator.free(p->allocator.ctx, b, size);
  else
    lade__aligned_free(b);
}

void lade__pool_slot_free(lade__pool_t *p, slot_t *s) {
  if (!s) return;
  if (s->pinned) lade__cuda_unpin(s->data);
  buf_free(p, s->data, s->cap);
  free(s->labels);
  free(s->indices);
  free(s->sizes);
  free(s->taken);
  lade__cursor_step_free(&s->cs);
  free(s);
}

void lade__pool_close(lade__pool_t *p) {
  for (uint32_t i = 0; i < p->n; i++) lade__pool_slot_free(p, p->slots[i]);
  for (uint32_t i = 0; i < p->nhandles; i++) free(p->handles[i]);
  free(p->handles);
  free(p->hfree);
  free(p->slots);
  memset(p, 0, sizeof *p);
}

/* While the caller holds at most two batches, the window; once it holds
 * more, what it holds plus prefetch - 1 (at least one) to prepare ahead. A
 * `for` loop holds two at each next() (the batch of the last iteration
 * until the loop variable is rebound, and the one just handed out), as it
 * did when the pool was fixed at prefetch + 1. */
static uint32_t target(const lade__pool_t *p) { return LADE__MAX(p->window, p->held + p->ahead); }

slot_t *lade__pool_take(lade__pool_t *p, size_t batch_bytes) {
  for (uint32_t i = 0; i < p->n; i++) {
    slot_t *s = p->slots[i];
    if (s->state == SLOT_FREE) {
      s->state = SLOT_PLANNING;
      return s;
    }
  }
  /* never grown for slots a seek left finishing: they come back by themselves */
  if (p->n >= target(p) || (p->max && p->n >= p->max)) return NULL;
  if (p->n == p->cap) {
    uint32_t cap = p->cap * 2;
    slot_t **a = realloc(p->slots, cap * sizeof *a);
    if (!a) return NULL; /* the caller's next release frees a slot */
    p->slots = a;
    p->cap = cap;
  }
  slot_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->state = SLOT_PLANNING;
  p->slots[p->n++] = s;
  if (!p->warned_growth) {
    p->warned_growth = true;
    fprintf(stderr,
            "lade: warning: the caller holds %u batches, so the batch pool grows past prefetch+1 = %u buffers "
            "(%.1f MB each); memory now grows with every batch kept. Copy what you keep (tensor.clone()) or "
            "release it; the setting pool_max caps the pool.\n",
            p->held, p->window, (double)batch_bytes / 1e6);
  }
  return s;
}

size_t lade__pool_buffers(lade__pool_t *p, slot_t *s, uint32_t B, size_t bytes) {
  if (s->data) return 0;
  size_t cap = (size_t)B * bytes;
  s->data = buf_alloc(p, cap);
  s->labels = malloc(B * sizeof *s->labels);
  s->indices = malloc(B * sizeof *s->indices);
  s->sizes = malloc(B * sizeof *s->sizes);
  s->taken = malloc(B);
  if (!s->data || !s->labels || !s->indices || !s->sizes || !s->taken) {
    lade__fail(LADE_ENOMEM, "out of memory for a batch buffer of %zu bytes", cap);
    return SIZE_MAX; /* what was allocated is freed with the slot */
  }
  if (p->pin) {
    if (lade__cuda_pin(s->data, cap)) return SIZE_MAX;
    s->pinned = true;
  }
  s->cap = cap;
  return cap;
}

void lade__pool_account(lade__pool_t *p, size_t bytes) {
  p->bytes += bytes;
  if (p->bytes > p->peak_bytes) p->peak_bytes = p->bytes;
}

/* A handle for the batch about to be handed out: the oldest released one
 * once HANDLE_QUARANTINE others were released after it, else a new one. */
static handle_t *handle_get(lade__pool_t *p) {
  if (p->hfree_len > HANDLE_QUARANTINE) {
    handle_t *h = p->hfree[p->hfree_head];
    p->hfree_head = (p->hfree_head + 1) % p->handles_cap;
    p->hfree_len--;
    return h;
  }
  if (p->nhandles == p->handles_cap) {
    uint32_t cap = p->handles_cap ? 2 * p->handles_cap : 16;
    handle_t **a = realloc(p->handles, cap * sizeof *a);
    if (!a) return NULL;
    p->handles = a;
    handle_t **ring = malloc(cap * sizeof *ring);
    if (!ring) return NULL;
    for (uint32_t i = 0; i < p->hfree_len; i++) ring[i] = p->hfree[(p->hfree_head + i) % p->handles_cap];
    free(p->hfree);
    p->hfree = ring;
    p->hfree_head = 0;
    p->handles_cap = cap;
  }
  handle_t *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  h->L = p->L;
  p->handles[p->nhandles++] = h;
  return h;
}

handle_t *lade__pool_hand_out(lade__pool_t *p, slot_t *s) {
  handle_t *h = handle_get(p);
  if (!h) return NULL;
  h->slot = s;
  h->seq = s->seq;
  h->held = true;
  s->state = SLOT_HELD;
  p->held++;
  return h;
}

slot_t *lade__pool_take_back(lade__pool_t *p, handle_t *h, bool keep) {
  slot_t *s = h->slot;
  h->held = false;
  h->slot = NULL;
  p->hfree[(p->hfree_head + p->hfree_len) % p->handles_cap] = h;
  p->hfree_len++;
  s->state = SLOT_FREE;
  p->held--;
  if (keep || p->n <= target(p)) return NULL;
  /* the pool grew while the caller held batches: give this buffer back */
  for (uint32_t i = 0; i < p->n; i++)
    if (p->slots[i] == s) {
      p->slots[i] = p->slots[--p->n];
      p->bytes -= s->cap;
      return s;
    }
  return NULL;
}
