// wire.cpp — encoder and bounds-checked decoder of the TCP store's frames (see wire.hpp).
//
// The decoder reads through a Cursor that fails (instead of reading past the end) on any short
// field, and checks every announced length against both the bytes left and the protocol limit
// before allocating, so no input can make it allocate more than the frame it was handed.
#include "bootstrap/wire.hpp"

#include "common/error.hpp"

#include <cstring>
#include <type_traits>

namespace pstate::wire {
namespace {

// ---- encoding ----------------------------------------------------------------------------

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { little_endian(v, 2); }
  void u32(uint32_t v) { little_endian(v, 4); }
  void i32(int32_t v) { little_endian(static_cast<uint32_t>(v), 4); }
  void i64(int64_t v) { little_endian(static_cast<uint64_t>(v), 8); }
  void raw(const uint8_t *p, size_t n) { out_.insert(out_.end(), p, p + n); }
  void bytes(const uint8_t *p, size_t n) {
    u32(static_cast<uint32_t>(n));
    raw(p, n);
  }
  void key(const std::string &k) {
    if (k.empty() || k.size() > kMaxKeyBytes)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store key of ", k.size(), " bytes: keys must be 1..",
                  kMaxKeyBytes, " bytes");
    bytes(reinterpret_cast<const uint8_t *>(k.data()), k.size());
  }
  // A string of at most limit bytes (longer is refused: the caller cuts it first).
  void text(const std::string &t, size_t limit, const char *what) {
    if (t.size() > limit)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store message: ", what, " of ", t.size(), " bytes; at most ", limit);
    bytes(reinterpret_cast<const uint8_t *>(t.data()), t.size());
  }
  void keys(const std::vector<std::string> &ks) {
    if (ks.size() > kMaxKeysPerRequest)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "a store request of ", ks.size(), " keys: at most ",
                  kMaxKeysPerRequest, " keys per request");
    u32(static_cast<uint32_t>(ks.size()));
    for (const auto &k : ks) key(k);
  }
  // Prepends the body length once the body is complete.
  Bytes finish() {
    if (out_.size() - kHeaderBytes > kMaxFrameBytes)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store message of ", out_.size(), " bytes exceeds the limit of ",
                  kMaxFrameBytes);
    uint32_t body = static_cast<uint32_t>(out_.size() - kHeaderBytes);
    for (int i = 0; i < 4; ++i) out_[i] = static_cast<uint8_t>(body >> (8 * i));
    return std::move(out_);
  }
  Writer() : out_(kHeaderBytes, 0) {}

 private:
  void little_endian(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  Bytes out_;
};

