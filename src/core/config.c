/* config.c - validated key=value settings. One table lists every key with its
 * default and help; lade_config_set() parses into the typed struct. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "plankinds.h"

/* T_SECRET is a string whose value is never printed: lade_config_get()
 * shows "(set, hidden)", errors never echo it, the Python module masks it
 * (lade_config_key_is_secret), and it is wiped when the config or a loader's
 * copy is destroyed. Marked by its kind in the table, not by a word in the
 * help text. */
typedef enum { T_STR, T_U32, T_U64, T_BOOL, T_F64, T_ENUM, T_SECRET } kind_t;

typedef struct setting {
  const char *key;
  kind_t kind;
  size_t offset;
  size_t size;           /* for strings */
  double lo, hi;         /* numeric range */
  const char *choices;   /* for enums: "a|b|c" in value order */
  const char *def;
  const char *help;
} setting_t;

#define OFF(f) offsetof(struct lade_config, f)
#define SZ(f) sizeof(((struct lade_config *)0)->f)

static const setting_t settings[] = {
    {"source", T_STR, OFF(source), SZ(source), 0, 0, NULL, "",
     "dataset: an ImageFolder tree, a folder of .npy files, one stacked .npy, tar shards (a .tar, a folder of them, "
     "a brace pattern, a .txt list; local paths, http(s):// URLs or s3:// objects, e.g. "
     "https://host/train-{000000..000099}.tar), an HDF5 file (.h5, .hdf5, .he5; local only), or s3://bucket/prefix "
     "(one object per sample)"},
    {"source_type", T_ENUM, OFF(source_type), 0, 0, 0, "auto|dir|npy|s3|tar|hdf5|tfrecord", "auto",
     "source backend (auto: tfrecord for a file, folder of files, brace pattern or URL ending in .tfrecord or "
     ".tfrecords; tar for any other http(s):// URL, and for a .tar file, a folder of .tar files, a brace pattern "
     "train-{000000..000099}.tar or a .txt list of shards, local or s3://; s3 for any other s3:// prefix; npy for a .npy file or a folder holding only .npy files; hdf5 for a local file ending in .h5, .hdf5 "
     "or .he5; else dir; tfrecord for a list file of TFRecord files or an s3:// prefix of them)"},
    {"transform", T_ENUM, OFF(transform), 0, 0, 0, "auto|raw|npy|imagenet-train|imagenet-eval|npz", "auto",
     "sample transform (auto: npy for npy and hdf5 sources; for dir, npz when its files are .npz archives, else "
     "imagenet-train; npz: one array of each np.savez/np.savez_compressed file, setting npz_member)"},
    {"batch_size", T_U32, OFF(batch_size), 0, 1, 1 << 20, NULL, "32", "samples per batch on this learner"},
    {"epochs", T_U64, OFF(epochs), 0, 1, 1e9, NULL, "1", "epochs to iterate"},
    {"seed", T_U64, OFF(seed), 0, 0, 1.8446744073709552e19, NULL, "0", "seed of shuffles and augmentations"},
    {"shuffle", T_BOOL, OFF(shuffle), 0, 0, 0, NULL, "true", "shuffle the dataset every epoch"},
    {"drop_last", T_BOOL, OFF(drop_last), 0, 0, 0, NULL, "false",
     "drop the last incomplete global batch (false: the last batch is short, as DataLoader's; with world_size > 1 "
     "the epoch is padded by wrapping to a multiple of world_size, as DistributedSampler, and batch.valid counts "
     "the real samples)"},
    {"rank", T_U32, OFF(rank), 0, 0, 1 << 20, NULL, "0", "this learner's rank"},
    {"world_size", T_U32, OFF(world_size), 0, 1, 1 << 20, NULL, "1", "number of learners"},
    {"threads", T_U32, OFF(threads), 0, 0, 1024, NULL, "0", "worker threads (0: online cores)"},
    {"prefetch", T_U32, OFF(prefetch), 0, 1, 64, NULL, "2", "batches prepared ahead of the consumer"},
    {"device", T_STR, OFF(device), SZ(device), 0, 0, NULL, "cpu",
     "where batches are delivered: cpu, or cuda / cuda:N (a GPU: batches and labels in device memory, copied on "
     "lade's own stream and handed out with DLPack's stream protocol; the CUDA runtime is opened on first use, "
     "LADE_CUDA_LIB names libcudart; docs/device.md)"},
    {"device_prefetch", T_U32, OFF(device_prefetch), 0, 0, 64, NULL, "2",
     "device=cuda: ready batches copied to the device ahead of the one handed out (each costs a device buffer)"},
    {"pin_memory", T_BOOL, OFF(pin_memory), 0, 0, 0, NULL, "false",
     "page-locked (pinned) batch buffers, so tensor.cuda(non_blocking=True) copies them by DMA at full speed and "
     "overlaps; needs the CUDA runtime (LADE_CUDA_LIB) and a device"},
    {"pool_max", T_U32, OFF(pool_max), 0, 0, 1e6, NULL, "0",
     "most batch buffers at once (0: no cap); the pool grows past prefetch+1 only while the caller holds batches"},
    {"crop_size", T_U32, OFF(crop_size), 0, 8, 4096, NULL, "224", "output side of image transforms"},
    {"resize_size", T_U32, OFF(resize_size), 0, 8, 8192, NULL, "256", "shorter side before the centre crop (imagenet-eval)"},
    {"image_dtype", T_ENUM, OFF(image_dtype), 0, 0, 0, "float32|uint8", "float32",
     "image output: float32 CHW normalised with ImageNet mean/std, or uint8 HWC"},
    {"decode_scale", T_ENUM, OFF(decode_scale), 0, 0, 0, "off|auto", "off",
     "JPEG decode at 1/2, 1/4, 1/8 scale when the box is >= 2x the output (auto: faster on large images, "
     "no longer bit-identical to torchvision; off: exact)"},
    {"scale_min", T_F64, OFF(scale_min), 0, 1e-6, 1, NULL, "0.08", "RandomResizedCrop area scale, lower bound"},
    {"scale_max", T_F64, OFF(scale_max), 0, 1e-6, 1, NULL, "1", "RandomResizedCrop area scale, upper bound"},
    {"ratio_min", T_F64, OFF(ratio_min), 0, 0.01, 100, NULL, "0.75", "RandomResizedCrop aspect ratio, lower bound"},
    {"ratio_max", T_F64, OFF(ratio_max), 0, 0.01, 100, NULL, "1.3333333333333333",
     "RandomResizedCrop aspect ratio, upper bound"},
    {"hflip", T_F64, OFF(hflip), 0, 0, 1, NULL, "0.5", "probability of a horizontal flip (imagenet-train)"},
    {"raw_size", T_U64, OFF(raw_size), 0, 0, 1ull << 40, NULL, "0",
     "raw transform: bytes per sample slot (0: size of sample 0); shorter samples are zero padded; npz: > 0 "
     "delivers each array's bytes (C order) in a slot of raw_size bytes, whatever its shape"},
    {"raw_overflow", T_ENUM, OFF(raw_overflow), 0, 0, 0, "error|cut", "error",
     "raw_size: a longer sample fails naming it (error) or keeps its first raw_size bytes (cut: as DLIO's readers "
     "return a fixed-size sample, `lade dlio`)"},
    {"on_error", T_ENUM, OFF(on_error), 0, 0, 0, "fail|skip", "fail",
     "a bad sample stops the loader (fail) or is replaced by another valid sample, counted (skip)"},
    {"skip_max_run", T_U32, OFF(skip_max_run), 0, 0, 1e6, NULL, "16",
     "on_error=skip: this many failed reads in a row (substitutes included, any thread) mean the storage is failing, "
     "not single samples: the loader stops with that error (0: no bound)"},
    {"skip_max_fraction", T_F64, OFF(skip_max_fraction), 0, 0, 1, NULL, "0.1",
     "on_error=skip: more bad samples than this fraction of an epoch stop the loader (1: no bound)"},
    {"trace", T_STR, OFF(trace), SZ(trace), 0, 0, NULL, "",
     "write a Chrome trace-event JSON of every sample and batch to this file"},
    {"npy_dtype", T_STR, OFF(npy_dtype), SZ(npy_dtype), 0, 0, NULL, "", "expected .npy dtype (\"\": from the first file)"},
    {"npy_shape", T_STR, OFF(npy_shape), SZ(npy_shape), 0, 0, NULL, "",
     "expected .npy sample shape, e.g. 3,224,224 (\"\": from the first file)"},
    {"npz_member", T_STR, OFF(npz_member), SZ(npz_member), 0, 0, NULL, "x",
     "npz transform: the array each .npz sample gives, as np.load(f)[NAME] (x reads member x.npy; every sample's "
     "must have sample 0's dtype and shape, unless raw_size is set)"},
    {"hdf5_data", T_STR, OFF(hdf5_data), SZ(hdf5_data), 0, 0, NULL, "data",
     "hdf5 source: path of the dataset inside the file holding the samples (N x ..., numeric)"},
    {"hdf5_labels", T_STR, OFF(hdf5_labels), SZ(hdf5_labels), 0, 0, NULL, "",
     "hdf5 source: path of the 1-D integer label dataset (\"\": \"labels\" when the file has one, else no labels; "
     "a path given and missing is an error)"},
    {"hdf5_gap", T_U64, OFF(hdf5_gap), 0, 0, 1e9, NULL, "1",
     "hdf5 source: a batch's sorted indices at most this far apart are read as one hyperslab, the samples between "
     "them included (0: one read per sample; 1: only neighbours, no extra bytes); `lade probe FILE.h5 [--cold]` "
     "measures the best value for your storage"},
    {"hdf5_chunk_cache", T_U64, OFF(hdf5_chunk_cache), 0, 0, 1e12, NULL, "67108864",
     "hdf5 source: bytes of decompressed chunks kept for a chunked dataset (lade's cache on the gzip chunk path, "
     "libhdf5's otherwise; 0: libhdf5's 1 MiB and no chunk path)"},
    {"hdf5_direct", T_ENUM, OFF(hdf5_direct), 0, 0, 0, "auto|off", "auto",
     "hdf5 source: a contiguous, uncompressed dataset in the host's byte order is read with pread() at its file "
     "offset without libhdf5, and gzip chunks holding whole samples are inflated by the workers outside libhdf5's "
     "lock (auto: when the layout allows; off: every read is an H5Dread of a hyperslab, serialised)"},
    {"tfrecord_feature", T_STR, OFF(tfrecord_feature), SZ(tfrecord_feature), 0, 0, NULL, "image",
     "tfrecord source: the tf.train.Example feature whose value is a sample's bytes: a bytes_list's first value, an "
     "int64_list's values as little-endian int64, a float_list's as float32 (\"\": each record's whole data, not "
     "decoded, for files that do not hold Examples); a record without it is an error naming it"},
    {"tfrecord_label", T_STR, OFF(tfrecord_label), SZ(tfrecord_label), 0, 0, NULL, "label",
     "tfrecord source: the int64 feature (its first value, 0 to 2^24-1) that is a sample's label; absent from every "
     "record: labels -1 (DLIO's files have none); present in some records only: an error (\"\": no labels)"},
    {"tfrecord_compression", T_ENUM, OFF(tfrecord_compression), 0, 0, 0, "auto|none|gzip|zlib", "auto",
     "tfrecord source: the files' compression (auto: gzip for names ending in .gz, zlib for .zlib, else none); "
     "gzip and zlib files (local, built with zlib) are inflated: in one pass when read in file order (plan=shards, "
     "shuffle=false), again from a kept point or the start for each read out of order"},
    {"s3_endpoint", T_STR, OFF(s3_endpoint), SZ(s3_endpoint), 0, 0, NULL, "",
     "S3 endpoint URL (\"\": $AWS_ENDPOINT_URL, else https://s3.REGION.amazonaws.com)"},
    {"s3_region", T_STR, OFF(s3_region), SZ(s3_region), 0, 0, NULL, "",
     "S3 region for SigV4 (\"\": $AWS_REGION, $AWS_DEFAULT_REGION, else us-east-1)"},
    {"s3_addressing", T_ENUM, OFF(s3_addressing), 0, 0, 0, "auto|path|virtual", "auto",
     "S3 URL style (auto: virtual-host on amazonaws.com, path elsewhere)"},
    {"s3_access_key_id", T_SECRET, OFF(s3_access_key_id), SZ(s3_access_key_id), 0, 0, NULL, "",
     "S3 access key id (\"\": $AWS_ACCESS_KEY_ID); never printed"},
    {"s3_secret_access_key", T_SECRET, OFF(s3_secret_access_key), SZ(s3_secret_access_key), 0, 0, NULL, "",
     "S3 secret key (\"\": $AWS_SECRET_ACCESS_KEY); never printed"},
    {"s3_session_token", T_SECRET, OFF(s3_session_token), SZ(s3_session_token), 0, 0, NULL, "",
     "S3 session token (\"\": $AWS_SESSION_TOKEN); never printed"},
    {"http_concurrency", T_U32, OFF(http_concurrency), 0, 0, 4096, NULL, "0",
     "HTTP requests in flight, s3:// and http(s):// alike, per node: each of the node's ranks (ranks_per_node, "
     "else the launcher's local size) has its share (0: tuned at run time, from 32, between 4 and "
     "http_max_concurrency); alias s3_concurrency"},
    {"http_max_concurrency", T_U32, OFF(http_max_concurrency), 0, 1, 4096, NULL, "128",
     "upper bound of the tuned number of HTTP requests in flight, per node: each of the node's ranks "
     "(ranks_per_node, else the launcher's local size) has its share; alias s3_max_concurrency"},
    {"http_timeout_ms", T_U32, OFF(http_timeout_ms), 0, 100, 3600000, NULL, "30000",
     "a single HTTP request (connect to last byte) is abandoned and retried after this long; alias s3_timeout_ms"},
    {"http_connect_timeout_ms", T_U32, OFF(http_connect_timeout_ms), 0, 10, 600000, NULL, "5000",
     "HTTP connection timeout; alias s3_connect_timeout_ms"},
    {"http_retries", T_U32, OFF(http_retries), 0, 0, 100, NULL, "6",
     "retries of a transient HTTP error (5xx, 429/SlowDown, timeout, reset) before the sample fails; alias "
     "s3_retries"},
    {"http_retry_base_ms", T_U32, OFF(http_retry_base_ms), 0, 1, 60000, NULL, "100",
     "first retry delay; doubles per retry (capped at 20 s) with full jitter; alias s3_retry_base_ms"},
    {"max_sample_bytes", T_U64, OFF(max_sample_bytes), 0, 1, 1.8446744073709552e19, NULL, "1073741824",
     "largest sample read, a local file or an S3 object (its listed size, or the bytes sent); a larger one fails "
     "naming it before its bytes are held in memory"},
    {"label_file", T_STR, OFF(label_file), SZ(label_file), 0, 0, NULL, "",
     "labels as lines 'KEY LABEL' (a local path or s3://bucket/key); \"\": from the class folder in the key"},
    {"listing_ttl", T_U64, OFF(listing_ttl), 0, 0, 1e12, NULL, "86400",
     "seconds a remote listing stored in cache_dir is reused (0: list every run)"},
    {"coalesce_gap_bytes", T_U64, OFF(coalesce_gap_bytes), 0, 0, 1e12, NULL, "65536",
     "http(s):// and s3:// tar shards: samples of one shard in one batch with at most this many bytes between "
     "them are read with one Range request (0: one request per sample)"},
    {"readahead_bytes", T_U64, OFF(readahead_bytes), 0, 0, 1e12, NULL, "67108864",
     "remote sources (s3://, http(s):// shards): about this many bytes of the coming batches are requested ahead "
     "of the batches being prepared, in the order they will be used (at most 1024 samples), so request latency "
     "is hidden; with the DELI prefetcher it bounds the prefetcher's requests in flight instead (0: only the "
     "prefetch + 1 batches being prepared)"},
    {"tls_ca_file", T_STR, OFF(tls_ca_file), SZ(tls_ca_file), 0, 0, NULL, "",
     "PEM file of the CAs that https:// servers (s3://, http(s):// tar shards) are verified against; certificates "
     "and host names are always verified (\"\": $SSL_CERT_FILE, else $CURL_CA_BUNDLE, else the system's CAs)"},
    {"index_dir", T_STR, OFF(index_dir), SZ(index_dir), 0, 0, NULL, "",
     "tar shards: folder that keeps each shard's member index (created with mode 0700), so a later open reads it "
     "instead of the shard (\"\": cache_dir when set, else SHARD.tar.ladeidx beside a local shard and none for a "
     "remote one, which is then streamed once at every open); also the remote listings (an s3:// prefix's, a "
     "job's remote shards'): the ranks and nodes of a job that share it list and index once between them (on a "
     "file system the nodes share with working flock: NFS, Lustre mounted with -o flock); turns on no cache"},
    {"cache_dir", T_STR, OFF(cache_dir), SZ(cache_dir), 0, 0, NULL, "",
     "disk cache folder (created with mode 0700; persists across runs); \"\": no disk cache"},
    {"cache_disk_bytes", T_U64, OFF(cache_disk_bytes), 0, 0, 1.8446744073709552e19, NULL, "0",
     "disk cache capacity in bytes (0: half the free space of cache_dir's file system)"},
    {"cache_mem_bytes", T_U64, OFF(cache_mem_bytes), 0, 0, 1.8446744073709552e19, NULL, "0",
     "memory cache capacity in bytes (0: no memory cache)"},
    {"cache_policy", T_ENUM, OFF(cache_policy), 0, 0, 0, "auto|fifo|lru|clairvoyant|plan", "auto",
     "eviction (auto: clairvoyant, from the plan's future accesses, or plan with a plan other than regular; fifo as "
     "DELI; lru; plan: the memory tier holds exactly what the plan's cache model admits and evicts)"},
    {"plan", T_ENUM, OFF(plan), 0, 0, 0, LADE__PLAN_KIND_CHOICES, "regular",
     "who trains on which sample of each global batch and where it comes from (docs/plan.md): regular = global "
     "shuffle, DistributedSampler slices, the cache tiers decide; regular+lru ... solar follow the planner of `lade "
     "plan` and drive the memory cache (cache_mem_bytes) by its admits and evicts; shards streams tar shards "
     "(as Parax, \"Efficient Distributed Data Loading\"): each data-parallel group reads its part of the "
     "shuffled shard list front to back through a shuffle buffer; dlio reads as DLIO's pytorch or tensorflow reader "
     "does (dlio_reader; docs/dlio.md, `lade dlio`)"},
    {"shuffle_buffer", T_U64, OFF(shuffle_buffer), 0, 0, 1e12, NULL, "1000",
     "plan=shards: samples in the shuffle buffer (WebDataset's shuffle(n); 0: read the shards in order)"},
    {"dlio_reader", T_ENUM, OFF(dlio_reader), 0, 0, 0, "pytorch|tensorflow", "pytorch",
     "plan=dlio: whose sharding (docs/dlio.md): pytorch = a contiguous block of the samples per rank, the same every "
     "epoch, in order; tensorflow = files round-robin to ranks, records interleaved over dlio_interleave files, "
     "through a shuffle_buffer when shuffle is on"},
    {"dlio_samples_per_file", T_U32, OFF(dlio_samples_per_file), 0, 1, 1u << 30, NULL, "1",
     "plan=dlio, a source whose samples are files (.npz): DLIO samples per file (num_samples_per_file; DLIO loads the "
     "whole file for each)"},
    {"dlio_interleave", T_U32, OFF(dlio_interleave), 0, 1, 1 << 16, NULL, "1",
     "plan=dlio, dlio_reader=tensorflow: files read at once, one record from each in turn (DLIO's read_threads, "
     "tf.data's num_parallel_reads)"},
    {"model_parallel", T_U32, OFF(model_parallel), 0, 1, 1 << 20, NULL, "1",
     "plan=shards: ranks per model-parallel group (consecutive ranks); they receive identical batches"},
    {"devices_per_node", T_U32, OFF(devices_per_node), 0, 0, 1 << 20, NULL, "0",
     "plan=shards: ranks (devices) per node (0: all on one node); must divide world_size"},
    {"plan_balance", T_ENUM, OFF(plan_balance), 0, 0, 0, "peer|storage", "peer",
     "plan=locality: a learner short of cached samples gets them from the learner that has too many (peer) or "
     "reads them from storage"},
    {"plan_reorder", T_BOOL, OFF(plan_reorder), 0, 0, 0, NULL, "true",
     "plan=solar: choose the order of the epochs' shuffles that maximises reuse (needs a bounded epochs)"},
    {"plan_imbalance", T_U32, OFF(plan_imbalance), 0, 0, 1 << 20, NULL, "0",
     "plan=solar: local batch sizes may differ by up to this many samples (SOLAR's load balancing; the global "
     "batch stays batch_size * world_size), so more of each step trains from the caches"},
    {"plan_order", T_ENUM, OFF(plan_order), 0, 0, 0, "auto|dp|local|pso", "auto",
     "plan=solar: the epoch-order solver (auto: exact up to 16 epochs, local search beyond)"},
    {"transport", T_ENUM, OFF(transport), 0, 0, 0, "auto|local|mpi|ucx", "auto",
     "how learners send each other cached samples under a plan that routes to peers (auto: mpi when started by "
     "mpirun/srun with more than one process and built with MPI, rank and world_size then from MPI; else ucx when "
     "built with UCX and torch.distributed was initialised (the Python module exchanges the addresses) or "
     "rendezvous_dir is set; "
     "local: none, a sample routed to a peer is read from storage)"},
    {"ranks_per_node", T_U32, OFF(ranks_per_node), 0, 0, 1 << 20, NULL, "0",
     "ranks per node, the ranks that share a machine (docs/transport.md, Nodes): 0 detects them (MPI's shared-memory "
     "split under transport=mpi, the host names under transport=ucx, else the launcher's "
     "LOCAL_RANK/LOCAL_WORLD_SIZE); n > 0 makes nodes of n consecutive ranks (node = rank / n), so one machine can "
     "run several; must divide the world size"},
    {"peer_timeout_ms", T_U32, OFF(peer_timeout_ms), 0, 100, 86400000, NULL, "60000",
     "transport: a learner waits at most this long for a peer's sample (or for the others to start), then fails "
     "naming the peer and the step"},
    {"rendezvous_dir", T_STR, OFF(rendezvous_dir), SZ(rendezvous_dir), 0, 0, NULL, "",
     "transport=ucx without torch.distributed: a folder every rank can reach, where each writes its UCX address "
     "(lade-<job_id>.<rank>) and reads the others' at the first loader's open (docs/transport.md, UCX)"},
    {"prefetcher", T_ENUM, OFF(prefetcher), 0, 0, 0, "auto|on|off", "auto",
     "DELI prefetcher into the disk cache (auto: on for remote sources with a disk cache)"},
    {"fetch_size", T_U64, OFF(fetch_size), 0, 0, 1e15, NULL, "0",
     "samples per prefetcher fetch (0: half the disk cache, the 50/50 rule)"},
    {"prefetch_threshold", T_U64, OFF(prefetch_threshold), 0, 0, 1e15, NULL, "0",
     "fetch again when fetched-but-unused samples fall to this (0: fetch_size, the 50/50 rule)"},
    {"node_cache", T_ENUM, OFF(node_cache), 0, 0, 0, "auto|on|off", "auto",
     "one memory cache per node, shared by its ranks through shared memory (docs/cache.md, Node cache): "
     "cache_mem_bytes is then the node's budget, each sample is held once per node and read by every local rank "
     "(auto: on when several ranks share the node, cache_mem_bytes is set, the plan is regular or shards and a "
     "job key is known; off: one memory cache per rank, each of cache_mem_bytes)"},
    {"shm_dir", T_STR, OFF(shm_dir), SZ(shm_dir), 0, 0, NULL, "/dev/shm",
     "node cache: the tmpfs folder of its shared-memory segments (needs cache_mem_bytes free; containers: "
     "--shm-size)"},
    {"job_id", T_STR, OFF(job_id), SZ(job_id), 0, 0, NULL, "",
     "the key that the ranks of one job share and no other job on the node uses: the node cache's segment names "
     "and transport=ucx's rendezvous files (\"\": from the launcher: TORCHELASTIC_RUN_ID with "
     "MASTER_ADDR:MASTER_PORT, SLURM_JOB_ID.SLURM_STEP_ID, Open MPI's PMIX_NAMESPACE, else MASTER_ADDR:MASTER_PORT; "
     "the rendezvous adds torchrun's restart count)"},
};

