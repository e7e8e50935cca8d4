// The operands of the CPU GEMMs (internal to ops/cpu/): tensors as oneDNN
// matrix views in a normalised geometry, whether a B is worth packing, and
// the per-thread buffers of converted A operands. Shared by matmul_cpu.cc
// (the kernels' entry points) and widened_gemm.cc (the FP32-FMA path).
//
// NOTE [oneDNN operand geometry]: oneDNN's matmul takes any strides through
// its memory descriptors, but only row-major or column-major matrices (a unit
// stride in one of the two matrix dims, a leading dimension at least the
// other's extent) reach its fast kernels; anything else falls to a reference
// loop hundreds of times slower. So every operand is first normalised: batch
// dims that broadcast (size 1 or stride 0) become size 1, which oneDNN
// broadcasts itself; the strides of size-1 dims are made canonical; batch dims
// that are contiguous for all three tensors are merged; a batched A times a
// shared B whose batch dims fold into M becomes one 2-D GEMM. An operand whose
// matrix is neither row- nor column-major is copied (made contiguous) once.
#pragma once

#include <cstdint>
#include <memory>

#include <octet/core/dtype.h>
#include <octet/core/storage.h>
#include <octet/core/tensor.h>
#include <octet/ops/cpu/dnnl_gemm.h>

namespace octet::cpu {

// Merges batch dims across a, b and out (NOTE [oneDNN operand geometry]) and
// folds a shared B into M. All three views have one rank r >= 2 and
// normalised geometry; out is contiguous.
void Coalesce(MatView& a, MatView& b, MatView& out);

// A tensor operand as a MatView, copying it (into *keep) when oneDNN cannot
// read it.
MatView ViewOf(const Tensor& t, Tensor* keep);

// An operand as a MatView over its own elements, in its normalised layout. A
// layout oneDNN cannot read, or one with large gaps (the converters widen the
// whole span), is made contiguous first (kept alive in *keep).
MatView CompactView(const Tensor& t, Tensor* keep);

// An FP8 operand as a CompactView over its bytes (dtype bf16: what the GEMM
// computes on).
MatView Fp8View(const Tensor& t, Tensor* keep);

// A contiguous output as a MatView.
MatView OutView(const Tensor& out);

// See NOTE [packed weights] in dnnl_gemm.cc: packing B costs one pass over it
// and pays once there are a few hundred rows to reuse it for (measured on the
// GPT shapes; for small or batched GEMMs oneDNN's on-the-fly packing wins).
inline constexpr int64_t kPackMinRows = 256;
bool WorthPacking(const MatView& b, const MatView& out);

// WorthPacking for an f32 B read as it is: NOTE [small f32 B stays plain]
// (matmul_operands.cc).
bool WorthPackingF32(const MatView& b, const MatView& out);

// NOTE [converted A reuse]: an A operand oneDNN cannot read as it is (FP8
// codes, or bf16 on the FP32-FMA path) is converted in a pass of its own
// into a per-thread buffer, over its whole span in its own layout. A
// Linear's backward reads its output gradient dY as A twice in a row —
// dX = dY·W, then dW = dYᵀ·X — and both conversions produce the same bytes
// (dYᵀ is a view of the same span). So the buffer remembers what it holds:
// the source storage (weakly: a storage that died, even one whose memory was
// reused, never matches), the first element, the span, both dtypes and the
// storage's version (an in-place write bumps it). The second GEMM then skips
// its conversion pass: a third of the conversion work of an O1 step (perf,
// wide GPT, Zen 5). Values are exact conversions, so reuse cannot change a
// result, only skip recomputing it.
class ConvertedOperand {
 public:
  // v's span (elements of `from`: FP8 codes or bf16 bits) converted to
  // `to` in this buffer, v's geometry kept; `source` owns v's bytes.
  MatView Get(const Tensor& source, MatView v, DType from, DType to) {
    const int64_t span = std::max<int64_t>(SpanOf(v.dims, v.strides), 1);
    const std::shared_ptr<Storage>& storage = source.storage();
    const bool hit = storage_.lock() == storage && data_ == v.data && span_ == span && from_ == from && to_ == to &&
                     version_ == storage->version();
    last_hit_ = hit;
    if (!hit) storage_.reset();  // nothing valid until converted (a throw leaves it empty)
    void* dst = buffer_.Get(static_cast<size_t>(span) * SizeOf(to));  // a hit needs no more room
    if (!hit) {
      ConvertElements(v.data, from, to, span, dst);
      storage_ = storage;
      data_ = v.data;
      span_ = span;
      from_ = from;
      to_ = to;
      version_ = storage->version();
    }
    v.data = dst;
    v.dtype = to;
    return v;
  }

  // After the GEMM that read Get's result: once the conversion has served
  // its second GEMM (a hit: the pair NOTE [converted A reuse] describes is
  // complete), its buffer goes back to the CPU cache (NOTE [transient gemm
  // buffers] in dnnl_gemm.cc). Measured on the wide GPT step (peak RSS after
  // 30 steps): O1 303 -> 297 MiB, O1 with the FP8/FP16 AdamW state 234 ->
  // 227, O2 on the FP32-FMA path 297 -> 292.
  void AfterUse() {
    if (!last_hit_) return;
    buffer_.Release();
    storage_.reset();
    last_hit_ = false;
  }

 private:
  Workspace buffer_;
  bool last_hit_ = false;
  std::weak_ptr<Storage> storage_;
  const void* data_ = nullptr;
  int64_t span_ = 0;
  DType from_ = DType::kFloat32, to_ = DType::kFloat32;
  uint64_t version_ = 0;
};

// The calling thread's A conversions, one per target dtype.
ConvertedOperand& ThreadConvertedA(DType to);

}  // namespace octet::cpu
