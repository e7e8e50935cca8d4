// Embedding: a (num, dim) table looked up by integer indices (ops/embedding.h).
//
// amp: the table stays float32; at O1/O2 the gathered rows are converted to
// bfloat16 (the same values as gathering from a bf16 copy of the table, and
// the gradient is scattered into the float32 table). Embeddings never use FP8.
#pragma once

#include <cstdint>

#include <octet/core/random.h>
#include <octet/core/tensor.h>
#include <octet/nn/module.h>

namespace octet::nn {

class Embedding : public Module {
 public:
  struct Options {
    int64_t num = 0;  // V, number of rows
    int64_t dim = 0;  // C
    double init_std = 1.0;  // weight ~ N(0, init_std)
    DType dtype = DType::kFloat32;
    Generator* gen = nullptr;  // null: the default generator
  };
  explicit Embedding(const Options& options);
  // indices: any shape, int64/int32, values in [0, num) -> (indices.shape..., dim).
  Tensor Forward(const Tensor& indices);
  Tensor operator()(const Tensor& indices) { return Forward(indices); }
  Tensor& weight() { return weight_; }
  const Options& options() const { return options_; }

 private:
  Options options_;
  Tensor& weight_;
};

}  // namespace octet::nn
