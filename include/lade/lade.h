/*
 * lade.h - the public C API of liblade, a data loader for deep-learning training.
 *
 * A loader reads samples from a source (a folder of images, .npy files, ...),
 * transforms each into a tensor slot (JPEG decode + crop + flip + normalise,
 * raw bytes, .npy payload), collates them into batch buffers taken from a
 * bounded pool, and hands the batches out in plan order.
 *
 * Conventions (they hold for every call below unless its block says
 * otherwise):
 *  - Functions return 0 on success or a negative LADE_E* code. The human
 *    detail (which file, which sample, which key, why) is kept in a
 *    thread-local string read with lade_last_error().
 *  - Handles are opaque; lade_x_destroy(NULL) does nothing.
 *  - A handle is NOT thread-safe unless its block says so: one thread at a
 *    time may call functions on it.
 *  - Strings passed in are copied; pointers returned are borrowed and valid
 *    for the lifetime stated in the block.
 */
#ifndef LADE_LADE_H
#define LADE_LADE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define LADE_API
#else
#define LADE_API __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------ version */

#define LADE_VERSION_MAJOR 0
#define LADE_VERSION_MINOR 1
#define LADE_VERSION_PATCH 0
#define LADE_VERSION_NUMBER \
  (LADE_VERSION_MAJOR * 10000 + LADE_VERSION_MINOR * 100 + LADE_VERSION_PATCH)

/* The library's version as "MAJOR.MINOR.PATCH" (static string). Thread-safe. */
LADE_API const char *lade_version(void);

/*
 * The optional dependencies built into this library, as a static string of
 * space-separated names in this order: "jpeg png curl mpi ucx hdf5 zlib",
 * each present only when built in ("" when none), then "cuda" when the
 * CUDA runtime (opened on first use, never linked: LADE_CUDA_LIB names it)
 * found a device at the first call. curl means the s3 source and http(s)://
 * shards, mpi and ucx the transports between learners. Thread-safe.
 */
LADE_API const char *lade_features(void);

/*
 * The UCX transport's bootstrap (transport=ucx, docs/transport.md), for a
 * program that has its own way of reaching every rank (torch.distributed,
 * a job scheduler's key-value store): each rank gets its address with
 * lade_ucx_address() (*out: text owned by the library, valid until the
 * process exits), gathers every rank's, and passes them in rank order to
 * lade_ucx_set_peers() before it creates a loader with the UCX transport.
 * Once per process (a second call with the same rank and world does
 * nothing; another fails). Without them, the transport exchanges the
 * addresses through the setting rendezvous_dir. LADE_EUNSUPPORTED without
 * UCX in the build. Thread-safe.
 */
LADE_API int lade_ucx_address(const char **out);
LADE_API int lade_ucx_set_peers(uint32_t rank, uint32_t world, const char *const *addresses);

/* ------------------------------------------------------------------- errors */

/*
 * Every error code, once. X(NAME, value, description). A code is never
 * renumbered; new codes are appended.
 */
#define LADE_ERRORS(X)                                                   \
  X(LADE_OK, 0, "success")                                               \
  X(LADE_EINVAL, -1, "invalid argument or setting")                      \
  X(LADE_ENOMEM, -2, "out of memory")                                    \
  X(LADE_EIO, -3, "input/output error")                                  \
  X(LADE_ENOENT, -4, "no such file, object or key")                      \
  X(LADE_EFORMAT, -5, "malformed or unsupported data")                   \
  X(LADE_ESHAPE, -6, "sample shape or dtype differs from the dataset's") \
  X(LADE_ESTATE, -7, "call not valid in the current state")              \
  X(LADE_EEMPTY, -8, "dataset is empty")                                 \
  X(LADE_ETHREAD, -9, "thread creation or synchronisation failed")       \
  X(LADE_EINTR, -10, "interrupted")                                      \
  X(LADE_ETIMEOUT, -11, "timed out")                                     \
  X(LADE_EREMOTE, -12, "remote storage error")                           \
  X(LADE_EUNSUPPORTED, -13, "feature not built in or not supported")     \
  X(LADE_ERANGE, -14, "value out of range")

typedef enum lade_error {
#define LADE_X_ENUM(name, value, text) name = value,
  LADE_ERRORS(LADE_X_ENUM)
#undef LADE_X_ENUM
} lade_error_t;

/* A static description of a code ("unknown error" for an unknown one).
 * Thread-safe. */
LADE_API const char *lade_strerror(int code);

/* The code's symbolic name, e.g. "LADE_EIO" (static string). Thread-safe. */
LADE_API const char *lade_error_name(int code);

/* The detail of the last error raised on the calling thread: which file,
 * sample, key or request, and why. Borrowed; valid until the next lade call
 * on this thread. Never NULL ("" when there was none). Thread-safe (the
 * storage is per thread). */
