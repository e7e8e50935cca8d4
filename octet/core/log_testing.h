// Test hooks of core/log.h (not installed).
#pragma once

namespace octet::internal {

// Back to the state of a fresh process: the default sink, no message seen
// yet, and the level read again from OCTET_LOG_LEVEL at the next use.
void ResetLogForTesting();

}  // namespace octet::internal
