// GrpcWriteQueue (common/grpc_write_queue.h) under a real callback stream on
// 127.0.0.1 (a free port): the test plays the producer (the coordinator's
// JobState, psync-relay's batcher) and a sync client plays the worker.
#include "common/grpc_write_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "psync/v1/coordinator.grpc.pb.h"

namespace psync {
namespace {

using namespace std::chrono_literals;
using Queue = GrpcWriteQueue<v1::Plan>;

// What the test sees of the one stream the server serves.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<Queue> queue;  // set once the stream started
  bool reads_ended = false;      // the client half-closed or went away
  bool done = false;             // the reactor's OnDone ran

  template <typename Pred>
  bool Wait(Pred pred) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, 10s, pred);
  }
};

// Reads until the client half-closes or goes away, then asks the queue to
// finish with ABORTED "job aborted" once it may (as the Train reactors do).
class Reactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit Reactor(Seen* seen) : seen_(seen), queue_(std::make_shared<Queue>(this)) {
    {
      std::lock_guard<std::mutex> l(seen_->mu);
      seen_->queue = queue_;
    }
    seen_->cv.notify_all();
    StartRead(&in_);
  }
  void OnReadDone(bool ok) override {
    if (ok) {
      StartRead(&in_);
      return;
    }
    {
      std::lock_guard<std::mutex> l(seen_->mu);
      seen_->reads_ended = true;
    }
    seen_->cv.notify_all();
    queue_->FinishAfterDrain(grpc::Status(grpc::StatusCode::ABORTED, "job aborted"));
  }
  void OnWriteDone(bool ok) override { queue_->OnWriteDone(ok); }
  void OnDone() override {
    queue_->Detach();
    {
      std::lock_guard<std::mutex> l(seen_->mu);
      seen_->done = true;
    }
    seen_->cv.notify_all();
    delete this;
  }

 private:
  Seen* const seen_;
  std::shared_ptr<Queue> queue_;
  grpc::ByteBuffer in_;
};

class Service final : public v1::Coordinator::WithRawCallbackMethod_Train<v1::Coordinator::Service> {
 public:
  explicit Service(Seen* seen) : seen_(seen) {}
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Train(grpc::CallbackServerContext*) override {
    return new Reactor(seen_);
  }

 private:
  Seen* const seen_;
};

struct Fixture {
  Seen seen;
  Service service{&seen};
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Coordinator::Stub> stub;

  Fixture() {
    int port = 0;
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
    EXPECT_GT(port, 0);
    stub = v1::Coordinator::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }
  ~Fixture() { server->Shutdown(std::chrono::system_clock::now() + 2s); }
  std::shared_ptr<Queue> Started() {
    EXPECT_TRUE(seen.Wait([&] { return seen.queue != nullptr; })) << "the stream never reached the server";
    return seen.queue;
  }
};

std::shared_ptr<const v1::Plan> Plan(int64_t iteration) {
  auto p = std::make_shared<v1::Plan>();
  p->set_iteration(iteration);
  return p;
}

TEST(GrpcWriteQueue, WritesInOrderThenFinishesOnceClosedAndDrained) {
  Fixture f;
  grpc::ClientContext ctx;
  auto stream = f.stub->Train(&ctx);
  std::shared_ptr<Queue> q = f.Started();
  constexpr int kPlans = 200;
  for (int i = 0; i < kPlans; ++i) {
    if (q->Enqueue(Plan(i))) q->Pump();  // true only with no write in flight
  }
  ASSERT_TRUE(stream->WritesDone());  // the reactor gives its status: not enough while the input is open
  q->CloseInput();
  q->Pump();
  EXPECT_FALSE(q->Enqueue(Plan(kPlans))) << "closed input still queued";
  v1::Plan p;
  for (int i = 0; i < kPlans; ++i) {
    ASSERT_TRUE(stream->Read(&p)) << "stream ended after " << i << " plans";
    EXPECT_EQ(p.iteration(), i);
  }
  EXPECT_FALSE(stream->Read(&p)) << "a plan after the input was closed";
  const grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(st.error_message(), "job aborted");
  EXPECT_TRUE(f.seen.Wait([&] { return f.seen.done; }));
}

TEST(GrpcWriteQueue, AClientThatGoesAwayEndsTheStreamWithoutTheInputClosing) {
  Fixture f;
  auto ctx = std::make_unique<grpc::ClientContext>();
  auto stream = f.stub->Train(ctx.get());
  std::shared_ptr<Queue> q = f.Started();
  if (q->Enqueue(Plan(0))) q->Pump();
  v1::Plan p;
  ASSERT_TRUE(stream->Read(&p));
  ctx->TryCancel();  // the worker is gone: the read ends, the next write fails
  ASSERT_TRUE(f.seen.Wait([&] { return f.seen.reads_ended; }));
  if (q->Enqueue(Plan(1))) q->Pump();
  EXPECT_TRUE(f.seen.Wait([&] { return f.seen.done; })) << "the stream did not end without CloseInput";
  EXPECT_FALSE(q->Enqueue(Plan(99))) << "queued after the stream ended";
  q->Pump();  // harmless once detached
  (void)stream->Finish();
}

}  // namespace
}  // namespace psync
