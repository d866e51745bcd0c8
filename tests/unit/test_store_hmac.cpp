// test_store_hmac.cpp — SHA-256 and HMAC-SHA256 of the store handshake (OpenSSL's libcrypto behind
// bootstrap/crypto.hpp) against published vectors (FIPS 180-2 examples, RFC 4231 test cases) and
// against an independent implementation computed while the test runs (Python's hashlib/hmac, for
// keys and messages around the 64-byte block size), the constant-time compare, random bytes.
#include "bootstrap/crypto.hpp"
#include "bootstrap/handshake.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "store_test_util.hpp"  // last: it brings cmocka

using namespace pstate;

namespace {

std::string hex_sha256(const std::string &s) { return crypto::to_hex(crypto::sha256(crypto::as_bytes(s))); }
std::string hex_hmac(const std::string &key, const std::string &msg) {
  return crypto::to_hex(crypto::hmac_sha256(crypto::as_bytes(key), crypto::as_bytes(msg)));
}

void test_sha256_matches_fips_examples(void **) {
  assert_string_equal(hex_sha256("").c_str(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  assert_string_equal(hex_sha256("abc").c_str(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  assert_string_equal(hex_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq").c_str(),
                      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  assert_string_equal(hex_sha256(std::string(1000000, 'a')).c_str(),
                      "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

void test_hmac_sha256_matches_rfc4231(void **) {
  assert_string_equal(hex_hmac(std::string(20, '\x0b'), "Hi There").c_str(),
                      "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  assert_string_equal(hex_hmac("Jefe", "what do ya want for nothing?").c_str(),
                      "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Keys longer than a block are hashed first.
  assert_string_equal(hex_hmac(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First").c_str(),
                      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  assert_string_equal(
      hex_hmac(std::string(131, '\xaa'),
               "This is a test using a larger than block-size key and a larger than block-size data. The key needs "
               "to be hashed before being used by the HMAC algorithm.")
          .c_str(),
      "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  // A key of exactly one block is used as is (value from Python's hmac module).
  assert_string_equal(hex_hmac(std::string(64, 'k'), "exactly one block key").c_str(),
                      "e73e6474ed2f863bbf5500617c3b577e141d3c1543e1563f3630b762d038f14c");
}

// Python's answer for HMAC-SHA256 and SHA-256 of (key, message), both given as hex.
std::string python_reference(const std::string &what, const std::string &key_hex, const std::string &msg_hex) {
  std::string cmd =
      "/usr/bin/python3 -c 'import hashlib, hmac, sys; k, m = bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3]); "
      "print(hmac.new(k, m, hashlib.sha256).hexdigest() if sys.argv[1] == \"hmac\" else "
      "hashlib.sha256(m).hexdigest())' " +
      what + " '" + key_hex + "' '" + msg_hex + "'";
  FILE *p = popen(cmd.c_str(), "r");
  assert_non_null(p);
  char line[128] = {0};
  char *got = fgets(line, sizeof line, p);
  assert_int_equal(pclose(p), 0);
  assert_non_null(got);
  std::string out(line);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

void test_hmac_sha256_and_sha256_match_python_for_every_size_around_a_block(void **) {
  for (size_t key_len : {0u, 1u, 16u, 32u, 63u, 64u, 65u, 200u}) {
    for (size_t msg_len : {0u, 1u, 55u, 56u, 64u, 119u, 1000u}) {
      std::vector<uint8_t> key(key_len), msg(msg_len);
      crypto::fill_random(key.data(), key.size());
      crypto::fill_random(msg.data(), msg.size());
      std::string key_hex = crypto::to_hex(key), msg_hex = crypto::to_hex(msg);
      assert_string_equal(crypto::to_hex(crypto::hmac_sha256(key, msg)).c_str(),
                          python_reference("hmac", key_hex, msg_hex).c_str());
      if (key_len == 0) {
        assert_string_equal(crypto::to_hex(crypto::sha256(msg)).c_str(),
                            python_reference("sha256", "", msg_hex).c_str());
      }
    }
  }
}

void test_fill_random_gives_different_bytes_each_call(void **) {
  uint8_t a[32], b[32];
  crypto::fill_random(a, sizeof a);
  crypto::fill_random(b, sizeof b);
  assert_false(crypto::constant_time_equal(a, b));
  crypto::fill_random(a, 0);  // nothing asked, nothing done
}

void test_constant_time_equal_compares_contents_and_lengths(void **) {
  uint8_t a[] = {1, 2, 3}, b[] = {1, 2, 3}, c[] = {1, 2, 4};
  assert_true(crypto::constant_time_equal(a, b));
  assert_false(crypto::constant_time_equal(a, c));
  assert_false(crypto::constant_time_equal(std::span<const uint8_t>(a, 2), b));
}

void test_handshake_proofs_depend_on_token_rank_and_direction(void **) {
  HandshakeInputs in;
  in.server_nonce.fill(1);
  in.client_nonce.fill(2);
  in.rank = 3;
  in.world_size = 4;
  wire::Mac base = client_proof("token", in);
  assert_true(client_proof("token", in) == base);
  assert_false(client_proof("tokeN", in) == base);
  assert_false(server_proof("token", in) == base);
  HandshakeInputs other_rank = in;
  other_rank.rank = 2;
  assert_false(client_proof("token", other_rank) == base);
}

}  // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha256_matches_fips_examples),
      cmocka_unit_test(test_hmac_sha256_matches_rfc4231),
      cmocka_unit_test(test_hmac_sha256_and_sha256_match_python_for_every_size_around_a_block),
      cmocka_unit_test(test_fill_random_gives_different_bytes_each_call),
      cmocka_unit_test(test_constant_time_equal_compares_contents_and_lengths),
      cmocka_unit_test(test_handshake_proofs_depend_on_token_rank_and_direction),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
