// libFuzzer target for the coordinator's state machine (JobState with its
// Rendezvous / PlanAggregator / liveness rules, and KvStore), without gRPC:
// the input is a sequence of operations, each a request message parsed from
// arbitrary bytes (JoinRequest, TrainUp{hello, report, report_batch,
// heartbeat, done, rank_closed}: every call names its stream by the
// StreamRef Attach returned, or a made-up one),
// StoreSet/StoreGet, Control: Shutdown and the views) or a structured
// variant of one (so the fuzzer also gets past validation), plus stream
// closes, cancelled Joins, liveness checks and moves of a manual clock, in
// any order. Invariants, checked after every operation and at the end
// (std::abort on a violation):
//   - every Join and StoreGet callback runs exactly once (at the end, after
//     Abort/Close and the clock running out, none is left waiting);
//   - every rank receives the plans of consecutive iterations, and all ranks
//     receive identical plans for the same iteration; an ABORT is the last
//     plan a rank gets;
//   - a bucket plan applies exactly K iterations after the plan announcing
//     it; every STOP_AFTER names the same iteration, at most K-1 after the
//     first plan that announces it; no plan comes after the stop iteration;
//   - the job's state only moves forward (WAITING -> RUNNING -> STOPPING ->
//     FINISHED, or -> ABORTED) within a generation, and FINISHED / ABORTED
//     never change; with --max-restarts (drawn 0..2) the generation only
//     grows, by one per restart, generation == 1 + restarts <= 1 + max, and a
//     call on a stream of an ended generation is always refused;
//   - the views stay consistent (joined <= world, workers are joined ranks,
//     status iteration = the last plan any rank got).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "psync/v1/control.pb.h"
#include "psync/v1/coordinator.pb.h"
#include "server/job_state.h"
#include "server/kv_store.h"
#include "server/plan_queue.h"
#include "common/manual_scheduler.h"

