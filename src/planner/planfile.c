/*
 * planfile.c - plans on disk, so the engine can memory-map a precomputed plan
 * instead of recomputing it. Layout (little-endian, every field 8-byte
 * aligned; docs/plan.md):
 *
 *   header   "LADEPLAN" u32 version u32 header_bytes, settings, steps/epoch,
 *            step count, index offset, ranks_per_node (0: 1, as files
 *            written before nodes)
 *   steps    per step: 8 u64 (epoch, step, shuffle_epoch, total, transfers,
 *            deficit, admits, evicts), offset[p+1], samples[total],
 *            from[total] (i32, padded to 8 bytes), admit_offset[p+1],
 *            admit[], evict_offset[p+1], evict[], transfers (u32 src,
 *            u32 dst, u64 count)
 *   index    u64 file offset of every step
 *   trailer  u64 checksum (lade__hash64 of all bytes before it), "LADEEND\0"
 *
 * A reader checks magic, version, sizes and the checksum before trusting any
 * offset, so a truncated or foreign file fails with a clear message.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "lade/plan.h"

#define HEADER_U64 20

typedef struct writer {
  FILE *f;
  uint64_t pos, hash;
} writer_t;

static int put(writer_t *w, const void *data, size_t n) {
  if (n && fwrite(data, 1, n, w->f) != n) return lade__fail(LADE_EIO, "plan file: write failed");
  w->hash = lade__hash64(data, n, w->hash);
  w->pos += n;
  return 0;
}

static void settings_to_header(const lade_plan_settings_t *s, uint64_t steps, uint64_t nsteps, uint64_t *h) {
  memset(h, 0, HEADER_U64 * 8);
  memcpy(h, "LADEPLAN", 8);
  h[1] = LADE_PLAN_FILE_VERSION | ((uint64_t)(HEADER_U64 * 8) << 32);
  h[2] = (uint64_t)s->kind;
  h[3] = s->samples;
  h[4] = s->learners;
  h[5] = s->batch_size;
  h[6] = s->epochs;
  h[7] = s->seed;
  h[8] = s->cache;
  h[9] = (uint64_t)s->drop_last;
  h[10] = (uint64_t)s->balance_peer;
  h[11] = (uint64_t)s->reorder;
  h[12] = (uint64_t)s->order_algo;
  h[13] = s->imbalance;
  h[14] = (uint64_t)s->coalesce;
  h[15] = steps;
  h[16] = nsteps;
  /* h[17]: index offset, filled at the end */
  h[18] = s->ranks_per_node > 1 ? s->ranks_per_node : 0; /* 0 (files before nodes): 1 */
}

int lade_plan_write(const lade_plan_settings_t *s, size_t size, const char *path) {
  lade_plan_t *pl = NULL;
  int rc = lade_plan_create(&pl, s, size);
  if (rc) return rc;
  const lade_plan_settings_t *u = lade_plan_settings(pl);
  if (u->cache_disk) { /* version 1 has no room for the tiers of the reads, admits and moves */
    lade_plan_destroy(pl);
    return lade__fail(LADE_EUNSUPPORTED, "plan file %s: a plan with two tiers (cache_disk) cannot be written to a "
                      "plan file of version %u; compute it with lade_plan_create", path, LADE_PLAN_FILE_VERSION);
  }
  if (u->resume) {
    lade_plan_destroy(pl);
    return lade__fail(LADE_EINVAL, "plan file: a file holds a whole run from (0, 0); a resumed plan (settings.resume) "
                      "is computed, not written");
  }
  uint64_t steps = lade_plan_steps_per_epoch(pl), nsteps = steps * u->epochs, p = u->learners;
  uint64_t *index = malloc((nsteps ? nsteps : 1) * sizeof *index);
  writer_t w = {fopen(path, "wb"), 0, 1469598103934665603ull};
  if (!index || !w.f) {
    rc = !index ? lade__fail(LADE_ENOMEM, "plan file: out of memory") : lade__fail(LADE_EIO, "plan file: cannot create %s", path);
    goto out;
  }
  uint64_t h[HEADER_U64];
  settings_to_header(u, steps, nsteps, h);
  if ((rc = put(&w, h, sizeof h))) goto out;
  static const uint8_t zero[8] = {0};
  for (uint64_t i = 0; i < nsteps; i++) {
    const lade_plan_step_t *v;
    if ((rc = lade_plan_next(pl, &v))) goto out;
    index[i] = w.pos;
    uint64_t na = v->admit_offset[p], ne = v->evict_offset[p];
    uint64_t rec[8] = {v->epoch, v->step, v->shuffle_epoch, v->total, v->transfers, v->deficit, na, ne};
    if ((rc = put(&w, rec, sizeof rec)) || (rc = put(&w, v->offset, (p + 1) * 8)) ||
        (rc = put(&w, v->samples, v->total * 8)) || (rc = put(&w, v->from, v->total * 4)) ||
        (rc = put(&w, zero, (v->total * 4) % 8)) || (rc = put(&w, v->admit_offset, (p + 1) * 8)) ||
        (rc = put(&w, v->admit, na * 8)) || (rc = put(&w, v->evict_offset, (p + 1) * 8)) ||
        (rc = put(&w, v->evict, ne * 8)) || (rc = put(&w, v->transfer, v->transfers * sizeof *v->transfer)))
      goto out;
  }
  uint64_t index_at = w.pos;
  if ((rc = put(&w, index, nsteps * 8))) goto out;
  /* patch the index offset into the header, then hash the whole file again for the trailer */
  if (fflush(w.f) || fseek(w.f, 17 * 8, SEEK_SET) || fwrite(&index_at, 8, 1, w.f) != 1 || fflush(w.f)) {
    rc = lade__fail(LADE_EIO, "plan file: cannot patch the header of %s", path);
    goto out;
  }
  fclose(w.f);
  w.f = NULL;
  {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
      if (fd >= 0) close(fd);
      rc = lade__fail(LADE_EIO, "plan file: cannot reopen %s", path);
      goto out;
    }
    void *m = st.st_size ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED) {
      rc = lade__fail(LADE_EIO, "plan file: cannot map %s", path);
      goto out;
    }
    uint64_t trailer[2];
    trailer[0] = lade__hash64(m, (size_t)st.st_size, 1469598103934665603ull);
    memcpy(&trailer[1], "LADEEND", 8);
    munmap(m, (size_t)st.st_size);
    FILE *f = fopen(path, "ab");
    if (!f || fwrite(trailer, 8, 2, f) != 2 || fclose(f)) {
      rc = lade__fail(LADE_EIO, "plan file: cannot finish %s", path);
      goto out;
    }
  }
