/* heldlock.c - the cache folders' LOCK files this process holds (heldlock.h). */
#include "cache/heldlock.h"

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static lade__heldlock_t *list;

void lade__heldlock_add(lade__heldlock_t *h, int fd) {
  struct stat st;
  pthread_mutex_lock(&mu);
  if (fstat(fd, &st) == 0) {
    h->dev = st.st_dev, h->ino = st.st_ino, h->pid = getpid(), h->prev = &list;
    if ((h->next = list)) list->prev = &h->next;
    list = h;
  }
  pthread_mutex_unlock(&mu);
}

void lade__heldlock_del(lade__heldlock_t *h) {
  pthread_mutex_lock(&mu);
  if (h->prev) {
    *h->prev = h->next;
    if (h->next) h->next->prev = h->prev;
    h->prev = NULL, h->next = NULL;
  }
  pthread_mutex_unlock(&mu);
}

bool lade__heldlock_here(int fd) {
  struct stat st;
  bool found = false;
  pthread_mutex_lock(&mu);
  for (lade__heldlock_t *h = fstat(fd, &st) == 0 ? list : NULL; h && !found; h = h->next)
    found = h->dev == st.st_dev && h->ino == st.st_ino && h->pid == getpid();
  pthread_mutex_unlock(&mu);
  return found;
}
