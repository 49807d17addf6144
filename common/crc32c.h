// CRC-32C (Castagnoli), the checksum of data that moves between processes
// at memory speed (a heal's pieces, control/heal.h): SSE4.2's crc32
// instruction where the CPU has it (about 8 bytes a cycle), a table
// otherwise; both give the same values (RFC 3720's polynomial, the one of
// iSCSI, ext4 and gRPC's crc32c). Checkpoint files keep zlib's CRC-32
// (checkpoint/checksum.h): their format is fixed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace psync {

// The CRC-32C of `n` bytes at `data`, continuing `crc` (the value of the
// bytes before them; 0 to start): Crc32c(b, Crc32c(a)) == Crc32c(a + b).
// Crc32c("123456789") == 0xe3069283.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
// The same from the table alone (what a CPU without SSE4.2 runs; tests
// compare the two).
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);

}  // namespace psync
