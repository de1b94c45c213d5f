/*
 * heldlock.h - the cache folders' LOCK files this process holds. flock()
 * is per open file description, so a second loader of this process meets a
 * LOCK the first one holds as another process would; this list tells the
 * two apart, so the message can say "another loader in this process". A
 * fork's child inherits the list: entries carry the pid that made them.
 *
 * Lock: the list's own mutex (heldlock.c), taken alone.
 */
#ifndef LADE__HELDLOCK_H
#define LADE__HELDLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct lade__heldlock {
  struct lade__heldlock *next, **prev; /* in the list while listed */
  uint64_t dev, ino;                   /* the LOCK file */
  pid_t pid;                           /* the process that listed it */
} lade__heldlock_t;

/* Lists h for the LOCK open as fd (this process has just locked it). */
void lade__heldlock_add(lade__heldlock_t *h, int fd);
/* Unlists h (no-op when it is not listed). */
void lade__heldlock_del(lade__heldlock_t *h);
/* Whether a loader of this process (not of a parent) holds the LOCK open as fd. */
bool lade__heldlock_here(int fd);

#endif
