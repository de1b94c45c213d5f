/*
 * tar_nodelist.h - a remote tar source's shards: what its URL names, and
 * its open made once per node and job (issue 30, no request storms). Without it every rank of a node lists the
 * shards (an S3 LIST, a list file), sends each shard's HEAD and fetches its
 * sidecar or streams it, all at once. With a folder for indexes (index_dir,
 * else cache_dir) and a job key (source.h's job), the ranks of the
 * job that share that folder (a node's; the job's nodes when it is on a
 * file system they share) take turns (nodefile.h): the first indexes as before and
 * stores the indexes and this listing (the shards, each one's size and
 * validator as its HEAD gave them); the others, after its lock, take the
 * listing and the stored indexes without a request. The requests a
 * listing's shards send later are pinned to those validators as before
 * (If-Match), so a shard rewritten since fails loudly, never silently.
 *
 * One struct, owned by tar_nodelist.c, held in the http backend's state;
 * no lock of its own: open and store run on the thread opening the source,
 * the arrays are read-only after open; `dropped` is atomic (the stale
 * hook's, on the http module's thread).
 */
#ifndef LADE__TAR_NODELIST_H
#define LADE__TAR_NODELIST_H

#include <stdint.h>

#include "http/http.h"
#include "source/s3auth.h"
#include "tar_impl.h"

typedef struct lade__tar_nodelist {
  int fd;               /* the listing file's lock, held from open until store or close (-1: none) */
  char path[LADE__PATH_MAX + 96];
  uint64_t job;         /* source.h's job */
  int loaded;           /* the shards, sizes and validators below came from the file */
  uint64_t *size;       /* per shard, when loaded */
  char **val;           /* per shard, when loaded ("etag X", "modified DATE", "") */
  int dropped;          /* the file was removed as stale (atomic) */
} lade__tar_nodelist_t;

/* The shards a URL source names, into t->shards: a brace pattern, one
 * shard, the shard objects directly under an s3:// prefix (w: its where,
 * listed by http; NULL: not s3), else a list file fetched from `url`
 * ("": too long to name; relative lines are relative to its folder). */
int lade__tar_remote_shards(lade__tar_t *t, const char *src, lade__http_t *http, const lade__s3_where_t *w,
                            const char *url);
/* With dir and job (0: no job known, nothing shared): waits for the node's
 * lock on the listing of `source`; when the file holds this job's listing,
 * pushes its shards into *shards (when empty; else they must be the same)
 * and keeps their sizes and validators (loaded). 0, or an error (out of
 * memory). */
int lade__tar_nodelist_open(lade__tar_nodelist_t *nl, const char *dir, const char *index_name, uint64_t job,
                            const char *source, lade__tar_strs_t *shards);
/* Every shard indexed: stores the listing when this process holds the lock
 * and made it (not loaded), and drops the lock. */
void lade__tar_nodelist_store(lade__tar_nodelist_t *nl, const lade__tar_strs_t *shards, const uint64_t *size,
                              char *const *val);
/* A shard indexed: the waiting ranks see progress (nodefile.h). Thread-safe. */
void lade__tar_nodelist_progress(lade__tar_nodelist_t *nl);
/* A shard was found another version than the listing's (on any thread):
 * the listing file is removed, once, so the next open makes it again. */
void lade__tar_nodelist_stale(lade__tar_nodelist_t *nl);
/* Drops the lock (a listing never stored leaves no file) and frees. */
void lade__tar_nodelist_close(lade__tar_nodelist_t *nl, size_t shards);

#endif
