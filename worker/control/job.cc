#include "psync/control/job.h"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "psync/autograd/engine.h"
#include "psync/common/exit_code.h"
#include "psync/common/status_macros.h"
#include "worker/control/job_session.h"
#include "worker/control/plan_window.h"
#include "worker/control/unused_source.h"
#include "worker/ddp/reducer.h"

namespace psync::control {

using Clock = std::chrono::steady_clock;

// Owned by the training thread. The session's own threads (stream reader,
// heartbeat, watchdog) only touch the mailbox.
struct Job::State {
  JobOptions options;
  Device device;
  std::shared_ptr<nn::Module> module;
  std::unique_ptr<JobSession> session;
  std::unique_ptr<ddp::DistributedDataParallel> ddp;
  std::unique_ptr<PlanWindow> window;
  std::unordered_map<const autograd::Node*, size_t> param_of_accumulator;
  // The iteration begun last, and the last one whose Report was sent (both
  // start_iteration - 1 before the first): equal between iterations.
  int64_t iteration = -1;
  int64_t last_reported = -1;
  autograd::Variable last_loss;  // the last synchronised Forward's loss (its value goes in the next Report)
  std::vector<uint8_t> used;     // this iteration's parameters used so far (one byte each)
  double last_step_ms = 0;
  Clock::time_point begun;
  bool finished = false;
};

Job::Job(std::unique_ptr<State> state) : s_(std::move(state)) {}

Job::~Job() {
  if (s_ && !s_->finished) {
    (void)Finish(WithExitCode(absl::InternalError("the program ended without Job::Finish"), kExitInternal));
  }
}

absl::StatusOr<std::unique_ptr<Job>> Job::Join(const JobOptions& options, std::shared_ptr<nn::Module> module) {
  if (!module) return absl::InvalidArgumentError("Job::Join: no module");
  auto s = std::make_unique<State>();
  s->options = options;
  PSYNC_ASSIGN_OR_RETURN(s->device, ParseDevice(options.device));
  s->module = std::move(module);
  SessionOptions session = options.session;
  // One value, one place: the caps the reducer uses are the ones every rank
  // sends at Join (the coordinator plans buckets with them).
  session.bucket_caps = options.ddp.bucket_caps;
  PSYNC_ASSIGN_OR_RETURN(s->session, JobSession::Start(session, s->device, s->module->named_parameters(), options.start));

  ddp::DdpOptions dopt = options.ddp;
  dopt.timeout = std::min(dopt.timeout, session.timeout);
  // The coordinator announces the bucket layout (from rank 0's gradient
  // order) to every rank; the reducer only records the order.
  dopt.rebuild = ddp::RebuildMode::kExternal;
  auto source = std::make_shared<CoordinatorUnusedSource>(s->session->mailbox());
  absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> ddp =
      ddp::DistributedDataParallel::Create(s->module, s->session->group(), dopt, source);
  if (!ddp.ok()) {
    const int code = ExitCodeOf(s->session->mailbox()->failure(), kExitRendezvous);
    s->session->Finish(code, std::string(ddp.status().message()));
    return WithExitCode(absl::Status(ddp.status().code(), absl::StrCat("setting up DDP: ", ddp.status().message())),
                        code);
  }
  s->ddp = std::move(*ddp);
  if (!s->session->initial_bucket_plan().empty()) {
    PSYNC_RETURN_IF_ERROR(s->ddp->reducer().ApplyBucketPlan(s->session->initial_bucket_plan()));
  }
  const auto& params = s->ddp->reducer().parameters();
  for (size_t p = 0; p < params.size(); ++p) s->param_of_accumulator[params[p].grad_accumulator().get()] = p;
  s->window = std::make_unique<PlanWindow>(s->session->plan_lookahead(), s->session->start_iteration());
  s->iteration = s->last_reported = s->session->start_iteration() - 1;
  return std::unique_ptr<Job>(new Job(std::move(s)));
}

int Job::rank() const { return s_->session->rank(); }
int Job::world_size() const { return s_->session->world_size(); }
Device Job::device() const { return s_->device; }
int64_t Job::start_iteration() const { return s_->session->start_iteration(); }
int Job::plan_lookahead() const { return s_->session->plan_lookahead(); }
const std::string& Job::backend() const { return s_->session->backend(); }
ddp::DistributedDataParallel& Job::ddp() const { return *s_->ddp; }
comm::ProcessGroup& Job::group() const { return *s_->session->group(); }

absl::StatusOr<bool> Job::BeginIteration(int64_t iteration) {
  State& s = *s_;
  if (s.finished) return absl::FailedPreconditionError("Job::BeginIteration after Finish");
  if (iteration != s.iteration + 1 || s.last_reported != s.iteration) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Job::BeginIteration(", iteration, "): iterations run one after the other, each with one Job::Forward (",
        s.last_reported == s.iteration ? absl::StrCat("the next is ", s.iteration + 1)
                                       : absl::StrCat("iteration ", s.iteration, " had no Forward"),
        ")"));
  }
  const Clock::time_point now = Clock::now();
  if (s.iteration >= s.session->start_iteration()) {
    s.last_step_ms = std::chrono::duration<double, std::milli>(now - s.begun).count();
  }
  PSYNC_RETURN_IF_ERROR(
      s.window->TakeThrough(s.window->NeededBeforeStep(iteration), *s.session->mailbox(), s.options.session.timeout));
  if (s.window->StopsBefore(iteration)) return false;
  if (std::optional<IterationPlan> bp = s.window->TakeBucketPlanFor(iteration)) {
    PSYNC_RETURN_IF_ERROR(s.ddp->reducer().ApplyBucketPlan(*bp->bucket_plan));
  }
  s.iteration = iteration;
  s.begun = now;
  // Without find_unused_parameters every parameter counts as used.
  s.used.assign(s.param_of_accumulator.size(), s.options.ddp.find_unused_parameters ? 0 : 1);
  // The step check compares this across the ranks: a rank out of step is named.
  s.ddp->reducer().DeclareIteration(iteration);
  return true;
}

