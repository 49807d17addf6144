// psync-worker's options: flags, the torchrun environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, LOCAL_RANK, PSYNC_TOKEN), precedence (a flag on
// the command line wins over the environment) and one-line errors naming the
// flag or variable.
#include "worker/runtime/worker_flags.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <string>
#include <vector>

#include "absl/flags/reflection.h"

namespace psync::runtime {
namespace {

using Env = std::map<std::string, std::string>;

EnvLookup MapEnv(Env env) {
  return [env = std::move(env)](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

// ParseWorkerOptions parses into the process-wide Abseil flags and does not
// reset them; every Parse restores their defaults afterwards, so one parse
// never sees an earlier one's values.
class WorkerFlags : public ::testing::Test {
 protected:
  absl::StatusOr<WorkerOptions> Parse(std::vector<std::string> args, Env env = {}, std::string* help = nullptr) {
    absl::FlagSaver saver;
    args.insert(args.begin(), "psync-worker");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    return ParseWorkerOptions(static_cast<int>(args.size()), argv.data(), MapEnv(std::move(env)), help);
  }
  // Parse must fail with InvalidArgument on one line containing every `needles`.
  void ExpectError(const std::vector<std::string>& args, const Env& env, const std::vector<std::string>& needles) {
    absl::StatusOr<WorkerOptions> o = Parse(args, env);
    ASSERT_FALSE(o.ok()) << "accepted: " << ::testing::PrintToString(args);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
    const std::string msg(o.status().message());
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
};

TEST_F(WorkerFlags, DefaultsWithoutFlagsOrEnvironment) {
  auto o = Parse({});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->coordinator, "127.0.0.1:29500");
  EXPECT_EQ(o->rank, -1);
  EXPECT_EQ(o->world_size, 0);
  EXPECT_EQ(o->local_rank, 0);
  EXPECT_EQ(o->token, "");
  EXPECT_EQ(o->widths, (std::vector<int64_t>{32, 64, 64, 16}));
  EXPECT_EQ(o->global_batch, 64);
  EXPECT_EQ(o->accumulate, 1);
  EXPECT_EQ(o->timeout, std::chrono::milliseconds(30000));
  EXPECT_EQ(o->device, "cpu");
  EXPECT_TRUE(o->model_flags.empty()) << "the mlp declares no flags of its own";
  // The GPT's flags are its own (registered with it): defaults filled in,
  // given values kept, and refused for another --model.
  auto g = Parse({"--model=gpt"});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->model_flags.values(), (std::map<std::string, std::string>{
                                         {"attention", "fused"}, {"n-embd", "128"}, {"n-head", "4"}, {"n-layer", "4"}}));
  auto m = Parse({"--model=gpt", "--attention=materialized", "--n_layer=2"});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m->model_flags.String("attention"), "materialized");
  EXPECT_EQ(*m->model_flags.Int("n-layer"), 2);
  ExpectError({"--n-head=8"}, {}, {"flag --n-head belongs to --model=gpt", "not to --model=mlp"});
  ExpectError({"--model=gpt", "--cnn-channels=8,8"}, {}, {"--cnn-channels belongs to --model=cnn"});
}

TEST_F(WorkerFlags, ZeroStages) {
  auto o = Parse({});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->zero, 0);
  o = Parse({"--zero=2"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->zero, 2);
  o = Parse({"--zero=3", "--zero3-prefetch=2", "--reshard-after-forward=false"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->zero, 3);
  EXPECT_EQ(o->zero3_prefetch, 2);
  EXPECT_FALSE(o->reshard_after_forward);
  ExpectError({"--zero=4"}, {}, {"--zero", "4", "0|1|2|3"});
  ExpectError({"--zero=3", "--zero3-prefetch=-1"}, {}, {"--zero3-prefetch", "-1", ">= 0"});
  ExpectError({"--zero=1", "--grad-compression=bf16"}, {}, {"--zero", "--grad-compression=bf16"});
}

TEST_F(WorkerFlags, FlagsAreParsedWithDashOrUnderscoreSpelling) {
  auto o = Parse({"--coordinator=10.1.2.3:7000", "--rank=2", "--world-size=4", "--local_rank", "1",
                  "--widths=8,16,16,4", "--global-batch=32", "--accumulate=2", "--timeout=1500ms",
                  "--skip-layer=1", "--skip-pattern=odd", "--find-unused-parameters", "--device=cuda:1",
                  "--init-format=hf"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->coordinator, "10.1.2.3:7000");
  EXPECT_EQ(o->rank, 2);
  EXPECT_EQ(o->world_size, 4);
  EXPECT_EQ(o->local_rank, 1);
  EXPECT_EQ(o->widths, (std::vector<int64_t>{8, 16, 16, 4}));
  EXPECT_EQ(o->global_batch, 32);
  EXPECT_EQ(o->accumulate, 2);
  EXPECT_EQ(o->timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(o->skip_layer, 1);
  EXPECT_EQ(o->skip_pattern, SkipPattern::kOdd);
  EXPECT_TRUE(o->find_unused_parameters);
  EXPECT_EQ(o->device, "cuda:1");
  EXPECT_EQ(o->init_format, checkpoint::WeightsFormat::kHf);
}

TEST_F(WorkerFlags, TorchrunEnvironmentFillsUnsetFlags) {
  auto o = Parse({}, {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "coord.svc"},
                      {"MASTER_PORT", "29555"}, {"PSYNC_TOKEN", "s3cret"}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 3);
  EXPECT_EQ(o->world_size, 8);
  EXPECT_EQ(o->local_rank, 1);
  EXPECT_EQ(o->coordinator, "coord.svc:29555");
  EXPECT_EQ(o->token, "s3cret");
}

TEST_F(WorkerFlags, MasterAddrAndPortEachDefaultTheOther) {
  auto addr_only = Parse({}, {{"MASTER_ADDR", "10.0.0.7"}});
  ASSERT_TRUE(addr_only.ok()) << addr_only.status();
  EXPECT_EQ(addr_only->coordinator, "10.0.0.7:29500");
  auto port_only = Parse({}, {{"MASTER_PORT", "31000"}});
  ASSERT_TRUE(port_only.ok()) << port_only.status();
  EXPECT_EQ(port_only->coordinator, "127.0.0.1:31000");
}

TEST_F(WorkerFlags, CommandLineWinsOverEnvironment) {
  const Env env = {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "5"}, {"MASTER_ADDR", "coord.svc"},
                   {"MASTER_PORT", "29555"}, {"PSYNC_TOKEN", "from-env"}};
  auto o = Parse({"--rank=0", "--world-size=2", "--local-rank=0", "--coordinator=127.0.0.1:4000", "--token=flag"}, env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 0);
  EXPECT_EQ(o->world_size, 2);
  EXPECT_EQ(o->local_rank, 0);
  EXPECT_EQ(o->coordinator, "127.0.0.1:4000");
  EXPECT_EQ(o->token, "flag");
}

TEST_F(WorkerFlags, FlagEqualToItsDefaultStillWinsOverEnvironment) {
  // --rank=-1 is the default value, but given explicitly it overrides RANK.
  auto o = Parse({"--rank=-1", "--local-rank=0"}, {{"RANK", "3"}, {"LOCAL_RANK", "2"}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, -1);
  EXPECT_EQ(o->local_rank, 0);
}

TEST_F(WorkerFlags, NonIntegerEnvironmentNamesTheVariable) {
  ExpectError({}, {{"RANK", "abc"}}, {"RANK", "abc"});
  ExpectError({}, {{"WORLD_SIZE", "2x"}}, {"WORLD_SIZE", "2x"});
  ExpectError({}, {{"LOCAL_RANK", "one"}}, {"LOCAL_RANK", "one"});
}

TEST_F(WorkerFlags, BadEnvironmentIsIgnoredWhenTheFlagIsGiven) {
  auto o = Parse({"--rank=1", "--world-size=2"}, {{"RANK", "abc"}, {"WORLD_SIZE", "zz"}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->world_size, 2);
}

TEST_F(WorkerFlags, BadControlPlaneValuesNameTheFlag) {
  ExpectError({"--rank=abc"}, {}, {"--rank", "abc"});
  ExpectError({"--rank=-2"}, {}, {"--rank", "-2"});
  ExpectError({"--world-size=-1"}, {}, {"--world-size", "-1"});
  ExpectError({"--rank=2", "--world-size=2"}, {}, {"--rank", "2", "--world-size"});
  ExpectError({}, {{"RANK", "4"}, {"WORLD_SIZE", "4"}}, {"--rank", "4"});
  ExpectError({"--local-rank=-1"}, {}, {"--local-rank"});
  ExpectError({"--coordinator=nohost"}, {}, {"--coordinator", "nohost"});
  ExpectError({"--coordinator=:29500"}, {}, {"--coordinator"});
  ExpectError({"--coordinator=host:0"}, {}, {"--coordinator", "host:0"});
  ExpectError({}, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}, {"--coordinator", "h:70000"});
  ExpectError({"--job-id="}, {}, {"--job-id"});
  ExpectError({"--timeout=0s"}, {}, {"--timeout"});
}

TEST_F(WorkerFlags, BadModelAndOptimisationValuesNameTheFlag) {
  ExpectError({"--model=resnet"}, {}, {"--model", "resnet"});
  ExpectError({"--widths=8,x,4"}, {}, {"--widths", "8,x,4"});
  ExpectError({"--widths=8,0,4"}, {}, {"--widths"});
  ExpectError({"--widths=8"}, {}, {"--widths"});
  ExpectError({"--skip-pattern=sometimes"}, {}, {"--skip-pattern", "sometimes"});
  ExpectError({"--init-format=gguf"}, {}, {"--init-format", "gguf"});
  ExpectError({"--skip-layer=-2"}, {}, {"--skip-layer"});
  ExpectError({"--synthetic-rows=0"}, {}, {"--synthetic-rows"});
  ExpectError({"--global-batch=0"}, {}, {"--global-batch"});
  ExpectError({"--accumulate=0"}, {}, {"--accumulate"});
  ExpectError({"--steps=-1"}, {}, {"--steps"});
  ExpectError({"--lr=-0.1"}, {}, {"--lr"});
  ExpectError({"--momentum=1"}, {}, {"--momentum"});
  ExpectError({"--weight-decay=-1"}, {}, {"--weight-decay"});
  ExpectError({"--bucket-cap-mb=0"}, {}, {"--bucket-cap-mb"});
  ExpectError({"--first-bucket-mb=-1"}, {}, {"--first-bucket-mb"});
  ExpectError({"--device=tpu"}, {}, {"--device", "tpu"});
  ExpectError({"--progress-every=-1"}, {}, {"--progress-every"});
}

TEST_F(WorkerFlags, UnknownFlagsAndStrayArgumentsAreRejected) {
  ExpectError({"--no-such-flag=1"}, {}, {"--no-such-flag"});
  ExpectError({"--rank"}, {}, {"--rank", "missing"});
  ExpectError({"stray"}, {}, {"stray"});
}

TEST_F(WorkerFlags, BatchGeometryIsCheckedOnceTheWorldIsKnown) {
  // Without a world size it cannot be checked yet.
  ASSERT_TRUE(Parse({"--global-batch=10", "--accumulate=4"}).ok());
  ExpectError({"--global-batch=10", "--accumulate=2", "--world-size=4"}, {},
              {"--global-batch 10", "--world-size", "--accumulate", "4 x 2 = 8"});
  ExpectError({"--global-batch=10", "--accumulate=2"}, {{"WORLD_SIZE", "4"}}, {"--global-batch 10", "8"});
  auto ok = Parse({"--global-batch=16", "--accumulate=2", "--world-size=4"});
  ASSERT_TRUE(ok.ok()) << ok.status();

  WorkerOptions o;
  o.global_batch = 12;
  o.accumulate = 3;
  EXPECT_TRUE(ValidateBatchGeometry(o, 2).ok());
  EXPECT_TRUE(ValidateBatchGeometry(o, 4).ok());
  absl::Status bad = ValidateBatchGeometry(o, 3);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("3 x 3 = 9"), absl::string_view::npos) << bad;
  EXPECT_FALSE(ValidateBatchGeometry(o, 0).ok());
}

TEST_F(WorkerFlags, HelpListsFlagsAndEnvironment) {
  std::string help;
  auto o = Parse({"--help"}, {}, &help);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_NE(help.find("psync-worker"), std::string::npos) << help;
  EXPECT_NE(help.find("--world-size"), std::string::npos) << help;
  EXPECT_NE(help.find("--global-batch"), std::string::npos) << help;
  for (const char* var : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    EXPECT_NE(help.find(var), std::string::npos) << var << " missing from:\n" << help;
  }
}

TEST_F(WorkerFlags, ProcessEnvTreatsEmptyAsUnset) {
  ASSERT_EQ(setenv("PSYNC_WORKER_FLAGS_TEST_SET", "7", 1), 0);
  ASSERT_EQ(setenv("PSYNC_WORKER_FLAGS_TEST_EMPTY", "", 1), 0);
  EnvLookup env = ProcessEnv();
  EXPECT_EQ(env("PSYNC_WORKER_FLAGS_TEST_SET"), std::optional<std::string>("7"));
  EXPECT_EQ(env("PSYNC_WORKER_FLAGS_TEST_EMPTY"), std::nullopt);
  EXPECT_EQ(env("PSYNC_WORKER_FLAGS_TEST_UNSET_XYZ"), std::nullopt);
  unsetenv("PSYNC_WORKER_FLAGS_TEST_SET");
  unsetenv("PSYNC_WORKER_FLAGS_TEST_EMPTY");
}

TEST(WorkerOptionsHelpers, ExpandRankReplacesEveryPlaceholder) {
  EXPECT_EQ(ExpandRank("/out/trace_{rank}.json", 3), "/out/trace_3.json");
  EXPECT_EQ(ExpandRank("{rank}/{rank}", 12), "12/12");
  EXPECT_EQ(ExpandRank("summary.json", 5), "summary.json");
}

TEST(WorkerOptionsHelpers, SkipActiveFollowsThePattern) {
  WorkerOptions o;
  o.accumulate = 3;
  EXPECT_FALSE(o.SkipActive(0, 0));  // skip_layer -1: never
  o.skip_layer = 1;
  o.skip_pattern = SkipPattern::kAlways;
  EXPECT_TRUE(o.SkipActive(0, 0));
  EXPECT_TRUE(o.SkipActive(7, 2));
  o.skip_pattern = SkipPattern::kOdd;
  EXPECT_FALSE(o.SkipActive(0, 0));
  EXPECT_TRUE(o.SkipActive(1, 0));
  EXPECT_FALSE(o.SkipActive(2, 2));
  o.skip_pattern = SkipPattern::kLastMicro;
  EXPECT_FALSE(o.SkipActive(0, 0));
  EXPECT_FALSE(o.SkipActive(0, 1));
  EXPECT_TRUE(o.SkipActive(0, 2));
  EXPECT_STREQ(SkipPatternName(SkipPattern::kLastMicro), "lastmicro");
}

}  // namespace
}  // namespace psync::runtime
