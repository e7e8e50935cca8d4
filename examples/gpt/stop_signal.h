// How train_gpt takes SIGINT and SIGTERM (NOTE [stopping on a signal]).
//
// NOTE [stopping on a signal]: with --ckpt_dir, the first SIGINT or SIGTERM
// (Ctrl-C, a scheduler's preemption, octet-run passing either on) does not
// end the run at once: it ends after the step in flight, with a checkpoint of
// that step, and train_gpt exits 128 + the signal (the final evaluation and
// the sample are skipped; --resume continues bit-identically). One process
// stops after the step it is in; ranks under octet-run agree on the step at
// the next read point (a progress line, every --log_every steps, or an
// evaluation or save), taking the largest signal any rank got. A second
// signal ends the process at once. Before and after the training loop, and
// without --ckpt_dir, the signals end the process as usual.
//
// No thread ever runs a signal handler: SIGINT and SIGTERM are blocked in
// every thread (StartStopSignalThread runs first in main, so OpenMP's, Gloo's
// and every later thread inherit the mask) and one thread takes them with
// sigwait. A handler interrupting a compute thread can corrupt the heap:
// Debian's oneDNN 2.7 points rsp into the heap inside its generated f32 GEMM
// kernels (oneDNN issue 4845, fixed in 3.11), so the signal frame lands on
// heap memory. Measured with a handler: ONEDNN_MAX_CPU_ISA=AVX2 runs
// SIGTERMed mid-step aborted ("corrupted size vs. prev_size") 12 times in 50.
#pragma once

namespace octet::gpt {

// Blocks SIGINT and SIGTERM in the calling thread (and so in every thread it
// starts later) and starts the thread that takes them. Call first in main,
// before any other thread exists.
void StartStopSignalThread();

// While on, the first SIGINT or SIGTERM is noted (StopSignal) and a second
// ends the process; while off (the start), either ends the process as its
// default action would. Turning it off with a signal noted ends the process
// by that signal.
void CatchStopSignals(bool on);

// The signal noted while catching, 0 when none.
int StopSignal();
// Notes `sig` as the signal the run stopped on (the ranks' agreed one).
void SetStopSignal(int sig);

}  // namespace octet::gpt
