// Futex wait/wake on a 32-bit word in memory shared between processes (no
// FUTEX_PRIVATE_FLAG, so the kernel keys it by the physical page).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace psync::comm::shm {

// Sleeps while *word == expected, at most `timeout` (spurious wake-ups are
// possible; callers re-check their condition).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout);
// Wakes every waiter on `word`.
void FutexWakeAll(std::atomic<uint32_t>* word);

}  // namespace psync::comm::shm
