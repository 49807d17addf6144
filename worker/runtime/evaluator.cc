#include "worker/runtime/evaluator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "psync/common/exit_code.h"
#include "psync/common/status_from_exception.h"
#include "psync/autograd/grad_mode.h"
#include "worker/runtime/objective.h"

namespace psync::runtime {

namespace {

std::string Pack(const EvalSums& s) {
  std::string out(sizeof(double) + 2 * sizeof(int64_t), '\0');
  std::memcpy(&out[0], &s.loss_sum, sizeof(double));
  std::memcpy(&out[sizeof(double)], &s.count, sizeof(int64_t));
  std::memcpy(&out[sizeof(double) + sizeof(int64_t)], &s.correct, sizeof(int64_t));
  return out;
}

absl::StatusOr<EvalSums> Unpack(const std::string& bytes, size_t rank) {
  if (bytes.size() != sizeof(double) + 2 * sizeof(int64_t)) {
    return absl::InternalError(absl::StrCat("evaluation: rank ", rank, " sent ", bytes.size(), " bytes of sums"));
  }
  EvalSums s;
  std::memcpy(&s.loss_sum, &bytes[0], sizeof(double));
  std::memcpy(&s.count, &bytes[sizeof(double)], sizeof(int64_t));
  std::memcpy(&s.correct, &bytes[sizeof(double) + sizeof(int64_t)], sizeof(int64_t));
  return s;
}

}  // namespace

absl::StatusOr<EvalResult> EvaluateSharded(nn::Model& model, const data::Dataset& val, Device device,
                                           comm::ProcessGroup* group, const EvalOptions& options) {
  const int rank = group ? group->rank() : 0;
  const int world = group ? group->size() : 1;
  int64_t total = val.num_examples();
  if (options.max_examples > 0) total = std::min(total, options.max_examples);
  const int64_t begin = total * rank / world, end = total * (rank + 1) / world;
  const data::Task task = val.info().task;

  EvalSums mine;
  {
    autograd::NoGradGuard no_grad;
    for (int64_t b = begin; b < end; b += options.batch) {
      absl::StatusOr<data::Batch> batch = val.Examples(b, std::min(options.batch, end - b));
      // Bad held-out data (an id outside the vocabulary, named with its
      // file) is bad input, like --data's.
      if (!batch.ok()) return WithExitCode(batch.status(), kExitBadInput);
      absl::Status st = RunCatching(
          absl::StrCat("evaluation forward at example ", b),
          [&] {
            autograd::Variable out = model.Forward(autograd::Variable(batch->inputs.To(device)));
            mine.Add(Evaluate(task, out.data(), batch->targets));
          },
          absl::StatusCode::kInvalidArgument);
      if (!st.ok()) return st;
    }
  }

  EvalSums all = mine;
  if (group != nullptr && world > 1) {
    absl::StatusOr<std::vector<std::string>> gathered = group->AllgatherBytes(Pack(mine), options.timeout);
    if (!gathered.ok()) return gathered.status();
    all = EvalSums();
    for (size_t r = 0; r < gathered->size(); ++r) {
      absl::StatusOr<EvalSums> s = Unpack((*gathered)[r], r);
      if (!s.ok()) return s.status();
      all.Add(*s);
    }
  }
  EvalResult out;
  out.count = all.count;
  out.loss = all.count > 0 ? all.loss_sum / static_cast<double>(all.count) : std::nan("");
  out.accuracy = task == data::Task::kRegression || all.count == 0
                     ? std::numeric_limits<double>::quiet_NaN()
                     : static_cast<double>(all.correct) / static_cast<double>(all.count);
  return out;
}

}  // namespace psync::runtime
