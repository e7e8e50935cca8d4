// train_gpt's --metrics file: one record per logged step and a final one,
// as JSON lines (a path ending in .json or .jsonl) or CSV (any other).
//
//   JSON  {"step":10,"loss":...,"lr":...,"grad_norm":...,"ms_per_step":...,
//          "tokens_per_s":...,"gflops":...,"worst_saturation":...,"val_loss":... or null}
//         then {"final":true,"val_loss":...,"ms_per_step":...,"tokens_per_s":...,
//               "peak_rss_mb":...} (null where there is no number)
//   CSV   a header line, then step,loss,lr,grad_norm,ms_per_step,tokens_per_s,
//         gflops,worst_saturation,val_loss (empty without an evaluation); no
//         final record
//
// Every record is flushed as written, so a killed run leaves all it logged.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "absl/status/status.h"

namespace octet::gpt {

class MetricsWriter {
 public:
  // Opens `path` ("" writes nothing), appending when `append` (a resumed
  // run; the CSV header only when the file is new). Errors name the file and
  // why it cannot be opened.
  absl::Status Open(const std::string& path, bool append);
  void Step(int64_t step, double loss, double lr, double grad_norm, double ms, double tok_s, double gflops,
            double worst_sat, double val_loss);
  // NaN val_loss, ms or tok_s are written as null.
  void Final(double val_loss, double ms, double tok_s, double peak_rss_mb);

 private:
  std::ofstream out_;
  bool json_ = false;
};

}  // namespace octet::gpt
