/*
 * ucx_rdv.c - the UCX transport's rendezvous folder (docs/transport.md,
 * UCX, Bootstrap 2): the ranks' worker addresses exchanged as files, for
 * ranks that have no other way of reaching each other (C users, Python
 * without torch.distributed).
 *
 * Each rank writes DIR/lade-JOB.RANK atomically (a temporary file renamed),
 * "lade-ucx 1 WORLD HEX@HOST PID:BOOT_ID:PIDNS\n", and reads the others',
 * polling, bounded by the timeout. The folder is not trusted: a file is
 * read without blocking (a FIFO never hangs the open), only a regular file
 * of at most 64 KiB, and only a whole line of valid hex with a host name
 * counts; a file left by an exited process of this machine is skipped.
 * Anything unusable is waited on until its owner's rename replaces it; the
 * timeout's error names the file and what is wrong. A directory in a
 * rank's place fails at once.
 *
 * Lock: none. It runs on the opening thread without the world's mu (no
 * UCX call); its one state, this rank's file name (removed at exit), is
 * written by the rendezvous, which runs once per process (ucx_peers.c).
 */
#ifdef LADE_HAVE_UCX
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/comm.h"
#include "transport/topology.h"
#include "transport/ucx_impl.h"

static char rdv_file[4096]; /* this rank's rendezvous file, removed at exit */

static void remove_rdv_file(void) {
  if (rdv_file[0]) unlink(rdv_file);
}

/* The job's name in the rendezvous files: the setting job_id, else the
 * launcher's job key (the one the node cache uses: topology.h) with
 * torchrun's restart count, so a restarted group never reads the addresses
 * of the group before it. */
static int job_name(const char *job_id, char *out, size_t cap) {
  const char *restart = getenv("TORCHELASTIC_RESTART_COUNT");
  char key[200];
  if (job_id && *job_id) snprintf(out, cap, "%s", job_id);
  else if (lade__topology_job_key(key, sizeof key))
    snprintf(out, cap, "%.200s-%.20s", key, restart && *restart ? restart : "0");
  else
    return lade__fail(LADE_EINVAL, "transport ucx: the rendezvous in rendezvous_dir needs a job id that no other job "
                      "shares: set job_id (taken from the launcher when empty: torchrun's TORCHELASTIC_RUN_ID, "
                      "SLURM_JOB_ID, PMIX_NAMESPACE or MASTER_ADDR:MASTER_PORT)");
  for (char *p = out; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' ||
          *p == '.'))
      *p = '_';
  return 0;
}

/* mkdir -p */
static int make_dirs(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
      *s = '/';
    }
  return mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* This process, as the rendezvous file names its writer: "pid:boot_id:pid
 * namespace", so a reader on the same machine and in the same namespace can
 * tell a file left by a killed process (kill(pid, 0) fails) from a live one. */
static void proc_id(char *out, size_t cap) {
  char boot[64] = "-";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f && fscanf(f, "%36[0-9a-f-]", boot) != 1) snprintf(boot, sizeof boot, "-");
  if (f) fclose(f);
  struct stat st = {0};
  stat("/proc/self/ns/pid", &st);
  snprintf(out, cap, "%ld:%s:%llu", (long)getpid(), boot, (unsigned long long)st.st_ino);
}

/* Reads rank r's address file at path, "lade-ucx 1 WORLD HEX@HOST [ID]\n".
 * Returns 1 with addr[r] filled (malloc'd); 0 when it is not there, or not
 * usable (yet), with why saying what is wrong for the error at the timeout:
 * not a regular file (a FIFO would block the open), unreadable, oversized,
 * half-written (no end of line), garbage, or left by a process of this
 * machine that has exited; the owner's rename replaces any of these. Else
 * fails: a folder at that name (nothing replaces it) or another world size. */
