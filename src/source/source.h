/*
 * source.h - where sample bytes come from. A backend is one file filling one
 * vtable. The engine's fetch stage (engine/fetch.c) asks a source for the
 * bytes of one sample at a time from its worker threads; local backends
 * (dir, npy) answer synchronously with pread-style calls that are safe to run
 * concurrently. High-latency backends (s3 objects, remote tar shards:
 * docs/http.md) answer the same read() but are driven from their own event
 * loop (curl multi) so that hundreds of requests can be in flight without a
 * thread each: the fetch stage submits whole batches ahead to such a source
 * and workers only pick up samples whose bytes have arrived. A cache tier or a peer can stand in front
 * of any source because every backend reads by dataset index.
 */
#ifndef LADE__SOURCE_H
#define LADE__SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "core/buf.h" /* lade__buf_t */
#include "core/config.h"
#include "core/core.h"

/* A listing of files under a root, kept in one arena (no allocation per
 * file): sorted class folders give integer labels, files sorted within, in
 * exactly torchvision's ImageFolder order (docs/sources.md). */
typedef struct lade__listing {
  char *arena;        /* NUL-terminated relative paths, back to back */
  size_t arena_len, arena_cap;
  uint64_t *offset;   /* offset of each file's path in the arena */
  int32_t *label;     /* class label of each file (-1: flat folder, no classes) */
  uint64_t count, cap;
  uint32_t classes;
  char **class_names; /* borrowed pointers into class_arena */
  char *class_arena;
} lade__listing_t;

/* Which files a listing keeps. */
enum {
  LADE__LIST_ALL = 0,   /* every regular file (raw data, .npy folders) */
  LADE__LIST_IMAGES = 1 /* names ending in an image extension (lade__image_exts), any case */
};

/* The extensions torchvision 0.14's ImageFolder takes (IMG_EXTENSIONS),
 * lower case with the dot, NULL-terminated. */
extern const char *const lade__image_exts[];

/* Lists `root` the way torchvision's ImageFolder does: the non-hidden
 * sub-folders of root (symlinks followed) are the classes, sorted byte-wise
 * (= Python's code-point order for UTF-8), labels 0..C-1; the files of a
 * class are those of sorted(os.walk(class, followlinks=True)) - folders
 * ordered by their whole path string, then file names sorted within each.
 * Files directly under root are ignored when there are class folders; a
 * root without class folders is a flat, unlabelled dataset (label -1).
 * Names starting with '.' are skipped at every level (ImageFolder keeps
 * them); only regular files are kept. Fails with LADE_EEMPTY naming the root
 * and the reason when there are no files, or naming the class folders
 * without one. */
int lade__listing_scan(lade__listing_t *l, const char *root, int which);
/* lade__listing_scan(l, root, LADE__LIST_ALL). */
int lade__listing_build(lade__listing_t *l, const char *root);
void lade__listing_free(lade__listing_t *l);
static inline const char *lade__listing_path(const lade__listing_t *l, uint64_t i) {
  return l->arena + l->offset[i];
}
/* Writes root joined with rel as Python's os.path.join does (no '/' added
 * after a root ending in '/'), truncated to size. */
void lade__path_join(char *buf, size_t size, const char *root, const char *rel);

typedef struct lade__source lade__source_t;
struct lade__source_stats;