LADE_API const char *lade_last_error(void);

/* ---------------------------------------------------------------- allocator */

/*
 * Batch buffers come from this hook, so page-locked (pinned) GPU-visible
 * memory can replace plain memory. alloc returns memory aligned to at least
 * `align` bytes or NULL; free receives exactly what alloc returned and its
 * size. Both may be called from any lade thread and must be thread-safe.
 * The struct only grows at its end: lade_config_set_allocator() takes its
 * size as the caller was compiled, and fields past it are NULL.
 * The struct is copied at lade_config_set_allocator(); `ctx` is borrowed and
 * must outlive every loader created from the config and every batch they
 * handed out.
 */
typedef struct lade_allocator {
  void *(*alloc)(void *ctx, size_t size, size_t align);
  void (*free)(void *ctx, void *ptr, size_t size);
  void *ctx;
} lade_allocator_t;

/* ------------------------------------------------------------------- config */

typedef struct lade_config lade_config_t;

/* Creates a config holding every setting at its default. *out is owned by the
 * caller (lade_config_destroy). */
LADE_API int lade_config_create(lade_config_t **out);

/* Frees a config. NULL does nothing. */
LADE_API void lade_config_destroy(lade_config_t *cfg);

/*
 * Sets one setting. The value is validated now: an unknown key is
 * LADE_EINVAL with the list of valid keys in lade_last_error(); a bad value is
 * LADE_EINVAL (or LADE_ERANGE) with the valid choices or range. Both strings
 * are copied.
 */
LADE_API int lade_config_set(lade_config_t *cfg, const char *key, const char *value);

/* Same as lade_config_set for one "key=value" string. */
LADE_API int lade_config_parse(lade_config_t *cfg, const char *key_equals_value);

/* Writes the current value of `key` as text (NUL-terminated, truncated to
 * size). LADE_EINVAL for an unknown key. */
LADE_API int lade_config_get(const lade_config_t *cfg, const char *key, char *buf, size_t size);

/* The i-th setting's key, default value and one-line help (static strings),
 * for listing; returns NULL key past the end. Thread-safe. */
LADE_API const char *lade_config_key(size_t i, const char **default_value, const char **help);

/* 1 when `key` is a secret (S3 credentials): its value is never printed by
 * lade (lade_config_get shows "(set, hidden)", errors never echo it), and is
 * zeroed when the config or the loader holding a copy is destroyed. Wrappers
 * that show settings should mask it too. Thread-safe. */
LADE_API int lade_config_key_is_secret(const char *key);

/* Installs an allocator hook for batch buffers (see lade_allocator_t). NULL
 * restores the default (aligned malloc). size is sizeof(lade_allocator_t) as
 * the caller was compiled (as out_size of lade_loader_stats): the library
 * reads that many bytes; the fields of a newer struct that an older caller
 * lacks are NULL, and a newer caller's fields that this library does not
 * know must be zero (else LADE_EUNSUPPORTED). LADE_EINVAL when alloc and
 * free are not both within size and set. */
LADE_API int lade_config_set_allocator(lade_config_t *cfg, const lade_allocator_t *allocator, size_t size);

/* ------------------------------------------------------------------- batches */

/* Element types. Values are part of the ABI: never renumbered, new ones are
 * appended. Multi-byte values are always in the host's byte order. */
typedef enum lade_dtype {
  LADE_DTYPE_UINT8 = 1,
  LADE_DTYPE_INT8 = 2,
  LADE_DTYPE_INT16 = 3,
  LADE_DTYPE_UINT16 = 4,
  LADE_DTYPE_INT32 = 5,
  LADE_DTYPE_INT64 = 6,
  LADE_DTYPE_FLOAT16 = 7,
  LADE_DTYPE_FLOAT32 = 8,
  LADE_DTYPE_FLOAT64 = 9,
  LADE_DTYPE_BOOL = 10,
  LADE_DTYPE_UINT32 = 11,
  LADE_DTYPE_UINT64 = 12
} lade_dtype_t;

/* Size in bytes of one element of a dtype, 0 for an unknown one. */
LADE_API size_t lade_dtype_size(int dtype);

/* Lower-case name of a dtype ("float32"), "unknown" otherwise. */
LADE_API const char *lade_dtype_name(int dtype);

/* Dimensions of a batch (lade_batch_t.shape), the batch dimension included:
 * a sample has at most LADE_MAX_DIMS - 1. Part of the ABI (the arrays below
 * are this long), so it does not grow within a major version. */
#define LADE_MAX_DIMS 8

