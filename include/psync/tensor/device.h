// Device: where a tensor's memory lives (CPU, or CUDA device N).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device CPU() { return Device{DeviceType::kCPU, 0}; }
  static Device CUDA(int index = 0) { return Device{DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string ToString() const;  // "cpu" or "cuda:N"
  bool operator==(const Device& o) const { return type == o.type && (is_cpu() || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

// Parses "cpu", "cuda" (= cuda:0) or "cuda:N".
absl::StatusOr<Device> ParseDevice(absl::string_view text);

// True when psync was built with CUDA.
bool BuiltWithCuda();
// Number of usable CUDA devices; 0 without CUDA support, driver or GPU.
int CudaDeviceCount();
// OK when `device` can be used in this process; otherwise says why (e.g.
// "no CUDA device: CUDA driver version is insufficient").
absl::Status CheckDeviceAvailable(const Device& device);

}  // namespace psync