typedef struct lade__source_ops {
  const char *name;
  /* Lists the dataset (fills count, labels); may take a while: called on a
   * the thread calling lade_loader_create(), before any worker starts. */
  int (*open)(lade__source_t *s, const struct lade_config *cfg);
  void (*close)(lade__source_t *s);
  /* Reads all bytes of sample idx into out (grown as needed). Thread-safe. */
  int (*read)(lade__source_t *s, uint64_t idx, lade__buf_t *out);
  /* Optional: reads the typed payload of sample idx (exactly s->payload_bytes)
   * straight into dst, validating its header against the dataset's: the
   * zero-extra-copy path of .npy data. Thread-safe. */
  int (*read_payload)(lade__source_t *s, uint64_t idx, void *dst, size_t len);
  /* A human name for sample idx (its path), for error messages. */
  void (*describe)(lade__source_t *s, uint64_t idx, char *buf, size_t size);
  /* Optional (local sources): the version of sample idx's bytes that the
   * disk cache tier stores and checks: lade__stat_version() of the file that
   * holds them (the sample's own file, a stacked .npy, a tar shard), taken
   * through the source's own descriptors so a chdir cannot change it.
   * LADE__VERSION_UNKNOWN when it cannot be taken. Thread-safe. */
  uint64_t (*version)(lade__source_t *s, uint64_t idx);
  /* Optional (local sources): where the bytes read() returns for sample idx
   * lie, when they are one plain range of a local file: its path into path
   * (truncated to size) and the range [*off, *off + *len); for a source
   * with read_payload the payload's range instead. LADE_EUNSUPPORTED,
   * saying why, when they are not (converted, inflated, gathered). For
   * `lade bench`'s copy ceiling (lade_loader_sample_extent). Thread-safe. */
  int (*extent)(lade__source_t *s, uint64_t idx, char *path, size_t size, uint64_t *off, uint64_t *len);

  /* ---- optional: high-latency (remote) sources. NULL for local ones. ----
   * submit() starts fetching these samples in the background and returns at
   * once (never waits for the network). Each submitted index is one "want":
   * a later read(idx) takes the bytes of one want for idx (waiting only if
   * they have not arrived) instead of starting its own request; the same
   * index submitted twice is fetched once per want, or shared, as the source
   * likes, but is handed to read() once per want. read() of an index with no
   * want fetches it itself. Arrived bytes nobody read are kept up to a bound
   * chosen by the source and dropped oldest first (a later read re-fetches),
   * so a seek that abandons submitted batches cannot leak. `background`
   * (the prefetcher's speculative fetches) starts only when no foreground
   * submit or read waits: the batch the consumer needs never queues behind
   * a prefetch window. Thread-safe. */
  int (*submit)(lade__source_t *s, const uint64_t *idx, size_t n, int background);
  /* True when read(idx) would not wait for the network now: its bytes (or its
   * final error) have arrived, or it has no want (read() would then start
   * it, which the caller does on purpose). Cheap; thread-safe. */
  bool (*ready)(lade__source_t *s, uint64_t idx);
  /* Optional (hdf5): the engine planned a batch of these dataset indices
   * (the fetch stage calls it once per planned batch, before any worker
   * reads them, only for indices no cache tier holds). A source that reads
   * neighbouring samples cheaper together (SOLAR's chunk loading, paper 002
   * section 4.4) stages them here
   * or on the first read of one of them; read()/read_payload() of a staged
   * index then take its bytes from the stage. Must not block on I/O for
   * long: it runs on the worker that plans. Planned indices that are never
   * read are dropped oldest first (the stage is bounded). Thread-safe. */
  void (*plan_batch)(lade__source_t *s, const uint64_t *idx, size_t n);
  /* Counters of the source's own traffic, for lade_stats_t. Thread-safe. */
  void (*stats)(lade__source_t *s, struct lade__source_stats *out);
  /* Optional (remote sources): the caller will keep up to `samples`
   * submitted samples (about `bytes`) arrived and unread on purpose (a
   * shuffle buffer's worth read ahead in stream order); the source raises
   * its bound on unread results to hold them (never lowers it). Call
   * before submitting them. Thread-safe. */
  void (*reserve)(lade__source_t *s, uint64_t samples, uint64_t bytes);
} lade__source_ops_t;

/* Traffic counters of a remote source (all zero for local ones, except
 * get_requests of hdf5, which counts the reads it issued). */
typedef struct lade__source_stats {
  uint64_t get_requests;   /* GET requests sent, retries included; hdf5: H5Dread calls (reads issued) */
  uint64_t list_requests;  /* LIST requests sent (0 when the listing came from the cache) */
  uint64_t sidecar_rejected; /* tar: remote shards whose sidecar index was ignored (not theirs, damaged) */
  uint64_t retries;        /* requests retried after a transient error */
  uint64_t bytes;          /* body bytes received */
  uint32_t in_flight;      /* requests in flight now */
  uint32_t concurrency;    /* the current limit on requests in flight */
} lade__source_stats_t;

struct lade__source {
  const lade__source_ops_t *ops;
  void *impl;
  uint64_t count;
  const int32_t *labels; /* count labels, or NULL (all -1) */
  uint32_t classes;
  /* classes names (label i is class_names[i]), or NULL when the source does
   * not know them; owned by the source, valid until close(). */
  const char *const *class_names;
  /* Typed datasets (npy): the sample's dtype and shape, or dtype 0. */
  int dtype;
  int ndim;
  int64_t shape[LADE_MAX_DIMS];
  size_t payload_bytes;
  /* Encoded size of each sample when the listing knows it (object stores):
   * count entries, or NULL. Used to size the DELI fetch from the cache's
   * byte capacity and to detect truncated bodies. */
  const uint64_t *sizes;
  /* Sharded sources (tar): shards + 1 offsets, the samples of shard s being
   * [shard_offsets[s], shard_offsets[s+1]); NULL otherwise. The `shards`
   * plan streams them. Owned by the source. */
  const uint64_t *shard_offsets;
  uint64_t shards;
  /* dir under transform=auto: the files are .npz archives, every one is
   * listed, and auto means the npz transform (engine/resolve.c). */
  bool npz;
  /* Set by the engine before open(): called (from the source's own thread,
   * with none of the source's locks held) whenever a submitted sample
   * arrives, so workers waiting for ready samples wake up. May be NULL. */
  void (*on_ready)(void *ctx);
  void *on_ready_ctx;
  /* Set by the engine before open(): the ranks of this node that open the
   * dataset (engine/resolve.c's lade__resolve_node_ranks; 0 or 1: this
   * process alone). The remote sources split the node-wide bounds on
   * requests in flight among them (source/remote.c). */
  uint32_t node_ranks;
  /* Set by the engine before open() when this process is one of several
   * ranks (on this node, or launched as a job of more than one): a hash of
   * the job's key (the setting job_id, else the launcher's; 0: none known).
   * The ranks of one job that share the index folder (a node's; a job's
   * nodes on a shared file system) make a remote listing once between them
   * (source/nodefile.h); another job makes its own. */
  uint64_t job;
};

