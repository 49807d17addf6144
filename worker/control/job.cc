#include "psync/control/job.h"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "psync/autograd/engine.h"
#include "psync/common/exit_code.h"
#include "psync/common/status_macros.h"
#include "worker/checkpoint/contents.h"
#include "worker/control/heal.h"
#include "worker/control/job_session.h"
#include "worker/control/plan_window.h"
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
  optim::Optimizer* optimizer = nullptr;  // the program's (Join), healed by live recovery; may be null
  double last_step_ms = 0;
  Clock::time_point begun;
  bool finished = false;

  // After the session formed: the heal (live recovery: a rank lacking the
  // newest state takes it from heal_source), DDP over the session's group
  // with rank 0's parameters broadcast, the bucket plan, the plan window.
  // `held_step`: the steps of the state this process holds (none: fresh).
  // On an error the session is finished with its exit code.
  absl::Status Connect(std::optional<int64_t> held_step);
};

Job::Job(std::unique_ptr<State> state) : s_(std::move(state)) {}

Job::~Job() {
  if (s_ && !s_->finished) {
    (void)Finish(WithExitCode(absl::InternalError("the program ended without Job::Finish"), kExitInternal));
  }
}

namespace {

// The name live recovery's heal gives a Job's state (the manifest needs
// one; every rank of a job runs the same program).
constexpr char kJobModel[] = "control-job";

}  // namespace

absl::StatusOr<std::unique_ptr<Job>> Job::Join(const JobOptions& options, std::shared_ptr<nn::Module> module,
                                               optim::Optimizer* optimizer) {
  if (!module) return absl::InvalidArgumentError("Job::Join: no module");
  auto s = std::make_unique<State>();
  s->options = options;
  // One value, one place: the caps the reducer uses are the ones every rank
  // sends at Join (the coordinator plans buckets with them).
  s->options.session.bucket_caps = options.ddp.bucket_caps;
  PSYNC_ASSIGN_OR_RETURN(s->device, ParseDevice(options.device));
  s->module = std::move(module);
  s->optimizer = optimizer;
  PSYNC_ASSIGN_OR_RETURN(s->session, JobSession::Start(s->options.session, s->device, s->module->named_parameters(),
                                                       options.start));
  PSYNC_RETURN_IF_ERROR(s->Connect(std::nullopt));
  return std::unique_ptr<Job>(new Job(std::move(s)));
}

absl::Status Job::State::Connect(std::optional<int64_t> held_step) {
  if (session->heal_source() >= 0) {
    if (optimizer == nullptr || options.ddp.zero_stage > 0) {
      const std::string why = "live recovery: this rank must take the job's state from a peer, but its Job has no "
                              "optimizer to heal (pass it to Job::Join; not a sharded one)";
      session->Finish(kExitBadInput, why);
      return WithExitCode(absl::FailedPreconditionError(why), kExitBadInput);
    }
    checkpoint::CheckpointManifest m;
    m.step = session->start_iteration();
    m.model = kJobModel;
    m.world_size = session->world_size();
    HealOptions ho;
    ho.source = session->heal_source();
    ho.timeout = options.session.timeout;
    absl::Status healed =
        HealTrainingState(*session->group(), ho, held_step, module->named_parameters(), *optimizer, m);
    if (!healed.ok()) {
      session->Finish(ExitCodeOf(healed, kExitInternal), std::string(healed.message()));
      return healed;
    }
  }
  ddp::DdpOptions dopt = options.ddp;
  dopt.timeout = std::min(dopt.timeout, options.session.timeout);
  absl::StatusOr<std::unique_ptr<ddp::DistributedDataParallel>> made = session->MakeDdp(module, dopt);
  if (!made.ok()) {
    session->Finish(ExitCodeOf(made.status(), kExitInternal), std::string(made.status().message()));
    return made.status();
  }
  ddp = std::move(*made);
  param_of_accumulator.clear();
  const auto& params = ddp->reducer().parameters();
  for (size_t p = 0; p < params.size(); ++p) param_of_accumulator[params[p].grad_accumulator().get()] = p;
  window = std::make_unique<PlanWindow>(session->plan_lookahead(), session->start_iteration());
  iteration = last_reported = session->start_iteration() - 1;
  last_loss = autograd::Variable();
  return absl::OkStatus();
}

absl::StatusOr<bool> Job::Rejoin(const absl::Status& failure, int64_t steps_completed) {
  State& s = *s_;
  if (s.finished || failure.ok()) return false;
  // An error without an exit code (a collective that failed in backward)
  // counts as a peer lost: whether to stay is the coordinator's word.
  const int code = ExitCodeIn(failure).value_or(kExitPeerLost);
  // Without the optimizer the state cannot be healed: the job then resumes
  // from a checkpoint (as where RejoinGeneration says no).
  if (s.optimizer == nullptr) return false;
  const int64_t next = s.session->RejoinGeneration(code, s.options.ddp.zero_stage);
  if (next == 0) return false;
  // Why this order: the reducer holds the old group; the old session's
  // watchdog would end the process if it outlived the training it guards.
  s.ddp.reset();
  s.session->Leave();
  // The interrupted iteration's gradients are dropped: it is computed again.
  s.optimizer->ZeroGrad(/*set_to_none=*/true);
  StartOffer offer;
  offer.generation = next;
  offer.live_step = steps_completed;
  absl::StatusOr<std::unique_ptr<JobSession>> session =
      JobSession::Rejoin(s.options.session, s.device, s.module->named_parameters(), offer);
  // On an error the Job is over (the old session stays for rank() and the
  // like; it was left, so Finish has nobody to tell).
  if (!session.ok()) {
    s.finished = true;
    return session.status();
  }
  s.session = std::move(*session);
  if (absl::Status st = s.Connect(steps_completed); !st.ok()) {
    s.finished = true;  // Connect finished the session with the error's code
    return st;
  }
  return true;
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
      s.window->TakeThrough(s.window->NeededBeforeStep(iteration), *s.session->mailbox(),
                            s.options.session.timeout + s.options.session.coordinator_grace));
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
    if (st.ok()) st = s.window->TakeThrough(s.last_reported, *s.session->mailbox(),
                                         s.options.session.timeout + s.options.session.coordinator_grace);
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
