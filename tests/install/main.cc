// Built against the installed octet: a tiny autograd + FP8 round trip.
#include <cmath>
#include <cstdio>

#include <octet/octet.h>

int main() {
  using namespace octet;
  Tensor x = FromVector(std::vector<double>{1.0, -2.0, 3.0}, {3}, {.requires_grad = true});
  Tensor y = Sum(Mul(x, x));
  y.Backward();
  const std::vector<double> g = x.grad().ToDoubles();
  Tensor q = x.detach().To(DType::kFloat8E4M3);
  const bool ok = g[0] == 2.0 && g[1] == -4.0 && g[2] == 6.0 && q.At({2}) == 3.0 && y.Item() == 14.0;
  std::printf("consumer: grad = [%g, %g, %g], fp8(3) = %g -> %s\n", g[0], g[1], g[2], q.At({2}), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