#define NSETTINGS (sizeof settings / sizeof settings[0])

/* Other names of settings, kept working when a setting is renamed (the
 * generic HTTP settings were once s3_*): setting and getting an alias is
 * setting and getting its key. Listings show the key only, whose help
 * names the alias. */
static const struct {
  const char *alias, *key;
} aliases[] = {
    {"s3_concurrency", "http_concurrency"},
    {"s3_max_concurrency", "http_max_concurrency"},
    {"s3_timeout_ms", "http_timeout_ms"},
    {"s3_connect_timeout_ms", "http_connect_timeout_ms"},
    {"s3_retries", "http_retries"},
    {"s3_retry_base_ms", "http_retry_base_ms"},
};

static const setting_t *find_key(const char *key) {
  for (size_t i = 0; i < NSETTINGS; i++)
    if (strcmp(settings[i].key, key) == 0) return &settings[i];
  return NULL;
}

static const setting_t *find(const char *key) {
  const setting_t *s = find_key(key);
  for (size_t i = 0; !s && i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(aliases[i].alias, key) == 0) s = find_key(aliases[i].key);
  return s;
}

static int keys_error(const char *key) {
  char list[2048];
  size_t n = 0;
  list[0] = '\0';
  for (size_t i = 0; i < NSETTINGS && n < sizeof list; i++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", settings[i].key);
  return lade__fail(LADE_EINVAL, "unknown setting '%s'; valid keys: %s", key, list);
}

static int enum_index(const char *choices, const char *value) {
  int idx = 0;
  const char *p = choices;
  size_t vlen = strlen(value);
  while (*p) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == vlen && strncmp(p, value, len) == 0) return idx;
    if (!bar) break;
    p = bar + 1;
    idx++;
  }
  return -1;
}

