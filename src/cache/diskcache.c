/*
 * diskcache.c - the disk tier: one file per entry under
 *
 *   dir/<16 hex: checksum of ns>/NAMESPACE      the ns text
 *                               /LOCK           flock()ed while open
 *                               /INDEX          entry list of the last clean close
 *                               /IXPART.<pid>.<n>  node mode: a closing process's part of it
 *                               /<2 hex>/<16 hex key>   entries (2 hex: key & 0xff)
 *                               /.tmp.<pid>.<n> entries being written
 *
 * An entry file is a 56-byte header {magic "LADECE02", key, payload length,
 * insertion sequence number, the sample's version, checksum of the payload,
 * checksum of the previous 48 bytes} followed by the payload. A put writes an unnamed file
 * (O_TMPFILE) and links it under the entry's name - or, to replace an
 * entry, under a temporary name rename()d over it; where O_TMPFILE is not
 * supported it writes a named temporary and rename()s it. A reader or a
 * crash sees either the old complete file or the new complete one. There is no fsync: this is
 * a cache, and a kill -9 loses nothing the kernel has accepted; after a power
 * loss a renamed file may be short or hold zeros, which the length and
 * checksums catch on read (the file is removed and the read is a miss). Open
 * removes temporaries left by a crash and rebuilds the index from INDEX
 * (see load_index) or, without one, from the headers alone, ordered by
 * sequence number, so FIFO order (and LRU order as of the last insertion)
 * carries over to the next run.
 *
 * Each entry is charged its file size rounded up to 4096-byte blocks.
 *
 * Lock: `mu` guards the index, the entries' fields, the counters and every
 * change to the set of entry names (rename into place, unlink on eviction or
 * corruption), so the index always names exactly the files present. Payload
 * I/O runs outside it: get pins the entry, reads its file unlocked and
 * re-locks to count; put writes its temporary unlocked. A file evicted or
 * replaced while being read is either read whole (POSIX keeps an unlinked
 * open file) or not found (a miss); the header's key and checksums are
 * verified, so the bytes served always belong to the key. No other lock is
 * taken while holding mu.
 * The LOCKs this process holds are listed in heldlock.h's list (its own
 * lock), so a second loader of this process is told which it met.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cache/claims.h"
#include "cache/heldlock.h"
#include "cache/tier.h"

#define HDR_BYTES 56
#define MAX_LEN ((uint64_t)INT64_MAX - HDR_BYTES - BLOCK) /* longest payload a file can hold: charge_of never wraps */
#define BLOCK 4096
#define SUM_SEED 0x4c414445434531ull /* fixed seed of the entry checksums */
#define NS_SEED 0x4c4144454e53ull    /* fixed seed of the namespace folder's name */
static const char MAGIC[8] = {'L', 'A', 'D', 'E', 'C', 'E', '0', '2'};

typedef struct hdr {
  char magic[8];
  uint64_t key, len, seq, ver, sum, hsum;
} hdr_t;
_Static_assert(sizeof(hdr_t) == HDR_BYTES, "entry header is 56 bytes");

typedef struct diskcache {
  lade__cache_t base; /* ops, mu, ix, st */
  uint64_t seq, tmpn;
  uint64_t reserved; /* charges of the puts being written (room made for them) */
  int dirfd, lockfd;
  _Atomic int no_tmpfile; /* the file system refused O_TMPFILE: named temporaries */
  bool opened;             /* open succeeded: close writes INDEX */
  /* node mode (opts node_job): one folder for every rank of a node of one job (docs/cache.md, Node cache) */
  bool node;
  double claim_stale_s;    /* node: a claim to fetch older than this is taken over (claims.h) */
  bool first;              /* node: this process listed the folder at open and owns what it found */
  bool closing;            /* node: close forgets its entries but their files stay, and stay charged */
  int usedfd;
  struct node_shared {     /* node: the USED file, mapped by every process of the job */
    _Atomic uint64_t used; /* bytes charged by every process's entries and puts in progress */
    _Atomic uint64_t seq;  /* insertion sequence numbers, node-wide */
  } *shared;
  char path[LADE__PATH_MAX]; /* the namespace folder */
  lade__heldlock_t held; /* listed while this process locks LOCK (heldlock.h) */
} diskcache_t;

#define SAME_PROCESS_ADVICE                                                                                         \
  ". Two loaders share one cache_dir when both set node_cache=on and the same job_id, as the ranks of one job on " \
  "a node do (docs/cache.md, Node cache); else give each loader its own cache_dir"

typedef struct name {
  char s[24];
} name_t;

static name_t entry_name(uint64_t key) {
  name_t n;
  snprintf(n.s, sizeof n.s, "%02x/%016llx", (unsigned)(key & 0xff), (unsigned long long)key);
  return n;
}

static uint64_t charge_of(uint64_t len) { return (HDR_BYTES + len + BLOCK - 1) / BLOCK * BLOCK; }
uint64_t lade__diskcache_charge(uint64_t len) { return charge_of(len); }

static uint64_t hdr_sum(const hdr_t *h) { return lade_checksum(h, offsetof(hdr_t, hsum), SUM_SEED); }

/* ---- folders */

/* The tier's folders: private to the user (core's mkdir -p, 0700). */
static int ensure_dir(const char *path) {
  int rc = lade__mkdir_private(path);
  return rc ? lade__fail_prefix(rc, "cache ") : 0;
}

