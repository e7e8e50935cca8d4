// Host-side launch decisions of the CUDA kernels, in plain C++ (no CUDA
// headers) so they are unit-tested on the CPU (tests/cuda/launch_math_test.cc):
// dimension coalescing for strided kernels, the vector width of the 16-byte
// contiguous path, grid sizes, and the plan of a reduction.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace octet::cuda {

// Largest rank a strided kernel takes after coalescing.
inline constexpr int kMaxDims = 10;

// N operands over one iteration shape, dims coalesced like cpu::StridedIter:
// size-1 dims dropped, neighbours merged when every operand is contiguous
// across them. Strides count elements; dim rank-1 varies fastest.
template <int N>
struct StridedLayout {
  int rank = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
};

// Builds the layout of `shape` for operands with the given strides (each of
// shape.size() entries). Returns false when more than kMaxDims dims remain.
// A scalar (or all-size-1) shape gives rank 1, size 1 (or 0 for an empty shape).
template <int N>
bool Coalesce(const std::vector<int64_t>& shape, const std::array<const std::vector<int64_t>*, N>& strides,
              StridedLayout<N>* out) {
  StridedLayout<N> l;
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (l.rank > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k) mergeable &= l.strides[k][l.rank - 1] == (*strides[k])[d] * shape[d];
      if (mergeable) {
        l.sizes[l.rank - 1] *= shape[d];
        for (int k = 0; k < N; ++k) l.strides[k][l.rank - 1] = (*strides[k])[d];
        continue;
      }
    }
    if (l.rank == kMaxDims) return false;
    l.sizes[l.rank] = shape[d];
    for (int k = 0; k < N; ++k) l.strides[k][l.rank] = (*strides[k])[d];
    ++l.rank;
  }
  if (l.rank == 0) {
    l.rank = 1;
    l.sizes[0] = numel == 0 ? 0 : 1;
    for (int k = 0; k < N; ++k) l.strides[k][0] = 0;
  }
  *out = l;
  return true;
}

// True when every size and every reachable offset fits in 32 bits, so the
// kernel's index arithmetic can use 32-bit division.
template <int N>
bool FitsInt32(const StridedLayout<N>& l) {
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  int64_t numel = 1;
  for (int d = 0; d < l.rank; ++d) numel *= l.sizes[d];
  if (numel > kMax) return false;
  for (int k = 0; k < N; ++k) {
    int64_t reach = 0;
    for (int d = 0; d < l.rank; ++d) {
      const int64_t s = l.strides[k][d] < 0 ? -l.strides[k][d] : l.strides[k][d];
      reach += s * (l.sizes[d] > 0 ? l.sizes[d] - 1 : 0);
    }
    if (reach > kMax) return false;
  }
  return true;
}

// Elements per access on the contiguous path: 16 bytes of the widest operand
// (4 floats, 8 bf16, 2 doubles, 16 fp8), halved until every operand's pointer
// is aligned to its access size. `addrs` and `elem_sizes` list the operands.
inline int PickVectorWidth(const uintptr_t* addrs, const int* elem_sizes, int n_operands) {
  int widest = 1;
  for (int k = 0; k < n_operands; ++k) widest = std::max(widest, elem_sizes[k]);
  int vec = 16 / widest;
  if (vec < 1) vec = 1;
  while (vec > 1) {
    bool aligned = true;
    for (int k = 0; k < n_operands; ++k)
      aligned &= addrs[k] % static_cast<uintptr_t>(vec * elem_sizes[k]) == 0;
    if (aligned) break;
    vec /= 2;
  }
  return vec;
}

// Threads per block of the elementwise kernels.
inline constexpr int kElementwiseThreads = 256;
// Resident blocks per SM a grid-stride launch aims for.
inline constexpr int kBlocksPerSm = 8;

