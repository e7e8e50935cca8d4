#include <octet/core/amax_note.h>

#include <memory>
#include <utility>

namespace octet {

void NoteAmax(const Tensor& x, const Tensor& amax) {
  OCTET_CHECK(x.defined() && x.is_contiguous(), "NoteAmax: x must be a defined contiguous tensor");
  OCTET_CHECK(amax.defined() && amax.dtype() == DType::kFloat32 && amax.numel() == 1 && amax.device() == x.device(),
              "NoteAmax: the amax must be one float32 on ", x.device(), ", got ", Describe(amax));
  auto note = std::make_shared<AmaxNote>(
      AmaxNote{x.storage()->version(), x.offset(), x.numel(), x.dtype(), amax});
  x.storage()->SetAmaxNote(std::move(note));
}

Tensor NotedAmax(const Tensor& x) {
  if (!x.defined()) return Tensor();
  const std::shared_ptr<Storage>& storage = x.storage();
  const std::shared_ptr<const AmaxNote> note = storage->amax_note();
  if (note == nullptr || note->version != storage->version() || note->offset != x.offset() ||
      note->numel != x.numel() || note->dtype != x.dtype() || !x.is_contiguous()) {
    return Tensor();
  }
  return note->amax;
}

}  // namespace octet