/*
 * A batch view. Everything it points to is owned by the loader's batch pool
 * and stays valid and unchanged until lade_batch_release(); the fields must
 * not be modified (the data bytes may be, e.g. for in-place normalisation).
 * shape[0] is the number of samples: batch_size, except in the last step of
 * an epoch with drop_last=false, which is short as DataLoader's last batch.
 * The sample layout follows (C, H, W for float32 images, H, W, C for uint8
 * images, the .npy shape for npy, the slot size in bytes for raw).
 *
 * With world_size > 1 and drop_last=false the epoch is padded by wrapping to
 * its start up to a multiple of world_size (DistributedSampler's padding), so
 * every learner has the same number of steps; the padding samples are always
 * the last shape[0] - valid of a batch. Evaluation counts only the first
 * `valid` samples.
 *
 * `size` is sizeof(lade_batch_t) of the library that filled it: a field added
 * later (always at the end) exists when offsetof(field) < size.
 */
typedef struct lade_batch {
  size_t size;              /* sizeof(lade_batch_t) of the library */
  void *data;               /* first byte of sample 0; samples are contiguous */
  size_t nbytes;            /* bytes of the whole batch tensor */
  int dtype;                /* lade_dtype_t */
  int ndim;                 /* dimensions in shape, 1 + sample dimensions */
  int64_t shape[LADE_MAX_DIMS];
  int64_t strides[LADE_MAX_DIMS]; /* in elements, C order */
  const int64_t *labels;    /* shape[0] class labels (-1 where the source has none) */
  const int64_t *indices;   /* shape[0] dataset indices of the delivered samples */
  const uint32_t *sizes;    /* shape[0] payload bytes per sample (raw: before zero padding) */
  uint64_t epoch;           /* 0-based epoch of this batch */
  uint64_t step;            /* 0-based step within the epoch */
  uint32_t substituted;     /* samples replaced by on_error=skip in this batch */
  int device;               /* -1: host memory; else the CUDA device that `data` is on (setting device) */
  uint32_t valid;           /* samples that are real; the rest (at the end) are padding repeats */
  /* device >= 0: the labels in device memory (shape[0] int64); `labels` stays a host copy. Before the
   * device's bytes are read, a stream must wait for them: lade_batch_use_stream() */
  const int64_t *device_labels;
} lade_batch_t;

/* --------------------------------------------------------------------- loader */

typedef struct lade_loader lade_loader_t;

/*
 * Creates a loader from a config (the config is copied; it may be destroyed
 * right after). Lists the source and makes the plan before returning, so a
 * missing folder, an empty dataset or bad settings fail here (as
 * torchvision's ImageFolder raises at construction); the batches are then
 * produced in the background, and errors of single samples (a bad file) are
 * reported by lade_loader_next(). *out is owned by the caller.
 */
LADE_API int lade_loader_create(lade_loader_t **out, const lade_config_t *cfg);

/*
 * Waits for the next batch in plan order and hands it out in *out. Batches
 * of all epochs come one after the other (the workers cross epoch boundaries
 * without a pause); b->epoch and b->step say where each belongs. At the end
 * of the last epoch returns 0 with *out = NULL. A batch must be given back
 * with lade_batch_release(). The pool holds prefetch + 1 buffers plus one
 * for each batch the caller holds: holding batches never stalls the loader,
 * but each one held costs its buffer (a one-time warning on stderr says so
 * when the pool first grows). With the setting pool_max > 0, next() fails
 * with LADE_ESTATE instead once the caller holds pool_max batches.
 * On a sample error with on_error=fail returns the error (the detail names the
 * file and the reason); the loader is then stopped for good.
 * LADE_EINTR when lade_loader_interrupt() woke it while it waited (no batch
 * is taken: the next call returns the one it waited for); LADE_ESTATE in the
 * child of a fork() (see lade_loader_destroy).
 */
LADE_API int lade_loader_next(lade_loader_t *loader, lade_batch_t **out);

/*
 * Gives a batch back to its pool. Thread-safe: may be called from any thread,
 * also after lade_loader_destroy() of its loader (the pool lives until its
 * last batch is released). NULL does nothing.
 *
 * A batch is released exactly once. A second release of the same batch is
 * detected and ignored with a message on stderr naming its epoch and step:
 * it never touches the buffer, which may hold a later batch by then. Handles
 * (the lade_batch_t pointers) stay allocated while their loader lives and a
 * released one is handed out again only after 64 other batches were
 * released, so the detection holds while fewer than that were released in
 * between (after that the pointer may name a later batch, and releasing it
 * releases that one). A release after the loader was destroyed and all of
 * its batches released is undefined, as free() twice is. In the child of a
 * fork() it does nothing (the pool is the parent's).
 */
LADE_API void lade_batch_release(lade_batch_t *batch);

