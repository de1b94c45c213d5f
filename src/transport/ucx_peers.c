/*
 * ucx_peers.c - the UCX transport's process-wide state (docs/transport.md,
 * UCX, Bootstrap): one UCP context and worker per process, this process's
 * worker address as text (hex, then '@' and the host name), and an
 * endpoint to every peer, created once the peers' addresses are known:
 * from lade_ucx_set_peers() (the Python module gathers them over
 * torch.distributed) or, at the first loader's open, from the rendezvous
 * folder (ucx_rdv.c). The endpoints are created with peer error handling,
 * so a peer that dies fails its endpoint (ep_failed: the lost hook). The
 * host names give the nodes (node_lead). At exit the thread stops, and the
 * endpoints, the worker and the context are released when no loader was
 * left open.
 *
 * Lock: every field of lade__ucx_proc and every UCX call are under the
 * world's mu (W.mu, the skeleton's lock of the UCX transport); the
 * bootstrap takes it around each step and leaves it for the rendezvous.
 * Once peers_set, rank, world, ep_status and node_lead keep their size.
 */
#ifdef LADE_HAVE_UCX
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lade/lade.h"
#include "transport/ucx_impl.h"

#define W lade__ucx_comm
#define P (&lade__ucx_proc)

lade__ucx_proc_t lade__ucx_proc;
lade__comm_t lade__ucx_comm = LADE__COMM_INIT(NULL); /* its ops: ucx.c's, set at its first open */

/* A peer's endpoint failed (it died, or its connection broke): called by
 * ucp_worker_progress, under W.mu. Its channels are told (the lost hook). */
static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  uint32_t r = (uint32_t)(uintptr_t)arg;
  if (r >= P->world) return;
  P->ep_status[r] = status;
  if (P->lost) P->lost(r);
}

/* ------------------------------------------------------------ posting (under W.mu) */

bool lade__ucx_room(lade__ucx_pending_t **v, size_t n, size_t *cap) {
  if (n < *cap) return true;
  size_t nc = *cap ? *cap * 2 : 64;
  lade__ucx_pending_t *p = realloc(*v, nc * sizeof *p);
  if (!p) return false;
  *v = p;
  *cap = nc;
  return true;
}

/* Posts one message, its request kept in v; buf is owned by the send from
 * here on. Returns 0 or a UCX status (the message was not sent; buf freed). */
ucs_status_t lade__ucx_post_in(lade__ucx_pending_t **v, size_t *n, size_t *cap, uint32_t dst, ucp_tag_t tag,
                               uint8_t *buf, size_t len) {
  if (P->ep_status[dst] != UCS_OK || !lade__ucx_room(v, *n, cap)) {
    free(buf);
    return P->ep_status[dst] != UCS_OK ? P->ep_status[dst] : UCS_ERR_NO_MEMORY;
  }
  ucp_request_param_t prm = {.op_attr_mask = 0};
  void *req = U.ucp_tag_send_nbx(P->ep[dst], buf, len, tag, &prm);
  if (req == NULL || UCS_PTR_IS_ERR(req)) {
    free(buf);
    return UCS_PTR_STATUS(req);
  }
  (*v)[(*n)++] = (lade__ucx_pending_t){.req = req, .buf = buf, .len = len};
  return UCS_OK;
}

ucs_status_t lade__ucx_post(lade__ucx_chan_t *c, uint32_t dst, int type, uint8_t *buf, size_t len) {
  return lade__ucx_post_in(&c->sends, &c->nsends, &c->sends_cap, dst, lade__ucx_tag(c->id, type, c->ch.rank), buf,
                           len);
}

static void at_exit(void);

