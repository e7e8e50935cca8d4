// Amax notes: the largest magnitude of a storage's elements, left by the
// kernel that last wrote them, so that Amax() need not read them again.
//
// NOTE [amax notes]: at O1 every FP8 Linear quantizes its weight with current
// scaling (NOTE [weight scaling] in nn/fp8_linear.cc) after every optimizer
// step, and the scale needs the amax of the new weight first: a full read of
// every weight per step (wide GPT, 14 M f32 weights: 8 passes, ~2.5 ms of a
// ~100 ms step on the 2-core Xeon of issue 12). The CPU AdamW update has each
// new weight in registers anyway, so it takes their amax on the way, at no
// extra memory traffic, and notes it on the weight's storage. Amax() of
// exactly those elements at exactly that version returns a copy of the noted
// value: the same bits the amax kernel would compute (both are the maximum of
// the magnitudes, NaN when any element is NaN). Any later write bumps the
// storage's version and so retires the note; a view of part of the elements
// does not match it and is read as before.
//
// Notes are kept only for storages that asked for them (WantAmaxNotes: the
// FP8 weight cache asks for its weights), so the O0 and O2 updates take no
// amax they would not use. A writer notes after its version bump, and only
// when it really ran: a graph capture executes nothing, so a captured
// optimizer step leaves no note (its replays bump the version and would
// retire it anyway).
#pragma once

#include <cstdint>

#include <octet/core/dtype.h>
#include <octet/core/tensor.h>

namespace octet {

struct AmaxNote {
  uint64_t version = 0;  // the storage version the value describes
  int64_t offset = 0;    // the elements described: [offset, offset + numel) of dtype, contiguous
  int64_t numel = 0;
  DType dtype = DType::kFloat32;
  Tensor amax;  // f32 (1) on the storage's device: max |x|, NaN when any x is NaN
};

// Notes amax as the largest magnitude of x's elements at the storage's current
// version; x contiguous, amax an f32 tensor of one element on x's device.
// The caller has just written x and bumped the version.
void NoteAmax(const Tensor& x, const Tensor& amax);

// The noted amax of exactly x's elements at their current version (the noted
// tensor itself: callers copy it before handing it out), or an undefined Tensor.
Tensor NotedAmax(const Tensor& x);

}  // namespace octet
