/*
 * ucx.c - the UCX transport (docs/transport.md, UCX): the push protocol of
 * mpi.c without an MPI launcher, for torchrun and any other way of starting
 * the ranks.
 *
 * One UCP context and worker per process, and one communication thread that
 * makes every UCX call once the peers are known (the worker is created
 * UCS_THREAD_MODE_SERIALIZED; every call is made under g.mu). UCX picks the
 * transports (shared memory on one machine, TCP or RDMA between machines;
 * UCX_TLS is left to the user).
 *
 * Bootstrap: each rank's worker address (hex, then '@' and the host name)
 * reaches every rank once per process, either through lade_ucx_set_peers()
 * (the Python module gathers them over torch.distributed) or, at the first
 * loader's open, through a rendezvous folder: each rank writes
 * lade-<job>.<rank> atomically (a temporary file renamed) and reads the
 * others', bounded by timeout_ms; what is not a whole address file of a
 * live writer there (garbage, half-written, a FIFO, one a killed rank left)
 * is waited on, the owner's rename replacing it. An endpoint to every peer
 * is created then, with peer error handling, so a peer that dies fails its
 * endpoint. The host names give the nodes (node_leads).
 *
 * Each loader is a channel: the nth loader with this transport in a process
 * is channel n on every rank (loaders are opened in the same order on every
 * rank, as MPI's collective communicator duplication requires too). Messages
 * are tagged [channel 24 bits | type 8 | sender rank 32]; the thread takes
 * every message off UCX's queue (recv_any) and hands it to its channel,
 * keeps one for a channel this rank has yet to open, and drops one for a
 * closed channel (left in UCX, a large one would hold its sender's close
 * until the timeout). An open that fails tells every peer (ABORT) which
 * ranks it missed; one of those ranks that opens that channel later takes
 * the next number, as its peers' next loader did (its own loader before
 * failed before it opened the transport, so its count fell behind theirs),
 * and the numbers agree again. Opening sends the settings check to every peer
 * and waits (bounded) for every peer's (the allgather mpi.c makes). DATA,
 * GRANT (backpressure) and DONE (close) are mpi.c's messages, with the same
 * header, checksum, window and bounds (the bookkeeping both share:
 * pushq.h). GATHER carries a rank's part of the op allgather (the surviving
 * caches at open), numbered per channel; the caller waits for every part,
 * bounded, and a dead peer fails it at once.
 *
 * Locks: each channel's `mu` guards its queue, arrived messages, counters and
 * flags; `g.mu` guards the peers, the channel list and every UCX call, and is
 * held by the thread while it works on the channels. Order: g.mu, then a
 * channel's mu. serve() is called with g.mu held and no channel lock.
 */
#ifdef LADE_HAVE_UCX
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "lade/lade.h"
#include "transport/pushq.h"
#include "transport/topology.h"
#include "transport/transport.h"

#define MSG_MAGIC LADE__PUSHQ_MAGIC
#define CHAN_SHIFT 40
#define TYPE_SHIFT 32
#define MAX_CHECKS 62
enum { T_DATA = 1, T_DONE, T_GRANT, T_CHECK, T_GATHER, T_ABORT };
enum { OPENING = LADE__PUSHQ_OPENING, OPEN = LADE__PUSHQ_OPEN, CLOSING = LADE__PUSHQ_CLOSING,
       CLOSED = LADE__PUSHQ_CLOSED };

typedef lade__pushq_hdr_t msg_hdr_t;
typedef lade__pushq_msg_t msg_t;
typedef lade__pushq_send_t sendreq_t;
#define chan_fail_locked(c, ...) lade__pushq_fail_locked(&(c)->pq, __VA_ARGS__)

/* An allgather's contribution: the header, then len bytes. seq numbers the
 * channel's allgathers (1, 2, ...), so a contribution to a later one that
 * arrives early is kept for it, and a late one to an earlier is dropped. */
typedef struct gather_hdr {
  uint64_t magic, seq, len;
  uint64_t sum; /* lade_checksum of the bytes, seeded with seq */
} gather_hdr_t;

typedef struct gather_early {
  struct gather_early *next;
  uint32_t src;
  uint64_t seq;
  size_t len;
  uint8_t *buf; /* header and bytes, as received */
} gather_early_t;

typedef struct pending {
  void *req;
  uint8_t *buf;
  size_t len;
  ucp_tag_t tag; /* sends: 0; receives: the sender's tag */
} pending_t;

typedef struct chan {
  lade__transport_t base;
  lade__transport_params_t p;
  struct chan *next;
  uint32_t id, rank, world;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state;
  lade__pushq_t pq; /* queue, arrived messages, grants, failure, counters */
  uint8_t *peer_lost; /* per rank: its endpoint failed (it died) */
  uint8_t *done_from;
  uint64_t *checks_in; /* per rank: [count, values...] of its settings check; count ~0 until it came */
  /* the allgather in progress (ag_active) or the last one: its number, the
   * caller's buffer, which ranks' bytes are in it, the messages still to post
   * (one per peer, built by the caller), and contributions to a later one */
  uint64_t ag_seq;
  bool ag_active;
  uint8_t *ag_all;
  size_t ag_len;
  uint8_t *ag_have;
  uint32_t ag_count;
  uint8_t **ag_out;
  bool ag_post;
  char ag_err[512];
  gather_early_t *ag_early;
  /* owned by the thread */
  pending_t *sends, *recvs;
  size_t nsends, sends_cap, nrecvs, recvs_cap;
  double opened_at;
  bool checks_sent;
  bool skip;      /* a peer gave up opening this channel waiting for this rank: take the next number */
  uint32_t skips; /* how many times */
  lade__buf_t sbuf;
} chan_t;