/*
 * device=cuda[:N] (docs/device.md): makes the CUDA stream `stream` (a
 * cudaStream_t; NULL or 1: the legacy default stream, 2: the per-thread
 * one) wait, on the GPU and without blocking the host, until the batch's
 * data and labels are in device memory, as DLPack's __dlpack__(stream=)
 * does. The stream is remembered: lade_batch_release() records an event on
 * it, and lade's copy of a later batch into the same device buffer waits for
 * that event, so work queued on the stream before the release still reads
 * this batch. Call it on every stream that reads the batch (at most 4)
 * before reading. 0, or LADE_EINVAL for a host batch or a fifth stream,
 * LADE_EIO with the CUDA runtime's reason.
 */
LADE_API int lade_batch_use_stream(lade_batch_t *batch, void *stream);

/*
 * Repositions the loader so the next batch is (epoch, step), exactly as an
 * uninterrupted run would have produced it. Batches still held by the caller
 * stay valid. Valid positions: epoch 0..epochs-1 with step
 * 0..steps_per_epoch-1, and (epochs, 0), the end (the next
 * lade_loader_next() returns NULL). Anything else is LADE_ERANGE with the
 * value and the valid range in lade_last_error(), and moves nothing.
 */
LADE_API int lade_loader_seek(lade_loader_t *loader, uint64_t epoch, uint64_t step);

/* The (epoch, step) the next lade_loader_next() will return. */
LADE_API int lade_loader_tell(const lade_loader_t *loader, uint64_t *epoch, uint64_t *step);

/*
 * A global position of a run: what every rank together has consumed, so
 * that a loader at another world size (or batch size) resumes it
 * (docs/plan.md "Resume"). Any rank's position is the same: rank 0's
 * resumes every rank. The struct only grows at its end; the functions below
 * take its size as the caller was compiled (as lade_loader_stats).
 */
typedef struct lade_position {
  uint64_t epoch;         /* the epoch in progress (the run's epochs: the run is over) */
  uint64_t consumed;      /* regular and planned kinds: positions of that epoch's order the whole world has
                           * trained on (a prefix of its permutation); shards: samples each data-parallel
                           * group has delivered */
  uint64_t shuffle_epoch; /* the permutation that epoch uses (solar's epoch order depends on the world) */
  uint32_t world_size, batch_size; /* the saver's layout */
  uint32_t groups;        /* its data-parallel groups (shards: world_size / model_parallel; else world_size) */
  int32_t kind;           /* its plan (lade_plan_kind_t): a loader with another plan refuses the position */
  uint64_t samples, seed; /* its dataset size and seed: checked the same way */
  /* shards, when that epoch was itself resumed from another layout: that
   * layout's groups, batch size and consumed samples per group (0 groups: none) */
  uint64_t base_consumed;
  uint32_t base_groups, base_batch;
} lade_position_t;

/* The global position of this loader's (epoch, step) (lade_loader_tell()
 * gives the next batch's) into *out, size bytes written
 * (sizeof(lade_position_t)). LADE_ERANGE for a step outside the run (before
 * a resumed run's start); (epochs, 0) is the end. LADE_EUNSUPPORTED in the
 * one case a position cannot be written: plan=shards inside an epoch
 * resumed from a position that was itself saved in an epoch resumed at a
 * third layout (the message says so; the epoch's end can be saved). */
LADE_API int lade_loader_position(lade_loader_t *loader, uint64_t epoch, uint64_t step, lade_position_t *out,
                                  size_t size);

/* A loader created from cfg starts at `position` (copied; NULL clears it):
 * the rest of its epoch is re-striped over this loader's world size and
 * batch size, every remaining sample exactly once and none of the consumed
 * ones again, and later epochs are those of an uninterrupted run with this
 * loader's settings (docs/plan.md "Resume"). A planned kind plans from there
 * with empty caches. lade_loader_create() refuses a position of another
 * plan kind, dataset size or seed, naming the setting. Positions before it
 * are then out of the loader's range (lade_loader_seek). */
LADE_API int lade_config_set_position(lade_config_t *cfg, const lade_position_t *position, size_t size);

/* The (epoch, step) of the run's first batch: (0, 0), or where a loader
 * created with a position resumed (its epoch's earlier steps belong to the
 * run that saved it). */
LADE_API int lade_loader_start(const lade_loader_t *loader, uint64_t *epoch, uint64_t *step);

/* Number of samples in the dataset (waits for the listing), steps per epoch
 * for this learner, and number of epochs. */
LADE_API int lade_loader_info(lade_loader_t *loader, uint64_t *samples, uint64_t *steps_per_epoch,
                              uint64_t *epochs);

