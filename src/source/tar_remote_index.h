/*
 * tar_remote_index.h - the sidecar index of a shard already on a server or
 * in a bucket (lade_shard_index_write_to, `lade index --to DIR URL...`).
 */
#ifndef LADE__TAR_REMOTE_INDEX_H
#define LADE__TAR_REMOTE_INDEX_H

#include "tar_impl.h"

struct lade_config;

/* Writes to `out` the sidecar index of the shard at `shard`, an http(s)://
 * or s3:// URL (its requests as the settings in cfg make them: endpoint,
 * credentials, TLS, retries): one HEAD, then one streamed GET whose headers
 * t's format walks as they arrive, as a remote open without a sidecar
 * indexes a shard. The small reads of that walk are kept, so bind() reads the
 * same bytes again with no request (were one not kept, the shard is streamed
 * a second time for bind()'s reads): the file is byte for byte the one
 * lade_shard_index_write writes beside a local copy of the shard. (The walk
 * refuses a compressed file.) 0, or a negative code with lade_last_error()
 * naming the shard or `out`; LADE_EUNSUPPORTED in a build without libcurl. */
int lade__tar_remote_sidecar(const lade__tar_t *t, const struct lade_config *cfg, const char *shard, const char *out);

#endif
