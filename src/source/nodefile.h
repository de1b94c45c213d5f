/*
 * nodefile.h - a file that the ranks of one node make once between them
 * (single flight, issue 30: no request storms): the first process to find
 * no usable file flock()s it while it makes it (a listing of a bucket, a
 * remote tar source's shard list with their sizes and versions); the
 * others wait for that lock and read what it stored. A maker that dies
 * drops its lock with its last descriptor. The wait is bounded: at least
 * LADE__NODEFILE_WAIT_S, then as long as the maker shows progress (it
 * touches the file at least every LADE__NODEFILE_STALL_S: a pass over many
 * remote shards may take longer than any fixed bound), then they go on
 * without it, warned. The file is written elsewhere and renamed over the
 * locked name, so a reader never sees half of it (lade__nodefile_store, the
 * one atomic store of the sources' files: stored tar indexes use it too).
 * Test hook:
 * LADE_TEST_HOOK_NODEFILE_WAIT="WAIT,STALL" (seconds) shortens both.
 */
#ifndef LADE__NODEFILE_H
#define LADE__NODEFILE_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "core/buf.h"

#define LADE__NODEFILE_WAIT_S 900
#define LADE__NODEFILE_STALL_S 120

/* The file at path (in dir, created mode 0700 when missing), created empty
 * when missing, flock()ed: its descriptor (locked), or -1 when it cannot be
 * had (no folder, or the wait passed: warned naming `what`, the thing the
 * other process is making), and the caller makes it alone. */
int lade__nodefile_lock(const char *dir, const char *path, const char *what);
/* The maker's sign of progress (its file's mtime set to now); fd -1 does
 * nothing. Thread-safe. */
void lade__nodefile_progress(int fd);
/* Drops the lock; a file left empty (its maker failed) is removed when it
 * is still the file at path. fd -1 does nothing. */
void lade__nodefile_unlock(int fd, const char *path);
/* Writes the n pieces, back to back, to path (its folder exists), created
 * with `mode`: a temporary file of this process and call renamed over it, so
 * a reader never sees half of it. 0, or -1 with errno set and nothing
 * written (the next open makes it again). */
int lade__nodefile_store(const char *path, const struct iovec *piece, int n, mode_t mode);
/* Reads the whole file at path into out: 0, or -1 (missing, empty,
 * unreadable). */
int lade__nodefile_load(const char *path, lade__buf_t *out);

#endif
