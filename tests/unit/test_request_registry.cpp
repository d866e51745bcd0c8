// test_request_registry.cpp — the registry behind pstate_request_t handles
// (src/api/request_handles.hpp), on small token regions so that its count wraps within a test:
// handles are never handed out twice while live, a freed or stale handle is refused
// (INVALID_ARGUMENT) and never reaches the request that reuses its slot, a request stays
// reachable with its own state while the table skips its slot and doubles (tokens not aligned to
// the table: the doubling must move every entry to its slot in the new size), a second claim of a
// claimed request is BUSY, pointers outside the region are refused, and a full region
// is NO_MEMORY.
#include "api/request_handles.hpp"
#include "common/error.hpp"

#include <climits>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

// cmocka last: its macros (fail, skip, ...) would clash with names in the C++ headers.
#include <cstdarg>
#include <csetjmp>
#include <cstddef>
extern "C" {
#include <cmocka.h>
}

using pstate::Error;
using pstate::api::RequestClaim;
using pstate::api::RequestRegistry;

namespace {

// The status claim(h) throws (PSTATE_OK: none).
pstate_status_t claim_status(RequestRegistry &r, const pstate_request_t *h) {
  try {
    RequestClaim c = r.claim(h);
    return PSTATE_OK;  // c's end keeps the request live
  } catch (const Error &e) {
    return e.status();
  }
}

// A live request whose state.peer is `mark`.
pstate_request_t *make_marked(RequestRegistry &r, int mark) {
  RequestClaim c = r.make();
  c.state().peer = mark;
  return c.handle();
}

// h's mark, or INT_MIN when h is refused.
int mark_of(RequestRegistry &r, pstate_request_t *h) {
  try {
    RequestClaim c = r.claim(h);
    return c.state().peer;
  } catch (const Error &) {
    return INT_MIN;
  }
}

void free_request(RequestRegistry &r, pstate_request_t *h) { r.claim(h).free(); }

void test_a_freed_handle_is_refused_and_never_reaches_the_next_request(void **) {
  RequestRegistry r(8);  // 256 tokens: the count wraps 4 times below
  assert_int_equal(r.token_count(), 256);
  pstate_request_t *prev = make_marked(r, 0);
  for (int i = 1; i < 1000; ++i) {
    pstate_request_t *next = make_marked(r, i);
    assert_ptr_not_equal(next, prev);
    free_request(r, prev);
    assert_int_equal(claim_status(r, prev), PSTATE_ERR_INVALID_ARGUMENT);  // freed
    assert_int_equal(mark_of(r, next), i);                                  // untouched
    prev = next;
  }
  free_request(r, prev);
}

void test_a_live_handle_is_skipped_when_the_count_wraps(void **) {
  RequestRegistry r(8);
  pstate_request_t *held = make_marked(r, -7);
  std::set<pstate_request_t *> seen;
  for (int i = 0; i < 2000; ++i) {  // ~8 rounds of the 256 tokens, each passing held's
    pstate_request_t *h = make_marked(r, i);
    assert_ptr_not_equal(h, held);
    seen.insert(h);
    free_request(r, h);
  }
  // Every token came round again but those sharing held's slot (equal to it modulo the table).
  assert_int_equal(seen.size(), r.token_count() - r.token_count() / r.slot_count());
  assert_int_equal(mark_of(r, held), -7);
  free_request(r, held);
}

void test_pending_requests_keep_their_state_while_the_table_doubles(void **) {
  RequestRegistry r(20);
  for (int i = 0; i < 37; ++i) free_request(r, make_marked(r, -1));  // live tokens start unaligned
  std::map<pstate_request_t *, int> live;
  for (int i = 0; i < 3000; ++i) {
    live[make_marked(r, i)] = i;
    if (i % 3 == 0) {  // free every third, so live tokens are scattered over the count
      auto it = live.begin();
      std::advance(it, static_cast<long>(live.size() / 2));
      free_request(r, it->first);
      assert_int_equal(claim_status(r, it->first), PSTATE_ERR_INVALID_ARGUMENT);
      live.erase(it);
    }
    if (i % 500 == 499)
      for (const auto &[h, mark] : live) assert_int_equal(mark_of(r, h), mark);
  }
  assert_true(r.slot_count() >= live.size());  // it grew from 64
  for (const auto &[h, mark] : live) {
    assert_int_equal(mark_of(r, h), mark);
    free_request(r, h);
  }
}

void test_a_claimed_request_is_busy_for_a_second_claim(void **) {
  RequestRegistry r(16);
  pstate_request_t *h = make_marked(r, 3);
  {
    RequestClaim first = r.claim(h);
    assert_int_equal(claim_status(r, h), PSTATE_ERR_BUSY);
    assert_int_equal(first.state().peer, 3);
  }  // kept: live again
  assert_int_equal(claim_status(r, h), PSTATE_OK);
  free_request(r, h);
  assert_int_equal(claim_status(r, h), PSTATE_ERR_INVALID_ARGUMENT);
}

void test_pointers_outside_the_region_and_null_are_refused(void **) {
  RequestRegistry r(16);
  pstate_request_t *h = make_marked(r, 1);
  int on_the_stack = 0;
  const auto at = [](uintptr_t a) { return reinterpret_cast<const pstate_request_t *>(a); };
  assert_int_equal(claim_status(r, nullptr), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(claim_status(r, at(reinterpret_cast<uintptr_t>(&on_the_stack))), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(claim_status(r, at(reinterpret_cast<uintptr_t>(h) + r.token_count())), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(claim_status(r, at(reinterpret_cast<uintptr_t>(h) - 1)), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(claim_status(r, at(UINTPTR_MAX)), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(mark_of(r, h), 1);
  free_request(r, h);
}

void test_every_handle_in_use_is_no_memory(void **) {
  RequestRegistry r(6);  // 64 tokens
  std::vector<pstate_request_t *> live;
  for (int i = 0; i < 64; ++i) live.push_back(make_marked(r, i));
  try {
    r.make();
    fail_msg("a 65th request got a handle out of 64");
  } catch (const Error &e) {
    assert_int_equal(e.status(), PSTATE_ERR_NO_MEMORY);
  }
  free_request(r, live[10]);
  pstate_request_t *again = make_marked(r, 99);  // the one freed handle comes back
  assert_ptr_equal(again, live[10]);
  for (int i = 0; i < 64; ++i) free_request(r, i == 10 ? again : live[static_cast<size_t>(i)]);
}

}  // namespace

int main() {
  const CMUnitTest tests[] = {
      cmocka_unit_test(test_a_freed_handle_is_refused_and_never_reaches_the_next_request),
      cmocka_unit_test(test_a_live_handle_is_skipped_when_the_count_wraps),
      cmocka_unit_test(test_pending_requests_keep_their_state_while_the_table_doubles),
      cmocka_unit_test(test_a_claimed_request_is_busy_for_a_second_claim),
      cmocka_unit_test(test_pointers_outside_the_region_and_null_are_refused),
      cmocka_unit_test(test_every_handle_in_use_is_no_memory),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
