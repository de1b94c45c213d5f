/* nodefile.c - a file the ranks of one node make once between them
 * (nodefile.h). No state of its own: the lock is the file's flock. */
#include "source/nodefile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"

/* The wait's bounds (nodefile.h), or the test hook's. */
static void bounds(double *wait_s, double *stall_s) {
  const char *e = getenv("LADE_TEST_HOOK_NODEFILE_WAIT");
  double a, b;
  *wait_s = LADE__NODEFILE_WAIT_S;
  *stall_s = LADE__NODEFILE_STALL_S;
  if (e && sscanf(e, "%lf,%lf", &a, &b) == 2 && a >= 0 && b > 0) *wait_s = a, *stall_s = b;
}

/* Seconds since the file's last change (its maker's progress). */
static double idle_s(int fd) {
  struct stat st;
  struct timespec now;
  if (fstat(fd, &st) != 0 || clock_gettime(CLOCK_REALTIME, &now) != 0) return 1e18;
  return (double)(now.tv_sec - st.st_mtim.tv_sec) + (double)(now.tv_nsec - st.st_mtim.tv_nsec) / 1e9;
}

void lade__nodefile_progress(int fd) {
  if (fd >= 0) futimens(fd, NULL);
}

int lade__nodefile_lock(const char *dir, const char *path, const char *what) {
  if (lade__mkdir_private(dir) != 0) {
    lade__clear_error();
    return -1;
  }
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  double t0 = lade__now(), wait_s, stall_s, idle;
  bounds(&wait_s, &stall_s);
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    if (lade__now() - t0 > wait_s && (idle = idle_s(fd)) > stall_s) {
      fprintf(stderr, "lade: warning: waited %.0f s for another process's %s into %s (it holds its lock and has "
              "shown no progress for %.0f s); going on without it\n", lade__now() - t0, what, path, idle);
      break;
    }
    struct timespec nap = {0, 20 * 1000000L};
    nanosleep(&nap, NULL);
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) { /* the wait ended without the lock */
    close(fd);
    return -1;
  }
  return fd;
}

void lade__nodefile_unlock(int fd, const char *path) {
  if (fd < 0) return;
  struct stat a, b;
  if (fstat(fd, &a) == 0 && a.st_size == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
    unlink(path);
  close(fd); /* releases the flock */
}

int lade__nodefile_store(const char *path, const struct iovec *piece, int n, mode_t mode) {
  static unsigned seq; /* two threads of a process storing one path never share a temporary file */
  char tmp[LADE__PATH_MAX + 96];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED)) >=
      (int)sizeof tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  int ok = 1;
  for (int k = 0; ok && k < n; k++) {
    const char *p = piece[k].iov_base;
    for (size_t left = piece[k].iov_len; ok && left;) {
      ssize_t w = write(fd, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) ok = 0;
      else p += w, left -= (size_t)w;
    }
  }
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno ? errno : EIO; /* the caller's message names the reason, not unlink's */
    unlink(tmp);
    errno = e;
    return -1;
  }
  return 0;
}

int lade__nodefile_load(const char *path, lade__buf_t *out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  int rc = fstat(fd, &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size < ((uint64_t)1 << 34) ? 0 : -1;
  if (!rc && lade__buf_reserve(out, (size_t)st.st_size) != 0) {
    lade__clear_error();
    rc = -1;
  }
  size_t got = 0;
  while (!rc && got < (size_t)st.st_size) {
    ssize_t n = pread(fd, out->data + got, (size_t)st.st_size - got, (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) rc = -1;
    else got += (size_t)n;
  }
  close(fd);
  out->len = rc ? 0 : got;
  return rc;
}
