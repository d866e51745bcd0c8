// cli_layout.cpp — `pstate layout`: prints SGLang's (or vLLM's) groups for a world and parallel
// sizes.
//
// For launchers and people planning a deployment: no communication, just src/layout/. The text
// form is two tables (the groups of each kind; then one row per rank with its group index in
// each kind); --json prints one object {"world_size": N, "groups": {"tp": [[0,1],[2,3]], ...}}
// with one key per kind that exists, groups in the engine's order, for scripts and tests. An
// invalid configuration is the library's INVALID_ARGUMENT message on stderr and exit status 2.
// --batch answers many configurations in one process: one line of options per configuration on
// stdin, one line of JSON per answer on stdout ({"error": "..."} for an invalid one).
#include "cli/cli.hpp"

#include "layout/layout.hpp"

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace pstate::cli {
namespace {

using layout::Layout;
using layout::ParallelConfig;

constexpr OptionSpec kOptions[] = {
    {"--world", "N", "number of ranks (required)"},
    {"--engine", "NAME", "whose layout: sglang (default) or vllm"},
    {"--tp", "N", "tensor parallel size (omitted or 0: world / pp; vllm: world / (dp x pp x pcp))"},
    {"--pp", "N", "pipeline parallel size (omitted or 0: 1)"},
    {"--ep", "N", "MoE expert parallel size (omitted or 0: 1)"},
    {"--moe-dp", "N", "MoE data parallel size (omitted or 0: 1)"},
    {"--attn-dp", "N", "attention data parallel size (omitted or 0: 1)"},
    {"--attn-cp", "N", "attention context parallel size (omitted or 0: 1)"},
    {"--dcp", "N", "decode context parallel size (omitted or 0: 1, no dcp group)"},
    {"--shared-experts-tp", "N", "shared-experts TP size (omitted or 0: no group)"},
    {"--dp", "N", "vllm: data parallel size (omitted or 0: 1)"},
    {"--pcp", "N", "vllm: prefill context parallel size (omitted or 0: 1)"},
    {"--moe", nullptr, "vllm: a MoE model (ep and eplb groups)"},
    {"--json", nullptr, "print one JSON object instead of tables"},
    {"--batch", nullptr, "read one configuration's options per stdin line, print one JSON line each"},
};

constexpr CommandSpec kSpec{
    "layout",
    "print SGLang's or vLLM's process groups for a world and parallel sizes (no communication)",
    "--world N [--tp N] [--pp N] [--ep N] [--moe-dp N] [--attn-dp N] [--attn-cp N] [--dcp N]\n"
    "                     [--shared-experts-tp N] [--json]\n"
    "       pstate layout --engine vllm --world N [--tp N] [--pp N] [--dp N] [--pcp N] [--dcp N] [--moe]\n"
    "                     [--json]\n"
    "       pstate layout --batch < CONFIGS",
    "Computes the groups of SGLang's initialize_model_parallel: world, tp, pp, attn_tp, attn_cp,\n"
    "moe_ep, moe_tp, moe_dp, dcp (when dcp > 1), shared_experts_tp (when > 1) and self_pp, with\n"
    "attn_tp = tp / attn_dp / attn_cp and moe_tp = tp / ep / moe_dp. The world must be tp x pp.\n"
    "A size omitted or 0 is its default (pstate.h): tp = world / pp, the others 1.\n"
    "A kind marked 'shares' is the same group object as another kind (SGLang's aliasing).\n\n"
    "--engine vllm computes vLLM's instead: the world is the grid ExternalDP x dp x pp x pcp x tp\n"
    "(arange(world).reshape(-1, dp, pp, pcp, tp)); groups world, tp, pp, dp, pcp, dcp (when dcp > 1,\n"
    "consecutive blocks of each tp group), and with --moe ep and eplb (dp x pcp x tp of one pipeline\n"
    "stage), each group's ranks and the groups' order as vLLM builds them. tp omitted or 0 is\n"
    "world / (dp x pp x pcp).\n\n"
    "Exit status 2 and the reason on stderr for an invalid configuration.\n"
    "--batch reads lines of options (one configuration each, e.g. '--engine vllm --world 8 --tp 2')\n"
    "from stdin and prints one line for each: its --json object, or {\"error\": \"REASON\"}; blank\n"
    "lines and lines starting with # are skipped. Exit status 2 when any line was refused.\n\n"
    "examples: pstate layout --world 8 --tp 8 --attn-cp 2 --ep 4 --moe-dp 2\n"
    "          pstate layout --engine vllm --world 16 --tp 2 --pp 2 --dp 2 --moe --json",
    kOptions,
};

pstate_engine_t engine_from(const ParsedArgs &args) {
  std::string name = args.value("--engine").value_or("sglang");
  if (name == "sglang") return PSTATE_ENGINE_SGLANG;
  if (name == "vllm") return PSTATE_ENGINE_VLLM;
  throw UsageError("--engine must be sglang or vllm, not '" + name + "'");
}

// An omitted option is 0, which pstate.h's rule (ParallelConfig::with_defaults, shared with the
// library and the bindings) turns into the default: tp = world / pp (vllm: world / (dp x pp x
// pcp)), the others 1 (none for shared_experts_tp).
ParallelConfig config_from(const ParsedArgs &args, int world) {
  ParallelConfig cfg;
  cfg.engine = engine_from(args);
  cfg.dp = args.int_value("--dp", 0);
  cfg.pcp = args.int_value("--pcp", 0);
  cfg.moe_model = args.flag("--moe") ? 1 : 0;
  cfg.pp = args.int_value("--pp", 0);
  cfg.tp = args.int_value("--tp", 0);
  cfg.ep = args.int_value("--ep", 0);
  cfg.moe_dp = args.int_value("--moe-dp", 0);
  cfg.attn_dp = args.int_value("--attn-dp", 0);
  cfg.attn_cp = args.int_value("--attn-cp", 0);
  cfg.dcp = args.int_value("--dcp", 0);
  cfg.shared_experts_tp = args.int_value("--shared-experts-tp", 0);
  return cfg.with_defaults(world);
}

// The kinds that exist in this layout, in pstate_group_kind_t order.
std::vector<pstate_group_kind_t> present_kinds(const Layout &l) {
  std::vector<pstate_group_kind_t> kinds;
  for (int k = 0; k < layout::kKindCount; ++k)
    if (l.has(static_cast<pstate_group_kind_t>(k))) kinds.push_back(static_cast<pstate_group_kind_t>(k));
  return kinds;
}

// ---- --json ---------------------------------------------------------------------------------

std::string to_json(const Layout &l) {
  std::string out = "{\"world_size\": " + std::to_string(l.world_size()) + ", \"groups\": {";
  const char *kind_sep = "";
  for (pstate_group_kind_t kind : present_kinds(l)) {
    out += kind_sep;
    out += "\"" + std::string(layout::kind_name(kind)) + "\": [";
    for (size_t g = 0; g < l.group_count(kind); ++g) {
      out += g ? ",[" : "[";
      const char *rank_sep = "";
      for (int r : l.group_ranks(kind, g)) {
        out += rank_sep + std::to_string(r);
        rank_sep = ",";
      }
      out += "]";
    }
    out += "]";
    kind_sep = ", ";
  }
  return out + "}}\n";
}

// ---- tables ---------------------------------------------------------------------------------

// "[0-3]" for runs of 3+ consecutive ranks, else "[0,4]".
std::string compact(std::span<const int> ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i) out += ",";
    if (j - i >= 2) {
      out += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
    } else {
      out += std::to_string(ranks[i]);
      if (j > i) out += "," + std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return out + "]";
}

void print_vllm_header(const Layout &l) {
  const ParallelConfig &c = l.config();
  std::printf("world %d (vllm) = ExternalDP %d x dp %d x pp %d x pcp %d x tp %d\n", l.world_size(),
              c.external_dp(l.world_size()), c.dp, c.pp, c.pcp, c.tp);
  std::printf("  dcp %d%s    ", c.dcp, c.dcp > 1 ? "" : " (no group)");
  if (c.moe_model) std::printf("MoE: ep and eplb of dp x pcp x tp = %d ranks\n\n", c.dp * c.pcp * c.tp);
  else std::printf("dense: no ep, eplb (--moe for a MoE model)\n\n");
}

void print_header(const Layout &l) {
  if (l.config().vllm()) return print_vllm_header(l);
  const ParallelConfig &c = l.config();
  std::printf("world %d = tp %d x pp %d\n", l.world_size(), c.tp, c.pp);
  std::printf("  attention: attn_dp %d x attn_cp %d x attn_tp %d    MoE: moe_dp %d x ep %d x moe_tp %d\n", c.attn_dp,
              c.attn_cp, l.attn_tp_size(), c.moe_dp, c.ep, l.moe_tp_size());
  std::printf("  dcp %d%s    shared_experts_tp %d%s\n\n", c.dcp, c.dcp > 1 ? "" : " (no group)", c.shared_experts_tp,
              c.shared_experts_tp > 1 ? "" : " (no group)");
}

void print_groups(const Layout &l) {
  std::printf("%-18s %7s %5s  %-8s %s\n", "kind", "groups", "size", "shares", "ranks of group 0, 1, ...");
  for (pstate_group_kind_t kind : present_kinds(l)) {
    const auto &p = l.groups(kind);
    std::string line;
    for (size_t g = 0; g < p.group_count(); ++g) line += (g ? " " : "") + compact(p.group(g));
    const char *shares = l.is_alias(kind) ? layout::kind_name(l.canonical(kind)) : "";
    std::printf("%-18s %7zu %5d  %-8s %s\n", layout::kind_name(kind), p.group_count(), p.group_size(), shares,
                line.c_str());
  }
}

void print_ranks(const Layout &l) {
  auto kinds = present_kinds(l);
  std::printf("\ngroup index of each rank, by kind:\n%6s", "rank");
  for (auto kind : kinds) std::printf(" %s", layout::kind_name(kind));
  std::printf("\n");
  for (int r = 0; r < l.world_size(); ++r) {
    std::printf("%6d", r);
    for (auto kind : kinds)
      std::printf(" %*zu", static_cast<int>(std::string(layout::kind_name(kind)).size()), l.group_of(kind, r));
    std::printf("\n");
  }
}

// JSON string literal of `text` (the error messages are ASCII; control characters escaped).
std::string json_string(const std::string &text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(ch));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// One line of --batch: its options parsed as `pstate layout`'s own, answered as --json.
std::string batch_answer(const std::string &line, bool &refused) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<char *> argv;
  for (auto &w : words) argv.push_back(w.data());
  try {
    ParsedArgs args = parse_args(kSpec, static_cast<int>(argv.size()), argv.data());
    if (args.flag("--batch") || args.help()) throw UsageError("--batch and --help are not options of a batch line");
    int world = args.required_int("--world");
    return to_json(Layout(world, config_from(args, world)));
  } catch (const std::exception &e) {  // UsageError, pstate::Error: this line's answer
    refused = true;
    return "{\"error\": " + json_string(e.what()) + "}\n";
  }
}

int run_batch() {
  bool refused = false;
  for (std::string line; std::getline(std::cin, line);) {
    size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    std::string answer = batch_answer(line, refused);
    std::fwrite(answer.data(), 1, answer.size(), stdout);
  }
  if (std::fflush(stdout) != 0) return kExitFailure;
  return refused ? kExitUsage : kExitOk;
}

int run_layout(const ParsedArgs &args) {
  if (args.flag("--batch")) {
    for (const OptionSpec &o : kOptions)
      if (args.flag(o.name) && std::string(o.name) != "--batch" && std::string(o.name) != "--json")
        throw UsageError(std::string("--batch reads every configuration from stdin; ") + o.name +
                         " belongs on its lines");
    return run_batch();
  }
  int world = args.required_int("--world");
  Layout l(world, config_from(args, world));  // throws pstate::Error: main prints it, exits 2
  if (args.flag("--json")) {
    std::string json = to_json(l);
    std::fwrite(json.data(), 1, json.size(), stdout);
  } else {
    print_header(l);
    print_groups(l);
    print_ranks(l);
  }
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailure;
}

}  // namespace

const Subcommand &layout_subcommand() {
  static const Subcommand sub{kSpec, run_layout};
  return sub;
}

}  // namespace pstate::cli