/*
 * The dataset's classes and samples, so labels map back to names and files
 * (torchvision ImageFolder's classes, class_to_idx and samples). Each call
 * waits for the listing like lade_loader_info() and returns its error if
 * listing failed. The listing never changes afterwards, so these calls are
 * thread-safe: they may run on any thread, also during lade_loader_next().
 *
 * lade_loader_classes: *count = the number of classes; labels are
 * 0..count-1. 0 for a dataset without classes (a flat folder, or .npy
 * samples without class folders: every label is -1).
 */
LADE_API int lade_loader_classes(lade_loader_t *loader, uint32_t *count);

/*
 * *name = the name of class `index` (for a folder dataset, the class
 * folder's name as bytes, UTF-8 when the file system's names are).
 * Borrowed: valid until lade_loader_destroy(). LADE_ERANGE for an index >=
 * the class count; LADE_EUNSUPPORTED when the source has labels but no
 * names for them (an s3 or npy source today).
 */
LADE_API int lade_loader_class_name(lade_loader_t *loader, uint32_t index, const char **name);

/*
 * Sample `index` (the dataset index of lade_batch_t.indices): writes the
 * path a user would open into path (NUL-terminated; the root joined with the
 * file's relative path as Python's os.path.join does, the s3:// URI for an
 * s3 source, "FILE.npy[index]" for a stacked .npy) and its label (-1 when it
 * has none) into *label. path may be NULL (size 0) and label NULL when not
 * wanted. LADE_ERANGE for an index >= the sample count, or when the path
 * does not fit in size bytes (lade_last_error() says how many it needs;
 * 2 * 4096 always suffice). The path is copied.
 */
LADE_API int lade_loader_sample(lade_loader_t *loader, uint64_t index, char *path, size_t size, int64_t *label);

/*
 * The stored size in bytes of sample `index` as the source listed it (an S3
 * object's listed size, a tar member's size, a file's size where the
 * listing has it): what a read of it returns unless the sample changed
 * since. LADE_ERANGE past the end; LADE_EUNSUPPORTED for a source that
 * lists no sizes (the message names it).
 */
LADE_API int lade_loader_sample_bytes(lade_loader_t *loader, uint64_t index, uint64_t *bytes);

/*
 * Where the bytes lade delivers for sample `index` lie, when they are one
 * plain range of a local file that a read copies unchanged: writes the
 * file's path into path (NUL-terminated, truncated to size) and the range
 * [*offset, *offset + *length): a whole file of a folder; a .npy's payload
 * (a stacked .npy's row, a folder file's or a tar member's under the npy
 * transform); a tar member's data; a stored .npz member's array under the
 * npz transform; a contiguous HDF5 dataset's row. LADE_EUNSUPPORTED, the
 * message saying why, where they are not: remote sources, TFRecord files,
 * deflated .npz members, chunked or converted HDF5 datasets, Fortran-order
 * or byte-swapped arrays. May read the sample (to find a payload in it).
 * `lade bench` measures its copy ceiling over these ranges. The path is
 * copied. Thread-safe (it may run beside lade_loader_next()).
 */
LADE_API int lade_loader_sample_extent(lade_loader_t *loader, uint64_t index, char *path, size_t size,
                                       uint64_t *offset, uint64_t *length);

/*
 * Wakes the lade_loader_next() calls that are waiting for a batch now: each
 * returns LADE_EINTR once, and no batch is taken (the next call returns the
 * batch the interrupted one would have). Returns how many calls it woke; 0
 * when none was waiting, and then it has no effect at all (a later next() is
 * not affected), so an interrupt is never silently dropped nor left over: a
 * caller that must stop a next() that may not be waiting yet calls it again
 * until it returns > 0 or the next() returned. Thread-safe.
 */
LADE_API int lade_loader_interrupt(lade_loader_t *loader);

/*
 * Every rank's `len` bytes, in rank order, into `all` (world * len bytes;
 * world is the loader's world_size): a collective over the loader's ranks,
 * which every rank calls at the same point with the same len. It doubles as
 * a barrier (len 0 exchanges nothing and waits for every rank). With one
 * rank it copies `mine`. With several it needs the loader's transport
 * between ranks: MPI (`transport=mpi`, or a routed plan under mpirun; the
 * process initialised MPI with MPI_THREAD_MULTIPLE, as `lade bench` and
 * mpi4py do) or UCX (`transport=ucx` with a rendezvous_dir, or peers set by
 * lade_ucx_set_peers()); without one it fails with LADE_EUNSUPPORTED saying
 * which setting to give. Bounded by peer_timeout_ms: a rank that does not
 * come fails the others with LADE_ETIMEOUT. `lade dlio run` barriers its
 * emulated accelerators and gathers their metrics with it. Not thread-safe:
 * one call at a time per loader.
 */
LADE_API int lade_loader_allgather(lade_loader_t *loader, const void *mine, size_t len, void *all);

