/*
 * fork_ranks.h — run test ranks as child processes, bounded in time: no hang, no orphan.
 *
 * Multi-process tests fork one child per rank. A child runs its function and leaves with
 * _exit(status) (never returning into the test runner); the parent waits for every child up to a
 * time limit and SIGKILLs whatever is left, so a deadlocked rank fails the test instead of hanging
 * it. Children must not use cmocka assertions (they would unwind into the child's copy of the
 * runner): they report by exit status and stderr.
 */
#ifndef PSTATE_TEST_FORK_RANKS_H
#define PSTATE_TEST_FORK_RANKS_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A child's body: returns its exit status (0 = success). */
typedef int (*pst_child_fn)(int index, void *arg);

/** Forks a child that runs fn(index, arg) and exits with its result. -1 when fork fails. */
pid_t pst_fork(pst_child_fn fn, int index, void *arg);

/** Waits for pid up to timeout_ms, SIGKILLing it on timeout. Returns its exit status (0..255),
 *  128 + signal when a signal ended it, or -1 when it was killed for the timeout. */
int pst_wait(pid_t pid, int timeout_ms);

/** Forks n children running fn(0..n-1, arg), waits for all within timeout_ms in total (killing the
 *  rest when it passes) and stores each status as pst_wait does in statuses (may be NULL).
 *  Returns how many children did not exit with 0. */
int pst_run_children(int n, pst_child_fn fn, void *arg, int timeout_ms, int *statuses);

#ifdef __cplusplus
}
#endif

#endif