int lade__ucx_init_locked(void) {
  if (P->inited) return P->init_rc ? lade__fail(P->init_rc, "%s", P->init_msg) : 0;
  P->inited = true;
  if (!lade__ucx_load(P->init_msg, sizeof P->init_msg)) {
    P->init_rc = LADE_EUNSUPPORTED;
    return lade__fail(P->init_rc, "%s", P->init_msg);
  }
  ucp_config_t *cfg = NULL;
  ucs_status_t s = U.ucp_config_read(NULL, NULL, &cfg);
  if (s == UCS_OK) {
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    s = U.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, &P->ctx);
    U.ucp_config_release(cfg);
  }
  if (s == UCS_OK) {
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    s = U.ucp_worker_create(P->ctx, &wp, &P->worker);
  }
  ucp_address_t *a = NULL;
  size_t alen = 0;
  if (s == UCS_OK) atexit(at_exit);
  if (s == UCS_OK) s = U.ucp_worker_get_address(P->worker, &a, &alen);
  if (s != UCS_OK) {
    P->init_rc = LADE_EIO;
    snprintf(P->init_msg, sizeof P->init_msg, "transport ucx: starting UCX failed: %s", U.ucs_status_string(s));
    return lade__fail(P->init_rc, "%s", P->init_msg);
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  P->addr = malloc(2 * alen + strlen(host) + 2);
  if (!P->addr) {
    U.ucp_worker_release_address(P->worker, a);
    P->init_rc = LADE_ENOMEM;
    snprintf(P->init_msg, sizeof P->init_msg, "transport ucx: out of memory");
    return lade__fail(P->init_rc, "%s", P->init_msg);
  }
  for (size_t i = 0; i < alen; i++) sprintf(P->addr + 2 * i, "%02x", ((const uint8_t *)a)[i]);
  sprintf(P->addr + 2 * alen, "@%s", host);
  U.ucp_worker_release_address(P->worker, a);
  return 0;
}

