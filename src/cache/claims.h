/*
 * claims.h - node-wide claims to fetch a key into a folder that the
 * processes of one node share (the disk tier in node mode, docs/cache.md
 * "Node cache"): the DELI prefetchers of a node's ranks fetch each sample
 * once between them instead of once per rank that will read it.
 *
 * A claim is an empty file `<2 hex>/.tmp.claim.<16 hex key>` beside the
 * key's entry, made with O_EXCL: whoever makes it fetches the key and then
 * removes it. One that is older than the stale bound (a claimer that died,
 * or one whose fetch is that late) is taken over: unlinked and made again,
 * so a lost claim costs at most a second fetch, never a sample (an open
 * that lists the folder by its files also removes those a dead job left,
 * as every `.tmp.*`).
 * No lock: the file system's O_EXCL is the only arbiter.
 */
#ifndef LADE__CLAIMS_H
#define LADE__CLAIMS_H

#include <stdbool.h>
#include <stdint.h>

/* True when this process now holds key's claim in folder dirfd (made, or
 * taken over from one older than stale_s seconds); false when another
 * process holds a fresh one. A claim that cannot be made for another
 * reason (no space, no permission) is held: the caller fetches. */
bool lade__claim_take(int dirfd, uint64_t key, double stale_s);
/* Ends this process's claim of key (after its put, or when it gives up). */
void lade__claim_end(int dirfd, uint64_t key);

#endif
