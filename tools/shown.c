/*
 * shown.c - names and messages as a terminal should show them. The library
 * keeps names as the bytes it found (a tar member name in Latin-1, a file
 * name cut at a limit) and escapes only control bytes in its messages; the
 * Python module decodes a message with backslashreplace, so a 0xff byte
 * reads \xff there. The CLI prints the same text, not the raw byte.
 */
#include "shown.h"

#include <stdint.h>
#include <stdio.h>

#include "lade/lade.h"

/* The length of the valid UTF-8 sequence at p (as Python's strict decoder
 * takes it: no overlong forms, no surrogates, nothing past U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *p) {
  unsigned char c = p[0];
  if (c < 0x80) return 1;
  size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (!n) return 0;
  /* the second byte's range depends on the first (the rest are 80..bf) */
  unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
  unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
  return n;
}

char *lade_tool_shown(const char *s, char *buf, size_t size) {
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  size_t o = 0;
  while (*p) {
    size_t n = utf8_len(p);
    if (n == 1 && (*p < 0x20 || *p == 0x7f)) n = 0;
    if (n ? o + n >= size : o + 4 >= size) break;
    if (n) {
      for (size_t i = 0; i < n; i++) buf[o++] = (char)p[i];
      p += n;
    } else {
      snprintf(buf + o, 5, "\\x%02x", *p++);
      o += 4;
    }
  }
  buf[o] = '\0';
  return buf;
}

const char *lade_tool_error(void) {
  static _Thread_local char buf[4 * 1024 + 1]; /* every byte of a 1 KiB message escaped */
  return lade_tool_shown(lade_last_error(), buf, sizeof buf);
}

int lade_tool_set(lade_config_t *cfg, const char *key, const char *value) {
  if (lade_config_set(cfg, key, value)) {
    fprintf(stderr, "lade: %s\n", lade_tool_error());
    return -1;
  }
  return 0;
}
