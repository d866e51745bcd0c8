// netif.hpp — network interface name → IPv4 address (PSTATE_SOCKET_IFNAME / socket_ifname).
//
// On a host with several networks (management Ethernet, a fast fabric), the user names the
// interface the job should use ("eth1", "ib0"); the store client binds its source address to it
// and the transports advertise it. getifaddrs() lists the interfaces; the first IPv4 address of
// the named interface wins.
#pragma once

#include <string>
#include <vector>

namespace pstate {

struct InterfaceAddress {
  std::string name;  // "eth0"
  std::string ipv4;  // "10.0.0.2"
};

// Every interface with an IPv4 address, in getifaddrs order (loopback included).
std::vector<InterfaceAddress> ipv4_interfaces();

// The IPv4 address of interface ifname; throws PSTATE_ERR_INVALID_ARGUMENT naming the interfaces
// that do have one when it has none or does not exist.
std::string ipv4_address_of(const std::string &ifname);

}  // namespace pstate