namespace {

using namespace psync::server;
using psync::ManualScheduler;
namespace v1 = psync::v1;

#define CHECK_OR_DIE(cond)                                                                    \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "coordinator_fuzz: invariant failed at line %d: %s\n", __LINE__, #cond); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

// Reads bytes off the input; past the end it yields zeros.
class Input {
 public:
  Input(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool done() const { return i_ >= n_; }
  uint8_t Byte() { return i_ < n_ ? d_[i_++] : 0; }
  uint32_t U16() { return Byte() | (uint32_t{Byte()} << 8); }
  std::string Bytes(size_t max) {
    const size_t len = std::min<size_t>(Byte() % (max + 1), n_ - std::min(i_, n_));
    std::string s(reinterpret_cast<const char*>(d_ + i_), len);
    i_ += len;
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t i_ = 0;
};

// What the harness knows about one rank's stream (its own, or its host's).
struct Stream {
  std::shared_ptr<PlanQueue> mailbox;
  StreamRef ref;            // as Attach returned it (generation: of its hello)
  int64_t next_report = 0;  // for structured reports
  int64_t last_plan = -1;   // last CONTINUE/STOP plan iteration seen
  bool aborted = false;
};

struct Harness {
  int world = 1;
  int k = 2;
  ManualScheduler sched;
  std::unique_ptr<JobState> job;
  std::unique_ptr<KvStore> kv;
  std::vector<Stream> streams;
  int64_t generation = 1;        // the job's generation as last seen by SyncGeneration
  int64_t stale_generation = 0;  // an ended generation (0 = none yet)
  std::vector<StreamRef> stale_refs;  // by rank: the streams of stale_generation (sink null: none)
  int max_restarts = 0;
  // Callbacks: ticket -> how many times it ran (must end at exactly 1).
  std::vector<std::shared_ptr<int>> join_calls, get_calls;
  std::vector<uint64_t> join_tickets, get_tickets;
  std::map<int64_t, std::string> plan_by_iteration;  // serialized, to compare ranks
  int64_t stop_after = -1;
  v1::JobState last_state = v1::JOB_WAITING;
  int param_count = 3;

  v1::JoinRequest ValidJoin(int rank) const {
    v1::JoinRequest r;
    r.set_job_id("fuzz");
    r.set_requested_rank(rank);
    r.set_hostname("h");
    r.set_backend("gloo");
    r.set_bucket_cap_bytes(16);
    r.set_first_bucket_cap_bytes(8);
    r.set_host_id(rank % 2 ? "hostB" : "hostA");
    for (int i = 0; i < param_count; ++i) {
      auto* p = r.add_manifest();
      p->set_name("p" + std::to_string(i));
      p->add_shape(1 + i);
    }
    return r;
  }

  void Join(const v1::JoinRequest& req) {
    auto calls = std::make_shared<int>(0);
    join_calls.push_back(calls);
    join_tickets.push_back(job->Join(req, [this, calls](absl::StatusOr<JoinAnswer> answer) {
      ++*calls;
      CHECK_OR_DIE(*calls == 1);
      if (answer.ok()) {
        absl::StatusOr<v1::JoinResponse> r = answer->Full();
        v1::JoinResponse wire;
        CHECK_OR_DIE(wire.ParseFromString(answer->shared->bytes + answer->RankBytes()));
        CHECK_OR_DIE(wire.rank() == r->rank() && wire.rank_host_index_size() == r->rank_host_index_size());
        CHECK_OR_DIE(r->rank() >= 0 && r->rank() < world);
        CHECK_OR_DIE(r->world_size() == world);
        CHECK_OR_DIE(r->plan_lookahead() == k);
        CHECK_OR_DIE(r->rank_host_index_size() == world);
        for (int idx : r->rank_host_index()) CHECK_OR_DIE(idx >= 0 && idx < r->host_ids_size());
        CHECK_OR_DIE(r->generation() >= 1);
      }
    }));
  }

  void Get(const std::string& key, int64_t timeout_ms) {
    auto calls = std::make_shared<int>(0);
    get_calls.push_back(calls);
    get_tickets.push_back(kv->Get(key, std::chrono::milliseconds(timeout_ms), [calls](absl::StatusOr<std::string>) {
      ++*calls;
      CHECK_OR_DIE(*calls == 1);
    }));
  }

  // Host streams (hello.ranks): every rank of one shares the mailbox.
  struct HostStream {
    std::shared_ptr<PlanQueue> mailbox;
    StreamRef ref;
    std::vector<int> ranks;
  };
  std::vector<HostStream> host_streams;

  // How a call for `rank` names its stream: the ref its stream attached
  // with (its own or its host's), claiming `generation` (an ended one plays
  // a stale worker); a made-up own stream for a rank without one.
  StreamRef RefFor(int rank, int64_t generation) const {
    StreamRef ref{nullptr, generation, rank};
    if (rank < world && streams[static_cast<size_t>(rank)].mailbox) {
      ref = streams[static_cast<size_t>(rank)].ref;
      ref.generation = generation;
    }
    return ref;
  }

  // A TrainUp of any kind on `ref`, handed to JobState as TrainStream does.
  void Dispatch(const StreamRef& ref, const v1::TrainUp& up, JobState::Clock::time_point now) {
    if (up.has_report()) (void)job->Report(ref, up.report());
    if (up.has_report_batch()) (void)job->ReportBatch(ref, up.report_batch());
    if (up.has_heartbeat()) (void)job->Heartbeat(ref, up.heartbeat(), now);
    if (up.has_done()) (void)job->Done(ref, up.done());
    if (up.has_rank_closed()) (void)job->RankClosed(ref, up.rank_closed());
  }

  void Attach(int rank, const v1::Hello& hello) {
    auto mb = std::make_shared<PlanQueue>();
    absl::StatusOr<StreamRef> ref = job->Attach(hello, mb);
    if (!ref.ok()) return;
    CHECK_OR_DIE(ref->sink == mb.get() && ref->generation == hello.generation());
    if (hello.ranks_size() > 0) {
      CHECK_OR_DIE(hello.generation() == job->generation() && ref->host());
      std::set<int> distinct(hello.ranks().begin(), hello.ranks().end());
      CHECK_OR_DIE(distinct.size() == static_cast<size_t>(hello.ranks_size()));  // duplicates refused
      HostStream hs{mb, *ref, {}};
      v1::WorkersResponse ws;  // every rank of the stream is on one host
      job->FillWorkers(&ws);
      std::map<int, std::string> host_of;
      for (const auto& w : ws.workers()) host_of[w.rank()] = w.host_id();
      for (int r : hello.ranks()) {
        CHECK_OR_DIE(r >= 0 && r < world);
        CHECK_OR_DIE(!streams[static_cast<size_t>(r)].mailbox);  // a rank attaches once
        CHECK_OR_DIE(host_of.count(r) && host_of[r] == host_of[hello.ranks(0)]);
        streams[static_cast<size_t>(r)].mailbox = mb;
        streams[static_cast<size_t>(r)].ref = *ref;
        hs.ranks.push_back(r);
      }
      host_streams.push_back(std::move(hs));
      return;
    }
    CHECK_OR_DIE(hello.rank() >= 0 && hello.rank() < world);
    CHECK_OR_DIE(hello.generation() == job->generation() && ref->own_rank == hello.rank());
    streams[static_cast<size_t>(hello.rank())].mailbox = mb;
    streams[static_cast<size_t>(hello.rank())].ref = *ref;
    (void)rank;
  }

  // Drains every mailbox and checks the plans.
  void CheckPlans() {
    for (int r = 0; r < world; ++r) {
      Stream& s = streams[static_cast<size_t>(r)];
      if (!s.mailbox) continue;
      v1::Plan p;
      while (s.mailbox->TryPop(&p)) {
        // Nothing but ABORTs after an ABORT (a host stream gets the one naming
        // its lost rank and then the job's).
        CHECK_OR_DIE(!s.aborted || p.action() == v1::ABORT);
        CHECK_OR_DIE(p.action() == v1::ABORT || p.ranks_size() == 0);  // per-rank plans are ABORTs only
        if (p.action() == v1::ABORT) {
          s.aborted = true;
          continue;
        }
        CHECK_OR_DIE(p.iteration() == s.last_plan + 1 || s.last_plan == -1);
        if (stop_after >= 0) CHECK_OR_DIE(p.iteration() <= stop_after);
        s.last_plan = p.iteration();
        const std::string bytes = p.SerializeAsString();
        auto [it, inserted] = plan_by_iteration.emplace(p.iteration(), bytes);
        CHECK_OR_DIE(inserted || it->second == bytes);  // every rank gets the same plan
        if (p.has_bucket_plan()) CHECK_OR_DIE(p.bucket_plan().applies_from_iteration() == p.iteration() + k);
        if (p.action() == v1::STOP_AFTER) {
          if (stop_after < 0) {
            stop_after = p.stop_after_iteration();
            CHECK_OR_DIE(stop_after >= p.iteration() && stop_after <= p.iteration() + k - 1);
          }
          CHECK_OR_DIE(p.stop_after_iteration() == stop_after);
        }
      }
    }
  }

  // After the plans of the operation were checked: a restart starts a new
  // generation, whose ranks, plans and stop point are new.
  void SyncGeneration() {
    const int64_t g = job->generation();
    CHECK_OR_DIE(g == 1 + job->restarts() && job->restarts() <= max_restarts);
    CHECK_OR_DIE(g == generation || g == generation + 1);
    if (g == generation) return;
    stale_generation = generation;
    generation = g;
    stale_refs.clear();
    for (const Stream& s : streams) stale_refs.push_back(s.mailbox ? s.ref : StreamRef{});
    streams.assign(static_cast<size_t>(world), Stream{});
    host_streams.clear();
    plan_by_iteration.clear();
    stop_after = -1;
    last_state = job->state();  // WAITING, or RUNNING when queued Joins completed the world
  }

  // `views`: also build and check the Control views (the costly part; every
  // few operations and at the end).
  void CheckState(bool views) {
    const v1::JobState s = job->state();
    auto rank_of = [](v1::JobState x) {
      switch (x) {
        case v1::JOB_WAITING: return 0;
        case v1::JOB_RUNNING: return 1;
        case v1::JOB_STOPPING: return 2;
        default: return 3;
      }
    };
    if (last_state == v1::JOB_FINISHED || last_state == v1::JOB_ABORTED) CHECK_OR_DIE(s == last_state);
    CHECK_OR_DIE(rank_of(s) >= rank_of(last_state));
    last_state = s;
    if (!views) return;
    v1::StatusResponse st;
    job->FillStatus(&st);
    CHECK_OR_DIE(st.joined() >= 0 && st.joined() <= world);
    CHECK_OR_DIE(st.world_size() == world);
    CHECK_OR_DIE(st.workers_size() == st.joined());
    v1::WorkersResponse w;
    job->FillWorkers(&w);
    CHECK_OR_DIE(w.workers_size() == st.joined());
    v1::UnusedResponse u;
    job->FillUnused(&u);
    CHECK_OR_DIE(u.param_index_size() == u.param_names_size());
    v1::BucketsResponse b;
    job->FillBuckets(&b);
  }
};

}  // namespace

// Protobuf logs every string field with invalid UTF-8 it parses; that is
// expected here and would only slow the fuzzer down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  Harness h;
  h.world = 1 + in.Byte() % 4;
  h.k = 1 + in.Byte() % 3;
  h.param_count = 1 + in.Byte() % 10;
  JobConfig cfg;
  cfg.job_id = "fuzz";
  cfg.world_size = h.world;
  cfg.join_timeout = std::chrono::milliseconds(1000);
  cfg.report_timeout = std::chrono::milliseconds(2000);
  cfg.plan_lookahead = h.k;
  cfg.test_only_plan_delay = std::chrono::milliseconds(in.Byte() % 2 ? 0 : 30);
  cfg.max_restarts = h.max_restarts = in.Byte() % 3;
  h.job = std::make_unique<JobState>(cfg, &h.sched);
  h.kv = std::make_unique<KvStore>(&h.sched);
  h.job->SetGenerationEndHook([kv = h.kv.get()](const std::string& prefix) { kv->ErasePrefix(prefix); });
  h.streams.resize(static_cast<size_t>(h.world));
  const auto t0 = JobState::Clock::now();

