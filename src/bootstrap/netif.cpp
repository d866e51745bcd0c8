// netif.cpp — interface rules (NCCL_SOCKET_IFNAME syntax) and interface addresses via
// getifaddrs (see netif.hpp).
#include "bootstrap/netif.hpp"

#include "common/error.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

bool InterfaceRule::matches(const std::string &ifname) const {
  bool listed = false;
  for (const Name &n : names)
    listed = listed || (n.exact ? ifname == n.text : ifname.compare(0, n.text.size(), n.text) == 0);
  return exclude ? !listed : listed;
}

InterfaceRule parse_interface_rule(std::string_view spec) {
  auto bad = [&](const std::string &why) {
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "socket interface '", std::string(spec),
                "' (PSTATE_SOCKET_IFNAME / socket_ifname): ", why,
                "; the syntax is NCCL_SOCKET_IFNAME's: names or prefixes separated by commas (eth0 or eth), "
                "=NAME for an exact name, a leading ^ to exclude (^lo,docker0)");
  };
  if (spec.size() > 255) bad("longer than 255 characters");
  InterfaceRule rule;
  std::string_view rest = spec;
  if (!rest.empty() && rest.front() == '^') {
    rule.exclude = true;
    rest.remove_prefix(1);
  }
  if (rest.empty()) bad("no interface named");
  while (true) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    InterfaceRule::Name name;
    if (!item.empty() && item.front() == '=') {
      name.exact = true;
      item.remove_prefix(1);
    }
    if (item.empty()) bad("an empty name");
    if (item.size() > 15) bad(cat("'", std::string(item), "' is not an interface name (at most 15 characters)"));
    for (char ch : item) {
      unsigned char c = static_cast<unsigned char>(ch);
      if (c <= 0x20 || c >= 0x7f || ch == '/' || ch == '^' || ch == '=')
        bad(cat("'", std::string(item), "' is not an interface name"));
    }
    name.text = std::string(item);
    rule.names.push_back(std::move(name));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return rule;
}

std::string describe_interfaces(const std::vector<InterfaceAddress> &list) {
  std::string out;
  for (const auto &i : list) out += (out.empty() ? "" : ", ") + i.name + " " + i.ipv4;
  return out;
}

std::vector<InterfaceAddress> select_interfaces(std::string_view spec, const std::vector<InterfaceAddress> &all) {
  InterfaceRule rule = parse_interface_rule(spec);
  std::vector<InterfaceAddress> out;
  for (const auto &i : all)
    if (rule.matches(i.name)) out.push_back(i);
  if (out.empty())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "socket interface '", std::string(spec),
                "' (PSTATE_SOCKET_IFNAME / socket_ifname) matches no interface with an IPv4 address on this host; "
                "interfaces with one: ",
                all.empty() ? std::string("none") : describe_interfaces(all));
  return out;
}

std::vector<InterfaceAddress> select_interfaces(std::string_view spec) {
  return select_interfaces(spec, ipv4_interfaces());
}

namespace {

// The source address the kernel would give a connection to host (IPv4), or "" when it has no
// route (or host is not IPv4). A UDP connect sends nothing.
std::string kernel_source_toward(const std::string &host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo *found = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return "";
  std::string out;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr *>(&local), &len) == 0) {
      char text[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
      out = text;
    }
    ::close(fd);
  }
  freeaddrinfo(found);
  return out;
}

}  // namespace

InterfaceAddress interface_toward(std::string_view spec, const std::string &host) {
  std::vector<InterfaceAddress> chosen = select_interfaces(spec);
  std::string source = kernel_source_toward(host);
  for (const auto &i : chosen)
    if (i.ipv4 == source) return i;
  return chosen.front();
}

std::string route_hint(const std::string &host) {
  std::string source = kernel_source_toward(host);
  if (source.empty()) return cat(" (this host has no route to ", host, ")");
  for (const auto &i : ipv4_interfaces())
    if (i.ipv4 == source) return cat(" (the route to ", host, " leaves through ", i.name, ", ", i.ipv4, ")");
  return "";
}

bool is_loopback_ipv4(const std::string &ipv4) {
  return ipv4.rfind("127.", 0) == 0;
}

}  // namespace pstate
