// cli_info.cpp — `pstate info`: what this build is and what it can use on this host.
//
// Prints the version and ABI major, the build (type, compiler, options), the UCX library and the
// UCX transports usable here (the CPU communicator's choices), and the CUDA/NCCL backend: built
// or not, whether the driver, runtime and NCCL load here, and whether a CUDA context can be made
// (the backend's cuda_backend_status(), with every reason when not). Read-only.
#include "cli/cli.hpp"
#include "cli/probe.hpp"

#include "common/build_info.hpp"

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace pstate::cli {

// ---- UCX probes (declared in probe.hpp) -----------------------------------------------------

std::string ucx_library_version() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

namespace {

// Devices of every transport of one UCT memory domain, added to by_tl[tl name].
void collect_md_transports(uct_component_h component, const char *md_name,
                           std::map<std::string, std::vector<std::string>> *by_tl) {
  uct_md_config_t *config = nullptr;
  if (uct_md_config_read(component, nullptr, nullptr, &config) != UCS_OK) return;
  std::unique_ptr<uct_md_config_t, void (*)(void *)> config_owner(config, uct_config_release);
  uct_md_h md = nullptr;
  if (uct_md_open(component, md_name, config, &md) != UCS_OK) return;
  std::unique_ptr<uct_md, void (*)(uct_md_h)> md_owner(md, uct_md_close);
  uct_tl_resource_desc_t *resources = nullptr;
  unsigned n = 0;
  if (uct_md_query_tl_resources(md, &resources, &n) != UCS_OK) return;
  for (unsigned i = 0; i < n; ++i) (*by_tl)[resources[i].tl_name].push_back(resources[i].dev_name);
  uct_release_tl_resource_list(resources);
}

}  // namespace

std::vector<Probe> probe_ucx_transports() {
  std::map<std::string, std::vector<std::string>> by_tl;
  uct_component_h *components = nullptr;
  unsigned num_components = 0;
  if (uct_query_components(&components, &num_components) != UCS_OK)
    return {{"uct", false, "uct_query_components failed"}};
  for (unsigned c = 0; c < num_components; ++c) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[c], &attr) != UCS_OK || attr.md_resource_count == 0) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    for (const auto &md : mds) collect_md_transports(components[c], md.md_name, &by_tl);
  }
  uct_release_component_list(components);
  std::vector<Probe> out;
  for (const auto &[tl, devices] : by_tl) {
    std::string list;
    for (const auto &d : devices) list += (list.empty() ? "" : ", ") + d;
    out.push_back({tl, true, list});
  }
  return out;
}

namespace {

constexpr CommandSpec kSpec{
    "info",
    "print the version, build options and the transports/backends usable on this host",
    "",
    "Prints the pstate version and ABI major, how this copy was built, the UCX version and the\n"
    "UCX transports this host offers (with their devices), and whether the CUDA/NCCL backend\n"
    "was built and can be loaded here (CUDA driver, CUDA runtime, NCCL), with the reason when not.",
    {},
};

void print_probes(const std::vector<Probe> &probes) {
  for (const Probe &p : probes)
    std::printf("  %-14s %-12s %s\n", p.what.c_str(), p.usable ? "usable" : "not usable", p.detail.c_str());
}

int run_info(const ParsedArgs &) {
  BuildInfo b = build_info();
  std::printf("pstate %s (ABI major %d, SONAME libpstate.so.%d)\n", b.version.c_str(), b.abi_major, b.abi_major);
  std::printf("build: %s, %s, %s\n\n", b.build_type.c_str(), b.compiler.c_str(), b.options.c_str());

  std::printf("UCX %s (built against %s); transports on this host:\n", ucx_library_version().c_str(),
              b.ucx_headers.c_str());
  auto transports = probe_ucx_transports();
  if (transports.empty()) std::printf("  (none: UCX found no transport resources)\n");
  print_probes(transports);

  std::printf("\nCUDA/NCCL backend: %s\n",
              b.cuda_backend ? "built (CUDA and NCCL are loaded at run time)"
                             : "not built (no CUDA toolkit / nccl.h at configure time; CPU only)");
  print_probes(probe_cuda());  // the last line says whether device = PSTATE_DEVICE_CUDA works here
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailure;
}

}  // namespace

const Subcommand &info_subcommand() {
  static const Subcommand sub{kSpec, run_info};
  return sub;
}

}  // namespace pstate::cli
