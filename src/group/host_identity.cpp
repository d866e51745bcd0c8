// host_identity.cpp — builds "hostname|boot_id|net:INODE|pid:INODE" (see host_identity.hpp).
#include "group/host_identity.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace pstate {

namespace {

std::string first_line(const char *path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string namespace_inode(const char *path) {
  struct stat st {};
  if (::stat(path, &st) != 0) return "?";
  return std::to_string(static_cast<unsigned long long>(st.st_ino));
}

}  // namespace

std::string this_host_identity() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) name[0] = '\0';
  return std::string(name) + "|" + first_line("/proc/sys/kernel/random/boot_id") +
         "|net:" + namespace_inode("/proc/self/ns/net") + "|pid:" + namespace_inode("/proc/self/ns/pid");
}

std::string host_identity_name(const std::string &identity) {
  auto bar = identity.find('|');
  std::string name = identity.substr(0, bar);
  auto net = identity.find("|net:");
  if (net != std::string::npos) name += " (netns " + identity.substr(net + 5, identity.find('|', net + 1) - net - 5) + ")";
  return name;
}

}  // namespace pstate