static struct {
  pthread_mutex_t mu;
  bool inited;
  int init_rc;
  char init_msg[512];
  ucp_context_h ctx;
  ucp_worker_h worker;
  char *addr; /* this process's address text */
  bool peers_set;
  uint32_t rank, world;
  ucp_ep_h *ep;
  ucs_status_t *ep_status;
  uint32_t *node_lead;
  bool started, stop;
  pthread_t thread;
  chan_t *chans;
  uint32_t next_chan;
  pending_t *stray, *outs; /* receives for no open channel (recv_any); sends of no channel (aborts) */
  size_t nstray, stray_cap, nouts, outs_cap;
  char rdv_file[4096]; /* this rank's rendezvous file, removed at exit */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static inline ucp_tag_t tag_of(uint32_t chan, int type, uint32_t src) {
  return ((ucp_tag_t)(chan & 0xffffff) << CHAN_SHIFT) | ((ucp_tag_t)type << TYPE_SHIFT) | src;
}

/* UCX is opened on first use (dlopen), not linked: a process that never
 * uses this transport (a laptop, mpirun, `import lade`) runs none of UCX's
 * library constructors, which install its SIGSEGV/SIGBUS handlers and its
 * memory hooks in every process that loads it. The build needs UCX's headers;
 * the run needs libucp.so.0 (Debian: libucx0) only where the transport runs,
 * found by the dynamic loader's search (LD_LIBRARY_PATH) or named by
 * LADE_UCX_LIB. The calls below go through U. */
#define UCX_CALLS(X)                                                                                                  \
  X(ucp_config_read) \
  X(ucp_config_release) \
  X(ucp_init_version) \
  X(ucp_cleanup) \
  X(ucp_worker_create) \
  X(ucp_worker_destroy) \
  X(ucp_worker_get_address) \
  X(ucp_worker_release_address) \
  X(ucp_worker_progress) \
  X(ucp_ep_create) \
  X(ucp_ep_close_nbx) \
  X(ucp_tag_send_nbx) \
  X(ucp_tag_probe_nb) \
  X(ucp_tag_msg_recv_nbx) \
  X(ucp_request_check_status) \
  X(ucp_request_cancel) \
  X(ucp_request_free) \
  X(ucs_status_string)

static struct {
  void *lib;
#define UCX_MEMBER(f) __typeof__(&f) f;
  UCX_CALLS(UCX_MEMBER)
#undef UCX_MEMBER
} U;

/* Loads UCP and its calls once; false with the reason in why. Under g.mu. */
static bool ucx_load(char *why, size_t cap) {
  if (U.lib) return true;
  const char *name = getenv("LADE_UCX_LIB");
  if (!name || !*name) name = "libucp.so.0";
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(why, cap, "transport ucx: cannot load UCX (%s); install it (Debian: apt-get install libucx0) or name "
             "its libucp with LADE_UCX_LIB", dlerror());
    return false;
  }
#define UCX_SYM(f)                                                                                                    \
  if (!(*(void **)&U.f = dlsym(lib, #f))) {                                                                           \
    snprintf(why, cap, "transport ucx: %s has no %s (UCX %d.%d or later is needed)", name, #f, UCP_API_MAJOR,        \
             UCP_API_MINOR);                                                                                          \
    dlclose(lib);                                                                                                     \
    return false;                                                                                                     \
  }
  UCX_CALLS(UCX_SYM)
#undef UCX_SYM
  U.lib = lib;
  return true;
}

static void nap(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ the process's worker and peers */

static void at_exit(void);

static int init_locked(void) {
  if (g.inited) return g.init_rc ? lade__fail(g.init_rc, "%s", g.init_msg) : 0;
  g.inited = true;
  if (!ucx_load(g.init_msg, sizeof g.init_msg)) {
    g.init_rc = LADE_EUNSUPPORTED;
    return lade__fail(g.init_rc, "%s", g.init_msg);
  }
  ucp_config_t *cfg = NULL;
  ucs_status_t s = U.ucp_config_read(NULL, NULL, &cfg);
  if (s == UCS_OK) {
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    s = U.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, &g.ctx);
    U.ucp_config_release(cfg);
  }
  if (s == UCS_OK) {
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    s = U.ucp_worker_create(g.ctx, &wp, &g.worker);
  }
  ucp_address_t *a = NULL;
  size_t alen = 0;
  if (s == UCS_OK) atexit(at_exit);
  if (s == UCS_OK) s = U.ucp_worker_get_address(g.worker, &a, &alen);
  if (s != UCS_OK) {
    g.init_rc = LADE_EIO;
    snprintf(g.init_msg, sizeof g.init_msg, "transport ucx: starting UCX failed: %s", U.ucs_status_string(s));
    return lade__fail(g.init_rc, "%s", g.init_msg);
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  g.addr = malloc(2 * alen + strlen(host) + 2);
  if (!g.addr) {
    U.ucp_worker_release_address(g.worker, a);
    g.init_rc = LADE_ENOMEM;
    snprintf(g.init_msg, sizeof g.init_msg, "transport ucx: out of memory");
    return lade__fail(g.init_rc, "%s", g.init_msg);
  }
  for (size_t i = 0; i < alen; i++) sprintf(g.addr + 2 * i, "%02x", ((const uint8_t *)a)[i]);
  sprintf(g.addr + 2 * alen, "@%s", host);
  U.ucp_worker_release_address(g.worker, a);
  return 0;
}

/* A peer's endpoint failed (it died, or its connection broke): its channels
 * fail the waits on it at once instead of at the timeout. Called by
 * ucp_worker_progress, under g.mu. */
static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  uint32_t r = (uint32_t)(uintptr_t)arg;
  if (r >= g.world) return;
  g.ep_status[r] = status;
  for (chan_t *c = g.chans; c; c = c->next) {
    pthread_mutex_lock(&c->mu);
    if (c->peer_lost) c->peer_lost[r] = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
  }
}

static int hexval(int ch) {
  return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* Connects to every peer from their address texts (rank r's is addr[r]). */
static int peers_set_locked(uint32_t rank, uint32_t world, const char *const *addr) {
  if (g.peers_set) {
    if (rank == g.rank && world == g.world) return 0;
    return lade__fail(LADE_EINVAL, "transport ucx: this process's peers were set up as rank %u of %u; a loader now "
                      "says rank %u of %u (settings 'rank' and 'world_size')", g.rank, g.world, rank, world);
  }
  if (world == 0 || rank >= world)
    return lade__fail(LADE_EINVAL, "transport ucx: rank %u of %u is no rank", rank, world);
  if (strcmp(addr[rank], g.addr))
    return lade__fail(LADE_EINVAL, "transport ucx: the address given for rank %u is not this process's (the ranks' "
                      "addresses must be in rank order)", rank);
  g.ep = calloc(world, sizeof *g.ep);
  g.ep_status = calloc(world, sizeof *g.ep_status);
  g.node_lead = calloc(world, sizeof *g.node_lead);
  if (!g.ep || !g.ep_status || !g.node_lead) return lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
  int rc = 0;
  uint8_t *bin = NULL;
  for (uint32_t r = 0; r < world && !rc; r++) {
    const char *at = strrchr(addr[r], '@');
    size_t hl = at ? (size_t)(at - addr[r]) : 0;
    g.node_lead[r] = r;
    for (uint32_t k = 0; k < r; k++) {
      const char *ak = strrchr(addr[k], '@');
      if (at && ak && !strcmp(at, ak)) {
        g.node_lead[r] = g.node_lead[k];
        break;
      }
    }
    if (r == rank) continue;
    if (!at || !hl || hl % 2) {
      rc = lade__fail(LADE_EINVAL, "transport ucx: the address of rank %u is malformed ('%.40s'): not what "
                      "lade_ucx_address() gives", r, addr[r]);
      break;
    }
    free(bin);
    bin = malloc(hl / 2);
    if (!bin) {
      rc = lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
      break;
    }
    for (size_t i = 0; i < hl / 2 && !rc; i++) {
      int hi = hexval(addr[r][2 * i]), lo = hexval(addr[r][2 * i + 1]);
      if (hi < 0 || lo < 0)
        rc = lade__fail(LADE_EINVAL, "transport ucx: the address of rank %u is malformed (not hexadecimal)", r);
      else
        bin[i] = (uint8_t)(hi << 4 | lo);
    }
    if (rc) break;
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .address = (const ucp_address_t *)bin,
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {.cb = ep_failed, .arg = (void *)(uintptr_t)r}};
    g.world = world; /* ep_failed may run from here on */
    ucs_status_t s = U.ucp_ep_create(g.worker, &ep, &g.ep[r]);
    if (s != UCS_OK)
      rc = lade__fail(LADE_EIO, "transport ucx: rank %u: connecting to rank %u failed: %s", rank, r,
                      U.ucs_status_string(s));
  }
  free(bin);
  if (rc) {
    for (uint32_t r = 0; r < world; r++)
      if (g.ep[r]) {
        ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
        void *req = U.ucp_ep_close_nbx(g.ep[r], &prm);
        if (UCS_PTR_IS_PTR(req)) U.ucp_request_free(req);
      }
    free(g.ep);
    free(g.ep_status);
    free(g.node_lead);
    g.ep = NULL, g.ep_status = NULL, g.node_lead = NULL, g.world = 0;
    return rc;
  }
  g.rank = rank;
  g.world = world;
  g.peers_set = true;
  return 0;
}

int lade_ucx_address(const char **out) {
  *out = NULL;
  pthread_mutex_lock(&g.mu);
  int rc = init_locked();
  if (!rc) *out = g.addr;
  pthread_mutex_unlock(&g.mu);
  return rc;
}

int lade_ucx_set_peers(uint32_t rank, uint32_t world, const char *const *addresses) {
  lade__clear_error();
  if (!addresses) return lade__fail(LADE_EINVAL, "lade_ucx_set_peers: addresses is NULL");
  for (uint32_t r = 0; r < world; r++)
    if (!addresses[r]) return lade__fail(LADE_EINVAL, "lade_ucx_set_peers: the address of rank %u is NULL", r);
  pthread_mutex_lock(&g.mu);
  int rc = init_locked();
  if (!rc) rc = peers_set_locked(rank, world, addresses);
  pthread_mutex_unlock(&g.mu);
  return rc;
}

uint32_t lade__ucx_peers_world(void) {
  pthread_mutex_lock(&g.mu);
  uint32_t w = g.peers_set ? g.world : 0;
  pthread_mutex_unlock(&g.mu);
  return w;
}

static void remove_rdv_file(void) {
  if (g.rdv_file[0]) unlink(g.rdv_file);
}

/* The job's name in the rendezvous files: the setting job_id, else the
 * launcher's job key (the one the node cache uses: topology.h) with
 * torchrun's restart count, so a restarted group never reads the addresses
 * of the group before it. */
static int job_name(const char *job_id, char *out, size_t cap) {
  const char *restart = getenv("TORCHELASTIC_RESTART_COUNT");
  char key[200];
  if (job_id && *job_id) snprintf(out, cap, "%s", job_id);
  else if (lade__topology_job_key(key, sizeof key))
    snprintf(out, cap, "%.200s-%.20s", key, restart && *restart ? restart : "0");
  else
    return lade__fail(LADE_EINVAL, "transport ucx: the rendezvous in rendezvous_dir needs a job id that no other job "
                      "shares: set job_id (taken from the launcher when empty: torchrun's TORCHELASTIC_RUN_ID, "
                      "SLURM_JOB_ID, PMIX_NAMESPACE or MASTER_ADDR:MASTER_PORT)");
  for (char *p = out; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' ||
          *p == '.'))
      *p = '_';
  return 0;
}

/* mkdir -p */
static int make_dirs(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
      *s = '/';
    }
  return mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* This process, as the rendezvous file names its writer: "pid:boot_id:pid
 * namespace", so a reader on the same machine and in the same namespace can
 * tell a file left by a killed process (kill(pid, 0) fails) from a live one. */
static void proc_id(char *out, size_t cap) {
  char boot[64] = "-";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f && fscanf(f, "%36[0-9a-f-]", boot) != 1) snprintf(boot, sizeof boot, "-");
  if (f) fclose(f);
  struct stat st = {0};
  stat("/proc/self/ns/pid", &st);
  snprintf(out, cap, "%ld:%s:%llu", (long)getpid(), boot, (unsigned long long)st.st_ino);
}

/* Reads rank r's address file at path, "lade-ucx 1 WORLD HEX@HOST [ID]\n".
 * Returns 1 with addr[r] filled (malloc'd); 0 when it is not there, or not
 * usable (yet), with why saying what is wrong for the error at the timeout:
 * not a regular file (a FIFO would block the open), unreadable, oversized,
 * half-written (no end of line), garbage, or left by a process of this
 * machine that has exited; the owner's rename replaces any of these. Else
 * fails: a folder at that name (nothing replaces it) or another world size. */
static int rdv_read(const char *path, uint32_t rank, uint32_t r, uint32_t world, char **addr, char *why, size_t cap) {
  enum { MAX = 65536 };
  char txt[48] = "", me[128], theirs[128], boot[64] = "";
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (errno != ENOENT) snprintf(why, cap, "%s cannot be read: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return 0;
  }
  char *buf = S_ISREG(st.st_mode) ? malloc(MAX) : NULL;
  ssize_t n = 0, k = 1;
  while (buf && n < MAX - 1 && (k = read(fd, buf + n, MAX - 1 - (size_t)n)) > 0) n += k;
  close(fd);
  if (S_ISDIR(st.st_mode))
    return lade__fail(LADE_EINVAL, "transport ucx: rank %u: rendezvous: %s, the address file of rank %u, is a "
                      "directory: remove it", rank, path, r);
  if (!buf || k < 0 || n >= MAX - 1) {
    snprintf(why, cap, "%s is %s", path, !S_ISREG(st.st_mode) ? "not a regular file" : !buf ? "not read (out of "
             "memory)" : k < 0 ? "unreadable" : "too large for an address file");
    free(buf);
    return 0;
  }
  buf[n] = 0;
  for (size_t i = 0; i < sizeof txt - 1 && i < (size_t)n; i++) txt[i] = buf[i] >= ' ' && buf[i] < 127 ? buf[i] : '?';
  unsigned ver = 0, w = 0;
  int a0 = 0, a1 = 0, h0 = 0, h1 = 0, end = 0;
  long pid = 0;
  unsigned long long ns = 0;
  bool line = n && buf[n - 1] == '\n'; /* a file half-written by something else lacks its end */
  if (sscanf(buf, "lade-ucx %u %u %n%*[0-9a-f]%n@%n%*[^ \n]%n", &ver, &w, &a0, &a1, &h0, &h1) == 2 && ver == 1 &&
      w != world && a0 && line) {
    free(buf);
    return lade__fail(LADE_EINVAL, "transport ucx: rendezvous: rank %u runs a world of %u ranks (%s), this rank "
                      "(%u) one of %u (setting 'world_size')", r, w, path, rank, world);
  }
  if (h1 && buf[h1] == ' ') sscanf(buf + h1, " %ld:%63[0-9a-f-]:%llu%n", &pid, boot, &ns, &end);
  end += h1;
  if (!h1 || ver != 1 || w != world || (a1 - a0) % 2 || h1 == h0 || buf[end] != '\n' || buf[end + 1]) {
    snprintf(why, cap, "%s is %s ('%s')", path, line ? "not a lade address file" : "incomplete (no end of line)", txt);
    free(buf);
    return 0;
  }
  /* a file of a process of this machine (boot id) and pid namespace that has exited: left by a killed rank */
  proc_id(me, sizeof me);
  snprintf(theirs, sizeof theirs, "%s:%llu", boot, ns);
  if (pid > 0 && strlen(boot) == 36 && !strcmp(strchr(me, ':') + 1, theirs) && kill((pid_t)pid, 0) != 0 &&
      errno == ESRCH) {
    snprintf(why, cap, "%s was left by process %ld of this machine, which has exited (killed before it could remove "
             "it)", path, pid);
    free(buf);
    return 0;
  }
  addr[r] = strndup(buf + a0, (size_t)(h1 - a0));
  free(buf);
  return addr[r] ? 1 : lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
}

/* Exchanges the addresses through a folder every rank can reach: writes
 * this rank's (temporary file, renamed), reads the others', bounded. Fills
 * addr[r] (malloc'd). Called without g.mu. */
static int rendezvous(const char *dir, const char *job_id, uint32_t rank, uint32_t world, uint32_t timeout_ms,
                      const char *mine, char **addr) {
  char job[256], path[4096], tmp[4200], id[128], why[4400] = "";
  int rc = job_name(job_id, job, sizeof job);
  if (rc) return rc;
  if (make_dirs(dir) != 0)
    return lade__fail(LADE_EIO, "transport ucx: rendezvous_dir %s: %s", dir, strerror(errno));
  snprintf(path, sizeof path, "%s/lade-%s.%u", dir, job, rank);
  snprintf(tmp, sizeof tmp, "%s/.lade-%s.%u.tmp%ld", dir, job, rank, (long)getpid());
  proc_id(id, sizeof id);
  FILE *f = fopen(tmp, "w");
  if (!f) return lade__fail(LADE_EIO, "transport ucx: rendezvous: cannot write %s: %s", tmp, strerror(errno));
  int bad = fprintf(f, "lade-ucx 1 %u %s %s\n", world, mine, id) < 0;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    rc = lade__fail(LADE_EIO, "transport ucx: rank %u: rendezvous: cannot write its address file %s: %s", rank, path,
                    strerror(errno));
    unlink(tmp);
    return rc;
  }
  snprintf(g.rdv_file, sizeof g.rdv_file, "%s", path);
  static bool registered;
  if (!registered) atexit(remove_rdv_file);
  registered = true;
  double t0 = lade__now();
  uint32_t have = 1;
  long wait_ns = 1000000;
  addr[rank] = strdup(mine);
  if (!addr[rank]) return lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
  while (have < world) {
    why[0] = 0;
    for (uint32_t r = 0; r < world && rc >= 0; r++) {
      if (addr[r]) continue;
      snprintf(path, sizeof path, "%s/lade-%s.%u", dir, job, r);
      rc = rdv_read(path, rank, r, world, addr, why[0] ? NULL : why, why[0] ? 0 : sizeof why);
      have += rc > 0;
    }
    if (rc < 0 || have == world) break;
    if (lade__now() - t0 > timeout_ms / 1000.0) {
      char who[512] = "";
      size_t len = 0;
      uint32_t missing = 0;
      for (uint32_t r = 0; r < world; r++)
        if (!addr[r] && missing++ < 8)
          len += (size_t)snprintf(who + len, sizeof who - len, "%s%u", len ? ", " : "", r);
      rc = lade__fail(LADE_ETIMEOUT, "transport ucx: rank %u: rank%s %s%s did not write %s address to %s/lade-%s.<rank> "
                      "within %u ms (setting peer_timeout_ms): not started, or its loader failed before opening the "
                      "transport%s%s", rank, missing > 1 ? "s" : "", who, missing > 8 ? ", ..." : "",
                      missing > 1 ? "their" : "its", dir, job, timeout_ms, why[0] ? "; " : "", why);
      break;
    }
    nap(wait_ns);
    if (wait_ns < 50000000) wait_ns *= 2;
  }
  return rc < 0 ? rc : 0;
}

