/*
 * ucx_gather.c - the UCX transport's allgather (docs/transport.md, UCX,
 * Allgather): every rank's len bytes to every rank, once a loader is open
 * (the surviving caches of a warm restart).
 *
 * The caller copies its bytes into one GATHER message per peer, [header |
 * bytes], and hands them to the communication thread (ag.out, ag.post),
 * which posts them (lade__ucx_gather_post, the skeleton's open_pass). The
 * peers' messages are received by the thread as every other message and
 * copied into the caller's buffer at their rank's place
 * (lade__ucx_gather_take_locked). A channel numbers its allgathers (seq 1,
 * 2, ...): a part of a later one that comes early is kept aside
 * (ag.early) until that one starts here, one of an earlier (failed) one is
 * dropped. The caller returns when every rank's bytes are in and its own
 * went out (posted), waits at most the timeout, and fails at once when a
 * rank that has not contributed died (its endpoint failed).
 *
 * Lock: the channel's allgather (lade__ucx_gather_t, ucx_impl.h) is under
 * the channel's mu, on both sides; the thread posts the messages with the
 * world's mu held and the channel's not (world's, then channel's).
 */
#ifdef LADE_HAVE_UCX
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ucx_impl.h"

/* An allgather's contribution: the header, then len bytes. */
typedef struct gather_hdr {
  uint64_t magic, seq, len;
  uint64_t sum; /* lade_checksum of the bytes, seeded with seq */
} gather_hdr_t;

/* A contribution to a later allgather than the one here, kept for it. */
struct lade__ucx_early {
  struct lade__ucx_early *next;
  uint32_t src;
  uint64_t seq;
  size_t len;
  uint8_t *buf; /* header and bytes, as received */
};

static uint64_t gather_sum(uint64_t seq, const void *data, size_t len) { return lade_checksum(data, len, seq); }

void lade__ucx_gather_take_locked(lade__ucx_chan_t *c, uint32_t src, uint8_t *buf, size_t len) {
  lade__ucx_gather_t *ag = &c->ag;
  gather_hdr_t h;
  if (len < sizeof h || (memcpy(&h, buf, sizeof h), h.magic != LADE__PUSHQ_MAGIC) || h.len != len - sizeof h) {
    free(buf);
    lade__comm_fail_locked(&c->ch, "transport ucx: rank %u: a malformed message from rank %u", c->ch.rank, src);
    return;
  }
  if (h.seq > ag->seq) { /* a later allgather's, early: the peer finished this one */
    struct lade__ucx_early *e = malloc(sizeof *e);
    if (!e) {
      free(buf);
      lade__comm_fail_locked(&c->ch, "transport ucx: out of memory for a %zu-byte message", len);
      return;
    }
    *e = (struct lade__ucx_early){.next = ag->early, .src = src, .seq = h.seq, .len = len, .buf = buf};
    ag->early = e;
    return;
  }
  if (h.seq < ag->seq || !ag->active || ag->have[src]) { /* an earlier (failed) one's, or again */
    free(buf);
    return;
  }
  if (h.len != ag->len) {
    if (!ag->err[0])
      snprintf(ag->err, sizeof ag->err, "transport ucx: rank %u: rank %u contributed %llu bytes to allgather %llu "
               "of this loader, this rank %zu (the learners differ: in the dataset's size, or in their cache "
               "settings, e.g. cache_dir on one rank only)", c->ch.rank, src, (unsigned long long)h.len,
               (unsigned long long)h.seq, ag->len);
  } else if (gather_sum(h.seq, buf + sizeof h, h.len) != h.sum) {
    if (!ag->err[0])
      snprintf(ag->err, sizeof ag->err, "transport ucx: rank %u: the %llu bytes rank %u contributed to allgather "
               "%llu arrived corrupted (they do not match the sender's checksum)", c->ch.rank,
               (unsigned long long)h.len, src, (unsigned long long)h.seq);
  } else {
    memcpy(ag->all + (size_t)src * ag->len, buf + sizeof h, h.len);
    ag->have[src] = 1;
    ag->count++;
  }
  free(buf);
}

