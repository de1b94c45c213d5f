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

/* Who fetches key: this process (it now holds the claim: made, or taken
 * over from one older than stale_s; one that cannot be made for another
 * reason, no space or no permission, counts as made), another process
 * reading it now for a reader that waits (a demand claim: worth waiting
 * for), or another process's prefetcher (ahead of need, its request
 * perhaps queued behind many: a reader that needs the key now reads it
 * itself). The kind is the file's mode: 0400 demand, 0600 ahead. */
enum { LADE__CLAIM_MINE, LADE__CLAIM_DEMAND, LADE__CLAIM_AHEAD };
int lade__claim_take(int dirfd, uint64_t key, double stale_s, bool demand);
/* Ends this process's claim of key (after its put, or when it gives up). */
void lade__claim_end(int dirfd, uint64_t key);

#endif