out:
  if (w.f) fclose(w.f);
  free(index);
  lade_plan_destroy(pl);
  return rc;
}

struct lade_plan_file {
  const uint8_t *map;
  size_t size;
  lade_plan_settings_t s;
  uint64_t steps, nsteps;
  const uint64_t *index;
  lade_plan_step_t view;
};

static int bad(lade_plan_file_t *f, const char *path, const char *why) {
  lade_plan_file_close(f);
  return lade__fail(LADE_EFORMAT, "plan file %s: %s", path, why);
}

int lade_plan_file_open(lade_plan_file_t **out, const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return lade__fail(LADE_ENOENT, "plan file: cannot open %s", path);
  struct stat st;
  if (fstat(fd, &st)) {
    close(fd);
    return lade__fail(LADE_EIO, "plan file: cannot stat %s", path);
  }
  lade_plan_file_t *f = calloc(1, sizeof *f);
  if (!f) {
    close(fd);
    return lade__fail(LADE_ENOMEM, "plan file: out of memory");
  }
  f->size = (size_t)st.st_size;
  if (f->size < HEADER_U64 * 8 + 16) {
    close(fd);
    return bad(f, path, "too short to be a plan file");
  }
  if (f->size % 8) { /* every field is 8-byte aligned, the trailer too */
    close(fd);
    return bad(f, path, "truncated (size not a multiple of 8 bytes)");
  }
  void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    free(f);
    return lade__fail(LADE_EIO, "plan file: cannot map %s", path);
  }
  f->map = m;
  const uint64_t *h = m;
  if (memcmp(h, "LADEPLAN", 8)) return bad(f, path, "not a lade plan file (bad magic)");
  if ((uint32_t)h[1] != LADE_PLAN_FILE_VERSION) {
    char msg[128];
    snprintf(msg, sizeof msg, "version %u, this build reads version %u", (unsigned)(uint32_t)h[1],
             LADE_PLAN_FILE_VERSION);
    return bad(f, path, msg);
  }
  const uint64_t *tr = (const uint64_t *)(f->map + f->size - 16);
  if (memcmp(&tr[1], "LADEEND", 8)) return bad(f, path, "truncated (no trailer)");
  if (lade__hash64(f->map, f->size - 16, 1469598103934665603ull) != tr[0])
    return bad(f, path, "checksum mismatch (corrupted)");
  lade_plan_settings_t *s = &f->s;
  lade_plan_settings_default(s, sizeof *s);
  s->kind = (int)h[2];
  s->samples = h[3];
  s->learners = (uint32_t)h[4];
  s->batch_size = (uint32_t)h[5];
  s->epochs = h[6];
  s->seed = h[7];
  s->cache = h[8];
  s->drop_last = (int)h[9];
  s->balance_peer = (int)h[10];
  s->reorder = (int)h[11];
  s->order_algo = (int)h[12];
  s->imbalance = (uint32_t)h[13];
  s->coalesce = (int)h[14];
  s->ranks_per_node = h[18] ? (uint32_t)h[18] : 1;
  f->steps = h[15];
  f->nsteps = h[16];
  /* no sum or product of file fields may wrap: each is bounded first */
  if (h[17] < HEADER_U64 * 8 || h[17] > f->size - 16 || h[17] % 8 || f->nsteps > (f->size - 16 - h[17]) / 8)
    return bad(f, path, "index out of bounds");
  if (h[4] == 0 || h[4] > UINT32_MAX) return bad(f, path, "learner count out of range");
  if (h[18] > h[4] || (h[18] && h[4] % h[18])) return bad(f, path, "ranks_per_node does not divide the learners");
  f->index = (const uint64_t *)(f->map + h[17]);
  *out = f;
  return 0;
}