  for (int ops = 0; !in.done() && ops < 400; ++ops) {
    const uint8_t op = in.Byte() % 21;
    const int rank = in.Byte() % (h.world + 1) - (op == 0 ? 1 : 0);  // -1 .. world-1 for joins, else 0 .. world
    switch (op) {
      case 0: {  // a valid Join (requested rank or any), sometimes naming a generation
        v1::JoinRequest req = h.ValidJoin(rank);
        const uint8_t g = in.Byte();
        if (g % 4 == 0) req.set_generation(g / 4 % 4);
        h.Join(req);
        break;
      }
      case 1: {  // a JoinRequest from raw bytes
        v1::JoinRequest req;
        (void)req.ParseFromString(in.Bytes(200));
        h.Join(req);
        break;
      }
      case 2: {  // hello for a rank (valid or raw)
        v1::Hello hello;
        const uint8_t mode = in.Byte();
        if (mode % 4 == 0) {
          (void)hello.ParseFromString(in.Bytes(40));
        } else {
          hello.set_job_id("fuzz");
          hello.set_rank(rank);
          hello.set_generation(mode % 4 == 1 && h.stale_generation > 0 ? h.stale_generation : h.generation);
        }
        h.Attach(rank, hello);
        break;
      }
      case 3: {  // a structured report: the rank's next iteration, a bitmap, maybe a ready order
        if (rank >= h.world) break;
        Stream& s = h.streams[static_cast<size_t>(rank)];
        v1::Report r;
        const uint8_t mode = in.Byte();
        r.set_iteration(mode % 8 == 0 ? s.next_report + (mode / 8) % 4 - 1 : s.next_report);
        std::string bitmap((h.param_count + 7) / 8, '\0');
        for (auto& c : bitmap) c = static_cast<char>(in.Byte());
        if (mode % 16 == 1) bitmap.push_back('x');
        r.set_used_bitmap(bitmap);
        r.set_last_step_ms(in.Byte());
        if (mode % 5 == 0) {
          for (int i = 0; i < h.param_count; ++i) r.add_ready_order((i * 7 + in.Byte()) % (h.param_count + 1));
        }
        r.set_rank(rank);  // used on a host stream (its own stream ignores it)
        if (h.job->Report(h.RefFor(rank, s.mailbox ? s.ref.generation : h.generation), r).ok() &&
            r.iteration() == s.next_report) {
          ++s.next_report;
        }
        break;
      }
      case 4: {  // a TrainUp from raw bytes, dispatched as the Train reactor does
        v1::TrainUp up;
        (void)up.ParseFromString(in.Bytes(120));
        const bool own = rank < h.world && h.streams[static_cast<size_t>(rank)].mailbox;
        const int64_t g = own ? h.streams[static_cast<size_t>(rank)].ref.generation : h.generation;
        h.Dispatch(h.RefFor(rank, g), up, t0 + std::chrono::milliseconds(in.U16()));
        if (up.has_hello()) h.Attach(rank, up.hello());
        break;
      }
      case 5: {
        v1::Heartbeat hb;
        hb.set_rank(in.Byte() % 8 == 0 ? rank + 1 : rank);
        (void)h.job->Heartbeat(h.RefFor(rank, h.generation), hb, t0 + std::chrono::milliseconds(in.U16()));
        break;
      }
      case 6: {
        v1::Done d;
        d.set_exit_code(in.Byte() % 4 == 0 ? 1 : 0);
        d.set_exit_reason(in.Bytes(20));
        d.set_rank(rank);
        (void)h.job->Done(h.RefFor(rank, h.generation), d);
        break;
      }
      case 7:
        h.job->StreamClosed(
            h.RefFor(rank, in.Byte() % 4 == 0 && h.stale_generation > 0 ? h.stale_generation : h.generation),
            "stream closed");
        break;
      case 8:
        if (!h.join_tickets.empty()) h.job->CancelJoin(h.join_tickets[in.Byte() % h.join_tickets.size()]);
        break;
      case 9:
        h.job->CheckLiveness(t0 + std::chrono::milliseconds(in.U16() * 4));
        break;
      case 10: {
        v1::ShutdownRequest req;
        (void)req.ParseFromString(in.Bytes(40));
        v1::ShutdownResponse resp = h.job->Shutdown(req.reason());
        (void)resp;
        break;
      }
      case 11: {
        v1::StoreSetRequest req;
        (void)req.ParseFromString(in.Bytes(60));
        if (in.Byte() % 2) req.set_key("k" + std::to_string(in.Byte() % 4));
        (void)h.kv->Set(req.key(), req.value());
        break;
      }
      case 12: {
        v1::StoreGetRequest req;
        (void)req.ParseFromString(in.Bytes(40));
        if (in.Byte() % 2) req.set_key("k" + std::to_string(in.Byte() % 4));
        h.Get(req.key(), std::min<int64_t>(std::max<int64_t>(req.timeout_ms(), in.Byte()), 5000));
        break;
      }
      case 13:
        if (!h.get_tickets.empty()) h.kv->Cancel(h.get_tickets[in.Byte() % h.get_tickets.size()]);
        break;
      case 14:
        h.sched.Advance(std::chrono::milliseconds(in.U16() % 2000));
        break;
      case 15:
        if (in.Byte() % 8 == 0) h.job->Abort("fuzz abort");
        break;
      case 16: {  // all attached ranks report their next iteration (drives plans forward)
        for (int r = 0; r < h.world; ++r) {
          Stream& s = h.streams[static_cast<size_t>(r)];
          v1::Report rep;
          rep.set_iteration(s.next_report);
          rep.set_used_bitmap(std::string((h.param_count + 7) / 8, static_cast<char>(in.Byte())));
          rep.set_rank(r);
          if (h.job->Report(h.RefFor(r, s.mailbox ? s.ref.generation : h.generation), rep).ok()) ++s.next_report;
        }
        break;
      }
      case 17: {  // the raw Control requests: views
        v1::StatusResponse st;
        h.job->FillStatus(&st);
        v1::BucketsResponse b;
        h.job->FillBuckets(&b);
        break;
      }
      case 19: {  // hello of a host stream: ranks from a bitmask (duplicates, strangers, mixed hosts) or raw
        v1::Hello hello;
        const uint8_t mode = in.Byte();
        if (mode % 5 == 0) {
          (void)hello.ParseFromString(in.Bytes(40));
        } else {
          hello.set_job_id("fuzz");
          hello.set_generation(mode % 5 == 1 && h.stale_generation > 0 ? h.stale_generation : h.generation);
          const uint8_t mask = in.Byte();
          for (int r = 0; r <= h.world; ++r) {
            if (mask >> r & 1) hello.add_ranks(r);
          }
          if (mode % 7 == 0 && hello.ranks_size() > 0) hello.add_ranks(hello.ranks(0));  // a duplicate
        }
        h.Attach(-1, hello);
        break;
      }
      case 20: {  // a message on a host stream: structured (batch, done, heartbeat, rank_closed, close) or raw
        if (h.host_streams.empty()) break;
        Harness::HostStream& hs = h.host_streams[in.Byte() % h.host_streams.size()];
        const StreamRef& ref = hs.ref;
        const uint8_t mode = in.Byte() % 7;
        const int who = hs.ranks[in.Byte() % hs.ranks.size()];
        const int named = in.Byte() % 8 == 0 ? rank : who;  // sometimes a rank not on the stream
        switch (mode) {
          case 0: {  // every rank's next report in one batch
            v1::ReportBatch b;
            for (int r : hs.ranks) {
              v1::Report* rep = b.add_reports();
              rep->set_rank(r == who ? named : r);
              rep->set_iteration(h.streams[static_cast<size_t>(r)].next_report);
              rep->set_used_bitmap(std::string((h.param_count + 7) / 8, static_cast<char>(in.Byte())));
            }
            if (h.job->ReportBatch(ref, b).ok()) {
              for (int r : hs.ranks) ++h.streams[static_cast<size_t>(r)].next_report;
            }
            break;
          }
          case 1: {
            v1::Done d;
            d.set_rank(named);
            d.set_exit_code(in.Byte() % 4 == 0 ? 1 : 0);
            (void)h.job->Done(ref, d);
            break;
          }
          case 2: {
            v1::Heartbeat hb;
            hb.set_rank(named);
            (void)h.job->Heartbeat(ref, hb, t0 + std::chrono::milliseconds(in.U16()));
            break;
          }
          case 3: {
            v1::RankClosed c;
            c.set_rank(named);
            c.set_cause(in.Bytes(20));
            (void)h.job->RankClosed(ref, c);
            break;
          }
          case 4:
            h.job->StreamClosed(ref, "host Train stream closed");
            break;
          default: {  // raw, dispatched as the reactor does for a host stream
            v1::TrainUp up;
            (void)up.ParseFromString(in.Bytes(120));
            h.Dispatch(ref, up, t0);
            break;
          }
        }
        break;
      }
      case 18: {  // a worker of an ended generation goes on: always refused
        if (h.stale_generation == 0 || rank >= h.world) break;
        // Its stream of the ended generation, or a made-up one.
        StreamRef stale = h.stale_refs[static_cast<size_t>(rank)];
        if (stale.sink == nullptr) stale = StreamRef{nullptr, h.stale_generation, rank};
        v1::Report rep;
        rep.set_iteration(h.streams[static_cast<size_t>(rank)].next_report);
        rep.set_used_bitmap(std::string((h.param_count + 7) / 8, '\xff'));
        rep.set_rank(rank);
        CHECK_OR_DIE(!h.job->Report(stale, rep).ok());
        v1::Heartbeat hb;
        hb.set_rank(rank);
        CHECK_OR_DIE(!h.job->Heartbeat(stale, hb, t0).ok());
        break;
      }
    }
    h.CheckPlans();
    h.SyncGeneration();
    h.CheckState(/*views=*/ops % 8 == 0 || op == 17);
  }
  // Everything waiting gets answered: the job and the store shut down, the
  // clock runs past every deadline.
  h.job->Abort("fuzz end");
  h.kv->Close();
  h.sched.Advance(std::chrono::hours(2));
  h.CheckPlans();
  h.SyncGeneration();
  h.CheckState(/*views=*/true);
  for (const auto& c : h.join_calls) CHECK_OR_DIE(*c == 1);
  for (const auto& c : h.get_calls) CHECK_OR_DIE(*c == 1);
  v1::StatusResponse st;
  h.job->FillStatus(&st);
  int64_t max_plan = -1;
  for (const auto& s : h.streams) max_plan = std::max(max_plan, s.last_plan);
  // The status names the last plan made; a delayed one may have been dropped by the abort.
  CHECK_OR_DIE(st.iteration() >= max_plan);
  return 0;
}
