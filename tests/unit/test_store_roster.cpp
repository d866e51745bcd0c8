// test_store_roster.cpp — the pieces the three stores share (src/bootstrap/roster.hpp), byte for
// byte: the job's meta record as the file store (PATH/meta) and the etcd store (ROOT/meta) have
// always spelled it, read back, and a file that is not one refused; the job token's fingerprints
// (HMAC-SHA256 with each store's label, never the token); the record of a job that cannot start;
// and the absent-ranks classifier in the words of each store: never connected, refused ("never
// joined"), joined and left, what was last seen of them, and lists bounded for a large world.
#include "bootstrap/roster.hpp"

#include "store_test_util.hpp"  // last: it brings cmocka

using namespace pstate;
using pstest::expect_error;

namespace {

JobMeta sample_meta() {
  JobMeta m;
  m.world_size = 4;
  m.token = "none";
  m.job_id = "job";
  m.creator_rank = 0;
  m.creator = "pid 1 on host h (boot b, start 2)";
  m.ttl_s = 3;
  return m;
}

void test_meta_records_are_spelled_as_each_store_always_wrote_them(void **) {
  JobMeta m = sample_meta();
  assert_string_equal(encode_job_meta(m, MetaDialect::kFileStore).c_str(),
                      "pstate-file-store 2\nworld_size 4\ntoken none\njob_id 6a6f62\ncreated_by_rank 0\n"
                      "created_by pid 1 on host h (boot b, start 2)\n");
  assert_string_equal(encode_job_meta(m, MetaDialect::kEtcdStore).c_str(),
                      "pstate-etcd-store 1\nworld_size 4\ntoken none\njob_id 6a6f62\ncreator 0\nttl 3\n");
  m.job_id.clear();  // no job id: "-" in a file, nothing in etcd
  assert_non_null(std::strstr(encode_job_meta(m, MetaDialect::kFileStore).c_str(), "\njob_id -\n"));
  assert_non_null(std::strstr(encode_job_meta(m, MetaDialect::kEtcdStore).c_str(), "\njob_id \n"));
}

void test_meta_records_read_back_and_a_foreign_file_is_refused(void **) {
  for (MetaDialect d : {MetaDialect::kFileStore, MetaDialect::kEtcdStore}) {
    for (const std::string &job_id : {std::string("job-7"), std::string()}) {
      JobMeta m = sample_meta(), back;
      m.job_id = job_id;
      assert_true(decode_job_meta(encode_job_meta(m, d), d, &back));
      assert_int_equal(back.world_size, 4);
      assert_string_equal(back.token.c_str(), "none");
      assert_string_equal(back.job_id.c_str(), job_id.c_str());
      assert_int_equal(back.creator_rank, 0);
      if (d == MetaDialect::kFileStore) {
        assert_int_equal(back.version, 2);
        assert_string_equal(back.creator.c_str(), m.creator.c_str());
      } else {
        assert_int_equal(back.ttl_s, 3);
      }
    }
  }
  JobMeta m;
  // The file store's first version (no creator record) still reads.
  assert_true(decode_job_meta("pstate-file-store 1\nworld_size 2\ntoken none\njob_id -\ncreated_by_rank 1\n",
                              MetaDialect::kFileStore, &m));
  assert_int_equal(m.version, 1);
  assert_int_equal(m.creator_rank, 1);
  assert_true(m.creator.empty());
  // Not a file store's meta: another first line, a required field missing, a number that is none.
  assert_false(decode_job_meta("some notes\nworld_size 2\ntoken none\ncreated_by_rank 0\n", MetaDialect::kFileStore, &m));
  assert_false(decode_job_meta("pstate-file-store 2\nworld_size 2\ntoken none\n", MetaDialect::kFileStore, &m));
  assert_false(decode_job_meta("pstate-file-store 2\nworld_size two\ntoken none\ncreated_by_rank 0\n",
                               MetaDialect::kFileStore, &m));
  // The etcd store reads what it finds.
  assert_true(decode_job_meta("pstate-etcd-store 1\nworld_size 8\n", MetaDialect::kEtcdStore, &m));
  assert_int_equal(m.world_size, 8);
  assert_int_equal(m.ttl_s, 0);
}

void test_token_fingerprints_are_hmacs_never_the_token(void **) {
  assert_string_equal(token_fingerprint("", MetaDialect::kFileStore).c_str(), "none");
  assert_string_equal(token_fingerprint("", MetaDialect::kEtcdStore).c_str(), "none");
  // HMAC-SHA256(key = the token, message = the store's label): what jobs already running keep.
  assert_string_equal(token_fingerprint("job-secret", MetaDialect::kFileStore).c_str(),
                      "8f40c5510586fb61b2aa84f97c38dd6e5b238f75038649c3e409f6effd2172fc");
  assert_string_equal(token_fingerprint("job-secret", MetaDialect::kEtcdStore).c_str(),
                      "a95f467add8acab321535fd00b1ef80b80593320a4d9a19885a24dffe279d5d6");
}

void test_job_failure_record_carries_its_status_and_reason(void **) {
  const std::string refused = refused_reason(2, "pid 7 on host h", "rank 2 says world_size 4, rank 0 says 3");
  assert_string_equal(refused.c_str(), "the store refused rank 2 (pid 7 on host h): rank 2 says world_size 4, rank 0 says 3");
  assert_string_equal(gave_up_reason(1, "no network").c_str(), "rank 1 gave up: no network");
  assert_string_equal(gave_up_reason(-1, "no network").c_str(), "an observer gave up: no network");
  const std::string record = job_failure_record(PSTATE_ERR_TRANSPORT, gave_up_reason(1, "no network"));
  assert_string_equal(record.c_str(), "status 7\nthe job cannot start: rank 1 gave up: no network");
  expect_error([&] { throw_job_failure(record, "file:///s in failed"); }, PSTATE_ERR_TRANSPORT,
               {"the job cannot start: rank 1 gave up: no network (told by the store at file:///s in failed)"});
  // A record without a valid status is MISMATCH, its whole text the reason.
  expect_error([] { throw_job_failure("status 99\nthe job cannot start: x", "s"); }, PSTATE_ERR_MISMATCH,
               {"the job cannot start: x (told by the store at s)"});
  expect_error([] { throw_job_failure("the job cannot start: y", "s"); }, PSTATE_ERR_MISMATCH,
               {"the job cannot start: y (told by the store at s)"});
}

void test_absent_ranks_in_the_words_of_every_store(void **) {
  {
    AbsentRanks none(4);
    assert_int_equal(none.count(), 0);
    assert_string_equal(none.describe().c_str(), "");
    assert_string_equal(none.waiting_for().c_str(), "");
  }
  {  // the TCP server's view: refusals and departures noted, refusals' notes first
    AbsentRanks a(8);
    for (int r : {2, 3, 4}) a.add(r, Absence::kNeverConnected);
    a.add(5, Absence::kRefused, "refused 1.0 s ago (pid 7 from x: job token refused)");
    a.add(6, Absence::kLeft, "left 0.5 s ago (pid 8 from y: its connection closed)");
    assert_int_equal(a.count(), 5);
    assert_string_equal(a.waiting_for().c_str(), "2-6");
    assert_string_equal(a.describe().c_str(),
                        "ranks 2-4 of 0..7 never connected; rank 5 never joined; rank 6 joined and left; last seen: "
                        "rank 5 refused 1.0 s ago (pid 7 from x: job token refused); rank 6 left 0.5 s ago (pid 8 from "
                        "y: its connection closed)");
  }
  {  // the file store's view: no refusals; at most four notes
    AbsentRanks a(8);
    a.add(1, Absence::kNeverConnected);
    for (int r = 2; r < 8; ++r) a.add(r, Absence::kLeft, cat("left (pid ", r, ")"));
    assert_string_equal(a.describe().c_str(),
                        "rank 1 of 0..7 never connected; ranks 2-7 joined and left; last seen: rank 2 left (pid 2); "
                        "rank 3 left (pid 3); rank 4 left (pid 4); rank 5 left (pid 5)");
    AbsentRanks b(3);
    b.add(1, Absence::kNeverConnected);
    assert_string_equal(b.describe().c_str(), "rank 1 of 0..2 never connected; last seen: none");
  }
  {  // the etcd store's words: why a rank may be gone, no "last seen"
    AbsentRanks a(4, {" joined and left (closed, or the etcd lease lapsed)", false});
    a.add(1, Absence::kNeverConnected);
    a.add(3, Absence::kLeft);
    assert_string_equal(a.describe().c_str(),
                        "rank 1 of 0..3 never connected; rank 3 joined and left (closed, or the etcd lease lapsed)");
  }
  {  // a large world: the lists are bounded, the counts exact
    AbsentRanks bounded(100, {}, 64), whole(100);
    for (int r = 1; r < 100; ++r) bounded.add(r, Absence::kNeverConnected), whole.add(r, Absence::kNeverConnected);
    assert_false(bounded.full(Absence::kLeft));
    assert_true(bounded.full(Absence::kNeverConnected));
    assert_int_equal(bounded.count(), 99);
    assert_string_equal(bounded.describe().c_str(), "ranks 1-64 and 35 more of 0..99 never connected; last seen: none");
    assert_string_equal(bounded.waiting_for().c_str(), "1-64 and 35 more");
    assert_string_equal(whole.describe().c_str(), "ranks 1-99 of 0..99 never connected; last seen: none");
  }
}

}  // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_meta_records_are_spelled_as_each_store_always_wrote_them),
      cmocka_unit_test(test_meta_records_read_back_and_a_foreign_file_is_refused),
      cmocka_unit_test(test_token_fingerprints_are_hmacs_never_the_token),
      cmocka_unit_test(test_job_failure_record_carries_its_status_and_reason),
      cmocka_unit_test(test_absent_ranks_in_the_words_of_every_store),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
