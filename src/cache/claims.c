/* claims.c - node-wide claims to fetch a key (claims.h). */
#include "cache/claims.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* `<2 hex>/.tmp.claim.<16 hex>`: beside the key's entry, a `.tmp.*` to a scan */
#define CLAIM_NAME(buf, key) \
  snprintf(buf, sizeof buf, "%02x/.tmp.claim.%016llx", (unsigned)((key) & 0xff), (unsigned long long)(key))

static bool make(int dirfd, const char *name, bool demand) {
  int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, demand ? 0400 : 0600);
  if (fd >= 0) close(fd);
  return fd >= 0 || errno != EEXIST;
}

int lade__claim_take(int dirfd, uint64_t key, double stale_s, bool demand) {
  char n[40];
  CLAIM_NAME(n, key);
  if (make(dirfd, n, demand)) return LADE__CLAIM_MINE;
  struct stat st;
  struct timespec now;
  if (fstatat(dirfd, n, &st, AT_SYMLINK_NOFOLLOW) != 0) /* ended meanwhile */
    return make(dirfd, n, demand) ? LADE__CLAIM_MINE : LADE__CLAIM_DEMAND;
  clock_gettime(CLOCK_REALTIME, &now);
  double age = (double)(now.tv_sec - st.st_mtim.tv_sec) + (double)(now.tv_nsec - st.st_mtim.tv_nsec) * 1e-9;
  if (age < stale_s) return (st.st_mode & 0200) ? LADE__CLAIM_AHEAD : LADE__CLAIM_DEMAND;
  unlinkat(dirfd, n, 0); /* stale: two processes that both take it over both fetch, which is harmless */
  return make(dirfd, n, demand) ? LADE__CLAIM_MINE : LADE__CLAIM_DEMAND;
}

void lade__claim_end(int dirfd, uint64_t key) {
  char n[40];
  CLAIM_NAME(n, key);
  unlinkat(dirfd, n, 0);
}