/*
 * Stops the workers and frees the loader. Batches still held stay valid until
 * released; they keep only their buffers: the source's files, the disk
 * cache (and its cache_dir lock) and the transport are closed here, so a new
 * loader may open the same cache_dir at once. NULL does nothing.
 *
 * fork(): a loader belongs to the process that created it. In a child made by
 * fork() every call on an inherited loader fails with LADE_ESTATE (the
 * detail says to create a loader in the child), lade_loader_interrupt() and
 * lade_batch_release() do nothing, and lade_loader_destroy() returns at once
 * without touching the parent's threads or locks (the child's copy is freed
 * when it exits). The parent is unaffected.
 */
LADE_API void lade_loader_destroy(lade_loader_t *loader);

/* ---------------------------------------------------------------- checksum */

/*
 * A fast 64-bit checksum of bytes, chainable: checksum(b, checksum(a, s))
 * digests a then b (the chain restarts at 8-byte boundaries of each piece, so
 * digest a batch at a time). Used by `lade bench` and the Python module to
 * prove two runs delivered the same bytes in the same order. Not
 * cryptographic. Thread-safe.
 */
LADE_API uint64_t lade_checksum(const void *data, size_t size, uint64_t seed);

/*
 * CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and
 * final xor ~0) of `size` bytes at `data`, continuing from `crc`: pass 0 to
 * start; chainable as zlib's crc32(), lade_crc32c(b, nb, lade_crc32c(a, na,
 * 0)) is the CRC of a followed by b. lade_crc32c("123456789", 9, 0) is
 * 0xE3069283. The checksum of TFRecord files (a record's masked CRC is
 * ((c >> 15) | (c << 17)) + 0xa282ead8 in uint32 arithmetic); SSE4.2's
 * crc32 instruction where the CPU has it, tables elsewhere. data may be
 * NULL only with size 0. Thread-safe.
 */
LADE_API uint32_t lade_crc32c(const void *data, size_t size, uint32_t crc);

/*
 * Writes the sidecar index of a local WebDataset tar shard (or TFRecord
 * file) beside it, as SHARD.ladeidx: every member's offset and size, bound
 * to the shard by its size and a hash of sampled member headers, never by
 * its mtime, so it stays valid when both files are copied (to a web server,
 * an S3 bucket, another disk). A remote open fetches it instead of reading
 * the shard whole (docs/sources.md, "Sidecar indexes"); `lade pack` and
 * `lade index` call this. cfg (borrowed; NULL: the defaults) gives
 * source_type (tfrecord, else by the name: .tfrecord files are TFRecord)
 * and tfrecord_feature / tfrecord_label, which a TFRecord index depends
 * on. Returns 0, or a negative code with lade_last_error() naming the
 * shard (a broken tar: its member) or the file that could not be written.
 * Thread-safe.
 */
LADE_API int lade_shard_index_write(const lade_config_t *cfg, const char *shard);
/* The same into the file out_path (NULL: SHARD.ladeidx beside a local
 * shard), for a local shard or a remote one: an http(s):// or s3:// URL
 * (the settings' endpoint, credentials, TLS and retries), read once as a
 * streamed GET; the file is the one a local copy of the shard would get,
 * to be copied beside the remote shard. Thread-safe. */
LADE_API int lade_shard_index_write_to(const lade_config_t *cfg, const char *shard, const char *out_path);

/* ---------------------------------------------------------------- metrics */

enum { LADE_STAGE_READ = 0, LADE_STAGE_TRANSFORM, LADE_STAGE_COLLATE, LADE_STAGE_WAIT, LADE_STAGE_COUNT };

