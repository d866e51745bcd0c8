// netif.hpp — which network interfaces a rank uses: PSTATE_SOCKET_IFNAME / socket_ifname.
//
// On a host with several networks (management Ethernet, a fast fabric, docker0, lo), the user
// names the interfaces the job should use. The rule has NCCL_SOCKET_IFNAME's syntax, so one
// value serves both: a comma-separated list of names, each a prefix ("eth" matches eth0 and
// eth1) or, after "=", an exact name ("=eth0"); a leading "^" turns the list into exclusions
// ("^lo,docker" = every interface but lo and docker*; "^=eth1" = all but exactly eth1). One rule
// for everything that opens a socket: the store client binds its source address to a matching
// interface (the one the kernel's route to the store uses, when it is one of them), UCX's TCP
// transport gets the matching interfaces as UCX_NET_DEVICES, and NCCL, when pstate loads it,
// gets the rule as NCCL_SOCKET_IFNAME unless the user set that variable. Only interfaces with an
// IPv4 address count; getifaddrs() lists them, in its order.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pstate {

struct InterfaceAddress {
  std::string name;  // "eth0"
  std::string ipv4;  // "10.0.0.2"
};

// Every interface with an IPv4 address, in getifaddrs order (loopback included).
std::vector<InterfaceAddress> ipv4_interfaces();

struct InterfaceRule {
  struct Name {
    std::string text;
    bool exact = false;  // "=eth0": this name only; else a prefix
  };
  bool exclude = false;  // "^...": every interface but these
  std::vector<Name> names;

  bool matches(const std::string &ifname) const;
};

// Parses a rule; throws PSTATE_ERR_INVALID_ARGUMENT naming PSTATE_SOCKET_IFNAME and the syntax.
InterfaceRule parse_interface_rule(std::string_view spec);

// The interfaces of `all` the rule selects, in order; throws INVALID_ARGUMENT listing every
// interface with an address when none matches. The second form lists this host's.
std::vector<InterfaceAddress> select_interfaces(std::string_view spec, const std::vector<InterfaceAddress> &all);
std::vector<InterfaceAddress> select_interfaces(std::string_view spec);

// The selected interface to reach `host` from: the one whose address the kernel would use as
// the source toward host when that one is selected, else the first selected.
InterfaceAddress interface_toward(std::string_view spec, const std::string &host);

// " (the route to 198.18.0.1 leaves through eth0, 198.18.0.11)", or "" when unknown: for
// messages about an interface that cannot reach host.
std::string route_hint(const std::string &host);

// "eth0 10.0.0.2, eth1 10.1.0.2"
std::string describe_interfaces(const std::vector<InterfaceAddress> &list);

// True for 127.0.0.0/8.
bool is_loopback_ipv4(const std::string &ipv4);

}  // namespace pstate