static int write_all(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t w = writev(fd, iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
  return 0;
}

/* Writes a small control file (NAMESPACE, INDEX) whole: to .tmp.<name>,
 * then rename()d over name. 0, or -1 with errno set. */
static int replace_file(diskcache_t *d, const char *name, struct iovec *iov, int n) {
  char tmp[96];
  snprintf(tmp, sizeof tmp, ".tmp.%s", name);
  int fd = openat(d->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int rc = write_all(fd, iov, n), err = errno;
  if (close(fd) != 0 && rc == 0) rc = -1, err = errno;
  if (rc == 0 && renameat(d->dirfd, tmp, d->dirfd, name) != 0) rc = -1, err = errno;
  if (rc != 0) {
    unlinkat(d->dirfd, tmp, 0);
    errno = err;
  }
  return rc;
}

/* Checks the NAMESPACE file against ns, writing it when missing. */
static int check_namespace(diskcache_t *d, const char *ns) {
  size_t n = strlen(ns);
  /* O_NONBLOCK everywhere here: a FIFO planted under one of our names must
   * not block open() (a FIFO with no writer blocks it for ever); a
   * non-regular entry is corrupt */
  int fd = openat(d->dirfd, "NAMESPACE", O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat nst;
  if (fd >= 0 && (fstat(fd, &nst) != 0 || !S_ISREG(nst.st_mode))) {
    close(fd);
    return lade__fail(LADE_EFORMAT, "cache_dir %s: NAMESPACE is not a regular file; remove it or use another folder",
                      d->path);
  }
  if (fd >= 0) {
    char *buf = malloc(n + 2);
    if (!buf) return close(fd), lade__fail(LADE_ENOMEM, "cache: out of memory");
    ssize_t got = pread(fd, buf, n + 1, 0);
    close(fd);
    bool same = got == (ssize_t)n && memcmp(buf, ns, n) == 0;
    free(buf);
    if (same) return 0;
    if (got > 0)
      return lade__fail(LADE_ESTATE, "cache folder %s: its NAMESPACE names another dataset than '%s'", d->path, ns);
    /* empty or unreadable: rewrite it */
  } else if (errno != ENOENT) {
    return lade__fail(LADE_EIO, "cache file %s/NAMESPACE: %s", d->path, strerror(errno));
  }
  struct iovec iov = {(void *)ns, n};
  if (replace_file(d, "NAMESPACE", &iov, 1) != 0)
    return lade__fail(LADE_EIO, "cache file %s/NAMESPACE: cannot write: %s", d->path, strerror(errno));
  return 0;
}

/* ---- entry files */

/* Writes an entry's header and payload into a new file that has no name
 * yet: an O_TMPFILE inode (Linux; a crash frees it, and creating one skips
 * the cost some systems put on creating a named file: 0.7 ms against
 * 0.02 ms on the project VM), or, where the file system lacks O_TMPFILE,
 * the named temporary `tmp`; with `reuse`, tmp is an existing file
 * (an evicted entry's) rewritten in place. Returns the open descriptor of the unnamed
 * file, -2 when `tmp` was written instead (and closed), or -1 with the
 * error set. */
static int write_tmp(diskcache_t *d, const char *tmp, bool reuse, uint64_t key, uint64_t seq, uint64_t ver,
                     const void *data, size_t len) {
  hdr_t h = {.key = key, .len = len, .seq = seq, .ver = ver, .sum = lade_checksum(data, len, SUM_SEED)};
  memcpy(h.magic, MAGIC, 8);
  h.hsum = hdr_sum(&h);
  int fd = -1;
  bool named = true;
  if (reuse) { /* an evicted entry's file, renamed to tmp for us */
    fd = openat(d->dirfd, tmp, O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      unlinkat(d->dirfd, tmp, 0);
      reuse = false;
    }
  }
#ifdef O_TMPFILE
  if (fd < 0 && !d->no_tmpfile) {
    fd = openat(d->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) named = false;
    else if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL || errno == ENOENT) d->no_tmpfile = 1;
  }
#endif
  if (fd < 0) fd = openat(d->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return lade__fail(LADE_EIO, "cache file %s/%s: cannot create: %s", d->path, tmp, strerror(errno));
  struct iovec iov[2] = {{&h, sizeof h}, {(void *)data, len}};
  int rc = write_all(fd, iov, 2);
  if (rc == 0 && reuse && ftruncate(fd, (off_t)(HDR_BYTES + len)) != 0) rc = -1; /* drop the old tail */
  int err = errno;
  if (rc == 0 && !named) return fd;
  if (close(fd) != 0 && rc == 0) rc = -1, err = errno;
  if (rc != 0) {
    if (named) unlinkat(d->dirfd, tmp, 0);
    lade__fail(LADE_EIO, "cache file %s/%s: cannot write: %s", d->path, tmp, strerror(err));
    return -1;
  }
  return -2;
}

/* Gives the file written by write_tmp (fd >= 0: unnamed; -2: named `tmp`)
 * the entry's name, atomically replacing an existing entry file: a reader
 * sees the old complete file or the new one. Locked (names change under mu).
 * 0, or -1 with errno set. */
static int place(diskcache_t *d, int fd, const char *tmp, const char *name, bool replacing) {
  if (fd >= 0) {
    char proc[40];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (!replacing && linkat(AT_FDCWD, proc, d->dirfd, name, AT_SYMLINK_FOLLOW) == 0) return 0;
    if (linkat(AT_FDCWD, proc, d->dirfd, tmp, AT_SYMLINK_FOLLOW) != 0) return -1;
  }
  if (renameat(d->dirfd, tmp, d->dirfd, name) == 0) return 0;
  int e = errno;
  unlinkat(d->dirfd, tmp, 0);
  errno = e;
  return -1;
}

enum { READ_OK, READ_GONE, READ_BAD, READ_ERR };

/* Reads and verifies the entry file of key, version ver, into out. READ_ERR
 * has set the error. */
static int read_entry(diskcache_t *d, uint64_t key, uint64_t ver, lade__buf_t *out) {
  name_t nm = entry_name(key);
  int fd = openat(d->dirfd, nm.s, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return READ_GONE;
    lade__fail(LADE_EIO, "cache file %s/%s: cannot open: %s", d->path, nm.s, strerror(errno));
    return READ_ERR;
  }
  int res = READ_BAD;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    lade__fail(LADE_EIO, "cache file %s/%s: %s", d->path, nm.s, strerror(errno));
    res = READ_ERR;
    goto done;
  }
  if (!S_ISREG(st.st_mode) || st.st_size < HDR_BYTES) goto done; /* a FIFO or device: corrupt */
  size_t len = (size_t)st.st_size - HDR_BYTES;
  if (lade__buf_reserve(out, len ? len : 1) != 0) {
    res = READ_ERR;
    goto done;
  }
  hdr_t h;
  struct iovec iov[2] = {{&h, sizeof h}, {out->data, len}};
  ssize_t got = preadv(fd, iov, 2, 0);
  if (got < 0) {
    lade__fail(LADE_EIO, "cache file %s/%s: cannot read: %s", d->path, nm.s, strerror(errno));
    res = READ_ERR;
    goto done;
  }
  if ((size_t)got != HDR_BYTES + len) goto done; /* shrank under us */
  if (memcmp(h.magic, MAGIC, 8) != 0 || h.hsum != hdr_sum(&h) || h.key != key || h.len != len || h.ver != ver)
    goto done;
  if (lade_checksum(out->data, len, SUM_SEED) != h.sum) goto done;
  out->len = len;
  res = READ_OK;
done:
  close(fd);
  return res;
}

/* ---- index upkeep (mu held) */

/* Node mode: the bytes charged on the whole node, and their changes. */
static uint64_t charged(const diskcache_t *d) {
  return d->node ? atomic_load(&d->shared->used) : d->base.ix.used + d->reserved;
}
static void node_add(diskcache_t *d, uint64_t n) { if (d->node) atomic_fetch_add(&d->shared->used, n); }
static void node_sub(diskcache_t *d, uint64_t n) { if (d->node) atomic_fetch_sub(&d->shared->used, n); }
/* Node mode: takes n bytes of the node's capacity if they fit. */
static bool node_reserve(diskcache_t *d, uint64_t n) {
  uint64_t u = atomic_load(&d->shared->used);
  do {
    if (u + n > d->base.ix.capacity) return false;
  } while (!atomic_compare_exchange_weak(&d->shared->used, &u, u + n));
  return true;
}

static void drop(diskcache_t *d, lade__centry_t *e, bool unlink_file) {
  if (unlink_file) {
    name_t nm = entry_name(e->key);
    unlinkat(d->dirfd, nm.s, 0);
  }
  if (!d->closing) node_sub(d, e->charge);
  lade__cindex_remove(&d->base.ix, e);
  if (e->refs == 0) free(e);
}

/* Evicts until `room` more bytes fit beside the entries and the puts being
 * written. With `recycle` (a temporary name), the first unpinned victim's
 * file is renamed there instead of unlinked, so the put about to write
 * reuses its inode and blocks: allocating an inode is the dearest part of a
 * put on some file systems (ext4 without a journal scans for recently
 * deleted inodes). Returns whether it did. Locked. */
static bool evict_to(diskcache_t *d, uint64_t room, const char *recycle) {
  bool recycled = false;
  /* node mode: the node's bytes, and only this process's entries to evict */
  while (charged(d) + room > d->base.ix.capacity) {
    lade__centry_t *v = lade__cindex_victim(&d->base.ix);
    if (!v) break;
    bool unlink_file = true;
    if (recycle && !recycled && v->refs == 0) {
      name_t nm = entry_name(v->key);
      if (renameat(d->dirfd, nm.s, d->dirfd, recycle) == 0) recycled = true, unlink_file = false;
    }
    drop(d, v, unlink_file);
    d->base.st.evictions++;
  }
  return recycled;
}

/* ---- open: scan */

typedef struct found {
  uint64_t key, len, seq, ver;
} found_t;

static int by_seq(const void *a, const void *b) {
  const found_t *x = a, *y = b;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static bool parse_hex16(const char *s, uint64_t *v) {
  uint64_t x = 0;
  for (int i = 0; i < 16; i++) {
    char c = s[i];
    int dg = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (dg < 0) return false;
    x = x << 4 | (uint64_t)dg;
  }
  *v = x;
  return s[16] == '\0';
}

/* Reads one entry's header; true when it is sound for key. */
static bool header_ok(int fd, uint64_t key, found_t *f) {
  struct stat st;
  hdr_t h;
  if (fstat(fd, &st) != 0 || st.st_size < HDR_BYTES) return false;
  if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) return false;
  if (memcmp(h.magic, MAGIC, 8) != 0 || h.hsum != hdr_sum(&h) || h.key != key) return false;
  if (h.len != (uint64_t)st.st_size - HDR_BYTES) return false;
  *f = (found_t){key, h.len, h.seq, h.ver};
  return true;
}

/* Node mode (below): the parts of INDEX that closing processes wrote. */
#define IX_PART "IXPART."

/* Removes what a crashed writer left in the namespace folder (temporaries)
 * and the parts of INDEX a job's last close did not merge (node mode). */
static int remove_leftovers(diskcache_t *d) {
  int fd = openat(d->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dir) {
    if (fd >= 0) close(fd);
    return lade__fail(LADE_EIO, "cache folder %s: cannot list: %s", d->path, strerror(errno));
  }
  struct dirent *de;
  while ((de = readdir(dir)))
    if (strncmp(de->d_name, ".tmp.", 5) == 0 || strncmp(de->d_name, IX_PART, strlen(IX_PART)) == 0)
      unlinkat(d->dirfd, de->d_name, 0);
  closedir(dir);
  return 0;
}

/* The 256 entry folders 00..ff (puts link into them). */
static int make_subdirs(diskcache_t *d) {
  for (unsigned sub = 0; sub < 256; sub++) {
    char sname[4];
    snprintf(sname, sizeof sname, "%02x", sub);
    if (mkdirat(d->dirfd, sname, 0700) != 0 && errno != EEXIST)
      return lade__fail(LADE_EIO, "cache folder %s/%s: cannot create: %s", d->path, sname, strerror(errno));
  }
  return 0;
}

static int scan(diskcache_t *d, found_t **out, size_t *nout) {
  found_t *v = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *de;
  for (unsigned sub = 0; sub < 256 && rc == 0; sub++) {
    char sname[4];
    snprintf(sname, sizeof sname, "%02x", sub);
    int sfd = openat(d->dirfd, sname, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *sd = sfd >= 0 ? fdopendir(sfd) : NULL;
    if (!sd) {
      if (sfd >= 0) close(sfd);
      rc = lade__fail(LADE_EIO, "cache folder %s/%s: cannot list: %s", d->path, sname, strerror(errno));
      break;
    }
    while ((de = readdir(sd))) {
      uint64_t key;
      if (strncmp(de->d_name, ".tmp.", 5) == 0) {
        unlinkat(dirfd(sd), de->d_name, 0);
        continue;
      }
      if (!parse_hex16(de->d_name, &key)) continue; /* not ours; left alone */
      found_t f;
      int efd = openat(dirfd(sd), de->d_name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      bool ok = efd >= 0 && (key & 0xff) == sub && header_ok(efd, key, &f);
      if (efd >= 0) close(efd);
      if (!ok) {
        unlinkat(dirfd(sd), de->d_name, 0);
        d->base.st.corrupt++;
        continue;
      }
      if (n == cap) {
        size_t nc = cap ? cap * 2 : 1024;
        found_t *nv = realloc(v, nc * sizeof *nv);
        if (!nv) {
          rc = lade__fail(LADE_ENOMEM, "cache folder %s: out of memory listing entries", d->path);
          break;
        }
        v = nv, cap = nc;
      }
      v[n++] = f;
    }
    closedir(sd);
  }
  if (rc) {
    free(v);
    return rc;
  }
  if (n) qsort(v, n, sizeof *v, by_seq);
  *out = v, *nout = n;
  return 0;
}

/* ---- the vtable */

static int save_index(diskcache_t *d, const char *name);
static void node_save_index(diskcache_t *d);

static void disk_close(lade__cache_t *c) {
  diskcache_t *d = (diskcache_t *)c;
  /* node mode: this process's part of INDEX, merged by the last one out;
   * its files stay, charged, for the others */
  if (d->opened && !d->node) save_index(d, "INDEX");
  else if (d->opened) node_save_index(d);
  d->closing = d->node && d->opened;
  if (d->shared) munmap(d->shared, sizeof *d->shared);
  d->shared = NULL, d->node = false;
  if (d->usedfd >= 0) close(d->usedfd);
  lade__centry_t *e;
  while ((e = d->base.ix.head)) drop(d, e, false);
  lade__cache_base_free(&d->base);
  if (d->dirfd >= 0) close(d->dirfd);
  lade__heldlock_del(&d->held);
  if (d->lockfd >= 0) close(d->lockfd); /* releases the flock */
  free(d);
}

static void disk_drop(lade__cache_t *c, lade__centry_t *e) { drop((diskcache_t *)c, e, true); }

/* Node mode: an entry another process of the node put, read by its name
 * (verified as every read is: key, version, checksums). Left alone when it
 * does not verify: its owner's own read removes it. */
static int get_foreign(diskcache_t *d, uint64_t key, uint64_t ver, lade__buf_t *out) {
  if (read_entry(d, key, ver, out) != READ_OK) return LADE_ENOENT;
  pthread_mutex_lock(&d->base.mu);
  d->base.st.misses--; /* the pin counted it */
  d->base.st.hits++;
  d->base.st.bytes_read += out->len;
  pthread_mutex_unlock(&d->base.mu);
  return 0;
}

static int disk_get(lade__cache_t *c, uint64_t key, uint64_t ver, lade__buf_t *out) {
  diskcache_t *d = (diskcache_t *)c;
  lade__centry_t *e = lade__cache_pin(c, key, ver);
  if (!e) return d->node ? get_foreign(d, key, ver, out) : LADE_ENOENT;
  int res = read_entry(d, key, ver, out);
  pthread_mutex_lock(&d->base.mu);
  e->refs--;
  int rc = 0;
  if (res == READ_OK) {
    d->base.st.hits++;
    d->base.st.bytes_read += out->len;
  } else if (res == READ_ERR) {
    rc = LADE_EIO;
  } else {
    d->base.st.misses++;
    rc = LADE_ENOENT;
    /* Still the indexed entry: nobody renamed a new file over it since we
     * pinned it, so what we read was its file: remove it. */
    if (e->live) {
      if (res == READ_BAD) d->base.st.corrupt++;
      drop(d, e, res == READ_BAD);
      e = NULL;
    }
  }
  if (e && e->refs == 0 && !e->live) free(e);
  pthread_mutex_unlock(&d->base.mu);
  if (rc == LADE_ENOENT) {
    name_t nm = entry_name(key);
    lade__fail(LADE_ENOENT, "cache file %s/%s: %s", d->path, nm.s, res == READ_BAD ? "corrupt (removed)" : "not found");
  }
  return rc;
}

static int disk_put(lade__cache_t *c, uint64_t key, uint64_t ver, const void *data, size_t len) {
  diskcache_t *d = (diskcache_t *)c;
  uint64_t charge = charge_of(len);
  pthread_mutex_lock(&d->base.mu);
  /* Refuse early what would be refused anyway, before writing anything. */
  if (!lade__cindex_admit(&d->base.ix, key, charge)) {
    d->base.st.rejected++;
    pthread_mutex_unlock(&d->base.mu);
    return 0;
  }
  uint64_t seq = d->node ? atomic_fetch_add(&d->shared->seq, 1) + 1 : ++d->seq, n = ++d->tmpn;
  char tmp[64];
  snprintf(tmp, sizeof tmp, ".tmp.%ld.%llu", (long)getpid(), (unsigned long long)n);
  /* make room now, taking a victim's file to write into */
  bool reuse = evict_to(d, charge, tmp);
  if (d->node && !node_reserve(d, charge)) { /* the others' entries fill the node's capacity */
    d->base.st.rejected++;
    pthread_mutex_unlock(&d->base.mu);
    if (reuse) unlinkat(d->dirfd, tmp, 0);
    return 0;
  }
  d->reserved += charge;
  pthread_mutex_unlock(&d->base.mu);

  lade__centry_t *e = calloc(1, sizeof *e);
  bool nomem = !e;
  if (nomem && reuse) unlinkat(d->dirfd, tmp, 0);
  int fd = nomem ? -1 : write_tmp(d, tmp, reuse, key, seq, ver, data, len);
  if (fd == -1) {
    pthread_mutex_lock(&d->base.mu);
    d->reserved -= charge;
    node_sub(d, charge);
    pthread_mutex_unlock(&d->base.mu);
    free(e);
    return nomem ? lade__fail(LADE_ENOMEM, "disk cache: out of memory") : LADE_EIO;
  }
  int rc = 0;
  *e = (lade__centry_t){.key = key, .len = len, .charge = charge, .seq = seq, .ver = ver};
  name_t nm = entry_name(key);

  pthread_mutex_lock(&d->base.mu);
  d->reserved -= charge;
  lade__centry_t *old = lade__cindex_find(&d->base.ix, key);
  if (old) drop(d, old, false); /* its file is replaced by place(), or unlinked below */
  /* node mode: the reservation becomes the entry's charge (no room to make) */
  if (!lade__cindex_admit(&d->base.ix, key, charge)) {
    d->base.st.rejected++;
    if (fd == -2) unlinkat(d->dirfd, tmp, 0);
    if (old) unlinkat(d->dirfd, nm.s, 0);
    node_sub(d, charge);
    free(e);
  } else {
    if (!d->node) evict_to(d, charge, NULL);
    if (place(d, fd, tmp, nm.s, old != NULL) != 0) {
      rc = lade__fail(LADE_EIO, "cache file %s/%s: cannot move the new entry into place: %s", d->path, nm.s,
                      strerror(errno));
      if (old) unlinkat(d->dirfd, nm.s, 0);
      node_sub(d, charge);
      free(e);
    } else if ((rc = lade__cindex_insert(&d->base.ix, e)) != 0) {
      unlinkat(d->dirfd, nm.s, 0);
      node_sub(d, charge);
      free(e);
    } else {
      d->base.st.inserts++;
      d->base.st.bytes_written += len;
      if (fd >= 0) d->base.st.unnamed_puts++;
      if (reuse) d->base.st.recycled_puts++;
    }
  }
  pthread_mutex_unlock(&d->base.mu);
  if (fd >= 0) close(fd);
  return rc;
}

/* ---- INDEX: the entry list, written by a clean close

   {magic "LADEIX02", count, checksum of the records, checksum of the
   previous 24 bytes} then count records {key, payload length, seq, version}. Open
   reads it instead of every entry's header, then removes it (and syncs the
   folder) before anything changes, so an INDEX present always matches the
   folder as the last clean close left it; after a crash there is none and
   open scans. A stale or damaged INDEX is never needed for correctness:
   every get still verifies the entry file. */

#define IX_MAGIC "LADEIX02"
#define IX_SEED 0x4c414445495831ull
typedef struct ixrec {
  uint64_t key, len, seq, ver;
} ixrec_t;
typedef struct ixhdr {
  char magic[8];
  uint64_t count, sum, hsum;
} ixhdr_t;

/* 1: the index file `name` listed *out; 0: none or unusable. */
static int read_index(diskcache_t *d, const char *name, found_t **out, size_t *nout) {
  int fd = openat(d->dirfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  int ok = 0;
  ixhdr_t h;
  struct stat st;
  found_t *v = NULL;
  ixrec_t *r = NULL;
  if (fstat(fd, &st) == 0 && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && memcmp(h.magic, IX_MAGIC, 8) == 0 &&
      h.hsum == lade_checksum(&h, offsetof(ixhdr_t, hsum), IX_SEED) && h.count <= SIZE_MAX / sizeof *r &&
      (uint64_t)st.st_size == sizeof h + h.count * sizeof *r) {
    size_t n = (size_t)h.count, bytes = n * sizeof *r;
    r = malloc(bytes ? bytes : 1);
    v = malloc(n ? n * sizeof *v : 1);
    if (r && v && (bytes == 0 || pread(fd, r, bytes, sizeof h) == (ssize_t)bytes) &&
        lade_checksum(r, bytes, IX_SEED) == h.sum) {
      /* no file, and no folder of files, is that long: not what a clean
       * close wrote (and the charges would wrap `used`) */
      uint64_t total = 0;
      ok = 1;
      for (size_t i = 0; i < n && ok; i++) {
        v[i] = (found_t){r[i].key, r[i].len, r[i].seq, r[i].ver};
        ok = r[i].len <= MAX_LEN && (total += charge_of(r[i].len)) <= (uint64_t)INT64_MAX;
      }
      if (ok) *out = v, *nout = n, v = NULL;
    }
  }
  close(fd);
  free(r);
  free(v);
  return ok;
}

/* 1: INDEX listed *out; 0: none or unusable (scan instead); the file is
 * removed either way. */
static int load_index(diskcache_t *d, found_t **out, size_t *nout) {
  int ok = read_index(d, "INDEX", out, nout);
  unlinkat(d->dirfd, "INDEX", 0);
  fsync(d->dirfd); /* the removal reaches the disk before any entry changes */
  return ok;
}

/* Writes the index file `name` of k records. 0, or -1 with errno set. */
static int write_index(diskcache_t *d, const char *name, const ixrec_t *r, size_t k) {
  ixhdr_t h = {.count = k, .sum = lade_checksum(r, k * sizeof *r, IX_SEED)};
  memcpy(h.magic, IX_MAGIC, 8);
  h.hsum = lade_checksum(&h, offsetof(ixhdr_t, hsum), IX_SEED);
  struct iovec iov[2] = {{&h, sizeof h}, {(void *)r, k * sizeof *r}};
  return replace_file(d, name, iov, 2);
}

/* Writes this process's entries to the index file `name` (INDEX at the
 * close of a successful open; locked or alone). Best effort: without it the
 * next open scans. 0, or -1. */
static int save_index(diskcache_t *d, const char *name) {
  size_t n = d->base.ix.count, bytes = n * sizeof(ixrec_t), k = 0;
  ixrec_t *r = malloc(bytes ? bytes : 1);
  if (!r) return -1;
  for (lade__centry_t *e = d->base.ix.head; e && k < n; e = e->next) r[k++] = (ixrec_t){e->key, e->len, e->seq, e->ver};
  int rc = write_index(d, name, r, k);
  free(r);
  return rc;
}

/*
 * Node mode's INDEX. No process knows every entry of the folder, so each
 * writes its own at a clean close, as the part IXPART.<pid>.<n>; then it
 * tries to turn its shared lock exclusive, which succeeds only for the last
 * process of the job out. That one merges the parts into INDEX when their
 * entries' charges add up to the node's bytes in USED: then no process died
 * with entries on disk, no part is missing and none is counted twice;
 * otherwise (or on any error) there is no INDEX and the next first open
 * scans, as before. The parts are removed either way. A process that joins
 * the job later (after a last close it raced with) removes INDEX before it
 * changes anything, as every open does.
 */
static int cmp_ixrec(const void *a, const void *b) {
  const ixrec_t *x = a, *y = b;
  return x->key < y->key ? -1 : x->key > y->key ? 1 : x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* One record per key: two ranks that put the same sample at the same moment
 * both list it (one file stands, the later rename's), and both charged USED,
 * so the sums still agree; INDEX keeps the later record. */
static size_t dedup_keys(ixrec_t *r, size_t n) {
  if (n < 2) return n;
  qsort(r, n, sizeof *r, cmp_ixrec);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (k && r[k - 1].key == r[i].key) r[k - 1] = r[i]; /* sorted by seq within a key: the later wins */
    else r[k++] = r[i];
  }
  return k;
}

static void node_save_index(diskcache_t *d) {
  static _Atomic unsigned nparts;
  char part[64];
  snprintf(part, sizeof part, IX_PART "%d.%u", (int)getpid(), atomic_fetch_add(&nparts, 1));
  if (save_index(d, part) != 0) unlinkat(d->dirfd, part, 0); /* the merge finds the sums short */
  if (flock(d->lockfd, LOCK_EX | LOCK_NB) != 0) return; /* others are still open: the last one merges */
  ixrec_t *all = NULL;
  size_t n = 0, cap = 0;
  uint64_t charged = 0;
  bool ok = true;
  int fd = openat(d->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dir) {
    if (fd >= 0) close(fd);
    ok = false;
  }
  struct dirent *de;
  while (ok && (de = readdir(dir))) {
    if (strncmp(de->d_name, IX_PART, strlen(IX_PART)) != 0) continue;
    found_t *f = NULL;
    size_t nf = 0;
    if (!read_index(d, de->d_name, &f, &nf)) {
      ok = false;
      break;
    }
    if (n + nf > cap) {
      size_t nc = LADE__MAX(cap * 2, n + nf);
      ixrec_t *na = realloc(all, (nc ? nc : 1) * sizeof *na);
      if (!na) ok = false;
      else all = na, cap = nc;
    }
    for (size_t i = 0; ok && i < nf; i++) {
      all[n++] = (ixrec_t){f[i].key, f[i].len, f[i].seq, f[i].ver};
      charged += charge_of(f[i].len);
    }
    free(f);
  }
  if (dir) closedir(dir);
  if (ok && charged == atomic_load(&d->shared->used)) write_index(d, "INDEX", all, dedup_keys(all, n));
  free(all);
  remove_leftovers(d); /* the parts (nobody else has the folder open) */
}

/* Resident: in this process's index, or (node mode) put by another. */
static bool disk_contains(lade__cache_t *c, uint64_t key) {
  diskcache_t *d = (diskcache_t *)c;
  pthread_mutex_lock(&d->base.mu);
  bool r = lade__cindex_find(&d->base.ix, key) != NULL;
  pthread_mutex_unlock(&d->base.mu);
  if (!r && d->node) {
    name_t nm = entry_name(key);
    r = faccessat(d->dirfd, nm.s, F_OK, 0) == 0;
  }
  return r;
}

/* Node mode: the node's ranks fetch a key once between them (claims.h). */
static int disk_claim_fetch(lade__cache_t *c, uint64_t key, bool demand) {
  diskcache_t *d = (diskcache_t *)c;
  return d->node ? lade__claim_take(d->dirfd, key, d->claim_stale_s, demand) : LADE__CLAIM_MINE;
}

static void disk_end_fetch(lade__cache_t *c, uint64_t key) {
  diskcache_t *d = (diskcache_t *)c;
  if (d->node) lade__claim_end(d->dirfd, key);
}

static const lade__cache_ops_t disk_ops = {.close = disk_close, .get = disk_get, .put = disk_put, .drop = disk_drop,
                                           .contains = disk_contains, .claim_fetch = disk_claim_fetch,
                                           .end_fetch = disk_end_fetch};

/* ---- node mode: the ranks of one job on one node share the folder

   LOCK is flock()ed shared by every process of the job and holds the job's
   key. The first process takes it exclusively, lists the folder (it owns
   the entries found), resets USED and writes its key, then turns its lock
   shared; the others wait (peer_timeout_ms) for a shared lock and join when
   LOCK holds their key. Another job meeting a held LOCK finds another key
   and fails, naming the folder; a job that takes the lock while the first
   turns its lock shared makes the first (and its ranks) fail the same way:
   two jobs never share the folder. Each process evicts only the entries it
   put (the first also those it found), against the node's bytes in USED. */

static int map_used(diskcache_t *d) {
  d->usedfd = openat(d->dirfd, "USED", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  struct stat st;
  if (d->usedfd < 0 || fstat(d->usedfd, &st) != 0 ||
      (st.st_size < (off_t)sizeof *d->shared && ftruncate(d->usedfd, sizeof *d->shared) != 0))
    return lade__fail(LADE_EIO, "cache folder %s: cannot make USED: %s", d->path, strerror(errno));
  void *m = mmap(NULL, sizeof *d->shared, PROT_READ | PROT_WRITE, MAP_SHARED, d->usedfd, 0);
  if (m == MAP_FAILED) return lade__fail(LADE_EIO, "cache folder %s: cannot map USED: %s", d->path, strerror(errno));
  d->shared = m;
  return 0;
}

/* This process holds LOCK exclusively: it lists the folder and owns what it finds. */
static int node_first(diskcache_t *d) {
  d->first = true;
  d->node = true;
  int rc = map_used(d);
  if (!rc) atomic_store(&d->shared->used, 0); /* nobody else has it open: every entry is found again */
  return rc;
}

static int node_lock(diskcache_t *d, const lade__cache_opts_t *o) {
  if (flock(d->lockfd, LOCK_EX | LOCK_NB) == 0) return node_first(d);
  if (errno != EWOULDBLOCK) return lade__fail(LADE_EIO, "cache folder %s: cannot lock LOCK: %s", d->path, strerror(errno));
  double t_end = lade__now() + o->node_timeout_ms / 1000.0;
  while (flock(d->lockfd, LOCK_SH | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return lade__fail(LADE_EIO, "cache folder %s: cannot lock LOCK: %s", d->path, strerror(errno));
    if (lade__now() > t_end && lade__heldlock_here(d->lockfd))
      return lade__fail(LADE_ESTATE, "cache folder %s: in use by another loader in this process, without the node "
                        "cache (LOCK is held by it)" SAME_PROCESS_ADVICE, d->path);
    if (lade__now() > t_end)
      return lade__fail(LADE_ETIMEOUT, "cache folder %s: LOCK held exclusively for more than peer_timeout_ms (%u ms): "
                        "another process is listing it", d->path, o->node_timeout_ms);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  char key[512];
  ssize_t n = pread(d->lockfd, key, sizeof key - 1, 0);
  key[n > 0 ? n : 0] = 0;
  if (strcmp(key, o->node_job) != 0) {
    /* another job's key: in use, unless that job has just gone (its last
     * process held the lock exclusively, merging INDEX, while this one
     * waited): then nobody else holds it, and this process is the first */
    if (flock(d->lockfd, LOCK_EX | LOCK_NB) == 0) return node_first(d);
    return lade__fail(LADE_ESTATE, "cache folder %s: in use by another job (LOCK is held by a job whose key is not "
                      "this one's: %.64s). Give each job its own cache_dir", d->path, key);
  }
  d->node = true;
  return map_used(d);
}

/* The first process is done listing: its key into LOCK, its lock shared. */
static int node_unlock_setup(diskcache_t *d, const lade__cache_opts_t *o) {
  size_t n = strlen(o->node_job);
  if (pwrite(d->lockfd, o->node_job, n, 0) != (ssize_t)n || ftruncate(d->lockfd, (off_t)n) != 0)
    return lade__fail(LADE_EIO, "cache folder %s: cannot write LOCK: %s", d->path, strerror(errno));
  if (flock(d->lockfd, LOCK_SH) != 0)
    return lade__fail(LADE_EIO, "cache folder %s: cannot lock LOCK: %s", d->path, strerror(errno));
  char key[512];
  ssize_t got = pread(d->lockfd, key, sizeof key - 1, 0);
  key[got > 0 ? got : 0] = 0;
  if (strcmp(key, o->node_job) != 0) /* another job took it while the lock turned shared */
    return lade__fail(LADE_ESTATE, "cache folder %s: taken by another job while this one opened it (its LOCK names "
                      "%.64s). Give each job its own cache_dir", d->path, key);
  return 0;
}

int lade__diskcache_open(lade__cache_t **out, const lade__cache_opts_t *o) {
  const char *ns = o->ns ? o->ns : "";
  diskcache_t *d = calloc(1, sizeof *d);
  if (!d) return lade__fail(LADE_ENOMEM, "disk cache: out of memory");
  d->dirfd = d->lockfd = d->usedfd = -1;
  int rc = lade__cache_base_init(&d->base, &disk_ops, o, "disk cache");
  if (rc) return free(d), rc;
  found_t *f = NULL;
  size_t nf = 0;
  int len = snprintf(d->path, sizeof d->path, "%s/%016llx", o->dir,
                     (unsigned long long)lade_checksum(ns, strlen(ns), NS_SEED));
  if (len < 0 || (size_t)len >= sizeof d->path) {
    rc = lade__fail(LADE_EINVAL, "cache folder '%s': path too long", o->dir);
    goto fail;
  }
  if ((rc = ensure_dir(o->dir)) || (rc = ensure_dir(d->path))) goto fail;
  d->dirfd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d->dirfd < 0) {
    rc = lade__fail(LADE_EIO, "cache folder %s: cannot open: %s", d->path, strerror(errno));
    goto fail;
  }
  /* an unnamed file is named through /proc/self/fd (linkat with
   * AT_EMPTY_PATH needs a capability): without /proc, named temporaries */
  if (o->named_temporaries || access("/proc/self/fd", X_OK) != 0) d->no_tmpfile = 1;
  d->lockfd = openat(d->dirfd, "LOCK", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (d->lockfd < 0) {
    rc = lade__fail(LADE_EIO, "cache folder %s: cannot create LOCK: %s", d->path, strerror(errno));
    goto fail;
  }
  if (o->node_job) {
    rc = node_lock(d, o);
    if (rc) goto fail;
    d->claim_stale_s = (o->node_timeout_ms ? o->node_timeout_ms : 60000) / 1000.0;
  } else if (flock(d->lockfd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    if (e == EWOULDBLOCK && lade__heldlock_here(d->lockfd))
      rc = lade__fail(LADE_ESTATE, "cache folder %s: in use by another loader in this process (LOCK is held by it)"
                      SAME_PROCESS_ADVICE, d->path);
    else if (e == EWOULDBLOCK)
      rc = lade__fail(LADE_ESTATE, "cache folder %s: in use by another process (LOCK is held). Two processes cannot "
                      "share one cache_dir unless they are ranks of one job on one node with the node cache on "
                      "(node_cache, docs/cache.md); else give each rank its own folder (e.g. "
                      "cache_dir=/scratch/lade-$RANK)", d->path);
    else
      rc = lade__fail(LADE_EIO, "cache folder %s: cannot lock LOCK: %s", d->path, strerror(e));
    goto fail;
  }
  lade__heldlock_add(&d->held, d->lockfd);
  if (d->node && !d->first) { /* the first process of the node listed the folder and owns what it found */
    if ((rc = check_namespace(d, ns))) goto fail;
    /* an INDEX here was merged by a last close this open raced with: this
     * process's puts would make it stale, so the next first open scans */
    if (unlinkat(d->dirfd, "INDEX", 0) == 0) fsync(d->dirfd);
    d->opened = true;
    *out = &d->base;
    return 0;
  }
  if ((rc = check_namespace(d, ns)) || (rc = remove_leftovers(d)) || (rc = make_subdirs(d))) goto fail;
  bool indexed = load_index(d, &f, &nf);
  if (indexed) {
    d->base.st.from_index = nf;
    if (nf) qsort(f, nf, sizeof *f, by_seq);
  } else if ((rc = scan(d, &f, &nf))) {
    goto fail;
  }
  for (size_t i = 0; i < nf; i++) {
    if (indexed && lade__cindex_find(&d->base.ix, f[i].key)) {
      /* a key listed twice: no clean close wrote this INDEX; scan instead */
      lade__centry_t *e;
      while ((e = d->base.ix.head)) drop(d, e, false);
      free(f), f = NULL, indexed = false;
      d->base.st.from_index = 0, d->seq = 0;
      if ((rc = scan(d, &f, &nf))) goto fail;
      i = (size_t)-1;
      continue;
    }
    lade__centry_t *e = calloc(1, sizeof *e);
    if (!e) {
      rc = lade__fail(LADE_ENOMEM, "cache folder %s: out of memory", d->path);
      goto fail;
    }
    *e = (lade__centry_t){.key = f[i].key, .len = f[i].len, .charge = charge_of(f[i].len), .seq = f[i].seq,
                          .ver = f[i].ver};
    if ((rc = lade__cindex_insert(&d->base.ix, e)) != 0) {
      free(e);
      goto fail;
    }
    node_add(d, e->charge);
    if (e->seq > d->seq) d->seq = e->seq;
  }
  free(f), f = NULL;
  evict_to(d, 0, NULL);
  if (d->node) { /* ready: the others of the job may join */
    atomic_store(&d->shared->seq, d->seq);
    if ((rc = node_unlock_setup(d, o))) goto fail;
  }
  d->opened = true;
  *out = &d->base;
  return 0;
fail:
  free(f);
  disk_close(&d->base);
  return rc;
}
