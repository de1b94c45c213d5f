/*
 * proc.h - whether another process of this machine still runs, judged by
 * its pid and its start time (so a reused pid is not taken for it), a
 * zombie counting as dead (the node cache's segments and the node's disk
 * cache outlive no process; shmcache.c). Linux /proc; without it, kill(0).
 */
#ifndef LADE__PROC_H
#define LADE__PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The start time of pid (field 22 of /proc/PID/stat), 0 when unknown. */
uint64_t lade__proc_start(pid_t pid);
/* Whether the process (pid, start) still runs (start 0: any process of that
 * pid). A zombie (every thread exited, not reaped yet) does not; a stopped
 * one (SIGSTOP) does; one whose main thread exited while others run does. */
bool lade__proc_alive(int32_t pid, uint64_t start);
/* The inode of this process's pid namespace (0 when unknown): pids of
 * another namespace cannot be judged. */
uint64_t lade__proc_pidns(void);

#endif
