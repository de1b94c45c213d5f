/*
 * tfrec_gzip.c - gzip and zlib streams read at offsets of their uncompressed
 * bytes (tfrec_gzip.h): TensorFlow's compressed TFRecord files, one deflate
 * stream per file, where a record is reached only by inflating all that
 * comes before it.
 *
 * A cursor is a z_stream part-way through a file and a ring holding its
 * last WINDOW bytes of output. A read at or after the start of a cursor's
 * ring continues that cursor: a file read in order costs one pass, and
 * workers taking neighbouring records slightly out of order are served from
 * the ring. The cursor furthest along leaves a point to resume from (a copy
 * of its inflate state, ~40 KB) every `every` bytes; when a file has SNAPS
 * of them every other one is dropped and the spacing doubles, so a file's
 * points span all of it. A read before every cursor's ring takes another
 * cursor (PER_FILE per file) to the nearest point before it (a resume: at
 * most `every` bytes inflated again) or, when the file has none that early,
 * to the file's start (a restart, counted: the first is warned about).
 *
 * Memory: state for at most MAX_FILES files (cursors, rings and points),
 * the least recently read file's dropped for another; rings are allocated
 * when a cursor is first used. A read finding every slot busy (more files
 * read at once than MAX_FILES) gets a slot of its own for that read only.
 *
 * Locks: a file's reads take turns under its stripe of file_mu (one stream
 * cannot be inflated by two threads, and the next read wants the cursor the
 * last one left); `mu` guards which file each slot holds, its busy flag and
 * stamp, and the counters. A busy slot belongs to the reader of its file
 * (that holds the stripe), which alone touches its cursors and points; an
 * idle one is dropped only under `mu`. Order: file_mu, then mu; mu is never
 * held while inflating.
 */
#include "tfrec_gzip.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

const char *lade__gz_name(int kind) {
  return kind == LADE__GZ_GZIP ? "gzip" : kind == LADE__GZ_ZLIB ? "zlib" : "none";
}

#ifdef LADE_HAVE_ZLIB
#include <assert.h>
#include <pthread.h>
#include <zlib.h>

#define WINDOW (2u << 20)     /* output kept per cursor (a power of two) */
#define IN_BUF (64u << 10)    /* compressed bytes read at a time */
#define STEP_OUT (256u << 10) /* output of one inflate call at most (points land this close to their place) */
#define PER_FILE 3            /* cursors per file */
#define SNAPS 32              /* points to resume from per file */
#define SNAP_EVERY (1u << 20) /* their first spacing */
#define MAX_FILES 8           /* files with state */
#define STRIPES 64

typedef struct cur {
  z_stream zs;
  bool live;       /* zs set up (inflateEnd owed) */
  bool valid;      /* at a position of its slot's file */
  bool ended;      /* the stream ended: nothing after `out` */
  bool damaged;    /* inflate failed after making output: `why` once that output is read */
  int kind;
  uint64_t base;   /* the first output byte it made (0, or the point it resumed from) */
  uint64_t out;    /* output bytes before its position */
  uint64_t in_off; /* the file's next compressed byte to read */
  uint64_t stamp;
  uint8_t *win;    /* WINDOW bytes: output byte p at win[p % WINDOW] */
  uint8_t *in;     /* IN_BUF bytes */
  char why[200];
} cur_t;

typedef struct snap {
  z_stream zs;     /* inflateCopy of a cursor's stream (its buffer pointers stale; never moved: zlib's state
                    * points back at it) */
  uint64_t out;    /* output bytes before it */
  uint64_t in_pos; /* the compressed byte it goes on from */
} snap_t;

typedef struct slot {
  size_t file;     /* SIZE_MAX: free */
  bool busy;
  uint64_t stamp;
  cur_t cur[PER_FILE];
  snap_t *snap[SNAPS];
  size_t nsnap;
  uint64_t every, next_snap;
  uint64_t tick; /* its cursors' stamps */
} slot_t;

static int oom(void) { return lade__fail(LADE_ENOMEM, "out of memory for an inflate stream"); }

/* The first output byte still in c's ring. */
static uint64_t lo_of(const cur_t *c) {
  uint64_t lo = c->out > WINDOW ? c->out - WINDOW : 0;
  return lo > c->base ? lo : c->base;
}

