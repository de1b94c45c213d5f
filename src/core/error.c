/* error.c - codes, names and the thread-local last-error text. */
#include <stdio.h>
#include <string.h>

#include "core.h"

#define LADE__ERRBUF 1024
static _Thread_local char tls_error[LADE__ERRBUF];

const char *lade_strerror(int code) {
  switch (code) {
#define LADE__X_TEXT(name, value, text) \
  case value:                          \
    return text;
    LADE_ERRORS(LADE__X_TEXT)
#undef LADE__X_TEXT
  }
  return "unknown error";
}

const char *lade_error_name(int code) {
  switch (code) {
#define LADE__X_NAME(name, value, text) \
  case value:                          \
    return #name;
    LADE_ERRORS(LADE__X_NAME)
#undef LADE__X_NAME
  }
  return "LADE_E?";
}

const char *lade_last_error(void) { return tls_error; }

/* Rewrites every control byte (below 0x20, and 0x7f) of the error text as
 * \xNN, in place: a file name with a newline must not print a fake line of
 * its own (every message goes through here, so none can forget it). The
 * result has no control bytes, so escaping twice changes nothing. */
static void escape_controls(void) {
  const char *s = tls_error;
  size_t n = 0;
  for (const char *c = s; *c; c++) n += ((unsigned char)*c < 0x20 || *c == 0x7f) ? 4 : 1;
  if (n == strlen(s)) return;
  char out[LADE__ERRBUF];
  size_t o = 0;
  for (const char *c = s; *c && o + 1 < sizeof out; c++) {
    unsigned char u = (unsigned char)*c;
    if (u < 0x20 || u == 0x7f) {
      if (o + 5 > sizeof out) break;
      snprintf(out + o, 5, "\\x%02x", u);
      o += 4;
    } else {
      out[o++] = (char)u;
    }
  }
  out[o] = '\0';
  memcpy(tls_error, out, o + 1);
}

int lade__vfail(int code, const char *fmt, va_list ap) {
  vsnprintf(tls_error, sizeof tls_error, fmt, ap);
  escape_controls();
  return code;
}

int lade__fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lade__vfail(code, fmt, ap);
  va_end(ap);
  return code;
}

int lade__fail_prefix(int code, const char *fmt, ...) {
  char old[LADE__ERRBUF];
  memcpy(old, tls_error, sizeof old);
  char pre[LADE__ERRBUF];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  size_t n = strlen(pre);
  if (n >= sizeof tls_error) n = sizeof tls_error - 1;
  memcpy(tls_error, pre, n);
  snprintf(tls_error + n, sizeof tls_error - n, "%.*s", (int)(sizeof tls_error - 1), old);
  escape_controls();
  return code;
}

void lade__clear_error(void) { tls_error[0] = '\0'; }

void lade__copy_error(char *buf, size_t size) {
  if (size == 0) return;
  snprintf(buf, size, "%s", tls_error);
}

void lade__set_error_text(const char *text) {
  if (text != tls_error) snprintf(tls_error, sizeof tls_error, "%s", text); /* may be lade_last_error() itself */
  escape_controls();
}
