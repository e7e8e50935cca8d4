// How the CUDA multi-tensor kernels (ops/cuda/multi_tensor.cu) split a list
// of tensors into launches and blocks, in plain C++ so the CPU tests
// (tests/ops/multi_tensor_test.cc) check it.
//
// NOTE [multi-tensor chunks]: every tensor is cut into chunks of
// kMultiTensorChunk elements (the last one shorter); one block handles one
// chunk. A launch takes up to kMultiTensorMaxPerLaunch tensors of one dtype
// (their pointers, sizes and first chunk indices travel in the kernel's
// parameters, no device copy), so a list of n tensors of one dtype needs
// ceil(n / kMultiTensorMaxPerLaunch) launches. Chunks are numbered across
// all launches (first_chunk), so the norm kernel writes each chunk's sum to
// its own slot of one scratch buffer, and a final block adds the slots in
// order: deterministic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <octet/core/macros.h>

namespace octet {

inline constexpr int kMultiTensorMaxPerLaunch = 64;
inline constexpr int64_t kMultiTensorChunk = 32768;

struct MultiTensorLaunch {
  std::vector<int> tensors;         // indices into the planned list, at most max_per_launch
  std::vector<int64_t> chunk_begin;  // per tensor: its first chunk, relative to first_chunk (+ one end entry)
  int64_t first_chunk = 0;          // the global number of this launch's first chunk
  int64_t chunks() const { return chunk_begin.empty() ? 0 : chunk_begin.back(); }
};

// Launches for tensors `numels` whose dtypes are given by `group` (tensors of
// one group value share a launch; groups in order of first appearance,
// tensors in list order within a group). Tensors with no elements are left
// out. chunk > 0, max_per_launch > 0.
inline std::vector<MultiTensorLaunch> PlanMultiTensor(const std::vector<int64_t>& numels, const std::vector<int>& group,
                                                      int64_t chunk = kMultiTensorChunk,
                                                      int max_per_launch = kMultiTensorMaxPerLaunch) {
  std::vector<int> order;  // groups in order of first appearance
  for (int g : group) {
    bool seen = false;
    for (int o : order) seen |= o == g;
    if (!seen) order.push_back(g);
  }
  std::vector<MultiTensorLaunch> out;
  int64_t next_chunk = 0;
  for (int g : order) {
    MultiTensorLaunch cur;
    auto flush = [&] {
      if (cur.tensors.empty()) return;
      cur.first_chunk = next_chunk;
      next_chunk += cur.chunks();
      out.push_back(std::move(cur));
      cur = MultiTensorLaunch();
    };
    for (size_t i = 0; i < numels.size(); ++i) {
      if (group[i] != g || numels[i] <= 0) continue;
      if (cur.chunk_begin.empty()) cur.chunk_begin.push_back(0);
      cur.tensors.push_back(static_cast<int>(i));
      cur.chunk_begin.push_back(cur.chunk_begin.back() + (numels[i] + chunk - 1) / chunk);
      if (static_cast<int>(cur.tensors.size()) == max_per_launch) flush();
    }
    flush();
  }
  return out;
}

// The total number of chunks of a plan.
inline int64_t MultiTensorChunks(const std::vector<MultiTensorLaunch>& plan) {
  return plan.empty() ? 0 : plan.back().first_chunk + plan.back().chunks();
}

// The tensor (position in chunk_begin) that holds chunk `c` of a launch:
// the last t with chunk_begin[t] <= c (binary search; the device runs the same).
OCTET_HOST_DEVICE inline int MultiTensorOwner(const int64_t* chunk_begin, int count, int64_t c) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (chunk_begin[mid] <= c) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace octet
