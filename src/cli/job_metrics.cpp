// job_metrics.cpp — the launcher's merged /metrics (job_metrics.hpp has the rules).
#include "cli/job_metrics.hpp"

#include "common/prometheus_label.hpp"

#include <map>
#include <string_view>

#ifdef PSTATE_CLI_HAVE_CURL
#include <curl/curl.h>
#endif

namespace pstate::cli {

namespace {

std::string label_value(std::string_view v) {
  return pstate::prometheus_label_value(v);
}

struct Family {
  std::string help, type;          // their whole lines ("" when a rank wrote none)
  std::vector<std::string> lines;  // samples, every rank's, relabelled
};

// "name{a="b"} 1" -> "name{rank="R",host="H",a="b"} 1"; "name 1" -> "name{rank="R",host="H"} 1"
std::string relabel(std::string_view line, const std::string &labels) {
  size_t end = 0;
  while (end < line.size() && line[end] != '{' && line[end] != ' ') ++end;
  std::string out(line.substr(0, end));
  if (end < line.size() && line[end] == '{') {
    const bool empty = end + 1 < line.size() && line[end + 1] == '}';
    out += "{" + labels + (empty ? "" : ",");
    out += line.substr(end + 1);
  } else {
    out += "{" + labels + "}";
    out += line.substr(end);
  }
  return out;
}

}  // namespace

std::string merge_rank_metrics(const std::vector<RankExposition> &ranks) {
  std::vector<std::string> order;
  std::map<std::string, Family> families;
  auto family = [&](const std::string &name) -> Family & {
    auto [it, added] = families.try_emplace(name);
    if (added) order.push_back(name);
    return it->second;
  };
  for (const RankExposition &r : ranks) {
    if (!r.up) continue;
    const std::string labels = "rank=\"" + std::to_string(r.rank) + "\",host=\"" + label_value(r.host) + "\"";
    std::string current;  // the family the samples belong to (the last # TYPE or # HELP)
    size_t at = 0;
    while (at < r.text.size()) {
      size_t nl = r.text.find('\n', at);
      if (nl == std::string::npos) nl = r.text.size();
      std::string_view line(r.text.data() + at, nl - at);
      at = nl + 1;
      if (line.empty()) continue;
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        std::string_view rest = line.substr(7);
        current = std::string(rest.substr(0, rest.find(' ')));
        Family &f = family(current);
        std::string &slot = line[2] == 'H' ? f.help : f.type;
        if (slot.empty()) slot = std::string(line);
        continue;
      }
      if (line[0] == '#') continue;  // a comment
      if (current.empty()) {         // a sample before any TYPE: its own name is its family
        std::string_view name = line.substr(0, line.find_first_of("{ "));
        family(std::string(name)).lines.push_back(relabel(line, labels));
      } else {
        family(current).lines.push_back(relabel(line, labels));
      }
    }
  }
  std::string out;
  for (const std::string &name : order) {
    const Family &f = families[name];
    if (!f.help.empty()) out += f.help + "\n";
    if (!f.type.empty()) out += f.type + "\n";
    for (const std::string &l : f.lines) out += l + "\n";
  }
  out += "# HELP pstate_rank_up 1 when the launcher got the rank's metrics at this scrape, else 0 (not started, "
         "ended, not answering)\n# TYPE pstate_rank_up gauge\n";
  for (const RankExposition &r : ranks)
    out += "pstate_rank_up{rank=\"" + std::to_string(r.rank) + "\",host=\"" + label_value(r.host) + "\"} " +
           (r.up ? "1" : "0") + "\n";
  return out;
}

#ifdef PSTATE_CLI_HAVE_CURL

namespace {
size_t append(char *data, size_t size, size_t n, void *to) {
  static_cast<std::string *>(to)->append(data, size * n);
  return size * n;
}
}  // namespace

std::vector<std::string> fetch_metrics(const std::vector<std::string> &addresses, long timeout_ms) {
  static const bool inited = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  std::vector<std::string> out(addresses.size());
  if (!inited) return out;
  CURLM *multi = curl_multi_init();
  if (multi == nullptr) return out;
  std::vector<CURL *> handles(addresses.size(), nullptr);
  std::vector<std::string> urls(addresses.size());
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses[i].empty()) continue;
    CURL *h = curl_easy_init();
    if (h == nullptr) continue;
    urls[i] = "http://" + addresses[i] + "/metrics";
    curl_easy_setopt(h, CURLOPT_URL, urls[i].c_str());
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &append);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &out[i]);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");  // ranks are reached directly, never through a proxy
    curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
    curl_multi_add_handle(multi, h);
    handles[i] = h;
  }
  int running = 1;
  while (running > 0) {
    if (curl_multi_perform(multi, &running) != CURLM_OK) break;
    if (running > 0) curl_multi_poll(multi, nullptr, 0, 200, nullptr);
  }
  // a transfer that failed (refused, timed out, not 200) gives no text
  while (true) {
    int left = 0;
    CURLMsg *m = curl_multi_info_read(multi, &left);
    if (m == nullptr) break;
    if (m->msg != CURLMSG_DONE || m->data.result == CURLE_OK) continue;
    for (size_t i = 0; i < handles.size(); ++i)
      if (handles[i] == m->easy_handle) out[i].clear();
  }
  for (CURL *h : handles) {
    if (h == nullptr) continue;
    curl_multi_remove_handle(multi, h);
    curl_easy_cleanup(h);
  }
  curl_multi_cleanup(multi);
  return out;
}

#else

std::vector<std::string> fetch_metrics(const std::vector<std::string> &addresses, long) {
  return std::vector<std::string>(addresses.size());
}

#endif

}  // namespace pstate::cli
