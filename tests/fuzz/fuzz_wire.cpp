// fuzz_wire.cpp — libFuzzer target for the TCP store's frame decoder (src/bootstrap/wire.hpp).
//
// decode_frame() is what a stranger at the store port talks to, so it must survive any bytes:
// no crash, no read past the input, no allocation beyond the frame it was handed. Input: the
// first byte picks the limit (the handshake limit a fresh connection gets, or the member limit),
// the rest is the byte stream. Properties checked on every decoded frame:
//   - consumed is within the input and equals 4 + the announced body length;
//   - the decoded message re-encodes (encode never refuses what decode accepted) and the
//     re-encoded frame decodes to a message that encodes to the very same bytes;
//   - frames are decoded one after the other until the stream ends or is malformed (as the
//     server does), so a frame boundary bug shows up too.
#include "bootstrap/wire.hpp"
#include "fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

using namespace pstate;

namespace {

void check_round_trip(const wire::Message &m) {
  Bytes once;
  bool encoded = fuzz::accepts([&] { once = wire::encode(m); });
  FUZZ_CHECK(encoded, "a decoded %s does not re-encode", wire::op_name(wire::op_of(m)));
  wire::Decoded again = wire::decode_frame(once, wire::kMaxFrameBytes);
  FUZZ_CHECK(again.status == wire::DecodeStatus::kFrame, "re-encoded %s does not decode: %s",
             wire::op_name(wire::op_of(m)), again.error.c_str());
  FUZZ_CHECK(again.consumed == once.size(), "re-decoded %zu of %zu bytes", again.consumed, once.size());
  FUZZ_CHECK(wire::op_of(again.message) == wire::op_of(m), "opcode changed on a round trip");
  FUZZ_CHECK(wire::encode(again.message) == once, "%s encodes differently after a round trip",
             wire::op_name(wire::op_of(m)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t limit = (data[0] & 1) ? wire::kMaxHandshakeFrameBytes : wire::kMaxFrameBytes;
  std::span<const uint8_t> stream(data + 1, size - 1);
  for (int frames = 0; frames < 64 && !stream.empty(); ++frames) {
    wire::Decoded d = wire::decode_frame(stream, limit);
    if (d.status == wire::DecodeStatus::kNeedMore) break;
    if (d.status == wire::DecodeStatus::kMalformed) {
      FUZZ_CHECK(!d.error.empty(), "malformed without a reason");
      break;
    }
    uint32_t body = uint32_t{stream[0]} | (uint32_t{stream[1]} << 8) | (uint32_t{stream[2]} << 16) |
                    (uint32_t{stream[3]} << 24);
    FUZZ_CHECK(d.consumed == wire::kHeaderBytes + body && d.consumed <= stream.size(),
               "consumed %zu of %zu bytes (body %u)", d.consumed, stream.size(), body);
    FUZZ_CHECK(body <= limit, "a frame over the limit was accepted");
    check_round_trip(d.message);
    stream = stream.subspan(d.consumed);
  }
  return 0;
}
