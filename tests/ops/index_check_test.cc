// NOTE [deferred index checks]: with the mode on, Embedding and CrossEntropy
// give the same bits (values and gradients) as the immediate check for valid
// indices, do not throw at the call for a bad one, and the next
// ThrowIfDeferredIndexCheckFailed names the op, the value, its position and
// the range — the first failure only, once.
#include <octet/ops/index_check.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include <octet/core/host_reads.h>
#include <octet/ops/embedding.h>
#include <octet/ops/softmax.h>
#include "tests/test_util.h"

namespace octet {
namespace {

using ::octet::testing::ErrorOf;
using ::octet::testing::RandomTensor;
using ::testing::HasSubstr;

struct Deferred {
  Deferred() { SetDeferredIndexChecks(true); }
  ~Deferred() { SetDeferredIndexChecks(false); }
};

struct Result {
  std::vector<double> y, dx;
};

Result CrossEntropyRun(const Tensor& logits, const Tensor& targets, Reduction red, bool deferred) {
  std::optional<Deferred> mode;
  if (deferred) mode.emplace();
  const Tensor x = logits.detach().requires_grad_();
  const Tensor y = CrossEntropy(x, targets, /*ignore_index=*/-1, red);
  const Tensor dy = red == Reduction::kNone ? RandomTensor(y.shape(), 9, y.dtype()) : Full({}, 0.75, {.dtype = y.dtype()});
  y.Backward(dy);
  return {y.ToDoubles(), x.grad().ToDoubles()};
}

TEST(DeferredIndexChecks, SameBitsAsTheImmediateCheckForValidIndices) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    const Tensor logits = RandomTensor({7, 5}, 3, dtype, -3, 3);
    const Tensor targets = FromVector(std::vector<int64_t>{0, 4, -1, 2, 3, -1, 1}, {7});
    for (Reduction red : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
      const Result a = CrossEntropyRun(logits, targets, red, false), b = CrossEntropyRun(logits, targets, red, true);
      EXPECT_EQ(b.y, a.y) << Name(dtype);
      EXPECT_EQ(b.dx, a.dx) << Name(dtype);
    }
    // Every row ignored: a zero mean and zero gradient in both modes.
    const Tensor none = Full({7}, -1.0, {.dtype = DType::kInt64});
    const Result a = CrossEntropyRun(logits, none, Reduction::kMean, false);
    const Result b = CrossEntropyRun(logits, none, Reduction::kMean, true);
    EXPECT_EQ(b.y, a.y);
    EXPECT_EQ(b.dx, a.dx);
  }
  const Tensor w = RandomTensor({6, 4}, 4, DType::kFloat32);
  const Tensor ids = FromVector(std::vector<int32_t>{5, 0, 3, 3}, {2, 2});
  const Tensor y0 = Embedding(w, ids);
  Deferred mode;
  EXPECT_EQ(Embedding(w, ids).ToDoubles(), y0.ToDoubles());
  ThrowIfDeferredIndexCheckFailed();  // nothing recorded
}

TEST(DeferredIndexChecks, ABadIndexIsReportedAtTheNextCheckOnly) {
  const Tensor w = RandomTensor({6, 4}, 5, DType::kFloat32);
  Deferred mode;
  const int64_t reads = HostReadCount();
  // Embedding: id 9 at flat position 2 and a later -1; the call does not throw
  // and the bad rows read row 0.
  const Tensor y = Embedding(w, FromVector(std::vector<int64_t>{1, 0, 9, 2, -1}, {5}));
  // Cross entropy afterwards: its failure is not the first one.
  const Tensor loss = CrossEntropy(RandomTensor({3, 6}, 6, DType::kFloat32), FromVector(std::vector<int64_t>{1, 7, 0}, {3}));
  EXPECT_EQ(HostReadCount(), reads);  // neither call read the device
  const std::vector<double> rows = y.ToDoubles(), w0 = w.Narrow(0, 0, 1).ToDoubles();
  EXPECT_EQ(std::vector<double>(rows.begin() + 8, rows.begin() + 12), w0);
  EXPECT_EQ(std::vector<double>(rows.begin() + 16, rows.end()), w0);
  EXPECT_THAT(ErrorOf([] { ThrowIfDeferredIndexCheckFailed(); }),
              HasSubstr("embedding: index 9 at flat position 2 is out of range [0, 6)"));
  ThrowIfDeferredIndexCheckFailed();  // cleared: the cross-entropy failure came later and was not kept
  // The cross-entropy one alone, now: the bad target counts as ignored.
  const Tensor l2 = CrossEntropy(RandomTensor({3, 6}, 6, DType::kFloat32), FromVector(std::vector<int64_t>{1, 7, 0}, {3}),
                                 -100, Reduction::kNone);
  EXPECT_EQ(l2.ToDoubles()[1], 0.0);
  EXPECT_THAT(ErrorOf([] { ThrowIfDeferredIndexCheckFailed(); }),
              HasSubstr("cross_entropy: index 7 at flat position 1 is out of range [0, 6)"));
  (void)loss;
}

TEST(DeferredIndexChecks, OffByDefaultTheCallThrowsAtOnce) {
  EXPECT_FALSE(DeferredIndexChecks());
  const Tensor w = RandomTensor({6, 4}, 5, DType::kFloat32);
  EXPECT_THAT(ErrorOf([&] { Embedding(w, FromVector(std::vector<int64_t>{1, 9}, {2})); }),
              HasSubstr("embedding: index 9 at position [1]"));
}

}  // namespace
}  // namespace octet
