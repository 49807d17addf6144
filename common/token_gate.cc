#include "common/token_gate.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "psync/common/logging.h"
#include "common/token.h"

namespace psync {
namespace {

absl::string_view View(const grpc_slice& s) {
  return absl::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)), GRPC_SLICE_LENGTH(s));
}

// What is known of the caller for the log line. gRPC 1.51 gives the
// processor the call's headers and the connection's auth context (on
// plaintext and server-only TLS: only the transport kind), not the peer
// address, so the caller is named by what it sent: its user-agent and the
// :authority it dialed, cut short and printable.
std::string Describe(absl::string_view user_agent, absl::string_view authority) {
  auto printable = [](absl::string_view s) {
    std::string out;
    for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
    return out;
  };
  return absl::StrCat("a client (user-agent '", printable(user_agent), "', dialing '", printable(authority), "')");
}

// gRPC core's processor: decides inline and answers at once.
void Process(void* state, grpc_auth_context*, const grpc_metadata* md, size_t num_md,
             grpc_process_auth_metadata_done_cb done, void* user_data) {
  TokenGate* gate = static_cast<std::shared_ptr<TokenGate>*>(state)->get();
  absl::string_view path, authorization, user_agent, authority;
  bool has_authorization = false;
  for (size_t i = 0; i < num_md; ++i) {
    const absl::string_view key = View(md[i].key);
    if (key == ":path") {
      path = View(md[i].value);
    } else if (key == "authorization" && !has_authorization) {
      authorization = View(md[i].value);
      has_authorization = true;
    } else if (key == "user-agent") {
      user_agent = View(md[i].value);
    } else if (key == ":authority") {
      authority = View(md[i].value);
    }
  }
  const std::string* refused = gate->Admit(path, has_authorization ? &authorization : nullptr,
                                           [&] { return Describe(user_agent, authority); });
  if (refused == nullptr) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
    return;
  }
  done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, refused->c_str());
}

void Destroy(void* state) { delete static_cast<std::shared_ptr<TokenGate>*>(state); }

class GatedCredentials final : public grpc::ServerCredentials {
 public:
  GatedCredentials(std::shared_ptr<TokenGate> gate, std::string cert, std::string key)
      : gate_(std::move(gate)), cert_(std::move(cert)), key_(std::move(key)) {}

  // The gate is the processor; another one is not taken.
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    PSYNC_LOG(ERROR) << "GatedServerCredentials: SetAuthMetadataProcessor ignored (the token gate is the processor)";
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    grpc_server_credentials* creds = nullptr;
    if (cert_.empty()) {
      creds = grpc_insecure_server_credentials_create();
    } else {
      grpc_ssl_pem_key_cert_pair pair{key_.c_str(), cert_.c_str()};
      creds = grpc_ssl_server_credentials_create_ex(nullptr, &pair, 1, GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
                                                    nullptr);
    }
    if (creds == nullptr) return 0;
    grpc_server_credentials_set_auth_metadata_processor(
        creds, grpc_auth_metadata_processor{&Process, &Destroy, new std::shared_ptr<TokenGate>(gate_)});
    const int port = grpc_server_add_http2_port(server, addr.c_str(), creds);
    grpc_server_credentials_release(creds);
    return port;
  }

  const std::shared_ptr<TokenGate> gate_;
  const std::string cert_, key_;
};

}  // namespace

TokenGate::TokenGate(TokenGateOptions options, std::shared_ptr<RefusalCounters> counters)
    : options_(std::move(options)), counters_(std::move(counters)) {}

const std::string* TokenGate::Admit(absl::string_view path, const absl::string_view* authorization,
                                    const std::function<std::string()>& caller) {
  for (const std::string& open : options_.open_prefixes) {
    if (absl::StartsWith(path, open)) return nullptr;
  }
  if (authorization != nullptr && !options_.token.empty() && BearerTokenMatches(*authorization, options_.token)) {
    return nullptr;
  }
  uint64_t suppressed = 0;
  if (counters_->Count(path, &suppressed)) {
    PSYNC_LOG(WARNING) << options_.server_name << ": refused " << (path.empty() ? "(no path)" : path.substr(0, 128))
                       << " from " << caller() << ": "
                       << (authorization == nullptr ? "no token" : "wrong token")
                       << (suppressed > 0 ? absl::StrCat(" (", suppressed, " more refused since the last line)")
                                          : std::string());
  }
  return authorization == nullptr ? &options_.missing_message : &options_.wrong_message;
}

std::shared_ptr<grpc::ServerCredentials> GatedServerCredentials(std::shared_ptr<TokenGate> gate,
                                                                const std::string& tls_cert_pem,
                                                                const std::string& tls_key_pem) {
  return std::make_shared<GatedCredentials>(std::move(gate), tls_cert_pem, tls_key_pem);
}

}  // namespace psync
