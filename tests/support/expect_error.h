/*
 * expect_error.h — cmocka assertions for pstate's error contract: a call returns the documented
 * status AND leaves a non-empty, helpful pstate_last_error() (optionally containing a phrase).
 *
 *   PSTATE_EXPECT_ERROR(pstate_layout_create(0, NULL, &l), PSTATE_ERR_INVALID_ARGUMENT, "world_size");
 *
 * The support library itself calls no pstate function (it links before or after the library
 * under test, static or shared), so the macro reads pstate_last_error() at the call site.
 * Include <cmocka.h>'s prerequisites (stdarg, stddef, stdint, setjmp) before this header.
 */
#ifndef PSTATE_TEST_EXPECT_ERROR_H
#define PSTATE_TEST_EXPECT_ERROR_H

#include <pstate/pstate.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fails the current cmocka test unless got == want, message is non-empty, and (when needle is
 * not NULL) message contains needle. `call` is the source text of the call, for the report. */
void pstate_test_check_error(pstate_status_t got, pstate_status_t want, const char *message,
                             const char *needle, const char *call, const char *file, int line);

#ifdef __cplusplus
}
#endif

#define PSTATE_EXPECT_ERROR(call, want, needle)                                                  \
  do {                                                                                           \
    pstate_status_t pstate_test_status_ = (call);                                                \
    pstate_test_check_error(pstate_test_status_, (want), pstate_last_error(), (needle), #call,   \
                            __FILE__, __LINE__);                                                 \
  } while (0)

#define PSTATE_EXPECT_OK(call)                                                                   \
  do {                                                                                           \
    pstate_status_t pstate_test_status_ = (call);                                                \
    pstate_test_check_error(pstate_test_status_, PSTATE_OK, pstate_last_error(), NULL, #call,    \
                            __FILE__, __LINE__);                                                 \
  } while (0)

#endif /* PSTATE_TEST_EXPECT_ERROR_H */
