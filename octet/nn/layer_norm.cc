#include <octet/nn/layer_norm.h>

#include <octet/ops/norm.h>

namespace octet::nn {

Tensor ToComputeDType(const Tensor& x, amp::Level level) {
  if (level == amp::Level::kO0) return x;
  return x.To(amp::ComputeDType(level));
}

Tensor CastParam(const Tensor* p, amp::Level level) {
  if (p == nullptr) return Tensor();
  if (level == amp::Level::kO0) return *p;
  return p->To(amp::ComputeDType(level));
}

LayerNorm::LayerNorm(const Options& o) : options_(o) {
  OCTET_CHECK(o.dim > 0, "nn::LayerNorm: dim must be positive, got ", o.dim);
  OCTET_CHECK(!o.bias || o.affine, "nn::LayerNorm: bias needs affine=true");
  if (o.affine) weight_ = &RegisterParameter("weight", Ones({o.dim}, {.dtype = o.dtype}));
  if (o.bias) bias_ = &RegisterParameter("bias", Zeros({o.dim}, {.dtype = o.dtype}));
}

Tensor LayerNorm::Forward(const Tensor& x) {
  const amp::Level level = amp_level();
  return octet::LayerNorm(ToComputeDType(x, level), CastParam(weight_, level), CastParam(bias_, level),
                          options_.eps);
}

RMSNorm::RMSNorm(const Options& o) : options_(o) {
  OCTET_CHECK(o.dim > 0, "nn::RMSNorm: dim must be positive, got ", o.dim);
  if (o.affine) weight_ = &RegisterParameter("weight", Ones({o.dim}, {.dtype = o.dtype}));
}

Tensor RMSNorm::Forward(const Tensor& x) {
  const amp::Level level = amp_level();
  return octet::RmsNorm(ToComputeDType(x, level), CastParam(weight_, level), options_.eps);
}

}  // namespace octet::nn
