/*
 * plan_warm.c - a plan's initial caches (lade_plan_warm) as a loader's warm
 * restart gives them (docs/plan.md "Warm restarts"; plan_warm.h): read from
 * a loader's disk cache folder or from a listing, handed to a plan as the
 * loader hands them, and the simulator's per-epoch counts over such a plan.
 *
 * A loader that reopens its cache_dir under a planned kind takes as its
 * plan's start the entries whose stored version is the sample's now, in
 * ascending sample order, at most the plan's `cache` of them, learners in
 * rank order (src/engine/pipeline.c warm_plan, src/engine/fetch.c
 * lade__fetch_survivors). Here the entries are those whose header is sound
 * for their name, as the disk tier's scan finds them (src/cache/diskcache.c,
 * the layout in docs/cache.md "Disk layout"); the versions need the dataset
 * and are not checked (a sample changed since it was cached is a survivor
 * here and a miss in the loader), nor the payloads' checksums.
 *
 * Public headers only: the entry header's layout is repeated below.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lade/lade.h"
#include "lade/plan.h"
#include "plan_warm.h"
#include "shown.h"

/* The disk tier's entry header (src/cache/diskcache.c, docs/cache.md): 56
 * bytes, host byte order, "LADECE02", then the header's checksum of the 48
 * bytes before it with a fixed seed. */
#define ENTRY_HDR 56
#define ENTRY_SEED 0x4c414445434531ull
typedef struct entry_hdr {
  char magic[8];
  uint64_t key, len, seq, ver, sum, hsum;
} entry_hdr_t;
_Static_assert(sizeof(entry_hdr_t) == ENTRY_HDR, "the disk tier's entry header is 56 bytes");

enum { WHY = 2 * PATH_MAX + 512 };

static int say(char *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int say(char *why, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, WHY, fmt, ap);
  va_end(ap);
  return -1;
}

/* A path as printed (control bytes escaped); a static buffer per slot. */
static const char *shown(const char *s, int slot) {
  static char buf[2][4 * PATH_MAX + 1];
  return lade_tool_shown(s, buf[slot & 1], sizeof buf[0]);
}

/* ---------------------------------------------------------------- the lists */

