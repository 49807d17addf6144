#include "psync/tensor/device.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"
#include "worker/tensor/cuda/cuda_device.h"

namespace psync {

std::string Device::ToString() const {
  if (is_cpu()) return "cpu";
  return absl::StrCat("cuda:", index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  const std::string original(text.data(), text.size());
  if (text == "cpu") return Device::CPU();
  if (text == "cuda") return Device::CUDA(0);
  if (absl::ConsumePrefix(&text, "cuda:")) {
    int index = -1;
    if (absl::SimpleAtoi(text, &index) && index >= 0 && !text.empty() && text[0] != '+') {
      return Device::CUDA(index);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid device \"", original,
                   "\": expected cpu, cuda or cuda:N"));
}

bool BuiltWithCuda() {
#ifdef PSYNC_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int CudaDeviceCount() { return cuda_device::DeviceCount(nullptr); }

absl::Status CheckDeviceAvailable(const Device& device) {
  if (device.is_cpu()) return absl::OkStatus();
  if (!BuiltWithCuda()) {
    return absl::FailedPreconditionError(
        absl::StrCat(device.ToString(), " requested but ", cuda_device::kNoCudaMessage));
  }
  std::string why;
  const int count = cuda_device::DeviceCount(&why);
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(device.ToString(), " requested but there is no CUDA device: ", why));
  }
  if (device.index < 0 || device.index >= count) {
    return absl::InvalidArgumentError(absl::StrCat(device.ToString(), " requested but only ", count,
                                                   " CUDA device(s) are visible (cuda:0..cuda:",
                                                   count - 1, ")"));
  }
  return absl::OkStatus();
}

}  // namespace psync