static void enum_name(const char *choices, int idx, char *buf, size_t size) {
  const char *p = choices;
  for (int i = 0; i < idx && p; i++) {
    p = strchr(p, '|');
    if (p) p++;
  }
  if (!p) {
    snprintf(buf, size, "?");
    return;
  }
  const char *bar = strchr(p, '|');
  size_t len = bar ? (size_t)(bar - p) : strlen(p);
  snprintf(buf, size, "%.*s", (int)len, p);
}

/* "lo..hi" of an integer setting, exact at the top of the uint64 range
 * (the table's 1.8446744073709552e19 is 2^64 as a double: the largest
 * value that parses is 2^64 - 1). */
static const char *int_range(const setting_t *s, char *buf, size_t size) {
  if (s->hi >= 18446744073709551615.0)
    snprintf(buf, size, "%.0f..18446744073709551615", s->lo);
  else
    snprintf(buf, size, "%.0f..%.0f", s->lo, s->hi);
  return buf;
}

static int parse_num(const setting_t *s, const char *value, double *out_d, uint64_t *out_u) {
  char range[64];
  char *end = NULL;
  errno = 0;
  if (s->kind == T_F64) {
    double d = strtod(value, &end);
    if (end == value || *end || errno || !isfinite(d))
      return lade__fail(LADE_EINVAL, "setting '%s': '%s' is not a number (range %g..%g)", s->key, value, s->lo, s->hi);
    if (d < s->lo || d > s->hi)
      return lade__fail(LADE_ERANGE, "setting '%s': %s is out of range %g..%g", s->key, value, s->lo, s->hi);
    *out_d = d;
    return 0;
  }
  if (value[0] == '-' || value[0] == '\0')
    return lade__fail(LADE_EINVAL, "setting '%s': '%s' is not a non-negative integer (range %s)", s->key, value,
                      int_range(s, range, sizeof range));
  unsigned long long u = strtoull(value, &end, 10);
  if (*end || errno)
    return lade__fail(LADE_EINVAL, "setting '%s': '%s' is not a non-negative integer (range %s)", s->key, value,
                      int_range(s, range, sizeof range));
  if ((double)u < s->lo || (double)u > s->hi)
    return lade__fail(LADE_ERANGE, "setting '%s': %s is out of range %s", s->key, value,
                      int_range(s, range, sizeof range));
  *out_u = u;
  return 0;
}

