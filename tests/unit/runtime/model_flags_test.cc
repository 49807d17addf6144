// A model registered from outside psync (RegisterModel) with flags of its
// own: registration checks, psync-worker's parsing of its flags (both
// spellings, defaults, the wrong model's flag refused by name), --help, the
// checkpoint's model configuration and the job fingerprint carrying them.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "psync/nn/layers.h"
#include "psync/nn/models/registry.h"
#include "worker/checkpoint/model_config.h"
#include "worker/runtime/model_flag_args.h"
#include "worker/runtime/worker_flags.h"

namespace psync::runtime {
namespace {

class Tiny : public nn::Model {
 public:
  explicit Tiny(int64_t width) { fc_ = RegisterModule("fc", std::make_shared<nn::Linear>(width, width)); }
  nn::Variable Forward(const nn::Variable& x, const std::set<int>&) override { return fc_->Forward(x); }
  absl::Status ValidateSkip(const std::set<int>& skip) const override { return absl::OkStatus(); }
  std::string Describe() const override { return "tiny"; }

 private:
  std::shared_ptr<nn::Linear> fc_;
};

nn::ModelRegistration TinyRegistration(const std::string& name) {
  nn::ModelRegistration m;
  m.name = name;
  m.help = "a test model";
  m.flags = {{"tiny-width", "4", "its width"}, {"tiny-mode", "fast", "a mode"}};
  m.factory = [](const nn::ModelOptions& o) -> absl::StatusOr<std::unique_ptr<nn::Model>> {
    absl::StatusOr<int64_t> w = o.flags.Int("tiny-width");
    if (!w.ok()) return w.status();
    return std::unique_ptr<nn::Model>(std::make_unique<Tiny>(*w));
  };
  return m;
}

// Registered once for the whole test binary (the registry is process-wide).
const bool kRegistered = nn::RegisterModel(TinyRegistration("tiny")).ok();

absl::StatusOr<WorkerOptions> Parse(std::vector<std::string> args, std::string* help = nullptr) {
  absl::FlagSaver saver;
  args.insert(args.begin(), "psync-worker");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return ParseWorkerOptions(static_cast<int>(args.size()), argv.data(),
                            [](const std::string&) { return std::optional<std::string>(); }, help);
}

TEST(RegisterModel, AddsTheModelAfterTheBuiltIns) {
  ASSERT_TRUE(kRegistered);
  const std::vector<std::string> names = nn::Models().Names();
  EXPECT_EQ(names.front(), "mlp");
  EXPECT_EQ(names.back(), "tiny");
  EXPECT_EQ(nn::ModelFlagsOf("tiny").size(), 2u);
  EXPECT_EQ(nn::ModelFlagsOf("gpt").size(), 4u) << "the built-ins declare their flags the same way";
  EXPECT_EQ(nn::ModelFlagsOf("cnn").size(), 1u);
  EXPECT_TRUE(nn::ModelFlagsOf("mlp").empty());
}

TEST(RegisterModel, RefusesBadRegistrations) {
  EXPECT_NE(nn::RegisterModel(TinyRegistration("tiny")).message().find("already registered"), std::string::npos);
  EXPECT_NE(nn::RegisterModel(TinyRegistration("gpt")).message().find("already registered"), std::string::npos);
  EXPECT_NE(nn::RegisterModel(TinyRegistration("Bad Name")).message().find("must be"), std::string::npos);
  nn::ModelRegistration no_factory = TinyRegistration("nofactory");
  no_factory.factory = nullptr;
  EXPECT_NE(nn::RegisterModel(no_factory).message().find("no factory"), std::string::npos);
  nn::ModelRegistration bad_flag = TinyRegistration("badflag");
  bad_flag.flags.push_back({"Upper_Case", "1", ""});
  EXPECT_NE(nn::RegisterModel(bad_flag).message().find("Upper_Case"), std::string::npos);
  nn::ModelRegistration twice = TinyRegistration("twice");
  twice.flags.push_back({"tiny-width", "1", ""});
  EXPECT_NE(nn::RegisterModel(twice).message().find("declared twice"), std::string::npos);
  EXPECT_FALSE(nn::Models().Contains("nofactory"));
}

TEST(ModelFlagArgs, ParsedWithDefaultsAndBothSpellings) {
  ASSERT_TRUE(kRegistered);
  absl::StatusOr<WorkerOptions> o = Parse({"--model=tiny", "--tiny_width", "8", "--steps=3"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->steps, 3);
  EXPECT_EQ(*o->model_flags.Int("tiny-width"), 8);
  EXPECT_EQ(*o->model_flags.String("tiny-mode"), "fast");
  // A built-in model's flags come the same way.
  o = Parse({"--model=gpt", "--n-head=2"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o->model_flags.Int("n-head"), 2);
  EXPECT_EQ(*o->model_flags.Int("n-layer"), 4);
}

TEST(ModelFlagArgs, ErrorsNameTheFlag) {
  ASSERT_TRUE(kRegistered);
  absl::StatusOr<WorkerOptions> o = Parse({"--model=mlp", "--tiny-width=8"});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().message(), "flag --tiny-width belongs to --model=tiny, not to --model=mlp");
  o = Parse({"--model=tiny", "--tiny-width"});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().message(), "flag --tiny-width is missing its value");
  o = Parse({"--model=tiny", "--tiny-width=x"});
  ASSERT_TRUE(o.ok());  // the factory checks values: it names the flag
  EXPECT_EQ(o->model_flags.Int("tiny-width").status().message(), "--tiny-width: 'x' is not an integer");
  EXPECT_EQ(o->model_flags.Int("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(ModelFlagArgs, ModelFlagMayNotShadowAWorkerFlag) {
  std::vector<std::string> args = {"psync-worker"};
  std::vector<char*> argv = {args[0].data()};
  absl::StatusOr<ModelFlagArgs> split = SplitModelFlags(1, argv.data(), {"tiny_mode"});
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.status().message().find("--tiny-mode, which is psync-worker's own flag"), std::string::npos);
}

TEST(ModelFlagArgs, HelpListsModelsAndTheirFlags) {
  ASSERT_TRUE(kRegistered);
  std::string help;
  ASSERT_TRUE(Parse({"--help"}, &help).ok());
  EXPECT_NE(help.find("  tiny: a test model"), std::string::npos) << help;
  EXPECT_NE(help.find("flags of --model=tiny:\n  --tiny-width=4\n      its width"), std::string::npos) << help;
}

TEST(ModelFlagArgs, CheckpointConfigRoundTripsTheFlags) {
  nn::ModelOptions o;
  o.flags = nn::ModelFlags({{"tiny-width", "8"}, {"tiny-mode", "slow"}});
  const std::map<std::string, std::string> config = checkpoint::EncodeModelConfig(o);
  EXPECT_EQ(config.at("flag.tiny-width"), "8");
  absl::StatusOr<nn::ModelOptions> back = checkpoint::DecodeModelConfig({"tiny", config}, "ckpt.safetensors");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->flags, o.flags);
}

}  // namespace
}  // namespace psync::runtime
