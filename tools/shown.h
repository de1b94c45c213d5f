/* shown.h - text from outside (file and tar member names, error messages
 * naming them) made safe to print on a terminal (tools/shown.c). */
#ifndef LADE_TOOLS_SHOWN_H
#define LADE_TOOLS_SHOWN_H

#include <stddef.h>

#include "lade/lade.h"

/* s into buf (size > 0 bytes, cut there) with every byte that is not part
 * of valid UTF-8, and every control byte (below 0x20, 0x7f), written as
 * \xNN: what the Python module's errors show
 * (bytes.decode('utf-8', 'backslashreplace')), and no tab or newline of a
 * name can break a line of `lade ls`. Returns buf. */
char *lade_tool_shown(const char *s, char *buf, size_t size);

/* lade_last_error() so shown, in a buffer of the calling thread that the
 * next call overwrites. */
const char *lade_tool_error(void);

/* lade_config_set(cfg, key, value), its error printed on stderr ("lade:
 * ...", shown as above): 0 or -1. */
int lade_tool_set(lade_config_t *cfg, const char *key, const char *value);

#endif
