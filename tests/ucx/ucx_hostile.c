/* ucx_hostile.c - one rank of tests/ucx/test_hostile_transport.py's
 * closed-loader case, on the UCX transport's own interface (transport.h),
 * two processes, the addresses through a rendezvous folder:
 *   ucx_hostile DIR RANK closed
 * Channel 1: both open and close (the peers are set up). Channel 2: rank 0
 * closes it (short timeout) while rank 1 keeps it open; then rank 1 sends
 * rank 0 four 1 MB samples on it, which no one will take, and closes: its
 * close must return well within its 15 s timeout (it waited all of it when
 * those messages stayed in UCX's unexpected queue on rank 0, the large
 * sends never completing). Channel 3: a sample from rank 1 reaches rank 0
 * with its bytes right. Exits 0 when all held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lade/lade.h"
#include "transport/transport.h"

#define BIG (1u << 20)

static uint8_t byte_of(uint64_t idx, size_t k) { return (uint8_t)(idx * 7 + k * 13 + 1); }

static int serve(void *ctx, uint64_t idx, uint64_t q, int nonblock, lade__buf_t *out) {
  (void)ctx, (void)q, (void)nonblock;
  if (lade__buf_reserve(out, BIG)) return LADE_ENOMEM;
  for (size_t k = 0; k < BIG; k++) out->data[k] = byte_of(idx, k);
  out->len = BIG;
  return 0;
}

static char g_dir[2048];
static uint32_t g_rank;

static lade__transport_t *open_chan(uint32_t timeout_ms) {
  lade__transport_params_t p = {.rank = g_rank, .world = 2, .timeout_ms = timeout_ms, .window = 2, .serve = serve,
                                .rendezvous_dir = g_dir, .job_id = "closed"};
  lade__transport_t *t = NULL;
  uint32_t r = 0, w = 0;
  if (lade__transport_ucx.open(&t, &p, &r, &w)) {
    fprintf(stderr, "rank %u: open: %s\n", g_rank, lade_last_error());
    exit(1);
  }
  uint32_t all[2] = {9, 9};
  if (lade__transport_ucx.allgather(t, &g_rank, sizeof g_rank, all) || all[0] != 0 || all[1] != 1) {
    fprintf(stderr, "rank %u: allgather: %s (%u %u)\n", g_rank, lade_last_error(), all[0], all[1]);
    exit(1);
  }
  return t;
}

static void marker(const char *name, bool wait) {
  char path[2200];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  if (!wait) {
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    return;
  }
  for (int i = 0; i < 3000 && access(path, F_OK) != 0; i++) usleep(20000);
}

int main(int argc, char **argv) {
  if (argc != 4 || strcmp(argv[3], "closed")) {
    fprintf(stderr, "usage: ucx_hostile DIR RANK closed\n");
    return 2;
  }
  snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
  g_rank = (uint32_t)atoi(argv[2]);
  lade__transport_ucx.close(open_chan(20000));
  lade__transport_t *t = open_chan(g_rank == 0 ? 1500 : 15000);
  if (g_rank == 0) {
    lade__transport_ucx.close(t); /* rank 1 keeps it open: waits 1.5 s for its DONE */
    marker("closed.0", false);
  } else {
    marker("closed.0", true);
    uint32_t dst[4] = {0, 0, 0, 0};
    uint64_t idx[4] = {0, 1, 2, 3};
    if (lade__transport_send(t, 0, dst, idx, 4) || lade__transport_wait_served(t, 0)) {
      fprintf(stderr, "rank 1: send: %s\n", lade_last_error());
      return 1;
    }
    double t0 = lade__now();
    lade__transport_ucx.close(t);
    double took = lade__now() - t0;
    printf("rank 1: close took %.2f s (timeout 15 s)\n", took);
    if (took > 5) {
      fprintf(stderr, "rank 1: FAIL: closing waited %.2f s for sends to a loader rank 0 had closed\n", took);
      return 1;
    }
  }
  t = open_chan(20000);
  int bad = 0;
  if (g_rank == 1) {
    uint32_t dst = 0;
    uint64_t idx = 7;
    bad = lade__transport_send(t, 0, &dst, &idx, 1) || lade__transport_wait_served(t, 0);
  } else {
    lade__buf_t b = {0};
    bad = lade__transport_recv(t, 0, 7, 1, &b) || b.len != BIG;
    for (size_t k = 0; !bad && k < BIG; k++) bad = b.data[k] != byte_of(7, k);
    lade__buf_free(&b);
  }
  if (bad) fprintf(stderr, "rank %u: channel 3: %s\n", g_rank, lade_last_error());
  uint32_t all[2];
  if (!bad && lade__transport_ucx.allgather(t, &g_rank, sizeof g_rank, all)) bad = 1;
  lade__transport_ucx.close(t);
  printf("rank %u: %s\n", g_rank, bad ? "FAIL" : "ok");
  return bad;
}