/* ------------------------------------------------------------ the thread (under g.mu) */

static bool room(pending_t **v, size_t n, size_t *cap) {
  if (n < *cap) return true;
  size_t nc = *cap ? *cap * 2 : 64;
  pending_t *p = realloc(*v, nc * sizeof *p);
  if (!p) return false;
  *v = p;
  *cap = nc;
  return true;
}

/* Posts one message, its request kept in v; buf is owned by the send from
 * here on. Returns 0 or a UCX status (the message was not sent; buf freed). */
static ucs_status_t post_in(pending_t **v, size_t *n, size_t *cap, uint32_t dst, ucp_tag_t tag, uint8_t *buf,
                           size_t len) {
  if (g.ep_status[dst] != UCS_OK || !room(v, *n, cap)) {
    free(buf);
    return g.ep_status[dst] != UCS_OK ? g.ep_status[dst] : UCS_ERR_NO_MEMORY;
  }
  ucp_request_param_t prm = {.op_attr_mask = 0};
  void *req = U.ucp_tag_send_nbx(g.ep[dst], buf, len, tag, &prm);
  if (req == NULL || UCS_PTR_IS_ERR(req)) {
    free(buf);
    return UCS_PTR_STATUS(req);
  }
  (*v)[(*n)++] = (pending_t){.req = req, .buf = buf, .len = len};
  return UCS_OK;
}

