#include <octet/nn/embedding.h>

#include <octet/nn/layer_norm.h>
#include <octet/ops/embedding.h>

namespace octet::nn {
namespace {
Tensor InitTable(const Embedding::Options& o) {
  OCTET_CHECK(o.num > 0 && o.dim > 0, "nn::Embedding: num and dim must be positive, got (", o.num, ", ", o.dim, ")");
  Tensor w = Empty({o.num, o.dim}, {.dtype = o.dtype});
  NormalFill_(w, 0.0, o.init_std, o.gen);
  return w;
}
}  // namespace

Embedding::Embedding(const Options& o) : options_(o), weight_(RegisterParameter("weight", InitTable(o))) {}

Tensor Embedding::Forward(const Tensor& indices) {
  return ToComputeDType(octet::Embedding(weight_, indices), amp_level());
}

}  // namespace octet::nn
