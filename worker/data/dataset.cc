#include "worker/data/dataset.h"

namespace psync::data {

const char* TaskName(Task t) {
  switch (t) {
    case Task::kRegression:
      return "regression";
    case Task::kClassification:
      return "classification";
    case Task::kLanguageModel:
      return "language-model";
  }
  return "unknown";
}

}  // namespace psync::data
