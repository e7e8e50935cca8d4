#include "examples/gpt/metrics_writer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace octet::gpt {

namespace fs = std::filesystem;

absl::Status MetricsWriter::Open(const std::string& path, bool append) {
  if (path.empty()) return absl::OkStatus();
  json_ = absl::EndsWith(path, ".json") || absl::EndsWith(path, ".jsonl");
  const bool exists = fs::exists(path);
  errno = 0;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) {
    const int err = errno;  // set by the open(2) under the stream
    return absl::InvalidArgumentError(absl::StrCat("cannot open --metrics file '", path, "'",
                                                   err != 0 ? absl::StrCat(": ", std::strerror(err)) : ""));
  }
  if (!json_ && (!append || !exists))
    out_ << "step,loss,lr,grad_norm,ms_per_step,tokens_per_s,gflops,worst_saturation,val_loss\n";
  return absl::OkStatus();
}

void MetricsWriter::Step(int64_t step, double loss, double lr, double grad_norm, double ms, double tok_s,
                         double gflops, double worst_sat, double val_loss) {
  if (!out_.is_open()) return;
  const std::string val = std::isnan(val_loss) ? (json_ ? "null" : "") : absl::StrFormat("%.9g", val_loss);
  if (json_) {
    out_ << absl::StrFormat(
        "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"ms_per_step\":%.3f,\"tokens_per_s\":%.1f,"
        "\"gflops\":%.3f,\"worst_saturation\":%.6g,\"val_loss\":%s}\n",
        step, loss, lr, grad_norm, ms, tok_s, gflops, worst_sat, val);
  } else {
    out_ << absl::StrFormat("%d,%.9g,%.9g,%.9g,%.3f,%.1f,%.3f,%.6g,%s\n", step, loss, lr, grad_norm, ms, tok_s,
                            gflops, worst_sat, val);
  }
  out_.flush();
}

void MetricsWriter::Final(double val_loss, double ms, double tok_s, double peak_rss_mb) {
  if (!out_.is_open() || !json_) return;
  // null where there is no number: no timed step, or no evaluation.
  auto or_null = [](double v, std::string text) { return std::isnan(v) ? std::string("null") : text; };
  out_ << absl::StrFormat(
      "{\"final\":true,\"val_loss\":%s,\"ms_per_step\":%s,\"tokens_per_s\":%s,\"peak_rss_mb\":%.1f}\n",
      or_null(val_loss, absl::StrFormat("%.9g", val_loss)), or_null(ms, absl::StrFormat("%.3f", ms)),
      or_null(tok_s, absl::StrFormat("%.1f", tok_s)), peak_rss_mb);
  out_.flush();
}

}  // namespace octet::gpt
