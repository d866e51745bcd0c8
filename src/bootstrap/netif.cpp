// netif.cpp — interface name → IPv4 address via getifaddrs (see netif.hpp).
#include "bootstrap/netif.hpp"

#include "common/error.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>

namespace pstate {

std::vector<InterfaceAddress> ipv4_interfaces() {
  ifaddrs *list = nullptr;
  if (getifaddrs(&list) != 0)
    throw_error(PSTATE_ERR_TRANSPORT, "cannot list network interfaces (getifaddrs): ", std::strerror(errno));
  std::vector<InterfaceAddress> out;
  for (ifaddrs *i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || i->ifa_name == nullptr) continue;
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in *>(i->ifa_addr)->sin_addr, text, sizeof text);
    out.push_back({i->ifa_name, text});
  }
  freeifaddrs(list);
  return out;
}

std::string ipv4_address_of(const std::string &ifname) {
  auto all = ipv4_interfaces();
  for (const auto &i : all)
    if (i.name == ifname) return i.ipv4;
  std::string known;
  for (const auto &i : all) known += (known.empty() ? "" : ", ") + i.name + " " + i.ipv4;
  throw_error(PSTATE_ERR_INVALID_ARGUMENT, "socket interface '", ifname,
              "' (PSTATE_SOCKET_IFNAME / socket_ifname) does not exist or has no IPv4 address; interfaces "
              "with one: ",
              known.empty() ? "none" : known);
}

}  // namespace pstate
