// wire.hpp — the TCP store's messages and their byte encoding; pure functions, no I/O.
//
// Every message is one frame: a 4-byte little-endian body length, then the body: a 1-byte opcode
// and the opcode's fields (integers little-endian; strings and byte strings as a u32 length and
// the bytes; key lists as a u32 count and the keys). decode_frame() never trusts a length: it
// refuses a frame longer than the caller's limit before the body arrives, a field longer than the
// bytes left, a key over kMaxKeyBytes, a value over kMaxValueBytes, an unknown opcode and trailing
// bytes. It is the one entry point a fuzzer needs (tests/fuzz feed it arbitrary bytes).
//
// Conversation (client → server, server → client):
//   the client's preamble and Hello{magic, version, rank, world_size, client_nonce, pid, job_id}
//   → the server's preamble and Challenge{magic, version, token_required, server_nonce} (or Fail:
//   another job id, another version); Proof{mac} → Welcome{mac, world_size} or Fail{status,
//   text}; then requests Set/Get/Add/Wait/Check/Erase/Abandon/Members, each answered by Ok/Value/
//   Int/Bool/TimedOut/Fail. Abandon{status, text}: this rank gives up on the job (its pstate_init
//   failed); the server fails the job with that reason, so the ranks that wait hear it at once.
//   Members{}: the ranks whose connections are open now (a Value of i32 ranks, ascending): the
//   one place that sees every rank's process end, on any host. SetIfAbsent{key, value}: first
//   writer wins (a Value: what the key holds afterwards), the survivors' agreement of
//   pstate_shrink. Opcodes are unique across both
//   directions, so one decoder serves both ends.
// The preambles are one line of text each way, before any frame: the client speaks first, so a
// service that is not a pstate store (an HTTP server on MASTER_PORT) answers the line with its
// own words, which the client names at once instead of waiting for a reply that never parses;
// and a pstate server drops a connection whose first bytes are not the client's line.
#pragma once

#include "bootstrap/store.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace pstate::wire {

inline constexpr uint32_t kMagic = 0x53545350;  // the bytes "PSTS" on the wire
inline constexpr uint16_t kVersion = 2;
// The first bytes each way (see above). The client's is shaped like an HTTP/1.0 request with
// an unknown method and ends in a blank line, so an HTTP server answers it at once with a status
// line ("HTTP/1.0 501 ..."), and other line-based services with their own error; the server's
// differs, so an echo service is not taken for a store.
inline constexpr std::string_view kPreambleStem = "PSTATE-STORE/";  // then the version
inline constexpr std::string_view kClientPreamble = "PSTATE-STORE/2 CLIENT HTTP/1.0\r\n\r\n";
inline constexpr std::string_view kServerPreamble = "PSTATE-STORE/2 SERVER\r\n\r\n";
inline constexpr size_t kMaxJobIdBytes = 256;  // PSTATE_JOB_ID
// The whole handshake, preambles to Welcome, takes a few round trips (a millisecond on one host).
// The server closes a connection that has not finished it this long after accepting it (anyone
// can open one, so none may hold a place longer), and the client gives up an attempt after the
// same time and retries on a fresh connection: one number for both ends.
inline constexpr int kHandshakeMs = 5000;
// How a Fail that ends the whole job (not just this request) starts: a rank of the job was
// refused in a way that means the world can never be complete (tcp_store_server.hpp).
inline constexpr std::string_view kJobFailedPrefix = "the job cannot start: ";
inline constexpr size_t kHeaderBytes = 4;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kMaxKeyBytes = kStoreMaxKeyBytes;
inline constexpr size_t kMaxValueBytes = kStoreMaxValueBytes;
inline constexpr size_t kMaxKeysPerRequest = 65536;
inline constexpr size_t kMaxTextBytes = 4096;  // Fail messages
inline constexpr size_t kMaxTimedOutKeys = 16;  // TimedOut lists at most this many missing keys
// Largest body of any frame (a Set with the largest key and value, plus its field headers).
inline constexpr size_t kMaxFrameBytes = kMaxValueBytes + kMaxKeyBytes + 64;
// Largest body before the handshake completes: strangers cannot make the server allocate more.
inline constexpr size_t kMaxHandshakeFrameBytes = 512;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