static ucs_status_t post(chan_t *c, uint32_t dst, int type, uint8_t *buf, size_t len) {
  return post_in(&c->sends, &c->nsends, &c->sends_cap, dst, tag_of(c->id, type, c->rank), buf, len);
}

static int chan_grants(chan_t *c) {
  uint64_t grant;
  if (!lade__pushq_grant_due(&c->pq, &grant)) return 0;
  int posted = 0;
  for (uint32_t r = 0; r < c->world; r++) {
    if (r == c->rank) continue;
    uint64_t *v = malloc(sizeof *v);
    if (!v) break;
    *v = grant;
    if (post(c, r, T_GRANT, (uint8_t *)v, sizeof *v) == UCS_OK) posted++; /* a failed peer: its receives say so */
  }
  return posted;
}

static int chan_sends(chan_t *c) {
  int posted = 0;
  sendreq_t sr;
  uint8_t *buf;
  size_t len;
  for (int k = 0; k < 64 && lade__pushq_next(&c->pq, &c->state, &c->sbuf, &sr, &buf, &len); k++) {
    ucs_status_t s = post(c, sr.dst, T_DATA, buf, sizeof(msg_hdr_t) + len);
    pthread_mutex_lock(&c->mu);
    if (s != UCS_OK) {
      chan_fail_locked(c, "transport ucx: rank %u: sending sample %llu of step %llu to rank %u failed: %s%s", c->rank,
                       (unsigned long long)sr.idx, (unsigned long long)sr.q, sr.dst, U.ucs_status_string(s),
                       g.ep_status[sr.dst] != UCS_OK ? " (the connection to that rank broke: it died)" : "");
    }
    lade__pushq_pop_locked(&c->pq, s == UCS_OK, len);
    pthread_mutex_unlock(&c->mu);
    posted++;
    if (s != UCS_OK) break;
  }
  return posted;
}

static uint64_t gather_sum(uint64_t seq, const void *data, size_t len) { return lade_checksum(data, len, seq); }

/* Takes one allgather contribution from src (buf: header and bytes,
 * malloc'd, owned from here; under c->mu): into the caller's buffer if it is
 * the one in progress, kept if it is for a later one, else dropped. */
static void gather_take_locked(chan_t *c, uint32_t src, uint8_t *buf, size_t len) {
  gather_hdr_t h;
  if (len < sizeof h || (memcpy(&h, buf, sizeof h), h.magic != MSG_MAGIC) || h.len != len - sizeof h) {
    free(buf);
    chan_fail_locked(c, "transport ucx: rank %u: a malformed message from rank %u", c->rank, src);
    return;
  }
  if (h.seq > c->ag_seq) { /* a later allgather's, early: the peer finished this one */
    gather_early_t *e = malloc(sizeof *e);
    if (!e) {
      free(buf);
      chan_fail_locked(c, "transport ucx: out of memory for a %zu-byte message", len);
      return;
    }
    *e = (gather_early_t){.next = c->ag_early, .src = src, .seq = h.seq, .len = len, .buf = buf};
    c->ag_early = e;
    return;
  }
  if (h.seq < c->ag_seq || !c->ag_active || c->ag_have[src]) { /* an earlier (failed) one's, or again */
    free(buf);
    return;
  }
  if (h.len != c->ag_len) {
    if (!c->ag_err[0])
      snprintf(c->ag_err, sizeof c->ag_err, "transport ucx: rank %u: rank %u contributed %llu bytes to allgather %llu "
               "of this loader, this rank %zu (the learners differ: in the dataset's size, or in their cache "
               "settings, e.g. cache_dir on one rank only)", c->rank, src, (unsigned long long)h.len,
               (unsigned long long)h.seq, c->ag_len);
  } else if (gather_sum(h.seq, buf + sizeof h, h.len) != h.sum) {
    if (!c->ag_err[0])
      snprintf(c->ag_err, sizeof c->ag_err, "transport ucx: rank %u: the %llu bytes rank %u contributed to allgather "
               "%llu arrived corrupted (they do not match the sender's checksum)", c->rank, (unsigned long long)h.len,
               src, (unsigned long long)h.seq);
  } else {
    memcpy(c->ag_all + (size_t)src * c->ag_len, buf + sizeof h, h.len);
    c->ag_have[src] = 1;
    c->ag_count++;
  }
  free(buf);
}