extern const lade__source_ops_t lade__source_dir;
extern const lade__source_ops_t lade__source_npy;
extern const lade__source_ops_t lade__source_s3; /* source=s3://bucket/prefix (needs libcurl) */
/* WebDataset tar shards: a .tar, a folder of them, a brace pattern, a list file */
extern const lade__source_ops_t lade__source_tar;
/* one dataset (N x ...) of an HDF5 file, labels from another (needs libhdf5) */
extern const lade__source_ops_t lade__source_hdf5;
/* The same for http(s):// shards (needs libcurl): reads are Range requests */
extern const lade__source_ops_t lade__source_tar_remote;
/* TFRecord files, a record per sample: the tar source with its tfrecord
 * format (tar_impl.h); local, and remote (needs libcurl) */
extern const lade__source_ops_t lade__source_tfrecord;
extern const lade__source_ops_t lade__source_tfrecord_remote;
/* A TFRecord file's name: ending in .tfrecord or .tfrecords, optionally
 * then .gz or .zlib (compressed). */
int lade__tfrec_is_name(const char *name, size_t len);
/* 1 when source names remote tar shards: a URL, or a local list file whose
 * first shard is a URL. */
int lade__tar_source_remote(const char *source);

/* Chooses the backend for cfg (source_type=auto inspects the path). Returns
 * LADE_ENOENT naming the path when it does not exist. Does not list. */
int lade__source_select(const struct lade_config *cfg, const lade__source_ops_t **ops);

/* Reads a whole file at path relative to dirfd into out; names the file in
 * errors. A file of more than max bytes fails with LADE_ERANGE naming it
 * and both sizes before anything is allocated or read. */
int lade__read_file_max(int dirfd, const char *rel, const char *shown_root, uint64_t max, lade__buf_t *out);

/* Opens a sample file (rel under dirfd; rel may be absolute) for reading
 * without ever blocking in open(): O_NONBLOCK, then anything but a regular
 * file (a FIFO, a device, a socket planted under the sample's name) is
 * LADE_EFORMAT naming it. Fills *st. Returns the fd or a negative code. */
int lade__open_regular(int dirfd, const char *rel, const char *shown, struct stat *st);

/* A sample version (ops->version) that matches no stored entry: the disk
 * tier is bypassed for that read. */
#define LADE__VERSION_UNKNOWN 1
/* The version of a file's bytes: a hash of its size, mtime (ns) and inode,
 * always > 1; LADE__VERSION_UNKNOWN when stat_rc is not 0. */
uint64_t lade__stat_version(int stat_rc, const struct stat *st);
/* A file that open() reads many times (a tar shard, an HDF5 file, a stacked
 * .npy) as open saw it. Rewriting it in place (the same inode) changes its
 * mtime and ctime on every local file system; a read that saw any of the new
 * bytes ends before an fstat() that sees the new times, because write()
 * updates the times before it copies the bytes. docs/sources.md (tar,
 * "Changed files") says what this cannot see. */
typedef struct lade__file_ver {
  uint64_t dev, ino, size;
  int64_t mtime_s, mtime_ns, ctime_s, ctime_ns;
} lade__file_ver_t;
void lade__file_ver_of(lade__file_ver_t *v, const struct stat *st);
/* After a read through fd: 0 when fd's file still is version v, or is v
 * unlinked since (replaced by rename: st_nlink 0, size and mtime unchanged,
 * the old bytes still read), else LADE_EIO naming `shown` and what changed
 * (the bytes just read may be the new ones: the caller discards them), or
 * that fd (opened per read) is another file. One fstat(); thread-safe. */
int lade__file_check(int fd, const lade__file_ver_t *v, const char *shown);
/* lade__read_file_max() with no limit. */
int lade__read_file_at(int dirfd, const char *rel, const char *shown_root, lade__buf_t *out);

#endif
