// The dtype dispatch of one AdamW tensor (ops/optim_kernels.h), shared by the
// CPU and CUDA kernels so both accept the same combinations with the same
// messages (private: not installed).
#pragma once

#include <type_traits>

#include <octet/core/dtype_traits.h>
#include <octet/core/error.h>
#include <octet/ops/optim_kernels.h>

namespace octet {

// Whether a's scaled-state tensors (fp8_e4m3 m, float16 v) are all there.
inline bool HasAdamWScales(const AdamWTensorArgs& a) {
  return a.m_scale.defined() && a.m_scale_inv.defined() && a.m_amax.defined() && a.v_scale.defined() &&
         a.v_scale_inv.defined() && a.v_amax.defined();
}

// Calls run.template operator()<P, G, M, V, kMaster>() with the element
// types of a's parameter, gradient, first and second moment and whether a
// float32 master is kept; fails (naming the tensors) for a combination no
// kernel implements. `scales` says whether the scale tensors scaled state
// needs are present (for a group: in every tensor of it).
template <typename Run>
void DispatchAdamW(const AdamWTensorArgs& a, bool scales, Run&& run) {
  auto with_state = [&]<typename P, typename G>() {
    auto go = [&]<typename M, typename V>() {
      if constexpr (std::is_same_v<P, double>) {
        run.template operator()<P, G, M, V, false>();
      } else if constexpr (std::is_same_v<M, double> || std::is_same_v<V, double>) {
        OCTET_FAIL("adamw: float64 state is only used with float64 parameters, got ", Describe(a.param));
      } else if (a.master.defined()) {
        if constexpr (std::is_same_v<P, bfloat16> || std::is_same_v<P, float16>) {
          run.template operator()<P, G, M, V, true>();
        } else {
          OCTET_FAIL("adamw: a master copy is only kept for bfloat16/float16 parameters, got ", Describe(a.param));
        }
      } else {
        run.template operator()<P, G, M, V, false>();
      }
    };
    const DType md = a.m.dtype(), vd = a.v.dtype();
    if (md == DType::kFloat32 && vd == DType::kFloat32) {
      go.template operator()<float, float>();
    } else if (md == DType::kFloat64 && vd == DType::kFloat64) {
      go.template operator()<double, double>();
    } else if (md == DType::kBFloat16 && vd == DType::kBFloat16) {
      go.template operator()<bfloat16, bfloat16>();
    } else if (md == DType::kFloat8E4M3 && vd == DType::kFloat16) {
      OCTET_CHECK(scales, "adamw: scaled state (fp8_e4m3 m, float16 v) needs its scale tensors");
      go.template operator()<float8_e4m3, float16>();
    } else {
      OCTET_FAIL("adamw: unsupported state dtypes m ", Name(md), ", v ", Name(vd),
                 " (expected float32/float32, float64/float64, bfloat16/bfloat16 or fp8_e4m3/float16)");
    }
  };
  DispatchFloat(a.param.dtype(), "adamw", [&]<typename P>() {
    if (a.grad.dtype() == a.param.dtype()) {
      with_state.template operator()<P, P>();
    } else if (a.grad.dtype() == DType::kFloat32) {
      if constexpr (!std::is_same_v<P, float>) with_state.template operator()<P, float>();
    } else {
      OCTET_FAIL("adamw: gradient ", Describe(a.grad), " does not match parameter ", Describe(a.param));
    }
  });
}

}  // namespace octet
