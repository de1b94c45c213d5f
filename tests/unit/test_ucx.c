/* test_ucx.c - the UCX transport's bootstrap in one process
 * (docs/transport.md, UCX): the rendezvous folder's bounded wait and its
 * errors, naming the rank and the setting; lade_ucx_set_peers()'s checks of
 * the addresses; once per process. test_allgather forks 4 processes (before
 * this one starts UCX) that run the transport's allgather over a rendezvous
 * folder: MBs per rank, numbered one after another, one rank late to the
 * second so the others' parts of it arrive before it starts. The loaders'
 * traffic between ranks is tested by tests/ucx. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "lade/lade.h"
#include "transport/transport.h"

#ifdef LADE_HAVE_UCX
static int open_rdv(const char *dir, const char *job, uint32_t rank, uint32_t world) {
  lade__transport_params_t p = {.rank = rank, .world = world, .timeout_ms = 300, .window = 2,
                                .rendezvous_dir = dir, .job_id = job};
  lade__transport_t *t = NULL;
  uint32_t r = 0, w = 0;
  int rc = lade__transport_ucx.open(&t, &p, &r, &w);
  if (!rc) lade__transport_ucx.close(t);
  return rc;
}

/* One rank of test_allgather: three allgathers of different sizes, every
 * rank's bytes checked; 0 when all came right. */
static int gather_rank(const char *dir, uint32_t rank, uint32_t world) {
  lade__transport_params_t p = {.rank = rank, .world = world, .timeout_ms = 20000, .window = 2,
                                .rendezvous_dir = dir, .job_id = "gather"};
  lade__transport_t *t = NULL;
  uint32_t r = 0, w = 0;
  if (lade__transport_ucx.open(&t, &p, &r, &w) || r != rank || w != world) {
    fprintf(stderr, "rank %u: open: %s\n", rank, lade_last_error());
    return 1;
  }
  static const size_t lens[] = {4u << 20, 1, (3u << 20) + 5};
  int bad = 0;
  for (int k = 0; k < 3 && !bad; k++) {
    size_t len = lens[k];
    uint8_t *mine = malloc(len), *all = malloc(len * world);
    if (!mine || !all) return 1;
    for (size_t i = 0; i < len; i++) mine[i] = (uint8_t)(rank * 131 + i * 7 + (size_t)k);
    memset(all, 0xee, len * world);
    if (rank == 0 && k == 1) usleep(500000); /* the others' parts of allgather 2 come before it starts here */
    if (lade__transport_ucx.allgather(t, mine, len, all)) {
      fprintf(stderr, "rank %u: allgather %d: %s\n", rank, k + 1, lade_last_error());
      bad = 1;
    }
    for (uint32_t q = 0; q < world && !bad; q++)
      for (size_t i = 0; i < len && !bad; i++)
        if (all[q * len + i] != (uint8_t)(q * 131 + i * 7 + (size_t)k)) {
          fprintf(stderr, "rank %u: allgather %d: byte %zu of rank %u differs\n", rank, k + 1, i, q);
          bad = 1;
        }
    free(mine);
    free(all);
  }
  lade__transport_ucx.close(t);
  return bad;
}

static void test_allgather(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/ucx-gather-%d", LADE_TEST_TMP, (int)getpid());
  pid_t pids[4];
  for (uint32_t r = 0; r < 4; r++) {
    pids[r] = fork();
    if (pids[r] == 0) exit(gather_rank(dir, r, 4));
  }
  for (uint32_t r = 0; r < 4; r++) {
    int st = -1;
    CHECK(pids[r] > 0 && waitpid(pids[r], &st, 0) == pids[r]);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
}

static void test_bootstrap(void) {
  const char *a = NULL;
  CHECK_EQ_INT(lade_ucx_address(&a), 0);
  CHECK(a && strchr(a, '@') && strchr(a, '@') - a > 16);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/ucx-rdv-%d/a", LADE_TEST_TMP, (int)getpid()); /* made with its parents */
  /* no job id: the setting is named */
  unsetenv("TORCHELASTIC_RUN_ID"), unsetenv("SLURM_JOB_ID"), unsetenv("PMIX_NAMESPACE"), unsetenv("MASTER_ADDR");
  CHECK(open_rdv(dir, "", 0, 2) == LADE_EINVAL && strstr(lade_last_error(), "set job_id"));
  /* rank 1 never writes its address: bounded, naming it */
  CHECK(open_rdv(dir, "j1", 0, 2) == LADE_ETIMEOUT &&
        strstr(lade_last_error(), "rank 1 did not write its address") && strstr(lade_last_error(), "lade-j1.<rank>"));
  char path[600];
  snprintf(path, sizeof path, "%s/lade-j1.0", dir);
  struct stat st;
  CHECK(stat(path, &st) == 0); /* this rank's own file, written before the wait */
  /* rank 1's file says another world size: named */
  snprintf(path, sizeof path, "%s/lade-j2.1", dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fprintf(f, "lade-ucx 1 3 %s\n", a);
    fclose(f);
  }
  CHECK(open_rdv(dir, "j2", 0, 2) == LADE_EINVAL && strstr(lade_last_error(), "rank 1 runs a world of 3 ranks"));
  /* lade_ucx_set_peers checks each address */
  const char *mine_not_first[] = {"00ff@elsewhere", a};
  CHECK(lade_ucx_set_peers(0, 2, mine_not_first) == LADE_EINVAL &&
        strstr(lade_last_error(), "the address given for rank 0 is not this process's"));
  const char *malformed[] = {a, "zz@host"};
  CHECK(lade_ucx_set_peers(0, 2, malformed) == LADE_EINVAL &&
        strstr(lade_last_error(), "address of rank 1 is malformed"));
  const char *no_host[] = {a, "00ff00"};
  CHECK(lade_ucx_set_peers(0, 2, no_host) == LADE_EINVAL &&
        strstr(lade_last_error(), "address of rank 1 is malformed"));
  const char *missing[] = {a, NULL};
  CHECK(lade_ucx_set_peers(0, 2, missing) == LADE_EINVAL && strstr(lade_last_error(), "rank 1 is NULL"));
  CHECK_EQ_INT(lade__ucx_peers_world(), 0); /* nothing set up by the failures */
  /* a world of one: set once; the same again is nothing; another is refused */
  const char *alone[] = {a};
  CHECK_EQ_INT(lade_ucx_set_peers(0, 1, alone), 0);
  CHECK_EQ_INT(lade_ucx_set_peers(0, 1, alone), 0);
  CHECK_EQ_INT(lade__ucx_peers_world(), 1);
  const char *two[] = {a, a};
  CHECK(lade_ucx_set_peers(0, 2, two) == LADE_EINVAL && strstr(lade_last_error(), "set up as rank 0 of 1"));
}
#else
static void test_allgather(void) {}

static void test_bootstrap(void) {
  const char *a = "x";
  CHECK_EQ_INT(lade_ucx_address(&a), LADE_EUNSUPPORTED);
  CHECK(a == NULL && strstr(lade_last_error(), "no UCX"));
  const char *one[] = {"x"};
  CHECK_EQ_INT(lade_ucx_set_peers(0, 1, one), LADE_EUNSUPPORTED);
}
#endif

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_allgather); /* first: its processes are forked before this one starts UCX */
  RUN(test_bootstrap);
  return lade_test_finish();
}
