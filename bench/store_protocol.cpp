// store_protocol.cpp — start-up's store traffic at scale, ranks as threads (issue 30, item 5).
//
//   store_protocol [--sizes 256,1024,4096] [--address-bytes B] [--connect-batch K] [--no-watcher]
//                  [--json OUT]
//
// For each size N, runs N simulated ranks (store_protocol.hpp: the library's TcpStore client,
// its server and the rendezvous function pstate_init calls) and prints, per size, the requests,
// frames and bytes per rank (rank 0 apart: it gathers the directory), the watcher connection's,
// the server's totals and the time. Counts are exact; times are this machine's (threads share
// its cores with the server's one thread).
#include "store_protocol.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

using namespace pstate;
using namespace pstate::bench;

namespace {

struct Summary {
  uint64_t min = UINT64_MAX, max = 0, sum = 0;
  size_t count = 0;
  void add(uint64_t v) {
    min = std::min(min, v);
    max = std::max(max, v);
    sum += v;
    ++count;
  }
  double mean() const { return count ? static_cast<double>(sum) / static_cast<double>(count) : 0; }
  std::string json() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "{\"min\": %llu, \"mean\": %.2f, \"max\": %llu}",
                  static_cast<unsigned long long>(count ? min : 0), mean(), static_cast<unsigned long long>(max));
    return buf;
  }
};

void raise_nofile() {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) == 0 && l.rlim_cur < l.rlim_max) {
    l.rlim_cur = l.rlim_max;
    setrlimit(RLIMIT_NOFILE, &l);
  }
}

std::string row_json(const ProtocolOptions &o, const ProtocolResult &r) {
  // Ranks 1..N-1 (the clients), rank 0 apart; the watcher connection of every rank.
  Summary req, frames, sent, recv, w_req, w_sent, w_recv;
  for (size_t i = 1; i < r.rank.size(); ++i) {
    req.add(r.rank[i].requests);
    frames.add(r.rank[i].frames);
    sent.add(r.rank[i].bytes_sent);
    recv.add(r.rank[i].bytes_received);
  }
  for (const auto &w : r.watcher) {
    w_req.add(w.requests);
    w_sent.add(w.bytes_sent);
    w_recv.add(w.bytes_received);
  }
  const StoreTraffic &z = r.rank[0];
  std::ostringstream s;
  s << "{\"ranks\": " << o.world_size << ", \"address_bytes\": " << o.address_bytes
    << ", \"watcher\": " << (o.watcher ? "true" : "false") << ", \"connect_batch\": " << o.connect_batch << ", \"exchange_ms\": " << r.exchange_ms
    << ", \"total_ms\": " << r.total_ms << ",\n  \"rank_requests\": " << req.json()
    << ", \"rank_frames\": " << frames.json() << ", \"rank_sent_bytes\": " << sent.json()
    << ", \"rank_received_bytes\": " << recv.json() << ",\n  \"rank0\": {\"requests\": " << z.requests
    << ", \"frames\": " << z.frames << ", \"sent_bytes\": " << z.bytes_sent << ", \"received_bytes\": "
    << z.bytes_received << "},\n  \"watcher_requests\": " << w_req.json() << ", \"watcher_sent_bytes\": "
    << w_sent.json() << ", \"watcher_received_bytes\": " << w_recv.json() << ",\n  \"server\": {\"accepted\": "
    << r.server.accepted << ", \"peak_connections\": " << r.server.peak_connections << ", \"requests\": "
    << r.server.requests << ", \"received_bytes\": " << r.server.bytes_received << ", \"sent_bytes\": "
    << r.server.bytes_sent << "}}";
  return s.str();
}

}  // namespace

int main(int argc, char **argv) {
  std::vector<int> sizes{256, 1024, 4096};
  ProtocolOptions o;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "store_protocol: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--sizes") {
      sizes.clear();
      std::stringstream ss(value());
      for (std::string item; std::getline(ss, item, ',');) sizes.push_back(std::atoi(item.c_str()));
    } else if (a == "--address-bytes") {
      o.address_bytes = static_cast<size_t>(std::atol(value().c_str()));
    } else if (a == "--connect-batch") {
      o.connect_batch = std::atoi(value().c_str());
    } else if (a == "--no-watcher") {
      o.watcher = false;
    } else if (a == "--json") {
      json_path = value();
    } else {
      std::fprintf(stderr,
                   "usage: store_protocol [--sizes 256,1024,4096] [--address-bytes B] [--connect-batch K] [--no-watcher] [--json OUT]\n");
      return 2;
    }
  }
  raise_nofile();
  std::vector<std::string> rows;
  for (int n : sizes) {
    o.world_size = n;
    ProtocolResult r = run_store_protocol(o);
    if (!r.error.empty()) {
      std::fprintf(stderr, "store_protocol: %d ranks failed: %s\n", n, r.error.c_str());
      return 1;
    }
    rows.push_back(row_json(o, r));
    std::printf("%s\n", rows.back().c_str());
    std::fflush(stdout);
  }
  if (!json_path.empty()) {
    FILE *f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "store_protocol: cannot write %s: %s\n", json_path.c_str(), std::strerror(errno));
      return 1;
    }
    std::fprintf(f, "{\"sizes\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) std::fprintf(f, "%s%s\n", rows[i].c_str(), i + 1 < rows.size() ? "," : "");
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