static int cur_alloc(cur_t *c) {
  if (!c->win) c->win = malloc(WINDOW);
  if (!c->in) c->in = malloc(IN_BUF);
  return c->win && c->in ? 0 : oom();
}

static void cur_drop(cur_t *c) {
  if (c->live) inflateEnd(&c->zs);
  free(c->win);
  free(c->in);
  memset(c, 0, sizeof *c);
}

static void cur_at(cur_t *c, int kind, uint64_t out, uint64_t in_pos) {
  c->valid = true;
  c->ended = c->damaged = false;
  c->kind = kind;
  c->base = c->out = out;
  c->in_off = in_pos;
  c->zs.next_in = c->in;
  c->zs.avail_in = 0;
}

/* c at the stream's start. */
static int cur_start(cur_t *c, int kind) {
  int rc = cur_alloc(c), bits = kind == LADE__GZ_GZIP ? 16 + MAX_WBITS : MAX_WBITS;
  if (rc) return rc;
  c->valid = false;
  if (c->live && inflateReset2(&c->zs, bits) != Z_OK) {
    inflateEnd(&c->zs);
    c->live = false;
  }
  if (!c->live) {
    memset(&c->zs, 0, sizeof c->zs);
    if (inflateInit2(&c->zs, bits) != Z_OK) return oom();
    c->live = true;
  }
  cur_at(c, kind, 0, 0);
  return 0;
}

/* c at point s. */
static int cur_resume(cur_t *c, int kind, snap_t *s) {
  int rc = cur_alloc(c);
  if (rc) return rc;
  if (c->live) inflateEnd(&c->zs);
  c->live = c->valid = false;
  if (inflateCopy(&c->zs, &s->zs) != Z_OK) return oom();
  c->live = true;
  cur_at(c, kind, s->out, s->in_pos);
  return 0;
}

static void snap_drop(snap_t *s) {
  inflateEnd(&s->zs);
  free(s);
}

/* A point at c's position (c is the file's furthest cursor); a failed
 * copy only means one point fewer. */
static void snap_take(slot_t *sl, cur_t *c) {
  if (sl->nsnap == SNAPS) { /* thin out: every other point, twice the spacing */
    size_t k = 0;
    for (size_t i = 0; i < SNAPS; i++) {
      if (i % 2) snap_drop(sl->snap[i]);
      else sl->snap[k++] = sl->snap[i];
    }
    sl->nsnap = k;
    sl->every *= 2;
  }
  sl->next_snap = c->out + sl->every;
  snap_t *s = calloc(1, sizeof *s);
  if (!s) return;
  if (inflateCopy(&s->zs, &c->zs) != Z_OK) {
    free(s);
    return;
  }
  s->out = c->out;
  s->in_pos = c->in_off - c->zs.avail_in;
  sl->snap[sl->nsnap++] = s;
}

/* End of a gzip member or zlib stream: another gzip member may follow (as
 * gunzip reads concatenated files); else the stream ended. */
static int member_end(cur_t *c, lade__tar_pread_fn fn, void *ctx) {
  if (c->kind == LADE__GZ_GZIP) {
    if (c->zs.avail_in == 0) {
      long n = fn(ctx, c->in, IN_BUF, c->in_off);
      if (n < 0)
        return lade__fail(LADE_EIO, "cannot read the compressed bytes at byte %llu: %s",
                          (unsigned long long)c->in_off, strerror((int)-n));
      c->in_off += (uint64_t)n;
      c->zs.next_in = c->in;
      c->zs.avail_in = (uInt)n;
    }
    if (c->zs.avail_in > 0) return inflateReset(&c->zs) == Z_OK ? 0 : oom();
  }
  c->ended = true;
  return 0;
}

