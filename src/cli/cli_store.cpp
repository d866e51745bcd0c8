// cli_store.cpp — `pstate store`: the rendezvous store as a process of its own.
//
//   pstate store --world-size N [--host H] [--port P] [--exit-when-done]
//
// Why: by default rank 0 serves the job's TCP store, so the store dies with rank 0. A launcher
// that outlives its ranks (`pstate run` hosts the store itself; torchrun's agent does the same)
// or a supervisor of another launcher runs this instead, and the store then outlives any rank:
// what the job keeps in it (the world's addresses, a dead rank's story) stays readable by the
// survivors. Ranks find it as they find rank 0's store (MASTER_ADDR, MASTER_PORT or
// init_method tcp://H:P); PSTATE_STORE_EXTERNAL=1 tells rank 0 not to try serving (without it,
// rank 0 finds the port taken, asks its holder, and uses the store when it admits rank 0).
//
// The job token comes from PSTATE_JOB_TOKEN and the job id from PSTATE_JOB_ID (never from the
// command line, where other users of the host could read the token): the store refuses a process
// that does not prove the same token, as rank 0's store does. It prints one line, "pstate store:
// serving tcp://H:P ...", once it listens (with --port 0, the port it got), and serves until
// SIGINT/SIGTERM (exit 0), or with --exit-when-done until every rank of the world has joined and
// left again.
#include "bootstrap/tcp_store_server.hpp"
#include "cli/cli.hpp"
#include "common/error.hpp"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace pstate::cli {
namespace {

constexpr OptionSpec kOptions[] = {
    {"--world-size", "N", "ranks in the job (required)"},
    {"--host", "H", "address to listen on (default 127.0.0.1; 0.0.0.0 for every address of the host)"},
    {"--port", "P", "port to listen on (default 29500; 0: any free port, printed)"},
    {"--exit-when-done", nullptr, "exit 0 once every rank has joined and left again"},
};

constexpr CommandSpec kSpec = {
    "store",
    "serve a job's rendezvous store as a process of its own (outlives any rank)",
    "--world-size N [--host H] [--port P] [--exit-when-done]",
    "Serves the TCP key-value store the ranks of one job meet at, which rank 0 serves otherwise,\n"
    "so the store outlives any rank. Start the ranks with MASTER_ADDR=H MASTER_PORT=P (or\n"
    "init_method tcp://H:P) and PSTATE_STORE_EXTERNAL=1. The job token is PSTATE_JOB_TOKEN and the\n"
    "job id PSTATE_JOB_ID from this environment (the ranks must have the same). Prints\n"
    "'pstate store: serving tcp://H:P ...' once listening; serves until SIGINT/SIGTERM (exit 0).",
    kOptions,
    false,
    false,
};

volatile sig_atomic_t g_stop = 0;
extern "C" void on_store_stop(int sig) { g_stop = sig; }

int run_store(const ParsedArgs &args) {
  const int world = args.int_value("--world-size", 0);
  if (world < 1) throw UsageError("--world-size N is required (N >= 1)");
  const int port = args.int_value("--port", 29500);
  if (port < 0 || port > 65535) throw UsageError("--port must be 0..65535");
  StoreServerOptions o;
  o.host = args.value("--host").value_or("127.0.0.1");
  o.port = port;
  o.world_size = world;
  o.owner_rank = -1;  // served by no rank
  if (const char *t = std::getenv("PSTATE_JOB_TOKEN")) o.job_token = t;
  if (const char *id = std::getenv("PSTATE_JOB_ID")) o.job_id = id;

  struct sigaction sa {};
  sa.sa_handler = on_store_stop;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  Logger logger;
  std::unique_ptr<TcpStoreServer> server = TcpStoreServer::start(o, logger);
  std::printf("pstate store: serving %s for a world of %d%s%s\n", server->url().c_str(), world,
              o.job_id.empty() ? "" : (", job " + o.job_id).c_str(),
              o.job_token.empty() ? ", no job token (PSTATE_JOB_TOKEN unset: any process may join)" : ", job token set");
  std::fflush(stdout);

  const bool until_done = args.flag("--exit-when-done");
  while (g_stop == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // Every rank joined once (counted by the server, so a job shorter than this loop's period
    // is not missed) and none is connected now.
    const StoreServerStats s = server->stats();
    if (until_done && s.ever_joined == static_cast<size_t>(world) && s.ranks == 0) {
      std::printf("pstate store: every rank of the world joined and left; exiting\n");
      return kExitOk;
    }
  }
  std::printf("pstate store: stopped by signal %d\n", static_cast<int>(g_stop));
  return kExitOk;
}

}  // namespace

const Subcommand &store_subcommand() {
  static const Subcommand sub{kSpec, run_store};
  return sub;
}

}  // namespace pstate::cli
