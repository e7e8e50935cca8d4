#include <octet/autograd/gradcheck.h>

#include <cmath>
#include <random>
#include <sstream>

#include <octet/autograd/engine.h>
#include <octet/autograd/grad_mode.h>

namespace octet {
namespace {

double WeightedSum(const Tensor& y, const std::vector<double>& w) {
  const std::vector<double> v = y.ToDoubles();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

}  // namespace

GradcheckResult Gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                          const GradcheckOptions& options) {
  GradcheckResult result;
  TensorList xs;
  for (const Tensor& x : inputs) {
    if (x.defined() && x.requires_grad()) {
      OCTET_CHECK(x.dtype() == DType::kFloat64, "Gradcheck: inputs that require grad must be float64, got ",
                  Describe(x));
    }
    xs.push_back(x);
  }
  // Analytic: backward of sum(w * y).
  Tensor y = fn(xs);
  OCTET_CHECK(y.dtype() == DType::kFloat64, "Gradcheck: output must be float64, got ", Describe(y));
  std::mt19937_64 gen(options.seed);
  std::uniform_real_distribution<double> dist(0.5, 1.5);
  std::vector<double> w(y.numel());
  for (double& v : w) v = dist(gen) * ((gen() & 1) ? 1 : -1);
  TensorList wrt;
  for (const Tensor& x : xs)
    if (x.defined() && x.requires_grad()) wrt.push_back(x);
  if (wrt.empty()) {
    result.ok = false;
    result.message = "no input requires grad";
    return result;
  }
  if (!y.requires_grad()) {
    result.ok = false;
    result.message = "output does not require grad";
    return result;
  }
  const Tensor wt = FromVector(w, y.shape(), {.dtype = DType::kFloat64, .device = y.device()});
  const TensorList analytic = autograd::Grad({y}, wrt, {wt});

  // Numeric: perturb every element of every input in place (no grad).
  std::ostringstream os;
  int bad = 0;
  for (size_t k = 0; k < wrt.size(); ++k) {
    Tensor x = wrt[k].detach();
    const std::vector<double> a = analytic[k].ToDoubles();
    OCTET_CHECK(x.device().is_cpu() && x.is_contiguous(), "Gradcheck: inputs must be contiguous CPU tensors");
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double orig = p[i];
      double lp, lm;
      {
        NoGradGuard ng;
        p[i] = orig + options.eps;
        x.storage()->BumpVersion();
        lp = WeightedSum(fn(xs), w);
        p[i] = orig - options.eps;
        x.storage()->BumpVersion();
        lm = WeightedSum(fn(xs), w);
        p[i] = orig;
        x.storage()->BumpVersion();
      }
      const double numeric = (lp - lm) / (2 * options.eps);
      const double tol = options.atol + options.rtol * std::abs(numeric);
      if (!(std::abs(numeric - a[i]) <= tol)) {
        if (bad < 10)
          os << "input " << k << " element " << i << ": analytic " << a[i] << " numeric " << numeric << "\n";
        ++bad;
      }
    }
  }
  if (bad) {
    result.ok = false;
    result.message = std::to_string(bad) + " gradient elements differ:\n" + os.str();
  }
  return result;
}

}  // namespace octet