typedef struct lade_stats {
  uint64_t batches;              /* batches delivered */
  uint64_t samples;              /* samples delivered */
  uint64_t bytes_read;           /* encoded bytes read from all sources */
  uint64_t samples_by_source[4]; /* 0: storage, 1: memory cache, 2: disk cache, 3: peer */
  uint64_t bytes_by_source[4];
  uint64_t substituted;          /* samples replaced by on_error=skip */
  double stage_seconds[LADE_STAGE_COUNT]; /* summed over threads; WAIT is the consumer's */
  double first_batch_seconds;    /* create() to the first batch handed out */
  double batch_latency_p50;      /* seconds from a batch's scheduling to its completion */
  double batch_latency_p90;
  double batch_latency_p99;
  double batch_latency_max;
  uint64_t peak_pool_bytes;      /* bytes of batch buffers allocated */
  uint32_t threads;              /* worker threads running */
  /* object stores and cache tiers (zero when not in use) */
  uint32_t concurrency;          /* remote requests allowed in flight now (tuned or set) */
  uint64_t get_requests;         /* GET requests sent to the object store, retries included */
  uint64_t list_requests;        /* LIST requests sent (0 when the listing came from cache_dir) */
  uint64_t sidecar_rejected;     /* remote shards whose sidecar index (SHARD.ladeidx) was not theirs or was
                                  * damaged: read whole to index them instead (docs/sources.md) */
  uint64_t retries;              /* remote requests retried after a transient error */
  uint64_t remote_bytes;         /* body bytes received from the object store (prefetcher included) */
  uint64_t cache_misses;         /* samples read from storage while a cache tier was on */
  uint64_t prefetched;           /* samples the DELI prefetcher stored in the disk cache */
  uint64_t cache_corrupt;        /* disk cache entries that failed their checksum (fetched again) */
  uint64_t fetch_size;           /* the prefetcher's fetch size and threshold, in samples (0: off) */
  uint64_t prefetch_threshold;
  /* the plan (setting `plan`; lade/plan.h's lade_plan_kind_t) and how its routes were followed */
  int plan;
  uint64_t plan_cache_hits;      /* samples the plan routed to this learner's cache and found there */
  uint64_t plan_fallbacks;       /* samples the plan routed to the cache that were not there: read from storage */
  uint64_t plan_peer_storage;    /* samples the plan routed to a peer, read from storage (no transport) */
  /* the transport between learners (transport=mpi): samples_by_source[3] counts those received */
  uint64_t peer_messages_sent;   /* samples this learner's cache sent to others */
  uint64_t peer_bytes_sent;
  uint64_t peer_served_from_storage; /* of those, read from storage: the cache did not hold them */
  uint64_t peer_bytes_held_peak; /* the most peer bytes held at once, arrived before their step was read
                                  * (bounded by backpressure: docs/transport.md) */
  /* the ranks that share this learner's machine (docs/transport.md, Nodes; setting ranks_per_node) */
  uint32_t node;                 /* this learner's node, 0 .. nodes - 1, nodes numbered by their lowest rank */
  uint32_t nodes;
  uint32_t local_rank;           /* its place among its node's ranks, in rank order */
  uint32_t ranks_per_node;       /* ranks on its node */
  /* a node-aware plan (docs/plan.md, Nodes): of samples_by_source[3], those a rank of this learner's own node
   * sent (intra-node handoffs; the rest came from other nodes) */
  uint64_t peer_samples_node;
  uint64_t peer_bytes_node;
  /* the node cache (setting node_cache; docs/cache.md): one memory cache shared by the node's ranks; zero when off.
   * Counters are the node's: every local rank's reads and puts */
  uint64_t node_cache_used_bytes;    /* bytes its entries are charged now (one copy of each cached sample) */
  uint64_t node_cache_capacity;      /* its budget: cache_mem_bytes */
  uint64_t node_cache_segment_bytes; /* the shared-memory segment's size (budget, index and header) */
  uint64_t node_cache_entries;
  uint64_t node_cache_hits, node_cache_misses;
  uint64_t node_cache_recovered;     /* times the cache was emptied: a rank died holding its lock (or its ring was
                                      * found damaged); no torn entry is served, the ranks go on */
  uint32_t node_cache_ranks;         /* live processes attached to it */
  /* two tiers under a plan (plan=solar with cache_mem_bytes and cache_dir + cache_disk_bytes; docs/plan.md, Two
   * tiers): samples_by_source[1] and [2] count the reads from each; zero otherwise */
  uint64_t plan_admits_mem, plan_admits_disk; /* the plan's admits put in each tier */
  uint64_t plan_moves_up, plan_moves_down;    /* the plan's moves done: disk to memory, memory to disk */
  uint64_t peer_served_from_disk;             /* of peer_messages_sent, read from the disk tier */
  /* a node-aware plan with the node's shared cache (docs/plan.md, Nodes): of samples_by_source[1], the intra-node
   * handoffs (read from the node's cache, not sent) */
  uint64_t plan_node_reads;
  /* cache entries stored under an older version of their sample (its file was rewritten or replaced since, or an
   * object's size changed): removed and read from storage again, never served (docs/cache.md, Versions) */
  uint64_t cache_stale;
  /* the image decoder's choices made by timing the first images on this machine (docs/transform.md, Choices
   * that follow the machine): its horizontal pass and rows per libjpeg call, as the first worker made them, e.g.
   * "vbmi-rgb, 16 rows per libjpeg call (trials cost 1.2 ms)"; "" before then and for other transforms */
  char image_kernels[96];
  /* device=cuda[:N] (docs/device.md): the batches' copies to the GPU; zero for host batches */
  uint64_t h2d_bytes;        /* bytes copied host to device (data and labels) */
  uint64_t device_buffers;   /* device batch buffers allocated */
  double h2d_seconds;        /* GPU time of the copies, on lade's own stream (they overlap the consumer's work) */
  double h2d_wait_seconds;   /* GPU time the consumer's streams waited for a copy: a stall of training */
} lade_stats_t;

