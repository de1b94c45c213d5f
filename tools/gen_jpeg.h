#include <stddef.h>
#include <stdint.h>
int lade_tool_gen_jpeg(const char *dir, uint64_t count, uint64_t seed, char *err, size_t errlen);