enum class Op : uint8_t {
  kHello = 1,
  kChallenge = 2,
  kProof = 3,
  kWelcome = 4,
  kSet = 10,
  kGet = 11,
  kAdd = 12,
  kWait = 13,
  kCheck = 14,
  kErase = 15,
  kAbandon = 16,
  kMembers = 17,
  kSetIfAbsent = 18,
  kOk = 32,
  kValue = 33,
  kInt = 34,
  kBool = 35,
  kTimedOut = 36,
  kFail = 37,
};

// --- handshake ---
struct Hello {
  uint16_t version = kVersion;  // magic is implied: a Hello without it does not decode
  int32_t rank = 0;             // -1: an observer that claims no rank
  int32_t world_size = 0;       // 0 with rank -1: observer that does not know the world size
  Nonce client_nonce{};
  int64_t pid = 0;     // the client's process id (named in messages about it)
  std::string job_id;  // PSTATE_JOB_ID; empty = none
};
struct Challenge {
  uint16_t version = kVersion;
  bool token_required = false;
  Nonce server_nonce{};
};
struct Proof {
  Mac mac{};
};
struct Welcome {
  Mac mac{};
  int32_t world_size = 0;
};
// --- requests ---
struct Set {
  std::string key;
  Bytes value;
};
struct Get {
  std::string key;
  uint32_t wait_ms = 0;  // the server holds the request until the key exists or this passes
};
struct Add {
  std::string key;
  int64_t delta = 0;
};
struct Wait {
  std::vector<std::string> keys;
  uint32_t wait_ms = 0;
};
struct Check {
  std::vector<std::string> keys;
};
struct Erase {
  std::string key;
};
struct Abandon {
  uint32_t status = 0;  // a pstate_status_t: why this rank gives up
  std::string text;
};
struct Members {};  // the ranks connected now: answered by a Value of i32 ranks, ascending
struct SetIfAbsent {  // first writer wins: answered by a Value, what the key holds afterwards
  std::string key;
  Bytes value;
};
// --- replies ---
struct Ok {};
struct Value {
  Bytes value;
};
struct Int {
  int64_t value = 0;
};
struct Bool {
  bool value = false;
};
struct TimedOut {
  uint32_t missing_count = 0;          // how many keys were missing
  std::vector<std::string> missing;    // the first few of them (at most kMaxTimedOutKeys)
  // What the server knows about the world while the job is incomplete (empty texts otherwise):
  uint32_t joined = 0;      // ranks connected now
  std::string waiting_for;  // the absent ranks, short: "2, 5" or "8-15, 20 and 3 more"
  std::string absent;       // in full: "ranks 2 and 5 of 0..7 never connected; last seen: none"
};
struct Fail {
  uint32_t status = 0;  // a pstate_status_t
  std::string text;
};

using Message = std::variant<Hello, Challenge, Proof, Welcome, Set, Get, Add, Wait, Check, Erase, Abandon, Members,
                             SetIfAbsent,
                             Ok, Value, Int, Bool, TimedOut, Fail>;

// The opcode of a message, and a short name for logs ("set", "timed_out").
Op op_of(const Message &m);
const char *op_name(Op op);

// One complete frame (length prefix included). Throws pstate::Error(INVALID_ARGUMENT) when a field
// breaks a limit, so nothing undecodable is ever sent.
Bytes encode(const Message &m);
// The first bytes of a Value frame whose value (value_size bytes) follows separately; lets the
// server send one shared copy of a large value to many readers.
Bytes encode_value_prefix(size_t value_size);

enum class DecodeStatus { kNeedMore, kFrame, kMalformed };

struct Decoded {
  DecodeStatus status = DecodeStatus::kNeedMore;
  Message message;      // valid when status == kFrame
  size_t consumed = 0;  // bytes of the frame, length prefix included, when status == kFrame
  std::string error;    // why, when status == kMalformed
};

// Decodes the frame at the start of bytes. kNeedMore when it is incomplete (and its announced
// length is within max_body_bytes); kMalformed, with the reason, as soon as the bytes cannot be a
// valid frame; otherwise the message and the bytes it took.
Decoded decode_frame(std::span<const uint8_t> bytes, size_t max_body_bytes);

}  // namespace pstate::wire
