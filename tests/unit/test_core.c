/* test_core.c - errors, config validation, RNG determinism. */
#include <string.h>

#include "core/coalesce.h"
#include "core/config.h"
#include "core/core.h"
#include "harness.h"
#include "lade/lade.h"

static void test_error_codes(void) {
  CHECK(strcmp(lade_strerror(LADE_EIO), "input/output error") == 0);
  CHECK(strcmp(lade_error_name(LADE_ESHAPE), "LADE_ESHAPE") == 0);
  CHECK(strcmp(lade_strerror(-999), "unknown error") == 0);
  CHECK_EQ_INT(lade__fail(LADE_ENOENT, "file %s: missing", "a.jpg"), LADE_ENOENT);
  CHECK(strcmp(lade_last_error(), "file a.jpg: missing") == 0);
  lade__fail_prefix(LADE_ENOENT, "sample %d: ", 7);
  CHECK(strcmp(lade_last_error(), "sample 7: file a.jpg: missing") == 0);
}

static void test_config(void) {
  lade_config_t *c = NULL;
  CHECK_OK(lade_config_create(&c));
  char buf[64];
  CHECK_OK(lade_config_get(c, "batch_size", buf, sizeof buf));
  CHECK(strcmp(buf, "32") == 0);
  CHECK_OK(lade_config_set(c, "batch_size", "256"));
  CHECK_EQ_INT(c->batch_size, 256);
  CHECK_EQ_INT(lade_config_set(c, "batch_size", "0"), LADE_ERANGE);
  CHECK(strstr(lade_last_error(), "1..1048576") != NULL);
  CHECK_EQ_INT(lade_config_set(c, "batch_size", "12x"), LADE_EINVAL);
  CHECK_EQ_INT(lade_config_set(c, "batch_size", "-3"), LADE_EINVAL);
  CHECK_EQ_INT(lade_config_set(c, "bach_size", "3"), LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "valid keys") && strstr(lade_last_error(), "batch_size"));
  CHECK_EQ_INT(lade_config_parse(c, "transform=jpeg"), LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "imagenet-train") != NULL);
  CHECK_OK(lade_config_parse(c, "transform=imagenet-eval"));
  CHECK_EQ_INT(c->transform, LADE__XF_IMAGENET_EVAL);
  CHECK_OK(lade_config_get(c, "transform", buf, sizeof buf));
  CHECK(strcmp(buf, "imagenet-eval") == 0);
  CHECK_OK(lade_config_parse(c, "image_dtype=uint8"));
  CHECK_EQ_INT(c->image_dtype, LADE_DTYPE_UINT8);
  CHECK_OK(lade_config_get(c, "image_dtype", buf, sizeof buf));
  CHECK(strcmp(buf, "uint8") == 0);
  CHECK_OK(lade_config_parse(c, "drop_last=true"));
  CHECK(c->drop_last);
  CHECK_EQ_INT(lade_config_parse(c, "drop_last=maybe"), LADE_EINVAL);
  CHECK_EQ_INT(lade_config_parse(c, "hflip=1.5"), LADE_ERANGE);
  CHECK_EQ_INT(lade_config_parse(c, "novalue"), LADE_EINVAL);
  size_t n = 0;
  while (lade_config_key(n, NULL, NULL)) n++;
  CHECK(n >= 20);
  lade_config_destroy(c);
  lade_config_destroy(NULL);
}

/* Ranges print the real maximum, secrets never show,
 * settings a source would ignore are refused, and control bytes in error
 * text are escaped. */
static void test_settings_hardening(void) {
  lade_config_t *c = NULL;
  CHECK_OK(lade_config_create(&c));
  /* the top of a uint64 range is 2^64 - 1, accepted, and printed as such */
  CHECK_OK(lade_config_set(c, "cache_disk_bytes", "18446744073709551615"));
  CHECK(lade_config_set(c, "cache_disk_bytes", "-1") == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "0..18446744073709551615)") != NULL);
  CHECK(strstr(lade_last_error(), "18446744073709551616") == NULL);
  CHECK(lade_config_set(c, "epochs", "0") == LADE_ERANGE);
  CHECK(strstr(lade_last_error(), "1..1000000000") != NULL);
  /* secrets: marked in the table, hidden by get, never echoed by parse errors */
  CHECK(lade_config_key_is_secret("s3_secret_access_key") && lade_config_key_is_secret("s3_session_token"));
  CHECK(!lade_config_key_is_secret("source") && !lade_config_key_is_secret("nope") && !lade_config_key_is_secret(NULL));
  CHECK_OK(lade_config_parse(c, "s3_secret_access_key=TOPSECRET1"));
  char buf[64];
  CHECK_OK(lade_config_get(c, "s3_secret_access_key", buf, sizeof buf));
  CHECK(strcmp(buf, "(set, hidden)") == 0);
  CHECK(lade_config_parse(c, "s3_secret_access_keyTOPSECRET2") == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "TOPSECRET2") == NULL && strstr(lade_last_error(), "s3_secret_access_key") != NULL);
  CHECK(lade_config_parse(c, "s3_secret_access_key_with_a_typo_in_a_very_long_key_name_xxxxxxxxxx=TOPSECRET3") ==
        LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "TOPSECRET3") == NULL);
  /* wiped: the bytes of a secret are zero after wipe (destroy calls it) */
  struct lade_config *raw = (struct lade_config *)c;
  CHECK(strcmp(raw->s3_secret_access_key, "TOPSECRET1") == 0);
  lade__config_wipe_secrets(raw);
  int zero = 1;
  for (size_t i = 0; i < sizeof raw->s3_secret_access_key; i++) zero &= raw->s3_secret_access_key[i] == 0;
  CHECK(zero);
  lade_config_destroy(c);

  /* label_file and npy_* on a dir source: refused at create, not ignored */
  const char *dir = lade_test_tmpdir("ignored");
  lade_test_sh("mkdir -p %s/a && echo x > %s/a/f.bin", dir, dir);
  const char *bad[][2] = {{"label_file", "/tmp/labels.txt"}, {"npy_dtype", "float32"}, {"npy_shape", "3,4"}};
  for (int i = 0; i < 3; i++) {
    CHECK_OK(lade_config_create(&c));
    lade_config_set(c, "source", dir);
    lade_config_set(c, "transform", "raw");
    lade_config_set(c, bad[i][0], bad[i][1]);
    lade_loader_t *L = NULL;
    CHECK(lade_loader_create(&L, c) == LADE_EINVAL);
    CHECK(strstr(lade_last_error(), bad[i][0]) != NULL);
    lade_loader_destroy(L);
    lade_config_destroy(c);
  }

  /* control bytes are escaped in every error text */
  lade__fail(LADE_EIO, "file %s", "a\nb\x1b[31m\x7f");
  CHECK(strcmp(lade_last_error(), "file a\\x0ab\\x1b[31m\\x7f") == 0);
  lade__set_error_text(lade_last_error()); /* escaping twice changes nothing */
  CHECK(strcmp(lade_last_error(), "file a\\x0ab\\x1b[31m\\x7f") == 0);
}