static int apply(struct lade_config *c, const setting_t *s, const char *value) {
  char *field = (char *)c + s->offset;
  switch (s->kind) {
    case T_STR:
    case T_SECRET:
      if (strlen(value) >= s->size)
        return lade__fail(LADE_ERANGE, "setting '%s': value longer than %zu bytes", s->key, s->size - 1);
      memcpy(field, value, strlen(value) + 1);
      return 0;
    case T_BOOL: {
      bool b;
      if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "yes") || !strcmp(value, "on"))
        b = true;
      else if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "no") || !strcmp(value, "off"))
        b = false;
      else
        return lade__fail(LADE_EINVAL, "setting '%s': '%s' is not a boolean (true|false|1|0)", s->key, value);
      memcpy(field, &b, sizeof b);
      return 0;
    }
    case T_ENUM: {
      int idx = enum_index(s->choices, value);
      if (idx < 0) return lade__fail(LADE_EINVAL, "setting '%s': '%s' is not one of %s", s->key, value, s->choices);
      if (strcmp(s->key, "image_dtype") == 0) idx = idx == 0 ? LADE_DTYPE_FLOAT32 : LADE_DTYPE_UINT8;
      memcpy(field, &idx, sizeof idx);
      return 0;
    }
    case T_U32:
    case T_U64:
    case T_F64: {
      double d = 0;
      uint64_t u = 0;
      int rc = parse_num(s, value, &d, &u);
      if (rc) return rc;
      if (s->kind == T_U32) {
        uint32_t v = (uint32_t)u;
        memcpy(field, &v, sizeof v);
      } else if (s->kind == T_U64) {
        memcpy(field, &u, sizeof u);
      } else {
        memcpy(field, &d, sizeof d);
      }
      return 0;
    }
  }
  return LADE_EINVAL;
}

