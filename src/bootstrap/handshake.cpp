// handshake.cpp — the TCP store's handshake MACs (see handshake.hpp).
#include "bootstrap/handshake.hpp"

#include "bootstrap/crypto.hpp"

#include <string>

namespace pstate {
namespace {

wire::Mac proof(std::string_view label, std::string_view token, const HandshakeInputs &in) {
  std::string message(label);
  message.append(reinterpret_cast<const char *>(in.server_nonce.data()), in.server_nonce.size());
  message.append(reinterpret_cast<const char *>(in.client_nonce.data()), in.client_nonce.size());
  for (int32_t v : {in.rank, in.world_size})
    for (int i = 0; i < 4; ++i) message.push_back(static_cast<char>(static_cast<uint32_t>(v) >> (8 * i)));
  return crypto::hmac_sha256(crypto::as_bytes(token), crypto::as_bytes(message));
}

}  // namespace

wire::Mac client_proof(std::string_view token, const HandshakeInputs &in) {
  return proof("pstate-store-v1 client", token, in);
}

wire::Mac server_proof(std::string_view token, const HandshakeInputs &in) {
  return proof("pstate-store-v1 server", token, in);
}

}  // namespace pstate