int lade__ucx_gather_post(lade__comm_chan_t *ch) {
  lade__ucx_chan_t *c = (lade__ucx_chan_t *)ch;
  lade__ucx_gather_t *ag = &c->ag;
  pthread_mutex_lock(&ch->mu);
  uint8_t **out = ag->post ? ag->out : NULL;
  size_t len = sizeof(gather_hdr_t) + ag->len;
  ag->post = false;
  ag->out = NULL;
  pthread_mutex_unlock(&ch->mu);
  if (!out) return 0;
  for (uint32_t r = 0; r < ch->world; r++) {
    if (r == ch->rank) continue;
    ucs_status_t s = lade__ucx_post(c, r, LADE__UCX_GATHER, out[r], len); /* owns out[r] from here */
    if (s != UCS_OK && lade__ucx_proc.ep_status[r] == UCS_OK) { /* a dead peer: the caller names it (peer_lost) */
      pthread_mutex_lock(&ch->mu);
      if (!ag->err[0])
        snprintf(ag->err, sizeof ag->err, "transport ucx: rank %u: sending its %zu bytes of allgather %llu to "
                 "rank %u failed: %s", ch->rank, ag->len, (unsigned long long)ag->seq, r, U.ucs_status_string(s));
      pthread_cond_broadcast(&ch->cv);
      pthread_mutex_unlock(&ch->mu);
    }
  }
  free(out);
  pthread_mutex_lock(&ch->mu);
  pthread_cond_broadcast(&ch->cv); /* the caller waits for its bytes to be out */
  pthread_mutex_unlock(&ch->mu);
  return 1;
}

static void free_out(uint8_t **out, uint32_t world) {
  for (uint32_t r = 0; out && r < world; r++) free(out[r]);
  free(out);
}

void lade__ucx_gather_free(lade__ucx_chan_t *c) {
  lade__ucx_gather_t *ag = &c->ag;
  free(ag->have);
  free_out(ag->out, c->ch.world);
  ag->out = NULL;
  while (ag->early) {
    struct lade__ucx_early *e = ag->early;
    ag->early = e->next;
    free(e->buf);
    free(e);
  }
}

/* This rank's messages of allgather seq into *outp, one per peer (NULL at
 * its own place): [header | mine]. 0 or LADE_ENOMEM. */
static int gather_msgs(lade__ucx_chan_t *c, uint64_t seq, const void *mine, size_t len, uint8_t ***outp) {
  uint8_t **out = *outp = calloc(c->ch.world, sizeof *out);
  if (!out) return lade__fail(LADE_ENOMEM, "transport ucx: out of memory for an allgather");
  gather_hdr_t h = {LADE__PUSHQ_MAGIC, seq, len, gather_sum(seq, mine, len)};
  for (uint32_t r = 0; r < c->ch.world; r++) {
    if (r == c->ch.rank) continue;
    out[r] = malloc(sizeof h + len);
    if (!out[r]) {
      free_out(out, c->ch.world);
      *outp = NULL;
      return lade__fail(LADE_ENOMEM, "transport ucx: out of memory for an allgather of %zu bytes per rank", len);
    }
    memcpy(out[r], &h, sizeof h);
    memcpy(out[r] + sizeof h, mine, len);
  }
  return 0;
}

/* Starts allgather seq into all, its messages `out` handed to the thread,
 * and takes what came early for it; an earlier one's leftovers are
 * dropped. Under c's mu. */
static void gather_start_locked(lade__ucx_chan_t *c, uint64_t seq, void *all, size_t len, uint8_t **out) {
  lade__ucx_gather_t *ag = &c->ag;
  ag->seq = seq;
  ag->active = true;
  ag->all = all;
  ag->len = len;
  memset(ag->have, 0, c->ch.world);
  ag->have[c->ch.rank] = 1;
  ag->count = 1;
  ag->err[0] = 0;
  ag->out = out;
  ag->post = true;
  for (struct lade__ucx_early **pp = &ag->early; *pp;) {
    struct lade__ucx_early *e = *pp;
    if (e->seq > seq) {
      pp = &e->next;
      continue;
    }
    *pp = e->next;
    if (e->seq == seq) lade__ucx_gather_take_locked(c, e->src, e->buf, e->len);
    else free(e->buf);
    free(e);
  }
}

/* The wait ended without every part (a rank died: lost, or the timeout):
 * fails naming the ranks that did not contribute (the dead ones, when one
 * died). Under c's mu. */
