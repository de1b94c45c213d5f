/*
 * http_retry.c - the rules that decide what a finished transfer means
 * (http_impl.h): which curl codes and HTTP statuses are tried again, which
 * fail at once, which replies are of the wrong size, which are not the
 * bytes asked for (a Content-Range other than the Range, another version
 * than the pinned one: docs/http.md, "Integrity"; never retried, as the
 * server would answer the same), what is a request to
 * slow down; and the full-jitter exponential backoff between tries ("Exponential
 * Backoff And Jitter", the AWS Architecture Blog). No state of its own:
 * the counters it bumps are h's, under h->mu. Retry-After is not read:
 * the backoff alone spaces the tries.
 */
#ifdef LADE_HAVE_CURL

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "http/http_impl.h"

int lade__http_curl_retryable(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
      return 1;
    default:
      return 0;
  }
}

/* An ETag or Last-Modified compared as RFC 9110's weak comparison does
 * (a "W/" prefix ignored): the same bytes may be served with either. */
static int same_version(const char *a, const char *b) {
  if (!strncmp(a, "etag ", 5) && !strncmp(b, "etag ", 5)) {
    a += 5, b += 5;
    if (!strncmp(a, "W/", 2)) a += 2;
    if (!strncmp(b, "W/", 2)) b += 2;
  }
  return !strcmp(a, b);
}

#define LADE__HTTP_REINDEX "reopen the source to index it again"

int lade__http_check_reply(const lade__http_req_t *r, long status, char *what, size_t size) {
  if (r->get.len && status == 206) {
    unsigned long long a = r->get.off, b = r->get.off + r->get.len - 1;
    if (r->crange == 0) {
      snprintf(what, size, "HTTP 206 without a Content-Range to a Range request for bytes %llu-%llu", a, b);
      return 1;
    }
    if (r->crange < 0) {
      snprintf(what, size, "HTTP 206 with an unreadable Content-Range '%s' to a Range request for bytes %llu-%llu",
               r->cr_text, a, b);
      return 1;
    }
    /* a probe's reply ends at the object's end when that comes first */
    int short_probe = r->probe && r->cr_total != UINT64_MAX && r->cr_total && r->cr_last == r->cr_total - 1 &&
                      r->cr_last < b;
    if (r->cr_first != a || (r->cr_last != b && !short_probe)) {
      snprintf(what, size, "HTTP 206 for other bytes than asked: Content-Range '%s', the request was for bytes "
               "%llu-%llu (the server is not serving the range asked; not retried)", r->cr_text, a, b);
      return 1;
    }
    if (r->pin_size != UINT64_MAX && r->cr_total != UINT64_MAX && r->cr_total != r->pin_size) {
      snprintf(what, size, "now %llu bytes (Content-Range '%s' to a request for bytes %llu-%llu), %llu bytes when it "
               "was indexed: changed since it was indexed; " LADE__HTTP_REINDEX, (unsigned long long)r->cr_total,
               r->cr_text, a, b, (unsigned long long)r->pin_size);
      return 2;
    }
  }
  /* a reply that names its version names the pinned one (of the same kind:
   * a server may send an ETag to a GET and not to a HEAD) */
  if (r->pin && r->pin[0] && r->validator[0] && !strncmp(r->pin, r->validator, 5) &&
      !same_version(r->pin, r->validator)) {
    snprintf(what, size, "changed since it was indexed (%.120s now, %.120s then); " LADE__HTTP_REINDEX,
             r->validator, r->pin);
    return 2;
  }
  return 0;
}