static int rdv_read(const char *path, uint32_t rank, uint32_t r, uint32_t world, char **addr, char *why, size_t cap) {
  enum { MAX = 65536 };
  char txt[48] = "", me[128], theirs[128], boot[64] = "";
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (errno != ENOENT) snprintf(why, cap, "%s cannot be read: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return 0;
  }
  char *buf = S_ISREG(st.st_mode) ? malloc(MAX) : NULL;
  ssize_t n = 0, k = 1;
  while (buf && n < MAX - 1 && (k = read(fd, buf + n, MAX - 1 - (size_t)n)) > 0) n += k;
  close(fd);
  if (S_ISDIR(st.st_mode))
    return lade__fail(LADE_EINVAL, "transport ucx: rank %u: rendezvous: %s, the address file of rank %u, is a "
                      "directory: remove it", rank, path, r);
  if (!buf || k < 0 || n >= MAX - 1) {
    snprintf(why, cap, "%s is %s", path, !S_ISREG(st.st_mode) ? "not a regular file" : !buf ? "not read (out of "
             "memory)" : k < 0 ? "unreadable" : "too large for an address file");
    free(buf);
    return 0;
  }
  buf[n] = 0;
  for (size_t i = 0; i < sizeof txt - 1 && i < (size_t)n; i++) txt[i] = buf[i] >= ' ' && buf[i] < 127 ? buf[i] : '?';
  unsigned ver = 0, w = 0;
  int a0 = 0, a1 = 0, h0 = 0, h1 = 0, end = 0;
  long pid = 0;
  unsigned long long ns = 0;
  bool line = n && buf[n - 1] == '\n'; /* a file half-written by something else lacks its end */
  if (sscanf(buf, "lade-ucx %u %u %n%*[0-9a-f]%n@%n%*[^ \n]%n", &ver, &w, &a0, &a1, &h0, &h1) == 2 && ver == 1 &&
      w != world && a0 && line) {
    free(buf);
    return lade__fail(LADE_EINVAL, "transport ucx: rendezvous: rank %u runs a world of %u ranks (%s), this rank "
                      "(%u) one of %u (setting 'world_size')", r, w, path, rank, world);
  }
  if (h1 && buf[h1] == ' ') sscanf(buf + h1, " %ld:%63[0-9a-f-]:%llu%n", &pid, boot, &ns, &end);
  end += h1;
  if (!h1 || ver != 1 || w != world || (a1 - a0) % 2 || h1 == h0 || buf[end] != '\n' || buf[end + 1]) {
    snprintf(why, cap, "%s is %s ('%s')", path, line ? "not a lade address file" : "incomplete (no end of line)", txt);
    free(buf);
    return 0;
  }
  /* a file of a process of this machine (boot id) and pid namespace that has exited: left by a killed rank */
  proc_id(me, sizeof me);
  snprintf(theirs, sizeof theirs, "%s:%llu", boot, ns);
  if (pid > 0 && strlen(boot) == 36 && !strcmp(strchr(me, ':') + 1, theirs) && kill((pid_t)pid, 0) != 0 &&
      errno == ESRCH) {
    snprintf(why, cap, "%s was left by process %ld of this machine, which has exited (killed before it could remove "
             "it)", path, pid);
    free(buf);
    return 0;
  }
  addr[r] = strndup(buf + a0, (size_t)(h1 - a0));
  free(buf);
  return addr[r] ? 1 : lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
}

/* Exchanges the addresses through a folder every rank can reach: writes
 * this rank's (temporary file, renamed), reads the others', bounded. Fills
 * addr[r] (malloc'd). (ucx_impl.h) */
int lade__ucx_rendezvous(const char *dir, const char *job_id, uint32_t rank, uint32_t world, uint32_t timeout_ms,
                         const char *mine, char **addr) {
  char job[256], path[4096], tmp[4200], id[128], why[4400] = "";
  int rc = job_name(job_id, job, sizeof job);
  if (rc) return rc;
  if (make_dirs(dir) != 0)
    return lade__fail(LADE_EIO, "transport ucx: rendezvous_dir %s: %s", dir, strerror(errno));
  snprintf(path, sizeof path, "%s/lade-%s.%u", dir, job, rank);
  snprintf(tmp, sizeof tmp, "%s/.lade-%s.%u.tmp%ld", dir, job, rank, (long)getpid());
  proc_id(id, sizeof id);
  FILE *f = fopen(tmp, "w");
  if (!f) return lade__fail(LADE_EIO, "transport ucx: rendezvous: cannot write %s: %s", tmp, strerror(errno));
  int bad = fprintf(f, "lade-ucx 1 %u %s %s\n", world, mine, id) < 0;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    rc = lade__fail(LADE_EIO, "transport ucx: rank %u: rendezvous: cannot write its address file %s: %s", rank, path,
                    strerror(errno));
    unlink(tmp);
    return rc;
  }
  snprintf(rdv_file, sizeof rdv_file, "%s", path);
  static bool registered;
  if (!registered) atexit(remove_rdv_file);
  registered = true;
  double t0 = lade__now();
  uint32_t have = 1;
  long wait_ns = 1000000;
  addr[rank] = strdup(mine);
  if (!addr[rank]) return lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
  while (have < world) {
    why[0] = 0;
    for (uint32_t r = 0; r < world && rc >= 0; r++) {
      if (addr[r]) continue;
      snprintf(path, sizeof path, "%s/lade-%s.%u", dir, job, r);
      rc = rdv_read(path, rank, r, world, addr, why[0] ? NULL : why, why[0] ? 0 : sizeof why);
      have += rc > 0;
    }
    if (rc < 0 || have == world) break;
    if (lade__now() - t0 > timeout_ms / 1000.0) {
      char who[512] = "";
      size_t len = 0;
      uint32_t missing = 0;
      for (uint32_t r = 0; r < world; r++)
        if (!addr[r] && missing++ < 8)
          len += (size_t)snprintf(who + len, sizeof who - len, "%s%u", len ? ", " : "", r);
      rc = lade__fail(LADE_ETIMEOUT, "transport ucx: rank %u: rank%s %s%s did not write %s address to %s/lade-%s.<rank> "
                      "within %u ms (setting peer_timeout_ms): not started, or its loader failed before opening the "
                      "transport%s%s", rank, missing > 1 ? "s" : "", who, missing > 8 ? ", ..." : "",
                      missing > 1 ? "their" : "its", dir, job, timeout_ms, why[0] ? "; " : "", why);
      break;
    }
    lade__comm_nap(wait_ns);
    if (wait_ns < 50000000) wait_ns *= 2;
  }
  return rc < 0 ? rc : 0;
}
#else
/* built without UCX (LADE_WITH_UCX) */
typedef int lade__ucx_rdv_unused;
#endif
