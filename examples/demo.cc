// A small tour of octet's core: tensors, FP8 quantisation with scales,
// autograd, and a few steps of gradient descent on a least-squares problem.
#include <cstdio>

#include <octet/octet.h>

int main() {
  using namespace octet;
  ManualSeed(42);

  // FP8 carries its scale: quantize, look at the scale, dequantize.
  Tensor x = Randn({4, 8}, 0.0, 3.0);
  Tensor q = x.To(DType::kFloat8E4M3);
  std::printf("x: %s, q: %s, max |x - dequant(q)| = %.4f\n", Describe(x).c_str(), Describe(q).c_str(),
              AbsMax(Sub(x, q.To(DType::kFloat32))).Item());

  // Least squares by gradient descent: find w with A w = b.
  Tensor a = Randn({64, 8});
  Tensor w_true = Randn({8, 1});
  Tensor b = Sum(Mul(a, w_true.T().Expand({64, 8})), {1}, /*keepdim=*/true);
  Tensor w = Zeros({8, 1}, {.requires_grad = true});
  for (int step = 0; step < 200; ++step) {
    Tensor pred = Sum(Mul(a, w.T().Expand({64, 8})), {1}, true);
    Tensor loss = Mean(Square(Sub(pred, b)));
    w.zero_grad();
    loss.Backward();
    {
      NoGradGuard no_grad;
      AddInPlace(w, w.grad(), -0.1);
    }
    if (step % 50 == 0 || step == 199) std::printf("step %3d  loss %.6f\n", step, loss.Item());
  }
  std::printf("max |w - w_true| = %.2e\n", AbsMax(Sub(w.detach(), w_true)).Item());
  return 0;
}