static int hexval(int ch) {
  return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* Connects to every peer from their address texts (rank r's is addr[r]). */
static int peers_set_locked(uint32_t rank, uint32_t world, const char *const *addr) {
  if (P->peers_set) {
    if (rank == P->rank && world == P->world) return 0;
    return lade__fail(LADE_EINVAL, "transport ucx: this process's peers were set up as rank %u of %u; a loader now "
                      "says rank %u of %u (settings 'rank' and 'world_size')", P->rank, P->world, rank, world);
  }
  if (world == 0 || rank >= world)
    return lade__fail(LADE_EINVAL, "transport ucx: rank %u of %u is no rank", rank, world);
  if (strcmp(addr[rank], P->addr))
    return lade__fail(LADE_EINVAL, "transport ucx: the address given for rank %u is not this process's (the ranks' "
                      "addresses must be in rank order)", rank);
  P->ep = calloc(world, sizeof *P->ep);
  P->ep_status = calloc(world, sizeof *P->ep_status);
  P->node_lead = calloc(world, sizeof *P->node_lead);
  if (!P->ep || !P->ep_status || !P->node_lead) return lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
  int rc = 0;
  uint8_t *bin = NULL;
  for (uint32_t r = 0; r < world && !rc; r++) {
    const char *at = strrchr(addr[r], '@');
    size_t hl = at ? (size_t)(at - addr[r]) : 0;
    P->node_lead[r] = r;
    for (uint32_t k = 0; k < r; k++) {
      const char *ak = strrchr(addr[k], '@');
      if (at && ak && !strcmp(at, ak)) {
        P->node_lead[r] = P->node_lead[k];
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
    P->world = world; /* ep_failed may run from here on */
    ucs_status_t s = U.ucp_ep_create(P->worker, &ep, &P->ep[r]);
    if (s != UCS_OK)
      rc = lade__fail(LADE_EIO, "transport ucx: rank %u: connecting to rank %u failed: %s", rank, r,
                      U.ucs_status_string(s));
  }
  free(bin);
  if (rc) {
    for (uint32_t r = 0; r < world; r++)
      if (P->ep[r]) {
        ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
        void *req = U.ucp_ep_close_nbx(P->ep[r], &prm);
        if (UCS_PTR_IS_PTR(req)) U.ucp_request_free(req);
      }
    free(P->ep);
    free(P->ep_status);
    free(P->node_lead);
    P->ep = NULL, P->ep_status = NULL, P->node_lead = NULL, P->world = 0;
    return rc;
  }
  P->rank = rank;
  P->world = world;
  P->peers_set = true;
  return 0;
}

int lade_ucx_address(const char **out) {
  *out = NULL;
  pthread_mutex_lock(&W.mu);
  int rc = lade__ucx_init_locked();
  if (!rc) *out = P->addr;
  pthread_mutex_unlock(&W.mu);
  return rc;
}

int lade_ucx_set_peers(uint32_t rank, uint32_t world, const char *const *addresses) {
  lade__clear_error();
  if (!addresses) return lade__fail(LADE_EINVAL, "lade_ucx_set_peers: addresses is NULL");
  for (uint32_t r = 0; r < world; r++)
    if (!addresses[r]) return lade__fail(LADE_EINVAL, "lade_ucx_set_peers: the address of rank %u is NULL", r);
  pthread_mutex_lock(&W.mu);
  int rc = lade__ucx_init_locked();
  if (!rc) rc = peers_set_locked(rank, world, addresses);
  pthread_mutex_unlock(&W.mu);
  return rc;
}

uint32_t lade__ucx_peers_world(void) {
  pthread_mutex_lock(&W.mu);
  uint32_t w = P->peers_set ? P->world : 0;
  pthread_mutex_unlock(&W.mu);
  return w;
}

int lade__ucx_bootstrap(const lade__transport_params_t *p) {
  pthread_mutex_lock(&W.mu);
  int rc = lade__ucx_init_locked();
  bool have = P->peers_set;
  const char *mine = P->addr;
  pthread_mutex_unlock(&W.mu);
  if (rc || have || p->world <= 1) return rc; /* one learner: nothing to exchange, no peers set up */
  char **addr = calloc(p->world, sizeof *addr);
  if (!addr) return lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
  if (p->rendezvous_dir && p->rendezvous_dir[0]) {
    rc = lade__ucx_rendezvous(p->rendezvous_dir, p->job_id, p->rank, p->world, p->timeout_ms, mine, addr);
  } else {
    rc = lade__fail(LADE_EINVAL, "transport ucx: rank %u of %u does not know its peers' addresses: initialise "
                    "torch.distributed before creating the loader (the Python module exchanges them through it), "
                    "call lade_ucx_set_peers(), or set rendezvous_dir (a folder every rank can reach) and job_id",
                    p->rank, p->world);
  }
  if (!rc) {
    pthread_mutex_lock(&W.mu);
    rc = peers_set_locked(p->rank, p->world, (const char *const *)addr);
    pthread_mutex_unlock(&W.mu);
  }
  for (uint32_t r = 0; r < p->world; r++) free(addr[r]);
  free(addr);
  return rc;
}

/* At exit: the thread stops; the endpoints, the worker and the context are
 * released when no loader was left open (an open one's requests may still
 * be in flight: then the process's exit releases them). */
static void at_exit(void) {
  bool abandoned = lade__comm_stop(&W, NULL);
  if (abandoned || !P->worker) return;
  for (uint32_t r = 0; P->ep && r < P->world; r++) {
    if (!P->ep[r]) continue;
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *req = U.ucp_ep_close_nbx(P->ep[r], &prm);
    for (int k = 0; UCS_PTR_IS_PTR(req) && k < 10000 && U.ucp_request_check_status(req) == UCS_INPROGRESS; k++)
      U.ucp_worker_progress(P->worker);
    if (UCS_PTR_IS_PTR(req)) U.ucp_request_free(req);
  }
  U.ucp_worker_destroy(P->worker);
  U.ucp_cleanup(P->ctx);
  P->worker = NULL;
  P->ctx = NULL;
}
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