static int warm_push(lade_tool_warm_t *w, uint32_t r, uint64_t s) {
  if (r >= w->learners) {
    uint32_t m = r + 1;
    uint64_t *n = realloc(w->n, m * sizeof *n);
    if (n) w->n = n;
    uint64_t *cap = n ? realloc(w->cap, m * sizeof *cap) : NULL;
    if (cap) w->cap = cap;
    uint64_t **list = cap ? realloc(w->list, m * sizeof *list) : NULL;
    if (!list) return -1;
    w->list = list;
    for (uint32_t k = w->learners; k < m; k++) w->n[k] = w->cap[k] = 0, w->list[k] = NULL;
    w->learners = m;
  }
  if (w->n[r] == w->cap[r]) {
    uint64_t c = w->cap[r] ? 2 * w->cap[r] : 256;
    uint64_t *l = realloc(w->list[r], c * sizeof *l);
    if (!l) return -1;
    w->list[r] = l;
    w->cap[r] = c;
  }
  w->list[r][w->n[r]++] = s;
  w->total++;
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Each learner's samples ascending, each once: the loader's order. */
static void warm_tidy(lade_tool_warm_t *w) {
  w->total = 0;
  for (uint32_t r = 0; r < w->learners; r++) {
    uint64_t *l = w->list[r], m = 0;
    if (w->n[r]) qsort(l, w->n[r], sizeof *l, cmp_u64);
    for (uint64_t i = 0; i < w->n[r]; i++)
      if (!m || l[m - 1] != l[i]) l[m++] = l[i];
    w->n[r] = m;
    w->total += m;
  }
}

void lade_tool_warm_free(lade_tool_warm_t *w) {
  if (!w) return;
  for (uint32_t r = 0; r < w->learners; r++) free(w->list[r]);
  free(w->list);
  free(w->n);
  free(w->cap);
  memset(w, 0, sizeof *w);
}

uint64_t lade_tool_warm_handed(const lade_tool_warm_t *w, uint64_t cache) {
  uint64_t n = 0;
  for (uint32_t r = 0; w && r < w->learners; r++) n += w->n[r] < cache ? w->n[r] : cache;
  return n;
}

/* ---------------------------------------------------------------- a listing */

/* One line's numbers (after a # comment is cut): 0, 1 or 2 of them into v;
 * -1 when it holds anything else. */
static int line_numbers(char *line, uint64_t v[2]) {
  char *hash = strchr(line, '#'), *p = line;
  if (hash) *hash = '\0';
  int k = 0;
  for (;;) {
    while (isspace((unsigned char)*p)) p++;
    if (!*p) return k;
    if (k == 2 || !isdigit((unsigned char)*p)) return -1;
    char *end;
    errno = 0;
    v[k++] = strtoull(p, &end, 10);
    if (errno || (*end && !isspace((unsigned char)*end))) return -1;
    p = end;
  }
}

static int listing_read(const char *path, uint32_t learner, uint64_t samples, uint32_t learners,
                        lade_tool_warm_t *w, char *why) {
  FILE *f = fopen(path, "r");
  if (!f) return say(why, "%s: cannot open: %s", shown(path, 0), strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  unsigned long long no = 0;
  int rc = 0;
  while (!rc && getline(&line, &cap, f) >= 0) {
    no++;
    line[strcspn(line, "\r\n")] = '\0';
    char text[96];
    snprintf(text, sizeof text, "%s", line); /* as written, for the message */
    uint64_t v[2] = {0, 0};
    int k = line_numbers(line, v);
    uint64_t r = k == 2 ? v[0] : learner, s = k == 2 ? v[1] : v[0];
    if (k < 0)
      rc = say(why, "%s:%llu: a line is SAMPLE or LEARNER SAMPLE (non-negative integers), got '%s'", shown(path, 0),
               no, shown(text, 1));
    else if (k == 0)
      continue;
    else if (k == 2 && r >= learners)
      rc = say(why, "%s:%llu: learner %llu is not below --learners %u", shown(path, 0), no, (unsigned long long)r,
               learners);
    else if (r >= learners)
      rc = say(why, "%s:%llu: a line of one sample is learner %llu's (this --warm's place), which is not below "
               "--learners %u; name the learner: LEARNER SAMPLE", shown(path, 0), no, (unsigned long long)r, learners);
    else if (s >= samples)
      rc = say(why, "%s:%llu: sample %llu is not below --samples %llu", shown(path, 0), no, (unsigned long long)s,
               (unsigned long long)samples);
    else if (warm_push(w, (uint32_t)r, s))
      rc = say(why, "%s:%llu: out of memory", shown(path, 0), no);
  }
  if (!rc && ferror(f)) rc = say(why, "%s: cannot read: %s", shown(path, 0), strerror(errno));
  free(line);
  fclose(f);
  return rc;
}

/* ---------------------------------------------------------------- a cache folder */

/* The NAMESPACE of a dataset folder: "SOURCE|N samples|names HEX"
 * (src/engine/fetch.c dataset_ns). 0, -1 without one, -2 for another text. */
static int ns_read(const char *nsdir, char *source, size_t ssize, uint64_t *count) {
  char path[PATH_MAX + 16], text[PATH_MAX + 256];
  snprintf(path, sizeof path, "%s/NAMESPACE", nsdir);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  char *names = NULL;
  for (char *p = strstr(text, "|names "); p; p = strstr(p + 1, "|names ")) names = p;
  if (!names) return -2;
  *names = '\0';
  char *bar = strrchr(text, '|');
  unsigned long long c = 0;
  int len = 0;
  if (!bar || sscanf(bar + 1, "%llu samples%n", &c, &len) != 1 || bar[1 + len]) return -2;
  *bar = '\0';
  snprintf(source, ssize, "%s", text);
  *count = c;
  return 0;
}

static int hex16(const char *s, uint64_t *v) {
  uint64_t x = 0;
  for (int i = 0; i < 16; i++) {
    int d = s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10 : -1;
    if (d < 0) return 0;
    x = x << 4 | (uint64_t)d;
  }
  *v = x;
  return s[16] == '\0';
}

/* The dataset folder of cache folder dir (dir itself when it holds a
 * NAMESPACE) of `samples` samples (any when 0) and `source` (any when
 * NULL) into out. 0; 1 when there is none, 2 when there are several (why
 * says what there is). */
static int ns_find(const char *dir, uint64_t samples, const char *source, char *out, size_t osize, uint64_t *count,
                   char *why) {
  char src[PATH_MAX + 256], sub[PATH_MAX + 32], seen[1024] = "", picked[256] = "";
  uint64_t c = 0;
  int r = ns_read(dir, src, sizeof src, &c);
  if (r == -2) return say(why, "%s/NAMESPACE: not a lade cache's NAMESPACE", shown(dir, 0)), 1;
  if (r == 0) {
    if ((samples && c != samples) || (source && strcmp(source, src)))
      return say(why, "%s/NAMESPACE: the cache of a dataset of %llu samples (%s), not of --samples %llu",
                 shown(dir, 0), (unsigned long long)c, shown(src, 1), (unsigned long long)samples), 1;
    snprintf(out, osize, "%s", dir);
    *count = c;
    return 0;
  }
  DIR *d = opendir(dir);
  if (!d) return say(why, "%s: cannot list: %s", shown(dir, 0), strerror(errno)), 1;
  int found = 0, match = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    uint64_t h;
    if (!hex16(de->d_name, &h)) continue;
    snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
    if (ns_read(sub, src, sizeof src, &c)) continue;
    found++;
    if ((samples && c != samples) || (source && strcmp(source, src))) {
      size_t n = strlen(seen);
      snprintf(seen + n, sizeof seen - n, "%s%.16s (%llu samples, %s)", n ? ", " : "", de->d_name,
               (unsigned long long)c, shown(src, 1));
      continue;
    }
    if (!match++) {
      snprintf(out, osize, "%s", sub);
      *count = c;
    }
    size_t n = strlen(picked);
    snprintf(picked + n, sizeof picked - n, "%s%.16s", n ? ", " : "", de->d_name);
  }
  closedir(d);
  if (!found)
    return say(why, "%s: not a lade cache folder (no NAMESPACE in it or in a dataset folder of it)", shown(dir, 0)), 1;
  if (!match)
    return say(why, "%s: no dataset of --samples %llu cached in it (it holds %s)", shown(dir, 0),
               (unsigned long long)samples, seen), 1;
  if (match > 1)
    return say(why, "%s: %d dataset folders of %llu samples in it (%s): name the one meant, %s/NAME", shown(dir, 0),
               match, (unsigned long long)*count, picked, shown(dir, 0)), 2;
  return 0;
}

/* Whether the entry file `name` of folder fd is sound for key, as the disk
 * tier's scan checks it: magic, header checksum, key, length = file size. */
static int entry_sound(int fd, const char *name, uint64_t key) {
  int efd = openat(fd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (efd < 0) return 0;
  struct stat st;
  entry_hdr_t h;
  int ok = fstat(efd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= ENTRY_HDR &&
           pread(efd, &h, sizeof h, 0) == (ssize_t)sizeof h && !memcmp(h.magic, "LADECE02", 8) && h.key == key &&
           h.hsum == lade_checksum(&h, offsetof(entry_hdr_t, hsum), ENTRY_SEED) &&
           h.len == (uint64_t)st.st_size - ENTRY_HDR;
  close(efd);
  return ok;
}

/* The sound entries of dataset folder nsdir (<2 hex>/<16 hex key>) below
 * `samples`, as learner's. */
static int ns_entries(const char *nsdir, uint32_t learner, uint64_t samples, lade_tool_warm_t *w, char *why) {
  char p[PATH_MAX + 8];
  for (unsigned sub = 0; sub < 256; sub++) {
    snprintf(p, sizeof p, "%s/%02x", nsdir, sub);
    DIR *d = opendir(p);
    if (!d && errno == ENOENT) continue;
    if (!d) return say(why, "%s: cannot list: %s", shown(p, 0), strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
      uint64_t key;
      if (!hex16(de->d_name, &key) || (key & 0xff) != sub || key >= samples) continue;
      if (entry_sound(dirfd(d), de->d_name, key) && warm_push(w, learner, key))
        rc = say(why, "%s: out of memory for its entries", shown(nsdir, 0));
    }
    closedir(d);
    if (rc) return rc;
  }
  return 0;
}

/* ---------------------------------------------------------------- entry points */

int lade_tool_warm_add(const char *cmd, const char *path, uint32_t learner, uint64_t samples, uint32_t learners,
                       lade_tool_warm_t *w) {
  static char why[WHY];
  struct stat st;
  int rc = 0;
  if (stat(path, &st) != 0) {
    rc = say(why, "%s: %s", shown(path, 0), strerror(errno));
  } else if (!S_ISDIR(st.st_mode)) {
    rc = listing_read(path, learner, samples, learners, w, why);
  } else if (learner >= learners) {
    rc = say(why, "%s: --warm number %u gives learner %u's cache, and --learners is %u (a listing of LEARNER SAMPLE "
             "lines names its learners)", shown(path, 0), learner + 1, learner, learners);
  } else {
    char ns[PATH_MAX + 32];
    uint64_t count = 0;
    rc = ns_find(path, samples, NULL, ns, sizeof ns, &count, why) ? -1 : ns_entries(ns, learner, samples, w, why);
  }
  warm_tidy(w);
  if (!rc) return 0;
  fprintf(stderr, "lade %s: --warm %s\n", cmd, why);
  return 2;
}

int lade_tool_warm_of_source(const char *cache_dir, const char *source, uint64_t *samples, lade_tool_warm_t *w,
                             char *why, size_t wsize) {
  static char msg[WHY];
  char abs[PATH_MAX], ns[PATH_MAX + 32];
  const char *where = source;
  *samples = 0;
  if (!strstr(source, "://") && realpath(source, abs)) where = abs; /* as the loader names it */
  uint64_t count = 0;
  int rc = ns_find(cache_dir, 0, where, ns, sizeof ns, &count, msg);
  if (rc == 0) rc = ns_entries(ns, 0, count, w, msg) ? 2 : 0;
  if (rc == 1) return 0; /* nothing of this dataset there: a cold start */
  warm_tidy(w);
  if (rc) {
    snprintf(why, wsize, "%s", msg);
    return -1;
  }
  *samples = count;
  return 0;
}

int lade_tool_plan_open(const lade_plan_settings_t *s, const lade_tool_warm_t *w, lade_plan_t **out) {
  lade_plan_t *pl = NULL;
  int rc = lade_plan_create(&pl, s, sizeof *s);
  uint64_t most = rc ? 0 : lade_plan_settings(pl)->cache;
  for (uint32_t r = 0; !rc && w && r < w->learners; r++) /* rank order, the first `cache` of each */
    if (w->n[r] && most) rc = lade_plan_warm(pl, r, w->list[r], w->n[r] < most ? w->n[r] : most);
  if (rc) {
    lade_plan_destroy(pl);
    pl = NULL;
  }
  *out = pl;
  return rc;
}