/* More output into c's ring (and a point when c passed the next one). */
static int cur_step(cur_t *c, slot_t *sl, lade__tar_pread_fn fn, void *ctx) {
  const char *name = lade__gz_name(c->kind);
  if (c->damaged) return lade__fail(LADE_EFORMAT, "%s", c->why);
  if (c->zs.avail_in == 0) {
    long n = fn(ctx, c->in, IN_BUF, c->in_off);
    if (n < 0)
      return lade__fail(LADE_EIO, "cannot read the compressed bytes at byte %llu: %s", (unsigned long long)c->in_off,
                        strerror((int)-n));
    if (n == 0)
      return lade__fail(LADE_EFORMAT, "the %s stream is cut short: the file ends after %llu bytes, inside it (%llu "
                        "bytes inflated): truncated?", name, (unsigned long long)c->in_off, (unsigned long long)c->out);
    c->in_off += (uint64_t)n;
    c->zs.next_in = c->in;
    c->zs.avail_in = (uInt)n;
  }
  size_t at = (size_t)(c->out % WINDOW), room = LADE__MIN(WINDOW - at, (size_t)STEP_OUT);
  c->zs.next_out = c->win + at;
  c->zs.avail_out = (uInt)room;
  uInt had = c->zs.avail_in;
  int zr = inflate(&c->zs, Z_NO_FLUSH);
  size_t made = room - c->zs.avail_out;
  c->out += made;
  if (zr == Z_STREAM_END) return member_end(c, fn, ctx);
  if (zr == Z_BUF_ERROR && !made && c->zs.avail_in == had) zr = Z_DATA_ERROR; /* no progress: never loop */
  if (zr == Z_OK || zr == Z_BUF_ERROR) {
    if (sl && c->out >= sl->next_snap) snap_take(sl, c);
    return 0;
  }
  if (zr == Z_MEM_ERROR) return oom();
  if (zr == Z_NEED_DICT)
    snprintf(c->why, sizeof c->why, "the zlib stream needs a preset dictionary (TF's never do)");
  else
    snprintf(c->why, sizeof c->why, "the %s stream is damaged (%s) near byte %llu of the file, after %llu bytes "
             "inflated", name, c->zs.msg ? c->zs.msg : "invalid data",
             (unsigned long long)(c->in_off - c->zs.avail_in), (unsigned long long)c->out);
  c->damaged = true; /* the output made before the damage is read first (the records' CRCs check it) */
  return made ? 0 : lade__fail(LADE_EFORMAT, "%s", c->why);
}

/* len bytes at output offset off (off >= lo_of(c)) into dst: *got fewer at
 * the stream's end. */
static int cur_read(cur_t *c, slot_t *sl, lade__tar_pread_fn fn, void *ctx, uint64_t off, uint8_t *dst, size_t len,
                    size_t *got) {
  assert(off >= lo_of(c));
  size_t done = 0;
  uint64_t pos = off;
  while (done < len) {
    if (pos < c->out) { /* in the ring: inflating only ever overwrites bytes before pos */
      size_t at = (size_t)(pos % WINDOW);
      size_t k = (size_t)LADE__MIN(c->out - pos, (uint64_t)(WINDOW - at));
      k = LADE__MIN(k, len - done);
      memcpy(dst + done, c->win + at, k);
      done += k;
      pos += k;
      continue;
    }
    if (c->ended) break;
    int rc = cur_step(c, sl, fn, ctx);
    if (rc) {
      c->valid = false;
      return rc;
    }
  }
  *got = done;
  return 0;
}

/* ---------------------------------------------------------------- walk */

struct lade__gz_walk {
  cur_t c;
  lade__tar_pread_fn fn;
  void *ctx;
  int code;
  char why[512];
};

int lade__gz_walk_open(lade__gz_walk_t **out, int kind, lade__tar_pread_fn fn, void *ctx) {
  lade__gz_walk_t *w = calloc(1, sizeof *w);
  int rc = w ? cur_start(&w->c, kind) : oom();
  if (rc) {
    lade__gz_walk_close(w);
    w = NULL;
  }
  if (w) {
    w->fn = fn;
    w->ctx = ctx;
  }
  *out = w;
  return rc;
}

long lade__gz_walk_pread(void *ctx, void *dst, size_t len, uint64_t off) {
  lade__gz_walk_t *w = ctx;
  if (w->code) return -EIO;
  size_t got = 0;
  int rc = 0;
  if (off < lo_of(&w->c))
    rc = lade__fail(LADE_EINVAL, "a read at byte %llu, before the %u bytes kept of the stream", (unsigned long long)off,
                    WINDOW);
  if (!rc) rc = cur_read(&w->c, NULL, w->fn, w->ctx, off, dst, len, &got);
  if (rc) {
    w->code = rc;
    snprintf(w->why, sizeof w->why, "%s", lade_last_error());
    return -EIO;
  }
  return (long)got;
}

const char *lade__gz_walk_error(const lade__gz_walk_t *w, int *code) {
  if (!w || !w->code) return NULL;
  *code = w->code;
  return w->why;
}