/*
 * Fills *out with the loader's counters so far. out_size is
 * sizeof(lade_stats_t) as the caller was compiled: the struct only grows at
 * its end, the library writes out_size bytes (a newer library leaves out
 * the fields an older caller does not know; an older one zeroes the fields
 * it does not know), so callers keep working across versions. LADE_EINVAL
 * for an out_size below 8. Thread-safe.
 */
LADE_API int lade_loader_stats(lade_loader_t *loader, lade_stats_t *out, size_t out_size);

/*
 * Counters of one epoch (DELI's per-epoch metrics, paper 004 in
 * docs/references.md). Samples and bytes by source count the samples of
 * this epoch's batches by where the workers found them; wait_seconds is the consumer's time blocked in lade_loader_next() for
 * this epoch's batches; requests and remote bytes are those sent while this
 * epoch's batches were being handed out (from the first batch of the epoch
 * to the first of the next; the listing counts in epoch 0), so they include
 * the prefetcher's work for later epochs.
 */
typedef struct lade_epoch_stats {
  uint64_t epoch;
  uint64_t batches;              /* batches of this epoch handed out */
  uint64_t samples;              /* samples of this epoch read by the workers */
  uint64_t samples_by_source[4]; /* 0: storage, 1: memory cache, 2: disk cache, 3: peer */
  uint64_t bytes_by_source[4];
  double miss_rate;              /* samples from storage / samples (0 with no cache tier) */
  double wait_seconds;
  uint64_t get_requests, list_requests, remote_bytes;
  uint64_t plan_fallbacks;       /* as in lade_stats_t, for this epoch's batches */
  uint64_t plan_peer_storage;
  uint64_t peer_samples_node;    /* as in lade_stats_t, for this epoch's batches */
  uint64_t peer_bytes_node;
  uint64_t plan_node_reads;      /* as in lade_stats_t, for this epoch's batches */
} lade_epoch_stats_t;

/* Fills *out for `epoch` (LADE_ERANGE for an epoch not started yet);
 * out_size is sizeof(lade_epoch_stats_t), as for lade_loader_stats.
 * Thread-safe. */
LADE_API int lade_loader_epoch_stats(lade_loader_t *loader, uint64_t epoch, lade_epoch_stats_t *out,
                                     size_t out_size);

/* ----------------------------------------------------------- stage account */

/*
 * Where an image transform's time goes on this machine (docs/transform.md,
 * The stage account): the transform of cfg (imagenet-train or imagenet-eval,
 * with its crop, dtype and seed) runs over the n JPEGs in memory on the
 * calling thread, once per stage and round, each time with the decoder told
 * to stop after a stage; a stage costs the difference between its stop and
 * the one before (same images, same boxes). All times are seconds per image,
 * each the best of `rounds`. Before the rounds the decoder makes its timed
 * choices (its horizontal pass, rows per libjpeg call) on the images, and
 * keeps them for every stop. lade bench and bench_jpeg_transform print it.
 */
typedef struct lade_image_stages {
  uint32_t images, rounds;
  double transform;  /* the transform as a loader runs it */
  double header;     /* stopping after the completeness check, header and lade's plan (box, coefficients) */
  double entropy;    /* ... after the entropy decode to the decoded region's last row */
  double decode;     /* ... after libjpeg's rows of the region (IDCT, upsampling, colour), not resampled */
  double timed;      /* the whole transform with lade's steps timed (below); its excess is the clock's cost */
  double plan, decoder, hpass, finish; /* of the timed run: lade's plan, libjpeg's calls, lade's horizontal pass,
                                        * lade's vertical pass, flip and store */
  double rows_frac;  /* mean over images: rows decoded to the region's last, of the image's rows */
  double area_frac;  /* mean: the region's decoded pixels (cropped columns x rows), of the image's */
  char choices[96];  /* the decoder's timed choices (lade_stats_t.image_kernels) */
} lade_image_stages_t;

/*
 * Fills *out (out_size: sizeof(lade_image_stages_t) as the caller was
 * compiled). LADE_EUNSUPPORTED without JPEG support or for a transform other
 * than the imagenet ones; LADE_EFORMAT naming the image that does not decode.
 * Not for the hot path: it takes (5 x rounds + 1) passes over the images.
 */
LADE_API int lade_image_stages(const lade_config_t *cfg, const uint8_t *const *images, const size_t *lens, size_t n,
                               int rounds, lade_image_stages_t *out, size_t out_size);

#ifdef __cplusplus
}
#endif
#endif /* LADE_LADE_H */