void encode_body(Writer &w, const Hello &m) {
  w.u32(kMagic);
  w.u16(m.version);
  w.i32(m.rank);
  w.i32(m.world_size);
  w.raw(m.client_nonce.data(), m.client_nonce.size());
  w.i64(m.pid);
  w.text(m.job_id, kMaxJobIdBytes, "job id");
}
void encode_body(Writer &w, const Challenge &m) {
  w.u32(kMagic);
  w.u16(m.version);
  w.u8(m.token_required ? 1 : 0);
  w.raw(m.server_nonce.data(), m.server_nonce.size());
}
void encode_body(Writer &w, const Proof &m) { w.raw(m.mac.data(), m.mac.size()); }
void encode_body(Writer &w, const Welcome &m) {
  w.raw(m.mac.data(), m.mac.size());
  w.i32(m.world_size);
}
void encode_body(Writer &w, const Set &m) {
  if (m.value.size() > kMaxValueBytes)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store value of ", m.value.size(), " bytes exceeds the limit of ",
                kMaxValueBytes);
  w.key(m.key);
  w.bytes(m.value.data(), m.value.size());
}
void encode_body(Writer &w, const Get &m) {
  w.key(m.key);
  w.u32(m.wait_ms);
}
void encode_body(Writer &w, const Add &m) {
  w.key(m.key);
  w.i64(m.delta);
}
void encode_body(Writer &w, const Wait &m) {
  w.u32(m.wait_ms);
  w.keys(m.keys);
}
void encode_body(Writer &w, const Check &m) { w.keys(m.keys); }
void encode_body(Writer &w, const Erase &m) { w.key(m.key); }
void encode_body(Writer &w, const Abandon &m) {
  std::string text = m.text.substr(0, kMaxTextBytes);
  w.u32(m.status);
  w.bytes(reinterpret_cast<const uint8_t *>(text.data()), text.size());
}
void encode_body(Writer &, const Members &) {}
void encode_body(Writer &w, const SetIfAbsent &m) {
  if (m.value.size() > kMaxValueBytes)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store value of ", m.value.size(), " bytes exceeds the limit of ",
                kMaxValueBytes);
  w.key(m.key);
  w.bytes(m.value.data(), m.value.size());
}
void encode_body(Writer &, const Ok &) {}
void encode_body(Writer &w, const Value &m) {
  if (m.value.size() > kMaxValueBytes)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store value of ", m.value.size(), " bytes exceeds the limit");
  w.bytes(m.value.data(), m.value.size());
}
void encode_body(Writer &w, const Int &m) { w.i64(m.value); }
void encode_body(Writer &w, const Bool &m) { w.u8(m.value ? 1 : 0); }
void encode_body(Writer &w, const TimedOut &m) {
  if (m.missing.size() > kMaxTimedOutKeys)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "TimedOut lists ", m.missing.size(), " keys; at most ",
                kMaxTimedOutKeys);
  w.u32(m.missing_count);
  w.keys(m.missing);
  w.u32(m.joined);
  w.text(m.waiting_for, kMaxTextBytes, "waiting_for");
  w.text(m.absent, kMaxTextBytes, "absent");
}
void encode_body(Writer &w, const Fail &m) {
  std::string text = m.text.substr(0, kMaxTextBytes);
  w.u32(m.status);
  w.bytes(reinterpret_cast<const uint8_t *>(text.data()), text.size());
}

// ---- decoding ----------------------------------------------------------------------------

// Reads fields from a body; the first failure sticks and later reads return zeros.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> body) : body_(body) {}

  bool ok() const { return error_.empty(); }
  const std::string &error() const { return error_; }
  size_t left() const { return body_.size() - at_; }
  void fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }

  uint8_t u8() { return static_cast<uint8_t>(little_endian(1, "u8")); }
  uint16_t u16() { return static_cast<uint16_t>(little_endian(2, "u16")); }
  uint32_t u32() { return static_cast<uint32_t>(little_endian(4, "u32")); }
  int32_t i32() { return static_cast<int32_t>(static_cast<uint32_t>(little_endian(4, "i32"))); }
  int64_t i64() { return static_cast<int64_t>(little_endian(8, "i64")); }
  template <size_t N>
  std::array<uint8_t, N> fixed(const char *what) {
    std::array<uint8_t, N> out{};
    if (!take(N, what)) return out;
    std::memcpy(out.data(), body_.data() + at_ - N, N);
    return out;
  }
  // A u32 length then that many bytes, at most `limit`.
  Bytes bytes(size_t limit, const char *what) {
    uint32_t n = u32();
    if (!ok()) return {};
    if (n > limit) {
      fail(cat(what, " of ", n, " bytes exceeds the limit of ", limit));
      return {};
    }
    if (!take(n, what)) return {};
    return Bytes(body_.begin() + static_cast<std::ptrdiff_t>(at_ - n), body_.begin() + static_cast<std::ptrdiff_t>(at_));
  }
  std::string text(size_t limit, const char *what) {
    Bytes b = bytes(limit, what);
    return std::string(b.begin(), b.end());
  }
  std::string key() {
    std::string k = text(kMaxKeyBytes, "key");
    if (ok() && k.empty()) fail("empty key");
    return k;
  }
  std::vector<std::string> keys(size_t limit) {
    uint32_t n = u32();
    if (!ok()) return {};
    // Each key takes at least 5 bytes (length + one byte), so a count the body cannot hold is
    // refused before anything is reserved.
    if (n > limit || n > left() / 5) {
      fail(cat("key count ", n, " exceeds the limit or the frame"));
      return {};
    }
    std::vector<std::string> out;
    out.reserve(n);
    for (uint32_t i = 0; i < n && ok(); ++i) out.push_back(key());
    return out;
  }
  bool boolean(const char *what) {
    uint8_t v = u8();
    if (v > 1) fail(cat(what, " is ", int{v}, ", not 0 or 1"));
    return v == 1;
  }

 private:
  bool take(size_t n, const char *what) {
    if (!ok()) return false;
    if (left() < n) {
      fail(cat("frame ends inside ", what));
      return false;
    }
    at_ += n;
    return true;
  }
  uint64_t little_endian(size_t n, const char *what) {
    if (!take(n, what)) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{body_[at_ - n + i]} << (8 * i);
    return v;
  }

  std::span<const uint8_t> body_;
  size_t at_ = 0;
  std::string error_;
};

