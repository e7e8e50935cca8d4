// How the CPU evaluates GELU and its gradient on bfloat16 tensors.
//
// NOTE [bf16 gelu tables]: a bfloat16 value has 65536 codes, so GELU of a
// bf16 tensor can be a table of 65536 results instead of an exponential and
// a division per value. octet builds two f32 tables at the first use, by
// running the f32 kernels themselves over every code: gelu(x) and gelu'(x).
// Then
//   forward   out = bf16(gelu_table[x]),
//   backward  dx = bf16(dy * grad_table[x])   (the kernel's dy * gelu'(x)),
//   GeluFp8   the block's f32 GELU values read from gelu_table,
// which are the computed kernels' results bit for bit, in every build: the
// f32 kernel computes the same functor, and the backward multiplies the
// same gelu'(x) by dy once (tests/ops/gelu_table_test.cc checks every code).
// Whether the lookups win depends on the CPU: measured with
// octet_pointwise_bench (2 threads, warm, 2026-11-29) on a Xeon with AMX, whose
// AVX-512 gathers are fast, a table GELU ran at 0.58x the f32 kernel's time
// against 1.07x computed, its backward 0.56x against 1.02x; on a Zen 5
// (2026-11-24) the gathers lost to the computed kernel for activation-like
// inputs (3.4 against 3.05 ms). So the path is chosen per process by timing
// both on one thread over 16 Ki activation-like values at the first bf16 GELU
// (both directions, with filling the tables: 2-3 ms on a Zen 3), unless
// OCTET_CPU_GELU says `table` or `compute` (`auto` or empty: measure). Any
// other value is an error at the first bf16 GELU. The forward and the backward
// are timed and chosen each on its own (GeluFp8 follows the forward): a lookup
// costs about the same in both, the computed gradient ~1.4x the computed GELU
// (the probe on an AMD EPYC Zen 3, 2026-11-30, ns a value: forward table
// 0.46-0.50 against computed 0.71-0.72, backward 0.55-0.57 against 0.99-1.02),
// so a CPU whose two forwards are close can still want the table for the
// backward. On that Zen 3 both chose the table, and inside train_gpt's O2 step
// (scripts/omp_regions.sh, 60 steps) the bf16 GELU regions agreed: forward 0.30
// against 0.41 ms a call computed, backward 0.35 against 0.55. A day later, on
// a noisier host of the same kind, the probe chose the same, but in that step
// the table's forward read 0.43-0.51 ms against 0.41 computed (its backward
// still won, 0.49-0.52 against 0.55): a lookup's speed there moves with what
// the host's other load leaves of the caches, the computed form's does not
// (docs/cpu-speed.md, twenty-second session). Not changed: GELU is ~1 % of a
// step. Tried and not kept (Zen 3, 2026-11-30): a second, 16 KiB copy of each
// table holding only the codes of magnitude in [2^-12, 16) (index: sign,
// exponent - 115, mantissa), read with AVX2 gathers and the full table for
// the rest, so that the lookups stay in L1 inside a step. The gathers cost
// more than the misses they saved: the probe's forward 0.64 against 0.57 ns a
// value, backward 0.73 against 0.54; in the small O2 step (OCTET_CPU_GELU=
// table) forward 413 against 303 us a call, backward 447 against 381. The
// same table read with scalar loads behind a range test ran at 1.3 ns.
// f32, f16 and f64 tensors are always computed.
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

#include <string>

namespace octet {

enum class CpuGeluPath { kCompute, kTable };

// "compute" or "table" (the spelling OCTET_CPU_GELU takes).
const char* Name(CpuGeluPath path);

struct CpuGeluPathInfo {
  // The forward's path (and GeluFp8's).
  CpuGeluPath path = CpuGeluPath::kCompute;
  // The probe's single-thread times of a bf16 GELU forward, nanoseconds a
  // value (best of several runs); measured even under an override.
  double table_ns = 0.0;
  double compute_ns = 0.0;
  // Why this path: "measured: table 0.11 < compute 0.20 ns a value",
  // "OCTET_CPU_GELU=compute", ...
  std::string reason;
  // The same for the backward (dy * gelu'(x)), timed and chosen on its own.
  CpuGeluPath backward_path = CpuGeluPath::kCompute;
  double backward_table_ns = 0.0;
  double backward_compute_ns = 0.0;
  std::string backward_reason;
};

// The path for this process: decided at the first call (thread-safe), then
// cached. Throws octet::Error naming the variable and the accepted values
// when OCTET_CPU_GELU holds anything but table, compute, auto or "".
CpuGeluPathInfo GetCpuGeluPath();

}  // namespace octet
