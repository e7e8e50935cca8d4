// The float64 causal-attention reference the attention tests compare with
// (tests/ops/attention_test.cc, tests/ops/attention_flash_test.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <octet/core/tensor.h>

namespace octet::testing {

// (B,H,T,D) in row-major order, float64.
struct AttentionRef {
  std::vector<double> out, lse, dq, dk, dv;
};

// Explicit softmax over each causal row: p_j = exp(s_j - max) / sum, j <= t.
// With dout: the gradients, through dP = dO V^T and dS = P o (dP - rowsum(P o dP)).
inline AttentionRef AttentionReference(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
              const Shape& shape, double scale, const std::vector<double>* dout = nullptr) {
  const int64_t bh = shape[0] * shape[1], t = shape[2], d = shape[3];
  AttentionRef r;
  r.out.assign(q.size(), 0.0);
  r.lse.assign(bh * t, 0.0);
  if (dout) {
    r.dq.assign(q.size(), 0.0);
    r.dk.assign(q.size(), 0.0);
    r.dv.assign(q.size(), 0.0);
  }
  std::vector<double> p(t), dp(t);
  for (int64_t h = 0; h < bh; ++h) {
    const int64_t base = h * t * d;
    for (int64_t i = 0; i < t; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += q[base + i * d + c] * k[base + j * d + c];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= i; ++j) sum += p[j] = std::exp(p[j] - mx);
      for (int64_t j = 0; j <= i; ++j) p[j] /= sum;
      r.lse[h * t + i] = mx + std::log(sum);
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t c = 0; c < d; ++c) r.out[base + i * d + c] += p[j] * v[base + j * d + c];
      if (!dout) continue;
      double pdp = 0;
      for (int64_t j = 0; j <= i; ++j) {
        dp[j] = 0;
        for (int64_t c = 0; c < d; ++c) {
          dp[j] += (*dout)[base + i * d + c] * v[base + j * d + c];
          r.dv[base + j * d + c] += p[j] * (*dout)[base + i * d + c];
        }
        pdp += p[j] * dp[j];
      }
      for (int64_t j = 0; j <= i; ++j) {
        const double ds = p[j] * (dp[j] - pdp) * scale;
        for (int64_t c = 0; c < d; ++c) {
          r.dq[base + i * d + c] += ds * k[base + j * d + c];
          r.dk[base + j * d + c] += ds * q[base + i * d + c];
        }
      }
    }
  }
  return r;
}

}  // namespace octet::testing
