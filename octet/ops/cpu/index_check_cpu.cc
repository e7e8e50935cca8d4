// CPU kernel of the deferred index check (ops/index_check.h).
#include <octet/core/dtype_traits.h>
#include <octet/ops/index_check_kernels.h>

namespace octet::cpu {
namespace {

void IndexCheckCpu(const Tensor& idx, int64_t bound, bool has_ignore, int64_t ignore, int64_t replacement,
                   int64_t op, const Tensor& sanitized, const Tensor& count, const Tensor& record) {
  int64_t* rec = record.data<int64_t>();
  int64_t valid = 0;
  Dispatch<DType::kInt64, DType::kInt32>(idx.dtype(), "index_check", [&]<typename I>() {
    const I* in = idx.data<I>();
    I* out = sanitized.data<I>();
    const int64_t n = idx.numel();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t x = static_cast<int64_t>(in[i]);
      const bool ignored = has_ignore && x == ignore;
      const bool ok = ignored || (x >= 0 && x < bound);
      out[i] = ok ? in[i] : static_cast<I>(replacement);
      valid += ok && !ignored;
      if (!ok && rec[0] == 0) {
        rec[0] = op;
        rec[1] = i;
        rec[2] = x;
        rec[3] = bound;
      }
    }
  });
  *count.data<int64_t>() = valid;
}

}  // namespace

OCTET_REGISTER_KERNEL(index_check_deferred, DeviceType::kCPU, &IndexCheckCpu);

}  // namespace octet::cpu
