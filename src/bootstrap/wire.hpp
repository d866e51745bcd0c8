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
//   Hello{magic, version, rank, world_size, client_nonce} → Challenge{magic, version,
//   token_required, server_nonce}; Proof{mac} → Welcome{mac, world_size} or Fail{status, text};
//   then requests Set/Get/Add/Wait/Check/Erase, each answered by Ok/Value/Int/Bool/TimedOut/Fail.
//   Opcodes are unique across both directions, so one decoder serves both ends.
#pragma once

#include "bootstrap/store.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace pstate::wire {

inline constexpr uint32_t kMagic = 0x53545350;  // the bytes "PSTS" on the wire
inline constexpr uint16_t kVersion = 1;
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
inline constexpr size_t kMaxHandshakeFrameBytes = 128;

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
};
struct Fail {
  uint32_t status = 0;  // a pstate_status_t
  std::string text;
};

using Message = std::variant<Hello, Challenge, Proof, Welcome, Set, Get, Add, Wait, Check, Erase, Ok, Value,
                             Int, Bool, TimedOut, Fail>;

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