void expect_magic(Cursor &c) {
  uint32_t magic = c.u32();
  if (c.ok() && magic != kMagic) c.fail("wrong protocol magic (not a pstate store peer)");
}

Message decode_body(Op op, Cursor &c) {
  switch (op) {
    case Op::kHello: {
      Hello m;
      expect_magic(c);
      m.version = c.u16();
      m.rank = c.i32();
      m.world_size = c.i32();
      m.client_nonce = c.fixed<kNonceBytes>("nonce");
      m.pid = c.i64();
      m.job_id = c.text(kMaxJobIdBytes, "job id");
      return m;
    }
    case Op::kChallenge: {
      Challenge m;
      expect_magic(c);
      m.version = c.u16();
      m.token_required = c.boolean("token_required");
      m.server_nonce = c.fixed<kNonceBytes>("nonce");
      return m;
    }
    case Op::kProof:
      return Proof{c.fixed<kMacBytes>("mac")};
    case Op::kWelcome: {
      Welcome m;
      m.mac = c.fixed<kMacBytes>("mac");
      m.world_size = c.i32();
      return m;
    }
    case Op::kSet: {
      Set m;
      m.key = c.key();
      m.value = c.bytes(kMaxValueBytes, "value");
      return m;
    }
    case Op::kGet: {
      Get m;
      m.key = c.key();
      m.wait_ms = c.u32();
      return m;
    }
    case Op::kAdd: {
      Add m;
      m.key = c.key();
      m.delta = c.i64();
      return m;
    }
    case Op::kWait: {
      Wait m;
      m.wait_ms = c.u32();
      m.keys = c.keys(kMaxKeysPerRequest);
      return m;
    }
    case Op::kCheck:
      return Check{c.keys(kMaxKeysPerRequest)};
    case Op::kErase:
      return Erase{c.key()};
    case Op::kAbandon: {
      Abandon m;
      m.status = c.u32();
      m.text = c.text(kMaxTextBytes, "text");
      return m;
    }
    case Op::kMembers:
      return Members{};
    case Op::kSetIfAbsent: {
      SetIfAbsent m;
      m.key = c.key();
      m.value = c.bytes(kMaxValueBytes, "value");
      return m;
    }
    case Op::kOk:
      return Ok{};
    case Op::kValue:
      return Value{c.bytes(kMaxValueBytes, "value")};
    case Op::kInt:
      return Int{c.i64()};
    case Op::kBool:
      return Bool{c.boolean("bool")};
    case Op::kTimedOut: {
      TimedOut m;
      m.missing_count = c.u32();
      m.missing = c.keys(kMaxTimedOutKeys);
      m.joined = c.u32();
      m.waiting_for = c.text(kMaxTextBytes, "waiting_for");
      m.absent = c.text(kMaxTextBytes, "absent");
      return m;
    }
    case Op::kFail: {
      Fail m;
      m.status = c.u32();
      m.text = c.text(kMaxTextBytes, "text");
      return m;
    }
  }
  c.fail(cat("unknown opcode ", int{static_cast<uint8_t>(op)}));
  return Ok{};
}

bool known_op(uint8_t v) {
  switch (static_cast<Op>(v)) {
    case Op::kHello: case Op::kChallenge: case Op::kProof: case Op::kWelcome: case Op::kSet:
    case Op::kGet:
    case Op::kAdd:
    case Op::kWait:
    case Op::kCheck:
    case Op::kErase:
    case Op::kAbandon:
    case Op::kMembers:
    case Op::kSetIfAbsent:
    case Op::kOk:
    case Op::kValue: case Op::kInt: case Op::kBool: case Op::kTimedOut: case Op::kFail:
      return true;
  }
  return false;
}