void lade__config_defaults(struct lade_config *c) {
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < NSETTINGS; i++) {
    int rc = apply(c, &settings[i], settings[i].def);
    (void)rc;
  }
  lade__clear_error();
}

int lade_config_create(lade_config_t **out) {
  if (!out) return lade__fail(LADE_EINVAL, "lade_config_create: out is NULL");
  struct lade_config *c = malloc(sizeof *c);
  if (!c) return lade__fail(LADE_ENOMEM, "lade_config_create: out of memory");
  lade__config_defaults(c);
  *out = c;
  return 0;
}

void lade__config_wipe_secrets(struct lade_config *c) {
  if (!c) return;
  for (size_t i = 0; i < NSETTINGS; i++)
    if (settings[i].kind == T_SECRET) lade__wipe((char *)c + settings[i].offset, settings[i].size);
}

void lade_config_destroy(lade_config_t *cfg) {
  lade__config_wipe_secrets(cfg);
  free(cfg);
}

int lade_config_key_is_secret(const char *key) {
  const setting_t *s = key ? find(key) : NULL;
  return s && s->kind == T_SECRET;
}

int lade_config_set(lade_config_t *cfg, const char *key, const char *value) {
  if (!cfg || !key || !value) return lade__fail(LADE_EINVAL, "lade_config_set: NULL argument");
  const setting_t *s = find(key);
  if (!s) return keys_error(key);
  return apply(cfg, s, value);
}

