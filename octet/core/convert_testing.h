// Test and benchmark hooks of core/convert.h (not installed).
#pragma once

#include <octet/core/convert.h>

namespace octet::internal {

// For tests and benchmarks: use at most the features in `isa` (intersected
// with DetectedConverterIsa(), so asking for more than the CPU has is safe;
// OCTET_DISABLE_AVX512 does not apply).
// Meant for single-threaded test setup: a converter call running at the same
// time uses either the old or the new setting (each call reads it once).
void SetConverterIsaForTesting(const ConverterIsa& isa);

// true: force the scalar loops. false: back to the default choice (the
// detected features, without AVX-512 when OCTET_DISABLE_AVX512 is set).
void ForceScalarConvertersForTesting(bool force_scalar);

// SetConverterIsaForTesting(isa) for a scope; the default choice comes back
// when it ends, also when a test assertion returns early.
class ScopedConverterIsa {
 public:
  explicit ScopedConverterIsa(const ConverterIsa& isa) { SetConverterIsaForTesting(isa); }
  ~ScopedConverterIsa() { ForceScalarConvertersForTesting(false); }
  ScopedConverterIsa(const ScopedConverterIsa&) = delete;
  ScopedConverterIsa& operator=(const ScopedConverterIsa&) = delete;
};

}  // namespace octet::internal
