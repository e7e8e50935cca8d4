// Shape ops are differentiable: gradcheck through every view and copy, and
// the gradient of a view written back into the right place of its base.
#include <gtest/gtest.h>

#include <octet/autograd/gradcheck.h>
#include <octet/ops/pointwise.h>
#include <octet/ops/reduce.h>
#include <octet/ops/shape.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::AllClose;
using ::octet::testing::RandomTensor;

Tensor X(const Shape& shape, uint64_t seed = 1) {
  return RandomTensor(shape, seed, DType::kFloat64).requires_grad_();
}

void ExpectGradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                     const char* what, const GradcheckOptions& options = {}) {
  GradcheckResult r = Gradcheck(fn, inputs, options);
  EXPECT_TRUE(r.ok) << what << ": " << r.message;
}

TEST(ShapeGrad, ViewsPassGradcheck) {
  Tensor x = X({2, 3, 4});
  ExpectGradcheck([](const TensorList& in) { return in[0].Reshape({4, 6}); }, {x}, "reshape");
  ExpectGradcheck([](const TensorList& in) { return in[0].View({-1}); }, {x}, "view");
  ExpectGradcheck([](const TensorList& in) { return in[0].Permute({2, 0, 1}); }, {x}, "permute");
  ExpectGradcheck([](const TensorList& in) { return in[0].Transpose(0, 2).Reshape({-1}); }, {x},
                  "transpose+reshape (copy)");
  ExpectGradcheck([](const TensorList& in) { return in[0].Narrow(1, 1, 2); }, {x}, "narrow");
  ExpectGradcheck([](const TensorList& in) { return in[0].Slice(2, 0, 4, 3); }, {x}, "strided slice");
  ExpectGradcheck([](const TensorList& in) { return in[0].Select(0, 1); }, {x}, "select");
  ExpectGradcheck([](const TensorList& in) { return in[0].Unsqueeze(1).Squeeze(1); }, {x}, "unsqueeze");
  ExpectGradcheck([](const TensorList& in) { return in[0].Flatten(0, 1); }, {x}, "flatten");
  Tensor y = X({3, 1});
  ExpectGradcheck([](const TensorList& in) { return in[0].Expand({2, 3, 5}); }, {y}, "expand");
}

TEST(ShapeGrad, CopiesAndCatSplitPassGradcheck) {
  Tensor a = X({2, 3}, 1), b = X({2, 2}, 2);
  ExpectGradcheck([](const TensorList& in) { return in[0].T().Contiguous(); }, {a}, "contiguous");
  ExpectGradcheck([](const TensorList& in) { return in[0].Clone(); }, {a}, "clone");
  ExpectGradcheck([](const TensorList& in) { return Cat({in[0], in[1]}, 1); }, {a, b}, "cat");
  ExpectGradcheck([](const TensorList& in) { return Split(in[0], {1, 2}, 1)[1]; }, {a}, "split");
  ExpectGradcheck([](const TensorList& in) { return Stack({in[0], in[0]}, 1); }, {a}, "stack");
  ExpectGradcheck([](const TensorList& in) { return in[0].To(DType::kFloat32).To(DType::kFloat64); }, {a},
                  "to float32 and back",
                  // float32 rounding of x +- eps is noise at the default eps: step wider.
                  {.eps = 1e-2, .atol = 1e-4, .rtol = 1e-4});
}

TEST(ShapeGrad, SliceGradientLandsInPlace) {
  Tensor x = Zeros({3, 4}, {.dtype = DType::kFloat64, .requires_grad = true});
  Sum(MulScalar(x.Slice(1, 1, 4, 2), 3.0)).Backward();
  EXPECT_TRUE(AllClose(x.grad(), std::vector<double>{0, 3, 0, 3, 0, 3, 0, 3, 0, 3, 0, 3}, 0, 0));
}

TEST(ShapeGrad, ChunkedUseOfOneTensorAccumulates) {
  // q, k, v style: split a fused tensor and use every piece.
  Tensor x = X({2, 6});
  ExpectGradcheck(
      [](const TensorList& in) {
        TensorList p = Chunk(in[0], 3, 1);
        return Add(Mul(p[0], p[1]), p[2]);
      },
      {x}, "chunk");
}

}  // namespace
}  // namespace octet
