// The programs the example tests start: the build's train_gpt, sample_gpt,
// octet-run and octet-device-info (OCTET_TRAIN_GPT / OCTET_SAMPLE_GPT /
// OCTET_RUN, set by examples/gpt/CMakeLists.txt, or their places under the
// build directory).
#pragma once

namespace octet::testing {

#ifdef OCTET_TRAIN_GPT
inline const char* const kTrainGpt = OCTET_TRAIN_GPT;
#else
inline const char* const kTrainGpt = OCTET_BINARY_DIR "/examples/gpt/train_gpt";
#endif
#ifdef OCTET_SAMPLE_GPT
inline const char* const kSampleGpt = OCTET_SAMPLE_GPT;
#else
inline const char* const kSampleGpt = OCTET_BINARY_DIR "/examples/gpt/sample_gpt";
#endif
#ifdef OCTET_RUN
inline const char* const kOctetRun = OCTET_RUN;
#else
inline const char* const kOctetRun = OCTET_BINARY_DIR "/octet-run";
#endif

inline const char* const kDeviceInfo = OCTET_BINARY_DIR "/octet-device-info";

}  // namespace octet::testing
