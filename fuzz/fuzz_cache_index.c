/*
 * fuzz_cache_index.c - libFuzzer target for what the disk cache tier reads
 * back from its folder (src/cache/diskcache.c): the INDEX file a clean close
 * writes, and the 56-byte header of an entry file. Both live on a disk
 * anybody with the folder's owner's rights can write, and survive crashes.
 *
 * Each run starts from a folder holding two sound entries (keys 1 and 2,
 * put by the tier itself), then replaces one file with the input and
 * reopens the tier:
 *
 *   byte 0, bits 0-1: 0 INDEX as given; 1 INDEX with its header rebuilt
 *                     (magic, count, both checksums right) over the rest,
 *                     so the records themselves are reached; 2 entry file
 *                     of key 1 as given; 3 entry file of key 1 with its
 *                     header checksum and payload checksum made right
 *   bit 2: entry modes: drop INDEX so open scans the headers too
 *   bits 3-4: policy (fifo, lru, clairvoyant); bit 5: capacity 8 KiB, else 1 MiB
 *   the rest: the file's bytes
 *
 * Then every key the input names (and 1, 2) is read back and a new entry
 * put. The tier's promises checked: it never holds more than its capacity;
 * a get of key 1 or 2 returns either a miss or exactly the bytes that were
 * put (or, in entry modes, exactly the payload of a sound input file); a
 * put is then read back whole.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HDR 56
static char g_dir[256], g_ns[512];

static uint64_t nu_fn(void *ctx, uint64_t key) { return lade__mix64(key) % 1000; }

static lade__cache_t *open_tier(int policy, uint64_t cap) {
  lade__cache_opts_t o = {.dir = g_dir, .ns = "fuzz", .capacity = cap, .policy = policy, .next_use = nu_fn};
  lade__cache_t *c = NULL;
  if (lade__cache_open(&c, &o) != 0) return NULL;
  return c;
}

static void payload(uint64_t key, uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(key * 37 + i * 11);
}

static void write_file(const char *rel, const void *a, size_t na, const void *b, size_t nb) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", g_ns, rel);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) abort();
  if ((na && write(fd, a, na) != (ssize_t)na) || (nb && write(fd, b, nb) != (ssize_t)nb)) abort();
  close(fd);
}

/* Removes every entry file and INDEX: the next run starts empty. */
static void clear_folder(void) {
  char path[600];
  for (unsigned sub = 0; sub < 256; sub++) {
    snprintf(path, sizeof path, "%s/%02x", g_ns, sub);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d)))
      if (de->d_name[0] != '.') {
        char p2[900];
        snprintf(p2, sizeof p2, "%s/%s", path, de->d_name);
        unlink(p2);
      }
    if (d) closedir(d);
  }
  snprintf(path, sizeof path, "%s/INDEX", g_ns);
  unlink(path);
}

static void setup(void) {
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(g_dir, sizeof g_dir, "%s/lade_fuzz_cache.XXXXXX", base);
  if (!mkdtemp(g_dir)) abort();
  lade__cache_t *c = open_tier(LADE__CACHE_FIFO, 1 << 20);
  if (!c) abort();
  lade__cache_close(c);
  DIR *d = opendir(g_dir);
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (strlen(de->d_name) == 16) snprintf(g_ns, sizeof g_ns, "%s/%s", g_dir, de->d_name);
  if (d) closedir(d);
  if (!g_ns[0]) abort();
}