Decoded malformed(std::string why) {
  Decoded d;
  d.status = DecodeStatus::kMalformed;
  d.error = std::move(why);
  return d;
}

}  // namespace

Op op_of(const Message &m) {
  static constexpr Op kOps[] = {Op::kHello, Op::kChallenge, Op::kProof, Op::kWelcome,  Op::kSet,     Op::kGet,
                                Op::kAdd,   Op::kWait,      Op::kCheck, Op::kErase,    Op::kAbandon, Op::kMembers,
                                Op::kSetIfAbsent, Op::kOk,    Op::kValue,     Op::kInt,   Op::kBool,     Op::kTimedOut, Op::kFail};
  static_assert(std::size(kOps) == std::variant_size_v<Message>);
  return kOps[m.index()];
}

const char *op_name(Op op) {
  switch (op) {
    case Op::kHello: return "hello";
    case Op::kChallenge: return "challenge";
    case Op::kProof: return "proof";
    case Op::kWelcome: return "welcome";
    case Op::kSet: return "set";
    case Op::kGet: return "get";
    case Op::kAdd: return "add";
    case Op::kWait: return "wait";
    case Op::kCheck: return "check";
    case Op::kErase: return "erase";
    case Op::kAbandon:
      return "abandon";
    case Op::kMembers: return "members";
    case Op::kSetIfAbsent: return "set_if_absent";
    case Op::kOk: return "ok";
    case Op::kValue: return "value";
    case Op::kInt: return "int";
    case Op::kBool: return "bool";
    case Op::kTimedOut: return "timed_out";
    case Op::kFail: return "fail";
  }
  return "unknown";
}

Bytes encode(const Message &m) {
  Writer w;
  w.u8(static_cast<uint8_t>(op_of(m)));
  std::visit([&w](const auto &msg) { encode_body(w, msg); }, m);
  return w.finish();
}

Bytes encode_value_prefix(size_t value_size) {
  if (value_size > kMaxValueBytes)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store value of ", value_size, " bytes exceeds the limit");
  Bytes out(kHeaderBytes + 1 + 4);
  uint32_t body = static_cast<uint32_t>(1 + 4 + value_size);
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(body >> (8 * i));
  out[4] = static_cast<uint8_t>(Op::kValue);
  for (int i = 0; i < 4; ++i) out[5 + i] = static_cast<uint8_t>(value_size >> (8 * i));
  return out;
}

Decoded decode_frame(std::span<const uint8_t> bytes, size_t max_body_bytes) {
  if (bytes.size() < kHeaderBytes) return {};
  uint32_t body_size = uint32_t{bytes[0]} | (uint32_t{bytes[1]} << 8) | (uint32_t{bytes[2]} << 16) |
                       (uint32_t{bytes[3]} << 24);
  if (body_size > max_body_bytes)
    return malformed(cat("frame of ", body_size, " bytes exceeds the limit of ", max_body_bytes));
  if (body_size == 0) return malformed("empty frame (no opcode)");
  // The opcode is checked as soon as it arrives, so garbage is refused without waiting for the
  // body its length announces.
  if (bytes.size() > kHeaderBytes && !known_op(bytes[kHeaderBytes]))
    return malformed(cat("unknown opcode ", int{bytes[kHeaderBytes]}));
  if (bytes.size() - kHeaderBytes < body_size) return {};

  Op op = static_cast<Op>(bytes[kHeaderBytes]);
  Cursor cursor(bytes.subspan(kHeaderBytes + 1, body_size - 1));
  Message message = decode_body(op, cursor);
  if (cursor.ok() && cursor.left() != 0) cursor.fail(cat(cursor.left(), " trailing bytes after ", op_name(op)));
  if (!cursor.ok()) return malformed(cat(op_name(op), ": ", cursor.error()));
  Decoded d;
  d.status = DecodeStatus::kFrame;
  d.message = std::move(message);
  d.consumed = kHeaderBytes + body_size;
  return d;
}

}  // namespace pstate::wire