uint64_t lade__gz_walk_produced(const lade__gz_walk_t *w) { return w->c.out; }

void lade__gz_walk_close(lade__gz_walk_t *w) {
  if (!w) return;
  cur_drop(&w->c);
  free(w);
}

/* ---------------------------------------------------------------- cache */

struct lade__gz_cache {
  pthread_mutex_t mu;
  pthread_mutex_t file_mu[STRIPES];
  slot_t slot[MAX_FILES];
  uint8_t *started; /* per file: a cursor started at its beginning once (a later start is a restart) */
  size_t files;
  uint64_t clock, restarts, resumes;
  bool warned;
};

static void slot_reset(slot_t *sl, size_t file) {
  for (size_t i = 0; i < sl->nsnap; i++) snap_drop(sl->snap[i]);
  sl->nsnap = 0;
  for (int i = 0; i < PER_FILE; i++) sl->cur[i].valid = false;
  sl->file = file;
  sl->every = sl->next_snap = SNAP_EVERY;
}

int lade__gz_cache_create(lade__gz_cache_t **out, size_t files) {
  *out = NULL;
  lade__gz_cache_t *z = calloc(1, sizeof *z);
  if (!z || !(z->started = calloc(files ? files : 1, 1))) {
    free(z);
    return oom();
  }
  pthread_mutex_init(&z->mu, NULL);
  for (int i = 0; i < STRIPES; i++) pthread_mutex_init(&z->file_mu[i], NULL);
  for (int i = 0; i < MAX_FILES; i++) z->slot[i].file = SIZE_MAX;
  z->files = files;
  *out = z;
  return 0;
}

static void slot_drop(slot_t *sl) {
  slot_reset(sl, SIZE_MAX);
  for (int i = 0; i < PER_FILE; i++) cur_drop(&sl->cur[i]);
}

void lade__gz_cache_destroy(lade__gz_cache_t *z) {
  if (!z) return;
  for (int i = 0; i < MAX_FILES; i++) slot_drop(&z->slot[i]);
  pthread_mutex_destroy(&z->mu);
  for (int i = 0; i < STRIPES; i++) pthread_mutex_destroy(&z->file_mu[i]);
  free(z->started);
  free(z);
}

/* The slot of `file`, made busy: its own, a free one, else the least
 * recently used idle one (its file's state dropped); NULL: all busy. */
static slot_t *slot_take(lade__gz_cache_t *z, size_t file) {
  slot_t *pick = NULL;
  for (int i = 0; i < MAX_FILES; i++) {
    slot_t *sl = &z->slot[i];
    if (sl->file == file) { /* idle: its file's reader (this thread) holds the stripe */
      assert(!sl->busy);
      sl->busy = true;
      return sl;
    }
    if (sl->busy) continue;
    if (!pick || (pick->file != SIZE_MAX && (sl->file == SIZE_MAX || sl->stamp < pick->stamp))) pick = sl;
  }
  if (pick) {
    slot_reset(pick, file);
    pick->busy = true;
  }
  return pick;
}

/* The read of [off, off + len) in slot sl (busy: this thread's); *how: 0 a
 * cursor went on, 1 one resumed from a point, 2 one started afresh. */
static int slot_read(slot_t *sl, int kind, lade__tar_pread_fn fn, void *ctx, uint64_t off, uint8_t *dst, size_t len,
                     size_t *got, int *how) {
  cur_t *best = NULL, *lead = NULL;
  uint64_t cost = UINT64_MAX;
  for (int i = 0; i < PER_FILE; i++) {
    cur_t *c = &sl->cur[i];
    if (!c->valid || c->kind != kind) continue;
    if (!lead || c->out > lead->out) lead = c;
    uint64_t k = off > c->out ? off - c->out : 0;
    if (off >= lo_of(c) && (k < cost || (k == cost && c->stamp > best->stamp))) best = c, cost = k;
  }
  snap_t *s = NULL; /* the latest point at or before off */
  for (size_t i = 0; i < sl->nsnap && sl->snap[i]->out <= off; i++) s = sl->snap[i];
  cur_t *c = best;
  int rc = 0;
  *how = 0;
  if (!best || (s && off - s->out + WINDOW < cost)) {
    /* another cursor: an unused one, else the least recently used but the lead */
    c = NULL;
    for (int i = 0; i < PER_FILE && !c; i++)
      if (!sl->cur[i].valid) c = &sl->cur[i];
    for (int i = 0; i < PER_FILE; i++)
      if (!c || (c->valid && &sl->cur[i] != lead && (c == lead || sl->cur[i].stamp < c->stamp))) c = &sl->cur[i];
    *how = s ? 1 : 2;
    rc = s ? cur_resume(c, kind, s) : cur_start(c, kind);
  }
  c->stamp = ++sl->tick;
  if (!rc) rc = cur_read(c, sl, fn, ctx, off, dst, len, got);
  return rc;
}

