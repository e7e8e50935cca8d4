// NOTE [host reads]: a count of the times the host reads tensor values
// through the API (Tensor::Item, At, ToDoubles/ToFloats, a copy from a device
// to the CPU, and the CUDA index checks' status reads). On a GPU each is a
// synchronisation with the device; in a training step there should be none
// between log points (see examples/gpt/train_gpt.cc and
// tests/nn/host_reads_test.cc, which counts a whole step on the CPU, where
// the same calls are made). Reading a CPU tensor's memory through data<T>()
// inside a CPU kernel is not counted: that is the kernel's own work, not a
// round trip.
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

#include <cstdint>

namespace octet {

// Reads since the process started (all threads; relaxed atomic).
int64_t HostReadCount();

namespace internal {
void CountHostRead();
}  // namespace internal

}  // namespace octet
