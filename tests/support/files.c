/* files.c — see files.h. */
#include "files.h"

#include <stdio.h>
#include <stdlib.h>

char *pstate_test_slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  char *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
      size_t got = fread(buf, 1, (size_t)n, f);
      buf[got] = '\0';
    }
  }
  fclose(f);
  return buf;
}
