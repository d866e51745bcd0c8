/* expect_error.c — the check behind PSTATE_EXPECT_ERROR / PSTATE_EXPECT_OK (see expect_error.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "expect_error.h"

/* cmocka has no "fail at file:line with a message": print, then fail there. */
#define FAIL_AT(file, line, ...) \
  do {                           \
    print_error(__VA_ARGS__);    \
    print_error("\n");          \
    _fail(file, line);           \
  } while (0)

void pstate_test_check_error(pstate_status_t got, pstate_status_t want, const char *message,
                             const char *needle, const char *call, const char *file, int line) {
  if (want == PSTATE_OK) {
    if (got != PSTATE_OK)
      FAIL_AT(file, line, "%s returned status %d, expected PSTATE_OK; last error: %s", call, (int)got,
                   message ? message : "(null)");
    return;
  }
  if (got != want)
    FAIL_AT(file, line, "%s returned status %d, expected %d; last error: %s", call, (int)got, (int)want,
                 message ? message : "(null)");
  if (message == NULL || message[0] == '\0')
    FAIL_AT(file, line, "%s failed with status %d but pstate_last_error() is empty", call, (int)got);
  if (needle != NULL && strstr(message, needle) == NULL)
    FAIL_AT(file, line, "%s: last error \"%s\" does not mention \"%s\"", call, message, needle);
}