int lade_config_parse(lade_config_t *cfg, const char *kv) {
  if (!cfg || !kv) return lade__fail(LADE_EINVAL, "lade_config_parse: NULL argument");
  const char *eq = strchr(kv, '=');
  if (!eq || eq == kv) {
    /* "s3_secret_access_keyABC" (a missing '='): never echo what may be a secret */
    for (size_t i = 0; i < NSETTINGS; i++)
      if (settings[i].kind == T_SECRET && !strncmp(kv, settings[i].key, strlen(settings[i].key)))
        return lade__fail(LADE_EINVAL, "setting '%s...' is not of the form key=value (the rest is not shown: it "
                          "may be a secret)", settings[i].key);
    return lade__fail(LADE_EINVAL, "setting '%s' is not of the form key=value", kv);
  }
  char key[64];
  size_t klen = (size_t)(eq - kv);
  if (klen >= sizeof key) return lade__fail(LADE_EINVAL, "unknown setting '%.40s...' (the key is too long)", kv);
  memcpy(key, kv, klen);
  key[klen] = '\0';
  return lade_config_set(cfg, key, eq + 1);
}

int lade_config_get(const lade_config_t *cfg, const char *key, char *buf, size_t size) {
  if (!cfg || !key || !buf || size == 0) return lade__fail(LADE_EINVAL, "lade_config_get: bad argument");
  const setting_t *s = find(key);
  if (!s) return keys_error(key);
  const char *field = (const char *)cfg + s->offset;
  switch (s->kind) {
    case T_STR:
    case T_SECRET:
      if (s->kind == T_SECRET && field[0])
        snprintf(buf, size, "(set, hidden)");
      else
        snprintf(buf, size, "%s", field);
      break;
    case T_BOOL: {
      bool b;
      memcpy(&b, field, sizeof b);
      snprintf(buf, size, "%s", b ? "true" : "false");
      break;
    }
    case T_ENUM: {
      int idx;
      memcpy(&idx, field, sizeof idx);
      if (strcmp(s->key, "image_dtype") == 0) idx = idx == LADE_DTYPE_FLOAT32 ? 0 : 1;
      enum_name(s->choices, idx, buf, size);
      break;
    }
    case T_U32: {
      uint32_t v;
      memcpy(&v, field, sizeof v);
      snprintf(buf, size, "%u", v);
      break;
    }
    case T_U64: {
      uint64_t v;
      memcpy(&v, field, sizeof v);
      snprintf(buf, size, "%llu", (unsigned long long)v);
      break;
    }
    case T_F64: {
      double v;
      memcpy(&v, field, sizeof v);
      snprintf(buf, size, "%.17g", v);
      break;
    }
  }
  return 0;
}

