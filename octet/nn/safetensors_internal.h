// The absl::Status forms of nn/safetensors.h, shared with nn/checkpoint.cc
// (private: not installed). The public functions throw what these return.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <octet/core/error.h>
#include <octet/nn/safetensors.h>

namespace octet::nn::internal {

absl::Status SaveSafetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                             const std::map<std::string, std::string>& metadata = {}, uint32_t* digest = nullptr);
absl::StatusOr<SafetensorsFile> LoadSafetensors(const std::string& path);

// Throws octet::Error with the status' message unless it is ok.
inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw Error(std::string(status.message()));
}

}  // namespace octet::nn::internal