static void test_rng(void) {
  lade__rng_t a, b, c;
  lade__rng_init(&a, 42, 7, LADE__RNG_AUGMENT);
  lade__rng_init(&b, 42, 7, LADE__RNG_AUGMENT);
  lade__rng_init(&c, 42, 8, LADE__RNG_AUGMENT);
  int same_c = 0;
  for (int i = 0; i < 1000; i++) {
    uint64_t x = lade__rng_u64(&a), y = lade__rng_u64(&b), z = lade__rng_u64(&c);
    CHECK(x == y);
    same_c += x == z;
  }
  CHECK_EQ_INT(same_c, 0);
  /* Philox4x32-10 known-answer test (Random123 kat_vectors: key 0, ctr 0). */
  lade__rng_t k;
  memset(&k, 0, sizeof k);
  k.pos = 4;
  CHECK_EQ_INT(lade__rng_u32(&k), 0x6627e8d5u);
  CHECK_EQ_INT(lade__rng_u32(&k), 0xe169c58du);
  CHECK_EQ_INT(lade__rng_u32(&k), 0xbc57ac4cu);
  CHECK_EQ_INT(lade__rng_u32(&k), 0x9b00dbd8u);
  /* bounded draws are in range and roughly uniform */
  lade__rng_t r;
  lade__rng_init(&r, 1, 2, 3);
  int hist[10] = {0};
  for (int i = 0; i < 100000; i++) {
    uint64_t v = lade__rng_below(&r, 10);
    CHECK(v < 10);
    hist[v]++;
  }
  for (int i = 0; i < 10; i++) CHECK(hist[i] > 9500 && hist[i] < 10500);
  double d = lade__rng_double(&r);
  CHECK(d >= 0.0 && d < 1.0);
}

static void test_coalesce(void) {
  /* two objects; gaps of 10 and 100 bytes; a repeated sample; one span
   * longer than the limit */
  lade__span_t v[] = {{0, 0, 50},   {0, 60, 40},  {0, 200, 10}, {0, 200, 10},
                      {1, 0, 10},   {1, 5, 10},   {1, 1000, 5000}, {1, 6000, 10}};
  lade__run_t r[8];
  size_t n = lade__coalesce(v, 8, 10, 4096, r);
  CHECK_EQ_INT(n, 5);
  CHECK(r[0].first == 0 && r[0].count == 2 && r[0].start == 0 && r[0].end == 100); /* gap 10: merged */
  CHECK(r[1].first == 2 && r[1].count == 2 && r[1].start == 200 && r[1].end == 210); /* gap 100: apart; twice: one */
  CHECK(r[2].first == 4 && r[2].count == 2 && r[2].start == 0 && r[2].end == 15); /* another object; overlap */
  CHECK(r[3].first == 6 && r[3].count == 1 && r[3].end - r[3].start == 5000); /* longer than max_len: alone */
  CHECK(r[4].first == 7 && r[4].count == 1);
  /* gap 0: only touching spans merge; max_len bounds a run */
  lade__span_t w[] = {{0, 0, 100}, {0, 100, 100}, {0, 200, 100}, {0, 301, 100}};
  CHECK_EQ_INT(lade__coalesce(w, 4, 0, 1 << 20, r), 2);
  CHECK(r[0].count == 3 && r[0].end == 300 && r[1].count == 1);
  CHECK_EQ_INT(lade__coalesce(w, 4, 0, 200, r), 3);
  CHECK(r[0].count == 2 && r[1].count == 1 && r[2].count == 1);
  CHECK_EQ_INT(lade__coalesce(w, 0, 0, 200, r), 0);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_error_codes);
  RUN(test_config);
  RUN(test_rng);
  RUN(test_settings_hardening);
  RUN(test_coalesce);
  return lade_test_finish();
}
