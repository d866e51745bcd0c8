// init_method.cpp — the init_method parser (see init_method.hpp).
#include "bootstrap/init_method.hpp"

#include "common/error.hpp"

namespace pstate {
namespace {

constexpr std::string_view kSchemes =
    "use env://, tcp://HOST:PORT or file:///PATH, or etcd://HOST:PORT[,HOST:PORT...]/PREFIX";

// The text quoted for an error, with unprintable bytes escaped and long text cut.
std::string shown(std::string_view text) {
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < 200; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > 200) out += "...";
  return out + "'";
}

InitMethod parse_tcp(std::string_view whole, std::string_view rest) {
  InitMethod m;
  m.kind = InitMethod::Kind::kTcp;
  std::string_view host, port;
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole), ": '[' without ']' around the IPv6 address");
    host = rest.substr(1, close - 1);
    if (host.find(':') == std::string_view::npos)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole),
                  ": brackets are only for IPv6 addresses (tcp://[::1]:29500)");
    std::string_view after = rest.substr(close + 1);
    if (after.empty() || after.front() != ':')
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole), ": no port: use tcp://[ADDRESS]:PORT");
    port = after.substr(1);
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole), ": no port: use tcp://HOST:PORT");
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole),
                  ": put IPv6 addresses in brackets: tcp://[", host, "]:", port);
  }
  if (host.empty())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole), ": no host: use tcp://HOST:PORT");
  size_t junk = port.find_first_of("/?#");
  if (junk != std::string_view::npos)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole), ": unexpected ", shown(port.substr(junk)),
                " after the port: use tcp://HOST:PORT");
  validate_host(host, "init_method host");
  m.host = std::string(host);
  m.port = parse_port(port, "init_method port");
  return m;
}

InitMethod parse_file(std::string_view whole, std::string_view rest) {
  InitMethod m;
  m.kind = InitMethod::Kind::kFile;
  if (rest.empty() || rest.front() != '/')
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole),
                ": file:// needs an absolute path, with three slashes: file:///shared/dir");
  if (rest.size() > 4000)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method: file path of ", rest.size(), " bytes is too long");
  for (char ch : rest) {
    if (static_cast<unsigned char>(ch) < 0x20)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole), ": control character in the path");
  }
  m.path = std::string(rest);
  while (m.path.size() > 1 && m.path.back() == '/') m.path.pop_back();
  return m;
}

// etcd://H1:P1,H2:P2/PREFIX: the endpoints are tcp://-style host:port pairs (parse_tcp checks
// each); the prefix is the job's key namespace in etcd, [A-Za-z0-9._/-], "pstate" when absent.
InitMethod parse_etcd(std::string_view whole, std::string_view rest, bool tls) {
  InitMethod m;
  m.kind = InitMethod::Kind::kEtcd;
  m.tls = tls;
  size_t slash = rest.find('/');
  std::string_view hosts = rest.substr(0, slash);
  std::string_view prefix = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  while (!prefix.empty() && prefix.front() == '/') prefix.remove_prefix(1);
  if (hosts.empty())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole),
                ": no etcd endpoint: use etcd://HOST:PORT[,HOST:PORT...]/PREFIX (etcd's client port, 2379)");
  size_t start = 0;
  while (start <= hosts.size()) {
    size_t comma = hosts.find(',', start);
    std::string_view one = hosts.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (one.empty())
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole), ": an empty endpoint in the list");
    InitMethod e = parse_tcp(whole, one);
    if (e.port == 0)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole), ": etcd endpoint ", shown(one),
                  " needs a port (etcd's client port, 2379)");
    m.endpoints.push_back(e.host.find(':') != std::string::npos ? cat("[", e.host, "]:", e.port) : cat(e.host, ":", e.port));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (prefix.size() > 512)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole), ": the etcd prefix is over 512 bytes");
  for (char ch : prefix) {
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-' || ch == '/';
    if (!ok)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(whole), ": the etcd prefix ", shown(prefix),
                  " may hold only letters, digits and . _ - /");
  }
  m.path = prefix.empty() ? "pstate" : std::string(prefix);
  return m;
}

}  // namespace

std::string InitMethod::url() const {
  switch (kind) {
    case Kind::kEnv:
      return "env://";
    case Kind::kTcp:
      if (host.find(':') != std::string::npos) return cat("tcp://[", host, "]:", port);
      return cat("tcp://", host, ":", port);
    case Kind::kFile:
      return "file://" + path;
    case Kind::kEtcd: {
      std::string out = tls ? "etcds://" : "etcd://";
      for (size_t i = 0; i < endpoints.size(); ++i) out += (i ? "," : "") + endpoints[i];
      return out + "/" + path;
    }
  }
  return "?";
}

void validate_host(std::string_view host, std::string_view what) {
  if (host.empty()) throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, " is empty");
  if (host.size() > 253)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, " is ", host.size(), " bytes long; host names have at most 253");
  for (char ch : host) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || ch == '/' || ch == '[' || ch == ']' || ch == '@' || ch == '?' || ch == '#')
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, " ", shown(host),
                  " is not a host name or address (it contains ", shown(std::string_view(&ch, 1)), ")");
  }
}

int parse_port(std::string_view text, std::string_view what) {
  if (text.empty()) throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, " is empty: give a port number 1..65535");
  if (text.size() > 5 || text.find_first_not_of("0123456789") != std::string_view::npos)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, " ", shown(text), " is not a port number (1..65535)");
  int port = 0;
  for (char c : text) port = port * 10 + (c - '0');
  if (port > 65535) throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, " ", port, " is out of range (1..65535)");
  return port;
}

InitMethod parse_init_method(std::string_view text) {
  if (text.empty()) throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method is empty: ", kSchemes, " (or NULL for env://)");
  size_t sep = text.find("://");
  if (sep == std::string_view::npos)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(text), " has no scheme: ", kSchemes);
  std::string_view scheme = text.substr(0, sep);
  std::string_view rest = text.substr(sep + 3);
  if (scheme == "env") {
    if (!rest.empty())
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(text),
                  ": env:// takes nothing after it (MASTER_ADDR and MASTER_PORT come from the environment)");
    return InitMethod{};
  }
  if (scheme == "tcp") return parse_tcp(text, rest);
  if (scheme == "file") return parse_file(text, rest);
  if (scheme == "etcd" || scheme == "etcds") return parse_etcd(text, rest, scheme == "etcds");
  throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", shown(text), ": scheme ", shown(scheme),
              " is not supported: ", kSchemes);
}

}  // namespace pstate