void lade_plan_file_close(lade_plan_file_t *f) {
  if (!f) return;
  if (f->map) munmap((void *)f->map, f->size);
  free(f);
}

const lade_plan_settings_t *lade_plan_file_settings(const lade_plan_file_t *f) { return &f->s; }
uint64_t lade_plan_file_steps(const lade_plan_file_t *f) { return f->nsteps; }

/* Takes n items of `size` bytes from the unread part [*q, end) of a step
 * record, rounded up to 8 bytes; false when they do not fit (n is a file
 * field: no product or sum here may wrap). */
static bool take(const uint8_t **q, const uint8_t *end, uint64_t n, size_t size, const void **out) {
  uint64_t room = (uint64_t)(end - *q);
  if (n > room / size) return false;
  uint64_t bytes = (n * size + 7) / 8 * 8;
  if (bytes > room) return false;
  *out = *q;
  *q += bytes;
  return true;
}

/* Offsets the contract promises: off[0] = 0, ordered, off[p] = last. */
static bool offsets_ok(const uint64_t *off, uint64_t p, uint64_t last) {
  if (off[0] != 0 || off[p] != last) return false;
  for (uint64_t r = 0; r < p; r++)
    if (off[r] > off[r + 1]) return false;
  return true;
}

int lade_plan_file_step(lade_plan_file_t *f, uint64_t i, const lade_plan_step_t **out) {
  if (i >= f->nsteps)
    return lade__fail(LADE_ERANGE, "plan file: step %llu of %llu", (unsigned long long)i, (unsigned long long)f->nsteps);
  uint64_t p = f->s.learners, at = f->index[i];
  if (at % 8 || at < HEADER_U64 * 8 || at > f->size - 16 || f->size - 16 - at < 64)
    return lade__fail(LADE_EFORMAT, "plan file: step %llu out of bounds", (unsigned long long)i);
  const uint64_t *rec = (const uint64_t *)(f->map + at);
  uint64_t total = rec[3], nt = rec[4], na = rec[6], ne = rec[7];
  lade_plan_step_t *v = &f->view;
  memset(v, 0, sizeof *v);
  v->epoch = rec[0];
  v->step = rec[1];
  v->shuffle_epoch = rec[2];
  v->total = total;
  v->transfers = nt;
  v->deficit = rec[5];
  v->learners = (uint32_t)p;
  v->ranks_per_node = f->s.ranks_per_node;
  const uint8_t *q = (const uint8_t *)(rec + 8), *end = f->map + f->size - 16;
  const void *a[8];
  bool ok = take(&q, end, p + 1, 8, &a[0]) && take(&q, end, total, 8, &a[1]) && take(&q, end, total, 4, &a[2]) &&
            take(&q, end, p + 1, 8, &a[3]) && take(&q, end, na, 8, &a[4]) && take(&q, end, p + 1, 8, &a[5]) &&
            take(&q, end, ne, 8, &a[6]) && take(&q, end, nt, sizeof(lade_plan_transfer_t), &a[7]);
  if (!ok) return lade__fail(LADE_EFORMAT, "plan file: step %llu out of bounds", (unsigned long long)i);
  v->offset = a[0];
  v->samples = a[1];
  v->from = a[2];
  v->admit_offset = a[3];
  v->admit = a[4];
  v->evict_offset = a[5];
  v->evict = a[6];
  v->transfer = a[7];
  /* what include/lade/plan.h promises a reader: learner r's slices lie in
   * the arrays, and transfers name learners of the plan */
  ok = offsets_ok(v->offset, p, total) && offsets_ok(v->admit_offset, p, na) && offsets_ok(v->evict_offset, p, ne);
  for (uint64_t t = 0; ok && t < nt; t++) ok = v->transfer[t].src < p && v->transfer[t].dst < p;
  if (!ok) return lade__fail(LADE_EFORMAT, "plan file: step %llu is inconsistent", (unsigned long long)i);
  *out = v;
  return 0;
}
