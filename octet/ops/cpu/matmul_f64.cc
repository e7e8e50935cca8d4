// octet's own f64 GEMM (see matmul_f64.h).
#include <octet/ops/cpu/matmul_f64.h>

#include <cstdint>
#include <vector>

#include <octet/ops/cpu/loops.h>

namespace octet::cpu {

void MatmulF64(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  const Tensor bc = (b.stride(-1) == 1 || b.size(-1) == 1) ? b : b.Contiguous();
  const int64_t r = out.dim(), M = out.size(r - 2), N = out.size(r - 1), K = a.size(r - 1);
  const int64_t batch = out.numel() / (M * N);
  std::vector<int64_t> a_off(batch, 0), b_off(batch, 0);
  for (int64_t bi = 0; bi < batch; ++bi) {
    int64_t rem = bi;
    for (int64_t d = r - 3; d >= 0; --d) {
      const int64_t idx = rem % out.size(d);
      rem /= out.size(d);
      if (a.size(d) != 1) a_off[bi] += idx * a.stride(d);
      if (bc.size(d) != 1) b_off[bi] += idx * bc.stride(d);
    }
  }
  const double* ap = a.data<double>();
  const double* bp = bc.data<double>();
  double* op = out.data<double>();
  const Tensor bias_c = bias.defined() ? bias.Contiguous() : Tensor();
  const double* biasp = bias_c.defined() ? bias_c.data<double>() : nullptr;
  const int64_t sam = a.stride(r - 2), sak = a.stride(r - 1), sbk = bc.stride(r - 2);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(N * K, 1));
  ParallelFor(batch * M, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t bi = row / M, m = row % M;
      double* c = op + row * N;
      std::fill(c, c + N, 0.0);
      const double* arow = ap + a_off[bi] + m * sam;
      const double* bb = bp + b_off[bi];
      for (int64_t k = 0; k < K; ++k) {
        const double av = arow[k * sak];
        const double* brow = bb + k * sbk;
        for (int64_t n = 0; n < N; ++n) c[n] += av * brow[n];
      }
      if (biasp != nullptr)
        for (int64_t n = 0; n < N; ++n) c[n] += biasp[n];
    }
  });
}

}  // namespace octet::cpu
