/*
 * files.h — reading a file whole, for tests that check what the library wrote (flight-recorder
 * dumps, ...).
 */
#ifndef PSTATE_TEST_FILES_H
#define PSTATE_TEST_FILES_H

#ifdef __cplusplus
extern "C" {
#endif

/* The whole file as a NUL-terminated string the caller frees, or NULL when it cannot be read. */
char *pstate_test_slurp(const char *path);

#ifdef __cplusplus
}
#endif

#endif
