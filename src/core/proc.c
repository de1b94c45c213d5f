/* proc.c - whether another process still runs (proc.h), from /proc. */
#include "core/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The start time (field 22) of the stat file at path (/proc/PID/stat or
 * /proc/PID/task/TID/stat), 0 when unknown; *state its state letter (field
 * 3), 0 when unknown. */
static uint64_t stat_of(const char *path, char *state) {
  char buf[1024];
  *state = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *s = strrchr(buf, ')'); /* the command name may hold spaces */
  if (!s) return 0;
  if (s[1] == ' ') *state = s[2];
  /* fields after the name: state(3) ... starttime(22) */
  int field = 2;
  for (char *q = s + 1; *q; q++)
    if (*q == ' ' && ++field == 22) return strtoull(q + 1, NULL, 10);
  return 0;
}

uint64_t lade__proc_start(pid_t pid) {
  char p[64], state;
  snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
  return stat_of(p, &state);
}

static bool exited(char state) { return state == 'Z' || state == 'X'; }

/* Whether any thread of pid, whose leader thread has exited (state Z),
 * still runs. /proc/PID/stat shows the leader's state alone: Z while the
 * process runs on in its other threads (its main thread called
 * pthread_exit) or while its threads are still being torn down by an exit
 * that has not finished. Only when no thread is left but exited ones is
 * the process a zombie, dead for good. */
static bool threads_run(pid_t pid) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/task", (int)pid);
  DIR *d = opendir(p);
  if (!d) return false; /* reaped meanwhile */
  bool run = false;
  struct dirent *de;
  while (!run && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char t[96], state;
    snprintf(t, sizeof t, "/proc/%d/task/%.20s/stat", (int)pid, de->d_name);
    stat_of(t, &state);
    run = state && !exited(state); /* gone meanwhile (no state): exited */
  }
  closedir(d);
  return run;
}

uint64_t lade__proc_pidns(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Whether the process (pid, start) still runs. Without /proc, kill(0). A
 * zombie (every thread exited, the process not yet reaped by its parent)
 * runs no more, though kill(0) succeeds on it: ranks SIGKILLed under a PID 1
 * that does not reap (a container without --init) stay zombies for good,
 * and their segment must not outlive them. A stopped process (SIGSTOP,
 * state T) runs. */
bool lade__proc_alive(int32_t pid, uint64_t start) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char p[64], state;
  snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
  uint64_t now = stat_of(p, &state);
  if (exited(state) && !threads_run(pid)) return false;
  if (!start) return true;
  return now == 0 ? access("/proc/self/stat", R_OK) != 0 : now == start;
}
