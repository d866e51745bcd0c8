// job_metrics.hpp — `pstate run --metrics [HOST:]PORT`: one Prometheus endpoint for the ranks a
// launcher started, so that a scrape config names one target per node instead of one per rank.
//
// Each rank serves its own /metrics (PSTATE_METRICS_ADDR; the launcher sets 127.0.0.1:0 when the
// environment does not say otherwise, so no rank's port is exposed or chosen by hand) and puts the
// address it serves, and its host name, on the job's store at "pstate/metrics/<rank>"
// (group/metrics_endpoint.hpp). A scrape of the launcher reads those keys, fetches every rank's
// text over HTTP (libcurl, 2 s per rank, all ranks at once), and answers one exposition: each
// metric family once (its HELP and TYPE), with every rank's samples labelled `rank` and `host`,
// and `pstate_rank_up{rank,host}`, 1 for a rank whose text it got and 0 for one it did not (not
// started yet, ended, not answering), as Prometheus' own `up` does for a target.
//
// Merging is textual and keeps what a rank wrote: a family is a `# TYPE` line and the samples that
// follow it (the exposition format's rule); samples of a family are grouped across ranks because
// the format forbids a family split in two.
#pragma once

#include <string>
#include <vector>

namespace pstate::cli {

// One rank's exposition as fetched (text empty and up false when it could not be had).
struct RankExposition {
  int rank = -1;
  std::string host;
  bool up = false;
  std::string text;
};

// The merged exposition of ranks (the rules above).
std::string merge_rank_metrics(const std::vector<RankExposition> &ranks);

// Fetches http://ADDRESS/metrics of each address at once (timeout_ms each); "" where a fetch
// failed or the address is empty. Needs libcurl; without it every entry is "".
std::vector<std::string> fetch_metrics(const std::vector<std::string> &addresses, long timeout_ms);

}  // namespace pstate::cli
