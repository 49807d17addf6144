// NoSync: scoped "don't reduce" (torch's `with ddp.no_sync():`).
//
//   {
//     auto guard = ddp.NoSync();
//     for (micro-batch m < M-1) { ddp.Forward(x_m); backward; }   // local accumulation
//   }
//   ddp.Forward(x_last); backward;   // reduces everything accumulated
//
// While a guard lives, forwards are prepared without synchronisation: the
// hooks only record which parameters got a gradient (OR-ed over the window)
// and gradients accumulate in each parameter's grad. The first backward of
// a forward run after the guard is gone reduces the accumulated gradients,
// including those of parameters used only inside the window.
//
// The flag is captured at forward time (like PyTorch), so what matters is
// whether the guard was alive during Forward. Guards nest; each restores
// the previous setting. Use from the training thread only.
#pragma once

namespace psync::ddp {

class Reducer;

class [[nodiscard]] NoSync {
 public:
  explicit NoSync(Reducer& reducer);
  ~NoSync();
  NoSync(NoSync&& other) noexcept : reducer_(other.reducer_), previous_(other.previous_) { other.reducer_ = nullptr; }
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;
  NoSync& operator=(NoSync&&) = delete;

 private:
  Reducer* reducer_;
  bool previous_;
};

}  // namespace psync::ddp
