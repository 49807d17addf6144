// Small formatting helpers shared by the stores and process groups
// (internal to worker/comm; not part of the public API).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace psync::comm::internal {

// "512 B", "3.0 KiB", "4.0 MiB", "1.5 GiB".
std::string FormatBytes(size_t bytes);
// "250ms", "30s", "1.5s".
std::string FormatDuration(std::chrono::milliseconds d);
// "'a', 'b'".
std::string QuoteJoin(const std::vector<std::string>& keys);

}  // namespace psync::comm::internal