void lade__http_judge(const lade__http_t *h, CURLcode cc, long status, int64_t cl, const lade__http_req_t *r,
                      lade__http_verdict_t *v) {
  memset(v, 0, sizeof *v);
  v->status = status;
  int ok_status = status >= 200 && status < 300;
  uint64_t expect = r->get.expect;
  if (r->get.len && !r->head && status == 200) {
    /* a whole object where a byte range was asked for: it would be read
     * whole for each sample */
    v->kind = LADE__HTTP_FINAL;
    v->code = LADE_EREMOTE;
    snprintf(v->what, sizeof v->what, "HTTP 200 to a Range request (bytes %llu-%llu): the server does not serve "
             "byte ranges", (unsigned long long)r->get.off, (unsigned long long)(r->get.off + r->get.len - 1));
    return;
  }
  if (r->refused) { /* the headers showed another range or version than asked: retrying gets the same */
    v->kind = LADE__HTTP_FINAL;
    v->code = LADE_EREMOTE;
    v->changed = r->refused == 2;
    snprintf(v->what, sizeof v->what, "%s", r->refused_what);
    return;
  }
  if (status == 412 && r->pin && r->pin[0] && !r->head) {
    v->kind = LADE__HTTP_FINAL;
    v->code = LADE_EREMOTE;
    v->changed = 1;
    snprintf(v->what, sizeof v->what, "changed since it was indexed (HTTP 412 Precondition Failed to %s %.200s); "
             LADE__HTTP_REINDEX, strncmp(r->pin, "etag ", 5) ? "If-Unmodified-Since:" : "If-Match:",
             r->pin + (strncmp(r->pin, "etag ", 5) ? 9 : 5));
    return;
  }
  if (status == 416 && r->get.len && r->pin_size != UINT64_MAX && !r->head) {
    char cr[128] = "";
    if (r->crange) snprintf(cr, sizeof cr, " (Content-Range '%.96s')", r->cr_text);
    v->kind = LADE__HTTP_FINAL;
    v->code = LADE_EREMOTE;
    v->changed = 1;
    snprintf(v->what, sizeof v->what, "HTTP 416 to a request for bytes %llu-%llu%s, %llu bytes when it was indexed: "
             "changed since it was indexed; " LADE__HTTP_REINDEX, (unsigned long long)r->get.off,
             (unsigned long long)(r->get.off + r->get.len - 1), cr, (unsigned long long)r->pin_size);
    return;
  }
  int too_big = r->over;
  if (too_big && ok_status) {
    /* stopped before the body was buffered: it would pass the cap */
    v->kind = expect == UINT64_MAX ? LADE__HTTP_FINAL : LADE__HTTP_SIZE;
    v->code = LADE_ERANGE;
    if (r->clen >= 0 && (uint64_t)r->clen > r->cap)
      snprintf(v->what, sizeof v->what, "the reply is %lld bytes (Content-Length), ", (long long)r->clen);
    else
      snprintf(v->what, sizeof v->what, "the reply passed %llu bytes%s, ", (unsigned long long)r->cap,
               r->clen >= 0 ? "" : " (no Content-Length)");
    size_t n = strlen(v->what);
    if (expect != UINT64_MAX)
      snprintf(v->what + n, sizeof v->what - n, "the listing says %llu", (unsigned long long)expect);
    else
      snprintf(v->what + n, sizeof v->what - n, "the most lade reads of it");
    return;
  }
  if (cc != CURLE_OK && !(too_big && status)) {
    v->kind = lade__http_curl_retryable(cc) ? LADE__HTTP_RETRY : LADE__HTTP_FINAL;
    v->code = cc == CURLE_OPERATION_TIMEDOUT ? LADE_ETIMEOUT : cc == CURLE_WRITE_ERROR ? LADE_ENOMEM : LADE_EREMOTE;
    v->truncated = cc == CURLE_PARTIAL_FILE;
    if (cc == CURLE_WRITE_ERROR)
      snprintf(v->what, sizeof v->what, "out of memory for the body after %zu bytes", r->body.len);
    else if (cc == CURLE_PEER_FAILED_VERIFICATION && strstr(r->errbuf, "host name"))
      snprintf(v->what, sizeof v->what, "the server's TLS certificate is not for this host (%s): use the host name "
               "it was issued for in the URL", r->errbuf);
    else if (cc == CURLE_PEER_FAILED_VERIFICATION)
      snprintf(v->what, sizeof v->what, "the server's TLS certificate is not trusted (%s): set tls_ca_file (or "
               "$SSL_CERT_FILE) to a PEM file of the CA that signed it; trusted now: %s",
               r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc), h->ca_file ? h->ca_file : "the system's CAs");
    else if (cc == CURLE_SSL_CACERT_BADFILE)
      snprintf(v->what, sizeof v->what, "cannot read the CA bundle %s (%s); tls_ca_file must be a PEM file",
               h->ca_file ? h->ca_file : "(the system's default)", r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
    else
      snprintf(v->what, sizeof v->what, "%s", r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
    return;
  }
  uint64_t got = r->body.len;
  if (ok_status) {
    if (r->head) {
      v->kind = cl >= 0 ? LADE__HTTP_OK : LADE__HTTP_RETRY;
      v->code = LADE_EREMOTE;
      v->size = cl >= 0 ? (uint64_t)cl : 0;
      if (cl < 0) snprintf(v->what, sizeof v->what, "HEAD without a Content-Length");
    } else if (cl >= 0 && (uint64_t)cl != got) {
      v->kind = LADE__HTTP_RETRY;
      v->code = LADE_EREMOTE;
      v->truncated = 1;
      snprintf(v->what, sizeof v->what, "truncated body: %llu of %lld bytes (Content-Length)",
               (unsigned long long)got, (long long)cl);
    } else if (expect != UINT64_MAX && got != expect) {
      v->kind = LADE__HTTP_SIZE;
      v->code = LADE_EREMOTE;
      v->truncated = 1;
      snprintf(v->what, sizeof v->what, "wrong size: %llu bytes, the listing says %llu", (unsigned long long)got,
               (unsigned long long)expect);
    } else {
      v->kind = LADE__HTTP_OK;
    }
    return;
  }
  char tail[LADE__HTTP_WHAT - 64] = "";
  int retry = 0, throttle = 0;
  if (h->o.error_body && r->body.data)
    h->o.error_body(h->o.ctx, (const char *)r->body.data, r->body.len, tail, sizeof tail, &retry, &throttle);
  v->throttled = status == 503 || status == 429 || throttle;
  if (status >= 500 || status == 429 || retry) {
    v->kind = LADE__HTTP_RETRY;
    v->code = LADE_EREMOTE;
  } else {
    v->kind = LADE__HTTP_FINAL;
    v->code = status == 404 ? LADE_ENOENT : LADE_EREMOTE;
  }
  snprintf(v->what, sizeof v->what, "HTTP %ld%s%s", status, r->head ? " (HEAD)" : "", tail);
}

void lade__http_judge_easy(const lade__http_t *h, CURL *e, CURLcode cc, const lade__http_req_t *r,
                           lade__http_verdict_t *v) {
  long status = 0;
  curl_off_t cl = -1;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_getinfo(e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
  lade__http_judge(h, cc, status, (int64_t)cl, r, v);
}

double lade__http_backoff_s(uint32_t base_ms, uint32_t retry, lade__rng_t *rng) {
  double cap = (double)base_ms;
  for (uint32_t i = 1; i < retry && cap < LADE__HTTP_BACKOFF_CAP_MS; i++) cap *= 2;
  if (cap > LADE__HTTP_BACKOFF_CAP_MS) cap = LADE__HTTP_BACKOFF_CAP_MS;
  return lade__rng_double(rng) * cap / 1000.0; /* full jitter */
}

void lade__http_retry_sleep(lade__http_t *h, uint32_t retry, lade__rng_t *rng) {
  pthread_mutex_lock(&h->mu);
  h->retried++;
  pthread_mutex_unlock(&h->mu);
  double s = lade__http_backoff_s(h->o.retry_base_ms, retry, rng);
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

int lade__http_blocking_again(lade__http_t *h, const lade__http_verdict_t *v, uint32_t attempt, const char *shown,
                              lade__rng_t *rng, int *rc) {
  if (v->kind != LADE__HTTP_RETRY || attempt >= h->o.retries) {
    *rc = v->kind == LADE__HTTP_RETRY ? lade__fail(v->code, "%s: %s after %u retries", shown, v->what, attempt)
                                : lade__fail(v->code, "%s: %s", shown, v->what);
    return 0;
  }
  lade__http_retry_sleep(h, attempt + 1, rng);
  return 1;
}

#endif /* LADE_HAVE_CURL */
