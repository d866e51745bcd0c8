// handshake.hpp — the MACs of the TCP store's challenge-response, shared by client and server.
//
// The job token never crosses the wire. The server sends a fresh random nonce; the client proves
// it holds the token with client_proof(); the server answers with server_proof() over the same
// inputs under a different label, so the client knows it reached a store of its own job (not a
// different job's store that happens to use the same port). Both MACs bind the rank and world
// size the client announced, so a proof cannot be replayed for another rank.
#pragma once

#include "bootstrap/wire.hpp"

#include <cstdint>
#include <string_view>

namespace pstate {

struct HandshakeInputs {
  wire::Nonce server_nonce{};
  wire::Nonce client_nonce{};
  int32_t rank = 0;
  int32_t world_size = 0;
};

// HMAC-SHA256(token, "pstate-store-v1 client" || server_nonce || client_nonce || rank || world).
wire::Mac client_proof(std::string_view token, const HandshakeInputs &in);
// The same with the label "pstate-store-v1 server".
wire::Mac server_proof(std::string_view token, const HandshakeInputs &in);

}  // namespace pstate
