// Identical FP8 scales on every rank (DESIGN.md §6): the delayed-scaling
// amax histories of every FP8 slot of a model are MAX-reduced across ranks
// once per step, in one collective.
//
// NOTE [amax sync]: every slot's history ([H] float32) and its scale
// ([1] float32) are concatenated into one buffer — the scales negated — and
// one AllReduce(max) runs over it; the results are copied back. MAX of the
// histories is what a single process seeing every rank's data would have
// recorded (recording shifts all ranks' histories alike, and max commutes
// with the shift); -MAX(-scale) is the smallest scale, which is the scale
// ComputeScale gives for the reduced history (it is monotone in the amax), so
// no rank needs to recompute anything. Call it after backward (every slot has
// recorded this step's amax) and before the next forward, on every rank.
//
// This reads the per-slot buffers of nn::amp::ScalingState; when the FP8
// state moves to one contiguous amax buffer per model, only this function
// changes (one AllReduce on that buffer).
#pragma once

#include <octet/distributed/process_group.h>
#include <octet/nn/fp8_state.h>
#include <octet/nn/module.h>

namespace octet::dist {

// Returns the number of float32 values reduced (0: the model has no FP8 slots).
// Throws octet::Error on a collective failure.
int64_t AllReduceAmaxes(ProcessGroup& pg, nn::Module& model);

// The same for a model driven by the FP8 state manager (nn/fp8_state.h): the
// manager's Update() calls one AllReduce(max) on its contiguous buffer of
// this step's amaxes before it rolls the histories, so every rank records the
// same amaxes and computes the same scales (slots not recorded on a rank hold
// -1, below any real amax). `pg` must outlive `state`'s updates.
void SyncAmaxesThrough(ProcessGroup& pg, nn::amp::Fp8State& state);

}  // namespace octet::dist
