/*
 * http_tune.c - the limit on an http handle's requests in flight
 * (lade__http_tuner_t, http_impl.h): fixed, or tuned from the completed
 * bytes/s over half-second windows while requests wait (the design is in
 * http.c's opening comment). A piece of its own: it takes its struct and
 * the clock, never the handle, so its rules are tested without one.
 *
 * Locking: none of its own; the loop calls it under the handle's mu, and
 * lade__http_stats reads the limit there too.
 */
#ifdef LADE_HAVE_CURL

#include <string.h>

#include "http/http_impl.h"

void lade__http_tuner_init(lade__http_tuner_t *t, uint32_t fixed, uint32_t max) {
  memset(t, 0, sizeof *t);
  t->fixed = fixed;
  t->max = max;
  t->limit = fixed ? fixed : LADE__MIN((uint32_t)LADE__HTTP_START_AUTO, max);
  t->slow_start = 1;
}

void lade__http_tuner_begin(lade__http_tuner_t *t, double now) { t->win_start = now; }

static uint32_t conc_min(const lade__http_tuner_t *t) { return LADE__MIN((uint32_t)LADE__HTTP_MIN_AUTO, t->max); }

uint32_t lade__http_tuner_bg_cap(const lade__http_tuner_t *t) { return LADE__MAX(1u, t->limit - t->limit / 4); }

void lade__http_tuner_done(lade__http_tuner_t *t, uint64_t bytes) { t->win_bytes += bytes; }

void lade__http_tuner_starved(lade__http_tuner_t *t) { t->win_starved = 1; }

int lade__http_tuner_throttle(lade__http_tuner_t *t, double now) {
  if (t->fixed || now - t->last_throttle <= LADE__HTTP_WINDOW_S) return 0;
  t->limit = LADE__MAX(conc_min(t), t->limit / 2);
  t->last_throttle = now;
  return 1;
}

void lade__http_tune(lade__http_tuner_t *t, double now) {
  if (t->fixed) return;
  if (now - t->win_start < LADE__HTTP_WINDOW_S) return;
  double rate = (double)t->win_bytes / (now - t->win_start);
  uint32_t step = LADE__MAX(4u, t->limit / 4), lo = conc_min(t);
  if (!t->win_starved && now - t->last_throttle > LADE__HTTP_WINDOW_S) {
    /* only a window with demand queued all along says anything about the server */
    if (t->win_prev_rate <= 0 || rate > t->win_prev_rate * 1.05) {
      /* slow start (as TCP's): double while it pays, then steps of a quarter */
      t->limit = LADE__MIN(t->max, t->slow_start ? t->limit * 2 : t->limit + step);
      t->flat_windows = 0;
    } else if (rate < t->win_prev_rate * 0.75) { /* a clear fall, not the noise of a busy machine */
      t->slow_start = 0;
      t->limit = t->limit > lo + step ? t->limit - step : lo;
      t->flat_windows = 0;
    } else {
      t->slow_start = 0;
      if (++t->flat_windows >= 8) { /* probe now and then */
        t->limit = LADE__MIN(t->max, t->limit + step);
        t->flat_windows = 0;
      }
    }
    t->win_prev_rate = rate;
  }
  t->win_start = now;
  t->win_bytes = 0;
  t->win_starved = 0;
}

#endif /* LADE_HAVE_CURL */