const char *lade_config_key(size_t i, const char **default_value, const char **help) {
  if (i >= NSETTINGS) return NULL;
  if (default_value) *default_value = settings[i].def;
  if (help) *help = settings[i].help;
  return settings[i].key;
}

int lade_config_set_allocator(lade_config_t *cfg, const lade_allocator_t *allocator, size_t size) {
  if (!cfg) return lade__fail(LADE_EINVAL, "lade_config_set_allocator: cfg is NULL");
  lade_allocator_t a = {0};
  if (allocator) {
    int rc = lade__struct_in(&a, sizeof a, allocator, size, sizeof(void *), "lade_config_set_allocator");
    if (rc) return rc;
  }
  if (allocator && (!a.alloc || !a.free))
    return lade__fail(LADE_EINVAL, "lade_config_set_allocator: alloc and free must both be set");
  if (allocator) {
    cfg->allocator = a;
    cfg->has_allocator = true;
  } else {
    memset(&cfg->allocator, 0, sizeof cfg->allocator);
    cfg->has_allocator = false;
  }
  return 0;
}

int lade_config_set_position(lade_config_t *cfg, const lade_position_t *position, size_t size) {
  if (!cfg) return lade__fail(LADE_EINVAL, "lade_config_set_position: cfg is NULL");
  lade_position_t pos = {0};
  if (position) {
    int rc = lade__struct_in(&pos, sizeof pos, position, size, offsetof(lade_position_t, base_consumed),
                             "lade_config_set_position");
    if (rc) return rc;
  }
  cfg->position = pos;
  cfg->has_position = position != NULL;
  return 0;
}