/* Takes one received message (buf malloc'd, owned from here). */
static void deliver(chan_t *c, ucp_tag_t tag, uint8_t *buf, size_t len) {
  int type = (int)((tag >> TYPE_SHIFT) & 0xff);
  uint32_t src = (uint32_t)(tag & 0xffffffffu);
  if ((uint32_t)(tag >> CHAN_SHIFT) != c->id) { /* for the number this channel had before it skipped */
    free(buf);
    return;
  }
  pthread_mutex_lock(&c->mu);
  if (src >= c->world) {
    free(buf);
    chan_fail_locked(c, "transport ucx: rank %u: a message from rank %u, outside the world of %u", c->rank, src,
                     c->world);
  } else if (type == T_GRANT && len == sizeof(uint64_t)) {
    uint64_t v;
    memcpy(&v, buf, sizeof v);
    free(buf);
    if (v > c->pq.grant[src]) c->pq.grant[src] = v; /* only ever raised, as in mpi.c */
  } else if (type == T_DONE) {
    free(buf);
    c->done_from[src] = 1;
  } else if (type == T_GATHER) {
    gather_take_locked(c, src, buf, len);
  } else if (type == T_ABORT) { /* src gave up opening this channel: [n, the ranks it missed..., its error] */
    uint32_t n = 0, r;
    bool me = false;
    if (len >= sizeof n) memcpy(&n, buf, sizeof n);
    if (n > c->world || len < (n + 1) * sizeof n) n = 0, len = sizeof n;
    for (uint32_t i = 0; i < n; i++) me |= (memcpy(&r, buf + (i + 1) * sizeof r, sizeof r), r) == c->rank;
    const char *why = (const char *)buf + (n + 1) * sizeof n;
    int wl = (int)(len - (n + 1) * sizeof n), pre = wl > 15 && !memcmp(why, "transport ucx: ", 15) ? 15 : 0;
    if (c->state == OPENING && me) c->skip = true; /* this rank came late: the others' next loader is this one */
    else chan_fail_locked(c, "transport ucx: rank %u: rank %u gave up on this loader: %.*s", c->rank, src,
                          wl - pre, why + pre);
    free(buf);
  } else if (type == T_CHECK) {
    /* [count, values...]; a malformed one counts as a check of another
     * length, so it is named as a difference */
    uint64_t *row = &c->checks_in[(size_t)src * (MAX_CHECKS + 1)], cnt = 0;
    if (len >= sizeof cnt) memcpy(&cnt, buf, sizeof cnt);
    if (cnt <= MAX_CHECKS && len == (cnt + 1) * sizeof cnt) {
      row[0] = cnt;
      memcpy(row + 1, buf + sizeof cnt, cnt * sizeof cnt);
    } else {
      row[0] = MAX_CHECKS + 1;
    }
    free(buf);
  } else {
    msg_hdr_t h;
    if (type != T_DATA || len < sizeof h) {
      free(buf);
      chan_fail_locked(c, "transport ucx: rank %u: a malformed message from rank %u", c->rank, src);
      pthread_mutex_unlock(&c->mu);
      return;
    }
    memcpy(&h, buf, sizeof h);
    msg_t *m = h.magic == MSG_MAGIC && h.len == len - sizeof h ? malloc(sizeof *m) : NULL;
    if (!m) {
      free(buf);
      chan_fail_locked(c, "transport ucx: rank %u: a malformed message from rank %u", c->rank, src);
      pthread_mutex_unlock(&c->mu);
      return;
    }
    memmove(buf, buf + sizeof h, h.len);
    *m = (msg_t){.q = h.q, .idx = h.idx, .src = src, .error = h.error, .sum = h.sum, .len = h.len, .data = buf};
    lade__pushq_store_locked(&c->pq, m);
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* The channel open here (not closed) with number id; under g.mu. */
static chan_t *chan_live(uint32_t id) {
  for (chan_t *c = g.chans; c; c = c->next) {
    pthread_mutex_lock(&c->mu);
    bool live = c->id == id && c->state != CLOSED;
    pthread_mutex_unlock(&c->mu);
    if (live) return c;
  }
  return NULL;
}

/* Receives every message that arrived, whatever its channel (under g.mu):
 * into its channel's receives when that is open here, else aside (strays):
 * kept for a channel this rank has yet to open (a peer's settings check or
 * abort comes first) until it opens, dropped for a closed one (a peer's late
 * grant, data or DONE), which in UCX's unexpected queue would stay for good,
 * the sender's large sends never completing (its close waiting out its
 * timeout). Completes the strays and the sends of no channel. */
static int recv_any(void) {
  int got = 0;
  for (int k = 0; k < 256; k++, got++) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = U.ucp_tag_probe_nb(g.worker, 0, 0, 1, &info);
    if (!msg) break;
    chan_t *c = chan_live((uint32_t)(info.sender_tag >> CHAN_SHIFT));
    pending_t **v = c ? &c->recvs : &g.stray;
    size_t *n = c ? &c->nrecvs : &g.nstray, *cap = c ? &c->recvs_cap : &g.stray_cap;
    uint8_t *buf = malloc(info.length ? info.length : 1);
    ucp_request_param_t prm = {.op_attr_mask = 0};
    void *req = buf && room(v, *n, cap) ? U.ucp_tag_msg_recv_nbx(g.worker, buf, info.length, msg, &prm)
                                        : UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
    if (!UCS_PTR_IS_ERR(req)) {
      (*v)[(*n)++] = (pending_t){.req = req, .buf = buf, .len = info.length, .tag = info.sender_tag};
      continue;
    }
    free(buf);
    if (!c) continue;
    pthread_mutex_lock(&c->mu);
    chan_fail_locked(c, "transport ucx: rank %u: receiving a %zu-byte message from rank %u failed: %s", c->rank,
                     info.length, (uint32_t)(info.sender_tag & 0xffffffffu), U.ucs_status_string(UCS_PTR_STATUS(req)));
    pthread_mutex_unlock(&c->mu);
  }
  for (size_t i = 0; i < g.nstray;) {
    pending_t *p = &g.stray[i];
    ucs_status_t s = p->req ? U.ucp_request_check_status(p->req) : UCS_OK;
    if (s == UCS_INPROGRESS) {
      i++;
      continue;
    }
    if (p->req) U.ucp_request_free(p->req);
    p->req = NULL;
    uint32_t id = (uint32_t)(p->tag >> CHAN_SHIFT);
    chan_t *c = s == UCS_OK ? chan_live(id) : NULL;
    if (!c && s == UCS_OK && id > g.next_chan) { /* kept, received */
      i++;
      continue;
    }
    pending_t done = *p;
    *p = g.stray[--g.nstray];
    if (c) deliver(c, done.tag, done.buf, done.len);
    else free(done.buf);
  }
  for (size_t i = 0; i < g.nouts;) {
    if (U.ucp_request_check_status(g.outs[i].req) == UCS_INPROGRESS) {
      i++;
      continue;
    }
    U.ucp_request_free(g.outs[i].req);
    free(g.outs[i].buf);
    g.outs[i] = g.outs[--g.nouts];
  }
  return got;
}

/* Receives (recv_any) and completes this channel's receives in flight.
 * Returns how many messages arrived. */
static int chan_recvs(chan_t *c) {
  int got = recv_any();
  for (size_t i = 0; i < c->nrecvs;) {
    pending_t *p = &c->recvs[i];
    ucs_status_t s = p->req ? U.ucp_request_check_status(p->req) : UCS_OK;
    if (s == UCS_INPROGRESS) {
      i++;
      continue;
    }
    if (p->req) U.ucp_request_free(p->req);
    pending_t done = *p;
    *p = c->recvs[--c->nrecvs];
    if (s != UCS_OK) {
      free(done.buf);
      pthread_mutex_lock(&c->mu);
      chan_fail_locked(c, "transport ucx: rank %u: receiving a message from rank %u failed: %s", c->rank,
                       (uint32_t)(done.tag & 0xffffffffu), U.ucs_status_string(s));
      pthread_mutex_unlock(&c->mu);
      continue;
    }
    deliver(c, done.tag, done.buf, done.len);
  }
  return got;
}

/* Completes finished sends; returns how many. */
static int chan_complete(chan_t *c) {
  int n = 0;
  for (size_t i = 0; i < c->nsends;) {
    ucs_status_t s = U.ucp_request_check_status(c->sends[i].req);
    if (s == UCS_INPROGRESS) {
      i++;
      continue;
    }
    U.ucp_request_free(c->sends[i].req);
    free(c->sends[i].buf);
    c->sends[i] = c->sends[--c->nsends];
    n++;
  }
  return n;
}

/* Requests still in flight (a dead or stuck peer, a failed open) are
 * cancelled and released when they complete; their buffers are left to
 * UCX, which may still hold them. */
static void cancel_pending(chan_t *c) {
  for (size_t i = 0; i < c->nsends; i++) {
    U.ucp_request_cancel(g.worker, c->sends[i].req);
    U.ucp_request_free(c->sends[i].req);
  }
  for (size_t i = 0; i < c->nrecvs; i++)
    if (c->recvs[i].req) {
      U.ucp_request_cancel(g.worker, c->recvs[i].req);
      U.ucp_request_free(c->recvs[i].req);
    }
  c->nsends = c->nrecvs = 0;
}

/* Posts the contributions of an allgather the caller started (its
 * messages, one per peer, built by the caller). */
static int chan_gather(chan_t *c) {
  pthread_mutex_lock(&c->mu);
  uint8_t **out = c->ag_post ? c->ag_out : NULL;
  size_t len = sizeof(gather_hdr_t) + c->ag_len;
  c->ag_post = false;
  c->ag_out = NULL;
  pthread_mutex_unlock(&c->mu);
  if (!out) return 0;
  for (uint32_t r = 0; r < c->world; r++) {
    if (r == c->rank) continue;
    ucs_status_t s = post(c, r, T_GATHER, out[r], len); /* owns out[r] from here */
    if (s != UCS_OK && g.ep_status[r] == UCS_OK) { /* a dead peer: the caller names it (peer_lost) */
      pthread_mutex_lock(&c->mu);
      if (!c->ag_err[0])
        snprintf(c->ag_err, sizeof c->ag_err, "transport ucx: rank %u: sending its %zu bytes of allgather %llu to "
                 "rank %u failed: %s", c->rank, c->ag_len, (unsigned long long)c->ag_seq, r, U.ucs_status_string(s));
      pthread_cond_broadcast(&c->cv);
      pthread_mutex_unlock(&c->mu);
    }
  }
  free(out);
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&c->cv); /* the caller waits for its bytes to be out */
  pthread_mutex_unlock(&c->mu);
  return 1;
}

