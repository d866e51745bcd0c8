// test_store_wire.cpp — the TCP store's frame codec: every message round-trips, every incomplete
// frame asks for more, and every kind of bad input (oversized length, unknown opcode, short
// field, trailing bytes, huge counts, empty or oversized keys, wrong magic) is refused as
// malformed without reading or allocating past the frame. Byte layouts are written out by hand
// here, independently of the encoder.
#include "bootstrap/wire.hpp"

#include <cstring>
#include <random>

#include "store_test_util.hpp"  // last: it brings cmocka

using namespace pstate;
using namespace pstate::wire;
using pstest::expect_error;

namespace {

Bytes le32(uint32_t v) { return {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)}; }

// A frame from its body bytes (opcode first), length prefix computed here.
Bytes frame_of(const Bytes &body) {
  Bytes f;
  f.reserve(4 + body.size());
  for (uint8_t b : le32(static_cast<uint32_t>(body.size()))) f.push_back(b);
  for (uint8_t b : body) f.push_back(b);
  return f;
}

Decoded decode_all(const Bytes &b, size_t limit = kMaxFrameBytes) { return decode_frame(b, limit); }

std::vector<Message> one_of_each() {
  Hello hello;
  hello.rank = 3;
  hello.world_size = 8;
  hello.client_nonce.fill(0xab);
  hello.pid = 123456;
  hello.job_id = "job-A";
  Challenge challenge;
  challenge.token_required = true;
  challenge.server_nonce.fill(0x11);
  Proof proof;
  proof.mac.fill(0x22);
  Welcome welcome;
  welcome.mac.fill(0x33);
  welcome.world_size = 8;
  return {hello,
          challenge,
          proof,
          welcome,
          Set{"addr/3", Bytes{0, 1, 2, 255}},
          Get{"addr/3", 1500},
          Add{"count", -7},
          Wait{{"a", "b", "c"}, 42},
          Check{{"a"}},
          Erase{"gone"},
          Abandon{PSTATE_ERR_TIMEOUT, "rank 2 of 0..2 never connected"},
          Members{},
          SetIfAbsent{"pstate/shrink/1/result", Bytes{1, 0, 0, 0}},
          Ok{},
          Value{Bytes(1000, 7)},
          Int{INT64_MIN},
          Bool{true},
          TimedOut{5, {"x", "y"}, 6, "2, 5", "ranks 2 and 5 of 0..7 never connected; last seen: none"},
          Fail{PSTATE_ERR_MISMATCH, "rank 2 is already taken"}};
}

void test_every_message_round_trips(void **) {
  for (const Message &m : one_of_each()) {
    Bytes f = encode(m);
    Decoded d = decode_all(f);
    assert_int_equal(static_cast<int>(d.status), static_cast<int>(DecodeStatus::kFrame));
    assert_int_equal(d.consumed, f.size());
    assert_int_equal(static_cast<int>(op_of(d.message)), static_cast<int>(op_of(m)));
    assert_true(encode(d.message) == f);  // field by field equal, as re-encoded bytes
  }
}

void test_set_frame_has_the_documented_layout(void **) {
  Bytes expected = frame_of({10, /*key len*/ 1, 0, 0, 0, 'k', /*value len*/ 2, 0, 0, 0, 'v', 'w'});
  assert_true(encode(Set{"k", Bytes{'v', 'w'}}) == expected);
}

void test_every_prefix_of_a_frame_needs_more(void **) {
  for (const Message &m : one_of_each()) {
    Bytes f = encode(m);
    for (size_t n = 0; n < f.size(); ++n) {
      Decoded d = decode_frame(std::span<const uint8_t>(f.data(), n), kMaxFrameBytes);
      assert_int_equal(static_cast<int>(d.status), static_cast<int>(DecodeStatus::kNeedMore));
    }
  }
}

void test_two_frames_back_to_back_decode_one_at_a_time(void **) {
  Bytes a = encode(Get{"first", 0}), b = encode(Erase{"second"});
  Bytes both = a;
  both.insert(both.end(), b.begin(), b.end());
  Decoded d = decode_all(both);
  assert_int_equal(d.consumed, a.size());
  Decoded d2 = decode_frame(std::span<const uint8_t>(both).subspan(d.consumed), kMaxFrameBytes);
  assert_string_equal(std::get<Erase>(d2.message).key.c_str(), "second");
}

void test_length_over_limit_is_malformed_before_the_body_arrives(void **) {
  Bytes header = le32(0xFFFFFF00u);
  Decoded d = decode_all(header);
  assert_int_equal(static_cast<int>(d.status), static_cast<int>(DecodeStatus::kMalformed));
  // The handshake limit is far smaller than a request's.
  Bytes big_hello = le32(kMaxHandshakeFrameBytes + 1);
  assert_int_equal(static_cast<int>(decode_frame(big_hello, kMaxHandshakeFrameBytes).status),
                   static_cast<int>(DecodeStatus::kMalformed));
}

void test_unknown_opcode_is_malformed_at_its_first_byte(void **) {
  Bytes f = le32(1000);
  f.push_back(200);  // body announced as 1000 bytes; only the opcode is here
  Decoded d = decode_all(f);
  assert_int_equal(static_cast<int>(d.status), static_cast<int>(DecodeStatus::kMalformed));
  assert_non_null(std::strstr(d.error.c_str(), "unknown opcode 200"));
}