static void check_get(lade__cache_t *c, uint64_t key, const uint8_t *want, size_t wlen, const uint8_t *alt,
                      size_t alen, lade__buf_t *b) {
  int rc = lade__cache_get(c, key, b);
  if (rc == LADE_ENOENT) return;
  if (rc != 0) abort();
  bool is_want = want && b->len == wlen && memcmp(b->data, want, wlen) == 0;
  bool is_alt = alt && b->len == alen && memcmp(b->data, alt, alen) == 0;
  if (!is_want && !is_alt) abort(); /* bytes served that nobody put */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_ns[0]) setup();
  if (size < 1) return 0;
  int mode = data[0] & 3, scan = (data[0] >> 2) & 1;
  int policy = 1 + ((data[0] >> 3) & 3) % 3;
  uint64_t cap = (data[0] & 0x20) ? 8192 : 1 << 20;
  const uint8_t *in = data + 1;
  size_t n = size - 1;

  /* two sound entries and an INDEX, written by the tier */
  uint8_t p1[300], p2[5000];
  payload(1, p1, sizeof p1);
  payload(2, p2, sizeof p2);
  lade__cache_t *c = open_tier(LADE__CACHE_FIFO, 1 << 20);
  if (!c) abort();
  if (lade__cache_put_ver(c, 1, 0, p1, sizeof p1) || lade__cache_put_ver(c, 2, 0, p2, sizeof p2)) abort();
  lade__cache_close(c);

  uint8_t *copy = malloc(n + HDR + 1);
  if (!copy) return 0;
  memcpy(copy, in, n);
  const uint8_t *alt = NULL; /* the payload a sound input entry holds */
  size_t alen = 0;
  uint64_t keys[16] = {1, 2};
  size_t nkeys = 2;
  if (mode == 0 || mode == 1) {
    size_t recs = n / 32;
    for (size_t i = 0; i < recs && nkeys < 16; i++) memcpy(&keys[nkeys++], in + i * 32, 8);
    if (mode == 0) {
      write_file("INDEX", in, n, NULL, 0);
    } else {
      uint64_t h[4];
      memcpy(h, "LADEIX02", 8);
      h[1] = recs;
      h[2] = lade_checksum(in, recs * 32, 0x4c414445495831ull);
      h[3] = lade_checksum(h, 24, 0x4c414445495831ull);
      write_file("INDEX", h, sizeof h, in, recs * 32);
    }
  } else {
    if (mode == 3 && n >= HDR) { /* make the checksums right: magic, key, len, seq, ver, sum, hsum */
      uint64_t f[7];
      memcpy(f, copy, HDR);
      f[2] = n - HDR; /* the length the file size says */
      f[5] = lade_checksum(copy + HDR, n - HDR, 0x4c414445434531ull);
      memcpy(copy, f, HDR);
      f[6] = lade_checksum(copy, 48, 0x4c414445434531ull);
      memcpy(copy, f, HDR);
      if (memcmp(copy, "LADECE02", 8) == 0 && f[1] == 1 && f[4] == 0) alt = copy + HDR, alen = n - HDR;
    }
    write_file("01/0000000000000001", copy, n, NULL, 0);
    if (scan) {
      char path[600];
      snprintf(path, sizeof path, "%s/INDEX", g_ns);
      unlink(path);
    }
  }

  c = open_tier(policy, cap);
  if (c) {
    lade__cache_stats_t st;
    lade__cache_stats(c, &st);
    if (st.used > st.capacity) abort();
    lade__buf_t b = {0};
    check_get(c, 1, p1, sizeof p1, alt, alen, &b);
    check_get(c, 2, p2, sizeof p2, NULL, 0, &b);
    for (size_t i = 2; i < nkeys; i++) {
      int rc = lade__cache_get(c, keys[i], &b);
      if (rc != 0 && rc != LADE_ENOENT) abort();
    }
    uint8_t p3[100];
    payload(3, p3, sizeof p3);
    for (size_t i = 0; i < nkeys; i++) {
      if (lade__cache_put(c, keys[i], p3, sizeof p3) != 0) abort();
      int rc = lade__cache_get(c, keys[i], &b);
      if (rc == 0 && (b.len != sizeof p3 || memcmp(b.data, p3, sizeof p3))) abort();
      lade__cache_stats(c, &st);
      if (st.used > st.capacity) abort();
    }
    lade__buf_free(&b);
    lade__cache_close(c);
  }
  lade__clear_error();
  free(copy);
  clear_folder();
  return 0;
}