/* This rank gives up opening channel c (why: its error): every peer is
 * told, with the ranks whose settings check had not come; one of those that
 * opens this channel later takes the next number instead (it came late:
 * the others' next loader is its), the others fail at once naming why.
 * Under g.mu, not c->mu. */
static void chan_abort(chan_t *c, const char *why) {
  size_t wl = strlen(why), n = 0;
  uint32_t *v = malloc((c->world + 1) * sizeof *v + wl);
  if (!v) return;
  pthread_mutex_lock(&c->mu);
  for (uint32_t r = 0; r < c->world; r++)
    if (r != c->rank && c->checks_in[(size_t)r * (MAX_CHECKS + 1)] == ~0ull) v[1 + n++] = r;
  pthread_mutex_unlock(&c->mu);
  v[0] = (uint32_t)n;
  size_t len = (n + 1) * sizeof *v + wl;
  memcpy(v + n + 1, why, wl);
  for (uint32_t r = 0; r < c->world; r++) {
    uint8_t *m = r == c->rank ? NULL : malloc(len);
    if (m) post_in(&g.outs, &g.nouts, &g.outs_cap, r, tag_of(c->id, T_ABORT, c->rank), memcpy(m, v, len), len);
  }
  free(v);
}

/* Opening, one pass: the settings check goes to every peer once; the open
 * completes when every peer's has come (compared: the first difference is
 * named, as mpi.c names it), or fails past the timeout naming the ranks
 * that did not open. */