// Blocks for a grid-stride loop over `work_items` with `threads` per block:
// enough to cover the work, at most kBlocksPerSm per SM, at least 1.
inline int64_t GridSize(int64_t work_items, int threads, int sm_count) {
  const int64_t needed = (work_items + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(std::max(sm_count, 1)) * kBlocksPerSm;
  return std::max<int64_t>(1, std::min(needed, cap));
}

// ---- reductions --------------------------------------------------------------

// A reduction of a contiguous tensor viewed as [outer, r, inner], reducing r
// (inner == 1: each output reduces one contiguous row). kPermute: the reduced
// dims are not one block, so the input is first copied to [kept..., reduced...]
// (perm gives that order) and reduced as rows.
struct ReducePlan {
  enum Kind { kOuterRInner, kPermute } kind = kOuterRInner;
  int64_t outer = 1;
  int64_t r = 1;
  int64_t inner = 1;
  std::vector<int64_t> perm;  // kPermute only
};

// `contiguous`: the input is row-major contiguous. reduced[d]: dim d is reduced.
inline ReducePlan PlanReduce(const std::vector<int64_t>& shape, bool contiguous, const std::vector<bool>& reduced) {
  ReducePlan p;
  int64_t kept_n = 1, red_n = 1;
  for (size_t d = 0; d < shape.size(); ++d) (reduced[d] ? red_n : kept_n) *= shape[d];
  // Group the dims of size > 1 into runs of reduced / kept.
  std::vector<std::pair<bool, int64_t>> runs;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!runs.empty() && runs.back().first == reduced[d])
      runs.back().second *= shape[d];
    else
      runs.push_back({reduced[d], shape[d]});
  }
  if (contiguous) {
    int reduced_runs = 0;
    for (auto& r : runs) reduced_runs += r.first;
    if (reduced_runs <= 1) {
      bool seen = false;
      for (auto& [is_red, n] : runs) {
        if (is_red) {
          p.r = n;
          seen = true;
        } else {
          (seen ? p.inner : p.outer) *= n;
        }
      }
      return p;
    }
  }
  p.kind = ReducePlan::kPermute;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!reduced[d]) p.perm.push_back(static_cast<int64_t>(d));
  for (size_t d = 0; d < shape.size(); ++d)
    if (reduced[d]) p.perm.push_back(static_cast<int64_t>(d));
  p.outer = kept_n;
  p.r = red_n;
  p.inner = 1;
  return p;
}

// Rows shorter than this are reduced by one warp each; longer ones by one
// block each (kReduceThreads).
inline constexpr int64_t kWarpRowLimit = 512;
inline constexpr int kReduceThreads = 512;
// A split of a row reduction covers at least this many elements; a split of a
// column reduction at least this many rows (of 32 columns).
inline constexpr int64_t kMinElementsPerSplit = 8192;
inline constexpr int64_t kMinRowsPerSplit = 256;

// How many pieces each reduction of length r is cut into so that
// `output_blocks * splits` blocks fill the device (about 4 per SM). 1 when
// there is enough parallelism already or r is short (< 2 * min_per_split);
// the partial results are combined by a second pass.
inline int64_t ChooseSplits(int64_t output_blocks, int64_t r, int sm_count, int64_t min_per_split) {
  const int64_t target = static_cast<int64_t>(std::max(sm_count, 1)) * 4;
  if (output_blocks >= target) return 1;
  const int64_t by_parallelism = (target + output_blocks - 1) / std::max<int64_t>(output_blocks, 1);
  const int64_t by_length = r / min_per_split;
  return std::max<int64_t>(1, std::min(by_parallelism, by_length));
}

// ---- row kernels (norm, softmax, cross-entropy, embedding) -------------------

// Threads of a block that owns one row of `n` elements: about 4 elements per
// thread, a power of two from 32 (one warp) to 512.
inline int RowThreads(int64_t n) {
  int threads = 32;
  while (threads < 512 && static_cast<int64_t>(threads) * 4 < n) threads *= 2;
  return threads;
}

// Row blocks the parameter gradients of a norm over `rows` rows are cut into
// (each block sums its rows per column, then the partials are added in block
// order): a function of the row count only, so results do not depend on the GPU.
inline constexpr int64_t kMaxParamSplits = 64;
inline int64_t ParamGradSplits(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(kMaxParamSplits, rows / kMinRowsPerSplit));
}

// Columns per block of the [outer, r, inner] kernel (one warp wide) and the
// rows its threads split between them.
inline constexpr int kColumnTileX = 32;
inline constexpr int kColumnTileY = 16;

}  // namespace octet::cuda