void test_empty_frame_is_malformed(void **) {
  assert_int_equal(static_cast<int>(decode_all(le32(0)).status), static_cast<int>(DecodeStatus::kMalformed));
}

void test_trailing_bytes_are_malformed(void **) {
  Bytes f = frame_of({static_cast<uint8_t>(Op::kOk), 0});
  assert_int_equal(static_cast<int>(decode_all(f).status), static_cast<int>(DecodeStatus::kMalformed));
}

void test_field_longer_than_frame_is_malformed(void **) {
  // A Set whose key claims 100 bytes inside a 10-byte body.
  Bytes f = frame_of({10, 100, 0, 0, 0, 'a', 'b', 'c', 'd', 'e'});
  Decoded d = decode_all(f);
  assert_int_equal(static_cast<int>(d.status), static_cast<int>(DecodeStatus::kMalformed));
}

void test_huge_key_count_is_refused_without_allocation(void **) {
  // A Check announcing 4 billion keys in a 5-byte body.
  Bytes f = frame_of({14, 0xff, 0xff, 0xff, 0xff});
  assert_int_equal(static_cast<int>(decode_all(f).status), static_cast<int>(DecodeStatus::kMalformed));
}

void test_keys_must_be_1_to_4096_bytes(void **) {
  Bytes empty_key = frame_of({15, 0, 0, 0, 0});
  assert_int_equal(static_cast<int>(decode_all(empty_key).status), static_cast<int>(DecodeStatus::kMalformed));
  Bytes body = {15};
  Bytes len = le32(4097);
  body.insert(body.end(), len.begin(), len.end());
  body.resize(body.size() + 4097, 'k');
  assert_int_equal(static_cast<int>(decode_all(frame_of(body)).status), static_cast<int>(DecodeStatus::kMalformed));
  expect_error([] { encode(Erase{std::string(4097, 'k')}); }, PSTATE_ERR_INVALID_ARGUMENT, {"4097"});
  expect_error([] { encode(Erase{""}); }, PSTATE_ERR_INVALID_ARGUMENT, {"keys must be"});
}

void test_value_over_64_mib_is_refused(void **) {
  Bytes body = {10, 1, 0, 0, 0, 'k'};
  Bytes len = le32(static_cast<uint32_t>(kMaxValueBytes + 1));
  body.insert(body.end(), len.begin(), len.end());
  // Only the header of the value: the decoder refuses on the announced length alone.
  Decoded d = decode_frame(frame_of(body), kMaxFrameBytes);
  assert_int_equal(static_cast<int>(d.status), static_cast<int>(DecodeStatus::kMalformed));
}

void test_hello_with_wrong_magic_is_malformed(void **) {
  Bytes f = encode(Hello{});
  f[5] ^= 0xff;  // first byte of the magic
  Decoded d = decode_all(f);
  assert_int_equal(static_cast<int>(d.status), static_cast<int>(DecodeStatus::kMalformed));
  assert_non_null(std::strstr(d.error.c_str(), "magic"));
}

void test_bool_other_than_0_or_1_is_malformed(void **) {
  Bytes f = frame_of({static_cast<uint8_t>(Op::kBool), 2});
  assert_int_equal(static_cast<int>(decode_all(f).status), static_cast<int>(DecodeStatus::kMalformed));
}

void test_value_prefix_plus_value_equals_encoded_value(void **) {
  Bytes value(300, 9);
  Bytes joined = encode_value_prefix(value.size());
  joined.insert(joined.end(), value.begin(), value.end());
  assert_true(joined == encode(Value{value}));
}

void test_random_bytes_never_decode_past_the_input(void **) {
  std::mt19937 rng(12345);
  for (int round = 0; round < 20000; ++round) {
    Bytes b(rng() % 64);
    for (auto &x : b) x = static_cast<uint8_t>(rng());
    if (b.size() >= 5 && round % 2 == 0) b[4] = static_cast<uint8_t>(1 + rng() % 40);  // often a real opcode
    Decoded d = decode_frame(b, 1 << 16);
    if (d.status == DecodeStatus::kFrame) assert_true(d.consumed <= b.size());
  }
}

}  // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_message_round_trips),
      cmocka_unit_test(test_set_frame_has_the_documented_layout),
      cmocka_unit_test(test_every_prefix_of_a_frame_needs_more),
      cmocka_unit_test(test_two_frames_back_to_back_decode_one_at_a_time),
      cmocka_unit_test(test_length_over_limit_is_malformed_before_the_body_arrives),
      cmocka_unit_test(test_unknown_opcode_is_malformed_at_its_first_byte),
      cmocka_unit_test(test_empty_frame_is_malformed),
      cmocka_unit_test(test_trailing_bytes_are_malformed),
      cmocka_unit_test(test_field_longer_than_frame_is_malformed),
      cmocka_unit_test(test_huge_key_count_is_refused_without_allocation),
      cmocka_unit_test(test_keys_must_be_1_to_4096_bytes),
      cmocka_unit_test(test_value_over_64_mib_is_refused),
      cmocka_unit_test(test_hello_with_wrong_magic_is_malformed),
      cmocka_unit_test(test_bool_other_than_0_or_1_is_malformed),
      cmocka_unit_test(test_value_prefix_plus_value_equals_encoded_value),
      cmocka_unit_test(test_random_bytes_never_decode_past_the_input),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