static void chan_open_step(chan_t *c) {
  uint32_t n = c->p.nchecks;
  if (!c->checks_sent) {
    c->checks_sent = true;
    c->opened_at = lade__now();
    for (uint32_t r = 0; r < c->world; r++) {
      if (r == c->rank) continue;
      uint64_t *v = malloc((n + 1) * sizeof *v);
      if (!v) break;
      v[0] = n;
      for (uint32_t i = 0; i < n; i++) v[i + 1] = c->p.checks[i].value;
      post(c, r, T_CHECK, (uint8_t *)v, (n + 1) * sizeof *v); /* a failed peer: named below */
    }
  }
  chan_recvs(c);
  chan_complete(c);
  pthread_mutex_lock(&c->mu);
  if (c->skip && !c->pq.fatal) {
    /* a peer gave up this number waiting for this rank (whose loader before
     * failed before it opened the transport, or came late): the numbers are
     * the process's count of loaders, so this one takes the next, as the
     * peers' next loader does, and they agree again */
    c->skip = false;
    c->skips++;
    c->checks_sent = false;
    for (uint32_t r = 0; r < c->world; r++) c->checks_in[(size_t)r * (MAX_CHECKS + 1)] = ~0ull;
    pthread_mutex_unlock(&c->mu);
    chan_abort(c, "it came late to this loader, which a peer had given up on, and went on to the next");
    c->id = ++g.next_chan;
    return;
  }
  uint32_t missing = 0, lost = 0;
  char who[512] = "";
  size_t len = 0;
  for (uint32_t r = 0; r < c->world; r++)
    if (r != c->rank && c->checks_in[(size_t)r * (MAX_CHECKS + 1)] == ~0ull) {
      if (missing++ < 8) len += (size_t)snprintf(who + len, sizeof who - len, "%s%u", len ? ", " : "", r);
      lost += c->peer_lost[r];
    }
  if (missing && (lost || lade__now() - c->opened_at > c->p.timeout_ms / 1000.0))
    chan_fail_locked(c, "transport ucx: rank %u: rank%s %s%s did not open %s loader within %u ms (setting "
                     "peer_timeout_ms)%s: every rank must create its loader, with the same settings, in the same "
                     "order%s", c->rank, missing > 1 ? "s" : "", who, missing > 8 ? ", ..." : "",
                     missing > 1 ? "their" : "its", c->p.timeout_ms, lost ? " (a connection broke: it died)" : "",
                     c->skips ? " (this rank had come late to their loader before, and waited for their next)" : "");
  for (uint32_t r = 0; r < c->world && !missing && !c->pq.fatal; r++) {
    const uint64_t *row = &c->checks_in[(size_t)r * (MAX_CHECKS + 1)];
    for (uint32_t i = 0; i < n && r != c->rank && !c->pq.fatal; i++) {
      uint64_t mine = c->p.checks[i].value;
      if (row[0] == n && row[i + 1] == mine) continue;
      /* name every rank whose value differs from this one's */
      const lade__transport_check_t *k = &c->p.checks[i];
      char list[768] = "";
      size_t ll = 0;
      for (uint32_t s = 0; s < c->world && ll < sizeof list - 64; s++) {
        const uint64_t *rs = &c->checks_in[(size_t)s * (MAX_CHECKS + 1)];
        if (s == c->rank || (rs[0] == n && rs[i + 1] == mine)) continue;
        ll += (size_t)snprintf(list + ll, sizeof list - ll, k->hash ? "%srank %u has %016llx" : "%srank %u has %llu",
                               ll ? ", " : "", s, rs[0] == n ? (unsigned long long)rs[i + 1] : 0ull);
      }
      chan_fail_locked(c, k->hash ? "learners disagree on %s: rank %u has %016llx, %s (every rank must open the same "
                                    "dataset with the same settings)"
                                  : "learners disagree on setting '%s': rank %u has %llu, %s (every rank must run the "
                                    "loader with the same settings)",
                       k->name, c->rank, (unsigned long long)mine, list);
    }
  }
  if (c->pq.fatal) c->state = CLOSED;
  else if (!missing) c->state = OPEN;
  if (c->pq.fatal) {
    char why[sizeof c->pq.fatal_msg];
    snprintf(why, sizeof why, "%s", c->pq.fatal_msg);
    pthread_mutex_unlock(&c->mu);
    cancel_pending(c);
    chan_abort(c, why);
    pthread_mutex_lock(&c->mu);
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* Closing: flush the queue, DONE to every peer, drain until every live
 * peer's DONE and the sends completed (all bounded). */
static void chan_close_step(chan_t *c) {
  double t0 = lade__now(), limit = c->p.timeout_ms / 1000.0;
  while (lade__now() - t0 < limit) {
    pthread_mutex_lock(&c->mu);
    bool empty = !c->pq.sq_len || c->pq.fatal;
    pthread_mutex_unlock(&c->mu);
    if (empty) break;
    U.ucp_worker_progress(g.worker);
    chan_sends(c);
    chan_recvs(c);
    chan_complete(c);
  }
  for (uint32_t r = 0; r < c->world; r++)
    if (r != c->rank) {
      uint8_t *one = malloc(1);
      if (one) *one = 1, post(c, r, T_DONE, one, 1);
    }
  for (;;) {
    while (U.ucp_worker_progress(g.worker)) {
    }
    chan_recvs(c);
    chan_complete(c);
    uint32_t seen = 0;
    pthread_mutex_lock(&c->mu);
    for (uint32_t r = 0; r < c->world; r++) seen += r == c->rank || c->done_from[r] || g.ep_status[r] != UCS_OK;
    pthread_mutex_unlock(&c->mu);
    if ((seen == c->world && c->nsends == 0 && c->nrecvs == 0) || lade__now() - t0 > limit) break;
    nap(200000);
  }
  cancel_pending(c);
  pthread_mutex_lock(&c->mu);
  lade__pushq_msgs_free_locked(&c->pq, UINT64_MAX);
  c->state = CLOSED;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static void *comm_main(void *arg) {
  (void)arg;
  long idle_ns = 20000;
  for (;;) {
    pthread_mutex_lock(&g.mu);
    if (g.stop && !g.chans) {
      pthread_mutex_unlock(&g.mu);
      break;
    }
    int work = 0;
    for (int k = 0; k < 64 && U.ucp_worker_progress(g.worker); k++) work++;
    work += recv_any(); /* also with no loader open: what comes for closed ones is dropped */
    for (chan_t *c = g.chans; c; c = c->next) {
      pthread_mutex_lock(&c->mu);
      int state = c->state;
      pthread_mutex_unlock(&c->mu);
      if (state == OPENING) {
        chan_open_step(c);
      } else if (state == OPEN) {
        work += chan_gather(c) + chan_grants(c) + chan_sends(c) + chan_recvs(c) + chan_complete(c);
      } else if (state == CLOSING) {
        chan_close_step(c);
        work++;
      }
    }
    pthread_mutex_unlock(&g.mu);
    if (work) {
      idle_ns = 20000;
    } else {
      nap(idle_ns);
      if (idle_ns < 1000000) idle_ns *= 2;
    }
  }
  return NULL;
}

/* At exit: the thread stops; the endpoints, the worker and the context are
 * released when no loader was left open (an open one's requests may still
 * be in flight: then the process's exit releases them). */
static void at_exit(void) {
  pthread_mutex_lock(&g.mu);
  bool started = g.started, abandoned = g.chans != NULL;
  g.stop = true;
  g.chans = NULL; /* loaders still open at exit: their channels are abandoned */
  pthread_mutex_unlock(&g.mu);
  if (started) pthread_join(g.thread, NULL);
  if (abandoned || !g.worker) return;
  for (uint32_t r = 0; g.ep && r < g.world; r++) {
    if (!g.ep[r]) continue;
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *req = U.ucp_ep_close_nbx(g.ep[r], &prm);
    for (int k = 0; UCS_PTR_IS_PTR(req) && k < 10000 && U.ucp_request_check_status(req) == UCS_INPROGRESS; k++)
      U.ucp_worker_progress(g.worker);
    if (UCS_PTR_IS_PTR(req)) U.ucp_request_free(req);
  }
  U.ucp_worker_destroy(g.worker);
  U.ucp_cleanup(g.ctx);
  g.worker = NULL;
  g.ctx = NULL;
}

/* ------------------------------------------------------------ the vtable */

static void ucx_close(lade__transport_t *d);

static int ucx_open(lade__transport_t **out, const lade__transport_params_t *p, uint32_t *rank, uint32_t *world) {
  *out = NULL;
  if (p->nchecks > MAX_CHECKS) return lade__fail(LADE_EINVAL, "transport ucx: too many settings to check");
  pthread_mutex_lock(&g.mu);
  int rc = init_locked();
  bool have = g.peers_set;
  const char *mine = g.addr;
  pthread_mutex_unlock(&g.mu);
  if (rc) return rc;
  bool alone = p->world <= 1; /* one learner: nothing to exchange, no peers set up */
  if (!have && !alone) {
    char **addr = calloc(p->world, sizeof *addr);
    if (!addr) return lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
    if (p->rendezvous_dir && p->rendezvous_dir[0]) {
      rc = rendezvous(p->rendezvous_dir, p->job_id, p->rank, p->world, p->timeout_ms, mine, addr);
    } else {
      rc = lade__fail(LADE_EINVAL, "transport ucx: rank %u of %u does not know its peers' addresses: initialise "
                      "torch.distributed before creating the loader (the Python module exchanges them through it), "
                      "call lade_ucx_set_peers(), or set rendezvous_dir (a folder every rank can reach) and job_id",
                      p->rank, p->world);
    }
    if (!rc) {
      pthread_mutex_lock(&g.mu);
      rc = peers_set_locked(p->rank, p->world, (const char *const *)addr);
      pthread_mutex_unlock(&g.mu);
    }
    for (uint32_t r = 0; r < p->world; r++) free(addr[r]);
    free(addr);
    if (rc) return rc;
  }
  pthread_mutex_lock(&g.mu);
  if (!alone && (p->world != g.world || p->rank != g.rank)) {
    rc = lade__fail(LADE_EINVAL, "transport ucx: settings 'rank' and 'world_size' say rank %u of %u, but this "
                    "process's peers were set up as rank %u of %u", p->rank, p->world, g.rank, g.world);
  } else if (g.stop) {
    rc = lade__fail(LADE_ESTATE, "transport ucx: the process is exiting");
  } else if (!alone && !g.started) {
    if (pthread_create(&g.thread, NULL, comm_main, NULL) != 0)
      rc = lade__fail(LADE_ETHREAD, "transport ucx: cannot start the communication thread: %s", strerror(errno));
    else
      g.started = true;
  }
  chan_t *c = rc ? NULL : calloc(1, sizeof *c);
  if (!rc && !c) rc = lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
  if (rc) {
    pthread_mutex_unlock(&g.mu);
    return rc;
  }
  c->base.ops = &lade__transport_ucx;
  c->base.pq = &c->pq;
  c->p = *p;
  c->id = ++g.next_chan;
  c->rank = alone ? 0 : g.rank;
  c->pq.rank = c->rank;
  c->world = alone ? 1 : g.world;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  lade__pushq_init(&c->pq, "ucx", &c->p, &c->mu, &c->cv);
  c->pq.grant = calloc(c->world, sizeof *c->pq.grant);
  c->peer_lost = calloc(c->world, 1);
  c->pq.peer_lost = c->peer_lost; /* a wait for a rank whose endpoint failed fails at once */
  c->pq.peer_lost_n = c->peer_lost ? c->world : 0;
  c->done_from = calloc(c->world, 1);
  c->checks_in = malloc((size_t)c->world * (MAX_CHECKS + 1) * sizeof *c->checks_in);
  c->ag_have = calloc(c->world, 1);
  if (!c->pq.grant || !c->peer_lost || !c->done_from || !c->checks_in || !c->ag_have) {
    pthread_mutex_unlock(&g.mu);
    c->state = CLOSED;
    ucx_close(&c->base);
    return lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
  }
  for (uint32_t r = 0; r < c->world; r++) {
    c->checks_in[(size_t)r * (MAX_CHECKS + 1)] = ~0ull;
    c->peer_lost[r] = !alone && g.ep_status[r] != UCS_OK;
  }
  c->state = alone ? OPEN : OPENING;
  if (!alone) {
    c->next = g.chans;
    g.chans = c;
  }
  pthread_mutex_unlock(&g.mu);
  pthread_mutex_lock(&c->mu);
  while (c->state == OPENING) pthread_cond_wait(&c->cv, &c->mu);
  rc = c->pq.fatal ? lade__fail(c->pq.fatal, "%s", c->pq.fatal_msg) : 0;
  pthread_mutex_unlock(&c->mu);
  if (rc) {
    ucx_close(&c->base);
    return rc;
  }
  *rank = c->rank;
  *world = c->world;
  *out = &c->base;
  return 0;
}

static void ucx_close(lade__transport_t *d) {
  if (!d) return;
  chan_t *c = (chan_t *)d;
  pthread_mutex_lock(&c->mu);
  if (c->state == OPEN && c->world > 1) c->state = CLOSING;
  else c->state = CLOSED;
  struct timespec ts;
  lade__pushq_timespec_after(&ts, 3.0 * c->p.timeout_ms / 1000.0 + 1);
  while (c->state != CLOSED)
    if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&c->mu);
  /* unlinked under g.mu: the thread holds g.mu while it works on channels */
  pthread_mutex_lock(&g.mu);
  for (chan_t **pp = &g.chans; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  cancel_pending(c);
  pthread_mutex_unlock(&g.mu);
  lade__pushq_free(&c->pq);
  free(c->sends);
  free(c->recvs);
  free(c->peer_lost);
  free(c->done_from);
  free(c->checks_in);
  free(c->ag_have);
  for (uint32_t r = 0; c->ag_out && r < c->world; r++) free(c->ag_out[r]);
  free(c->ag_out);
  while (c->ag_early) {
    gather_early_t *e = c->ag_early;
    c->ag_early = e->next;
    free(e->buf);
    free(e);
  }
  lade__buf_free(&c->sbuf);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

/* The host names in the addresses give the nodes; set once with the peers. */
static const uint32_t *ucx_node_leads(lade__transport_t *d) { return ((chan_t *)d)->world > 1 ? g.node_lead : NULL; }

/* Every rank's len bytes: this rank's go to every peer as one T_GATHER
 * message each (posted by the thread), the peers' arrive into all as the
 * thread receives them; waits until all came, bounded by the timeout, and
 * fails at once when a rank that has not contributed died. */
static int ucx_allgather(lade__transport_t *d, const void *mine, size_t len, void *all) {
  chan_t *c = (chan_t *)d;
  memcpy((uint8_t *)all + (size_t)c->rank * len, mine, len);
  if (c->world == 1) return 0;
  uint8_t **out = calloc(c->world, sizeof *out);
  int rc = out ? 0 : lade__fail(LADE_ENOMEM, "transport ucx: out of memory for an allgather");
  pthread_mutex_lock(&c->mu);
  uint64_t seq = c->ag_seq + 1;
  pthread_mutex_unlock(&c->mu);
  gather_hdr_t h = {MSG_MAGIC, seq, len, gather_sum(seq, mine, len)};
  for (uint32_t r = 0; !rc && r < c->world; r++) {
    if (r == c->rank) continue;
    out[r] = malloc(sizeof h + len);
    if (!out[r]) {
      rc = lade__fail(LADE_ENOMEM, "transport ucx: out of memory for an allgather of %zu bytes per rank", len);
      break;
    }
    memcpy(out[r], &h, sizeof h);
    memcpy(out[r] + sizeof h, mine, len);
  }
  if (rc) {
    for (uint32_t r = 0; out && r < c->world; r++) free(out[r]);
    free(out);
    return rc;
  }
  struct timespec ts;
  lade__pushq_timespec_after(&ts, c->p.timeout_ms / 1000.0);
  pthread_mutex_lock(&c->mu);
  if (c->state != OPEN || c->ag_active) {
    pthread_mutex_unlock(&c->mu);
    for (uint32_t r = 0; r < c->world; r++) free(out[r]);
    free(out);
    return lade__fail(LADE_ESTATE, "transport ucx: rank %u: an allgather on a loader that is not open or in one "
                      "already", c->rank);
  }
  c->ag_seq = seq;
  c->ag_active = true;
  c->ag_all = all;
  c->ag_len = len;
  memset(c->ag_have, 0, c->world);
  c->ag_have[c->rank] = 1;
  c->ag_count = 1;
  c->ag_err[0] = 0;
  c->ag_out = out;
  c->ag_post = true;
  /* what came early for this one; an earlier one's leftovers are dropped */
  for (gather_early_t **pp = &c->ag_early; *pp;) {
    gather_early_t *e = *pp;
    if (e->seq > seq) {
      pp = &e->next;
      continue;
    }
    *pp = e->next;
    if (e->seq == seq) gather_take_locked(c, e->src, e->buf, e->len);
    else free(e->buf);
    free(e);
  }
  /* done when every rank's bytes came and this rank's went out (posted) */
  for (;;) {
    if (c->ag_count == c->world && !c->ag_post) break;
    if (c->pq.fatal) {
      rc = lade__fail(c->pq.fatal, "%s", c->pq.fatal_msg);
      break;
    }
    if (c->ag_err[0]) {
      rc = lade__fail(LADE_EIO, "%s", c->ag_err);
      break;
    }
    bool timed_out = false, lost = false;
    for (uint32_t r = 0; r < c->world; r++) lost |= !c->ag_have[r] && c->peer_lost[r];
    if (!lost) timed_out = pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT;
    if (c->ag_count == c->world && !c->ag_post) break;
    if (lost || timed_out) {
      /* name the ranks that did not contribute (the dead ones, when one died) */
      char who[512] = "";
      size_t wl = 0;
      uint32_t missing = 0;
      for (uint32_t r = 0; r < c->world; r++)
        if (!c->ag_have[r] && (!lost || c->peer_lost[r]) && missing++ < 8)
          wl += (size_t)snprintf(who + wl, sizeof who - wl, "%s%u", wl ? ", " : "", r);
      if (!missing) { /* every part came; this rank's own never went out */
        rc = lade__fail(LADE_ETIMEOUT, "transport ucx: rank %u: its part of allgather %llu of this loader was not "
                        "sent within %u ms (setting peer_timeout_ms): the communication thread did not get to it",
                        c->rank, (unsigned long long)seq, c->p.timeout_ms);
        break;
      }
      rc = lost ? lade__fail(LADE_EIO, "transport ucx: rank %u: rank%s %s%s died (the connection broke) before "
                             "contributing to allgather %llu of this loader",
                             c->rank, missing > 1 ? "s" : "", who, missing > 8 ? ", ..." : "",
                             (unsigned long long)seq)
                : lade__fail(LADE_ETIMEOUT, "transport ucx: rank %u: rank%s %s%s did not contribute to allgather %llu "
                             "of this loader within %u ms (setting peer_timeout_ms): %s did not reach the same "
                             "collective (its loader's open, or lade_loader_allgather), or stopped", c->rank,
                             missing > 1 ? "s" : "", who, missing > 8 ? ", ..." : "", (unsigned long long)seq,
                             c->p.timeout_ms, missing > 1 ? "each" : "it");
      break;
    }
  }
  c->ag_active = false;
  c->ag_all = NULL;
  if (c->ag_post) { /* failed before the thread posted them: freed here */
    for (uint32_t r = 0; r < c->world; r++) free(c->ag_out[r]);
    free(c->ag_out);
    c->ag_out = NULL;
    c->ag_post = false;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

const lade__transport_ops_t lade__transport_ucx = {"ucx", ucx_open, ucx_close, ucx_node_leads, ucx_allgather};
#else
/* built without UCX (LADE_WITH_UCX): the bootstrap calls say so */
#include "lade/lade.h"
#include "transport/transport.h"

int lade_ucx_address(const char **out) {
  *out = NULL;
  return lade__fail(LADE_EUNSUPPORTED, "this build has no UCX (LADE_WITH_UCX; apt-get install libucx-dev)");
}

int lade_ucx_set_peers(uint32_t rank, uint32_t world, const char *const *addresses) {
  (void)rank, (void)world, (void)addresses;
  return lade__fail(LADE_EUNSUPPORTED, "this build has no UCX (LADE_WITH_UCX; apt-get install libucx-dev)");
}

uint32_t lade__ucx_peers_world(void) { return 0; }
#endif