absl::StatusOr<autograd::Variable> Job::Forward(const std::function<autograd::Variable()>& forward) {
  State& s = *s_;
  if (s.finished || s.last_reported == s.iteration) {
    return absl::FailedPreconditionError(
        "Job::Forward: call Job::BeginIteration first (an iteration ends with its one synchronised Forward)");
  }
  PSYNC_ASSIGN_OR_RETURN(autograd::Variable loss, s.ddp->Forward(forward));
  if (s.options.ddp.find_unused_parameters) {
    for (const auto& acc : autograd::ReachableAccumulators({loss})) {
      auto it = s.param_of_accumulator.find(acc.get());
      if (it != s.param_of_accumulator.end()) s.used[it->second] = 1;
    }
  }
  // Under ddp().NoSync() (the first micro-batches of an accumulated step):
  // only what it used counts; the synchronised forward reports the step.
  if (!s.ddp->reducer().sync_enabled()) return loss;
  // Right after the synchronised forward: the plan's round trip overlaps
  // backward. Rank 0's gradient order (recorded in the first backward) goes
  // with iteration 1, so the coordinator can announce a better bucket layout.
  std::vector<size_t> ready_order;
  if (s.session->rank() == 0 && s.iteration == 1) ready_order = s.ddp->reducer().recorded_ready_order();
  const double previous_loss = s.last_loss.defined() ? s.last_loss.data().Item() : 0.0;
  PSYNC_RETURN_IF_ERROR(
      s.session->reports()->SendReport(s.iteration, s.used, previous_loss, s.last_step_ms, ready_order, 0.0));
  s.last_reported = s.iteration;
  s.last_loss = loss;
  return loss;
}

absl::Status Job::Finish(const absl::Status& outcome) {
  State& s = *s_;
  if (s.finished) return outcome;
  s.finished = true;
  absl::Status result = outcome;
  if (outcome.ok()) {
    // Before Done: the plans of every iteration this rank reported, so the
    // coordinator closes them (and --zero's last parameter gathers).
    absl::Status st = s.ddp->reducer().WaitForParameters();
    if (st.ok()) st = s.window->TakeThrough(s.last_reported, *s.session->mailbox(), s.options.session.timeout);
    if (!st.ok()) {
      result = WithExitCode(st, ExitCodeOf(s.session->mailbox()->failure(), ExitCodeOf(st, kExitInternal)));
    }
  }
  const int code = result.ok() ? kExitOk : ExitCodeOf(result, kExitInternal);
  const std::string reason =
      result.ok() ? absl::StrCat("finished after iteration ", s.last_reported) : std::string(result.message());
  s.session->Finish(code, reason);
  return result;
}

}  // namespace psync::control