int lade__gz_cache_read(lade__gz_cache_t *z, size_t file, int kind, lade__tar_pread_fn fn, void *ctx, uint64_t off,
                        void *dst, size_t len, size_t *got, int *first_restart) {
  assert(file < z->files);
  *got = 0;
  *first_restart = 0;
  pthread_mutex_t *fm = &z->file_mu[file % STRIPES];
  pthread_mutex_lock(fm);
  pthread_mutex_lock(&z->mu);
  slot_t *sl = slot_take(z, file);
  pthread_mutex_unlock(&z->mu);
  slot_t *own = NULL;
  if (!sl && (own = calloc(1, sizeof *own)) != NULL) {
    slot_reset(own, file);
    sl = own;
  }
  int how = 0, rc = sl ? slot_read(sl, kind, fn, ctx, off, dst, len, got, &how) : oom();
  pthread_mutex_lock(&z->mu);
  /* a start before the first point's place (which a step may overshoot by
   * a ring) costs no more than a resume */
  if (how == 2 && z->started[file] && off >= SNAP_EVERY + WINDOW) {
    z->restarts++;
    *first_restart = !z->warned;
    z->warned = true;
  } else if (how == 1 || (how == 2 && z->started[file])) {
    z->resumes++;
  }
  if (how == 2) z->started[file] = 1;
  if (sl && sl != own) {
    sl->busy = false;
    sl->stamp = ++z->clock;
  }
  pthread_mutex_unlock(&z->mu);
  pthread_mutex_unlock(fm);
  if (own) slot_drop(own);
  free(own);
  return rc;
}

void lade__gz_cache_counts(lade__gz_cache_t *z, uint64_t *restarts, uint64_t *resumes) {
  pthread_mutex_lock(&z->mu);
  *restarts = z->restarts;
  *resumes = z->resumes;
  pthread_mutex_unlock(&z->mu);
}

#else /* no zlib */

static int no_zlib(void) {
  return lade__fail(LADE_EUNSUPPORTED, "lade was built without zlib (LADE_WITH_ZLIB; apt-get install zlib1g-dev)");
}

int lade__gz_walk_open(lade__gz_walk_t **out, int kind, lade__tar_pread_fn fn, void *ctx) {
  (void)kind, (void)fn, (void)ctx;
  *out = NULL;
  return no_zlib();
}
long lade__gz_walk_pread(void *ctx, void *dst, size_t len, uint64_t off) {
  (void)ctx, (void)dst, (void)len, (void)off;
  return -ENOSYS;
}
const char *lade__gz_walk_error(const lade__gz_walk_t *w, int *code) {
  (void)w, (void)code;
  return NULL;
}
uint64_t lade__gz_walk_produced(const lade__gz_walk_t *w) {
  (void)w;
  return 0;
}
void lade__gz_walk_close(lade__gz_walk_t *w) { (void)w; }
int lade__gz_cache_create(lade__gz_cache_t **out, size_t files) {
  (void)files;
  *out = NULL;
  return no_zlib();
}
void lade__gz_cache_destroy(lade__gz_cache_t *z) { (void)z; }
int lade__gz_cache_read(lade__gz_cache_t *z, size_t file, int kind, lade__tar_pread_fn fn, void *ctx, uint64_t off,
                        void *dst, size_t len, size_t *got, int *first_restart) {
  (void)z, (void)file, (void)kind, (void)fn, (void)ctx, (void)off, (void)dst, (void)len;
  *got = 0;
  *first_restart = 0;
  return no_zlib();
}
void lade__gz_cache_counts(lade__gz_cache_t *z, uint64_t *restarts, uint64_t *resumes) {
  (void)z;
  *restarts = *resumes = 0;
}

#endif