static int gather_missing_locked(lade__ucx_chan_t *c, bool lost) {
  const lade__ucx_gather_t *ag = &c->ag;
  char who[512] = "";
  size_t wl = 0;
  uint32_t missing = 0;
  for (uint32_t r = 0; r < c->ch.world; r++)
    if (!ag->have[r] && (!lost || c->peer_lost[r]) && missing++ < 8)
      wl += (size_t)snprintf(who + wl, sizeof who - wl, "%s%u", wl ? ", " : "", r);
  if (!missing) /* every part came; this rank's own never went out */
    return lade__fail(LADE_ETIMEOUT, "transport ucx: rank %u: its part of allgather %llu of this loader was not sent "
                      "within %u ms (setting peer_timeout_ms): the communication thread did not get to it",
                      c->ch.rank, (unsigned long long)ag->seq, c->ch.p.timeout_ms);
  if (lost)
    return lade__fail(LADE_EIO, "transport ucx: rank %u: rank%s %s%s died (the connection broke) before contributing "
                      "to allgather %llu of this loader", c->ch.rank, missing > 1 ? "s" : "", who,
                      missing > 8 ? ", ..." : "", (unsigned long long)ag->seq);
  return lade__fail(LADE_ETIMEOUT, "transport ucx: rank %u: rank%s %s%s did not contribute to allgather %llu of this "
                    "loader within %u ms (setting peer_timeout_ms): %s did not reach the same collective (its "
                    "loader's open, or lade_loader_allgather), or stopped", c->ch.rank, missing > 1 ? "s" : "", who,
                    missing > 8 ? ", ..." : "", (unsigned long long)ag->seq, c->ch.p.timeout_ms,
                    missing > 1 ? "each" : "it");
}

/* Waits until every rank's bytes came and this rank's went out (posted),
 * until ts, or at once when a rank that has not contributed died. Under
 * c's mu. */
static int gather_wait_locked(lade__ucx_chan_t *c, const struct timespec *ts) {
  lade__ucx_gather_t *ag = &c->ag;
  for (;;) {
    if (ag->count == c->ch.world && !ag->post) return 0;
    if (c->ch.pq.fatal) return lade__fail(c->ch.pq.fatal, "%s", c->ch.pq.fatal_msg);
    if (ag->err[0]) return lade__fail(LADE_EIO, "%s", ag->err);
    bool timed_out = false, lost = false;
    for (uint32_t r = 0; r < c->ch.world; r++) lost |= !ag->have[r] && c->peer_lost[r];
    if (!lost) timed_out = pthread_cond_timedwait(&c->ch.cv, &c->ch.mu, ts) == ETIMEDOUT;
    if (ag->count == c->ch.world && !ag->post) return 0;
    if (lost || timed_out) return gather_missing_locked(c, lost);
  }
}

int lade__ucx_allgather(lade__transport_t *d, const void *mine, size_t len, void *all) {
  lade__ucx_chan_t *c = (lade__ucx_chan_t *)d;
  lade__ucx_gather_t *ag = &c->ag;
  memcpy((uint8_t *)all + (size_t)c->ch.rank * len, mine, len);
  if (c->ch.world == 1) return 0;
  pthread_mutex_lock(&c->ch.mu);
  uint64_t seq = ag->seq + 1;
  pthread_mutex_unlock(&c->ch.mu);
  uint8_t **out;
  int rc = gather_msgs(c, seq, mine, len, &out);
  if (rc) return rc;
  struct timespec ts;
  lade__pushq_timespec_after(&ts, c->ch.p.timeout_ms / 1000.0);
  pthread_mutex_lock(&c->ch.mu);
  if (c->ch.state != LADE__PUSHQ_OPEN || ag->active) {
    pthread_mutex_unlock(&c->ch.mu);
    free_out(out, c->ch.world);
    return lade__fail(LADE_ESTATE, "transport ucx: rank %u: an allgather on a loader that is not open or in one "
                      "already", c->ch.rank);
  }
  gather_start_locked(c, seq, all, len, out);
  rc = gather_wait_locked(c, &ts);
  ag->active = false;
  ag->all = NULL;
  if (ag->post) { /* failed before the thread posted them: freed here */
    free_out(ag->out, c->ch.world);
    ag->out = NULL;
    ag->post = false;
  }
  pthread_mutex_unlock(&c->ch.mu);
  return rc;
}
#else
/* built without UCX (LADE_WITH_UCX) */
typedef int lade__ucx_gather_unused;
#endif
