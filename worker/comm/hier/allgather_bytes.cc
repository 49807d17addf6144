// Hierarchical allgather of byte strings: shm allgather within the host,
// the host leaders exchange their hosts' lists over Gloo, and each leader
// shares the whole list with its host (length, then bytes).
#include <cstring>

#include "psync/common/status_macros.h"
#include "worker/comm/hier/collectives.h"
#include "worker/comm/shm/collectives.h"

namespace psync::comm::hier {
namespace {

std::string Pack(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& s : parts) {
    const uint64_t len = s.size();
    out.append(reinterpret_cast<const char*>(&len), sizeof(len));
    out += s;
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> Unpack(const std::string& blob, size_t expected) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < blob.size()) {
    uint64_t len = 0;
    if (blob.size() - pos < sizeof(len)) break;
    std::memcpy(&len, blob.data() + pos, sizeof(len));
    pos += sizeof(len);
    if (blob.size() - pos < len) break;
    out.push_back(blob.substr(pos, len));
    pos += len;
  }
  if (pos != blob.size() || out.size() != expected) {
    return absl::InternalError(absl::StrCat("hier allgather: malformed list (", out.size(), " of ", expected,
                                            " entries)"));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> AllgatherBytes(HierParts& p, const std::string& desc, const std::string& bytes) {
  PSYNC_ASSIGN_OR_RETURN(std::vector<std::string> host_parts, shm::AllgatherBytes(*p.local, desc, bytes));
  std::string all;  // every host's packed list, packed in host order (leaders only at first)
  if (p.is_leader()) {
    std::vector<std::string> hosts = {Pack(host_parts)};
    if (p.leaders->size() > 1) {
      absl::StatusOr<std::vector<std::string>> got = p.leaders->AllgatherBytes(hosts[0], p.timeout);
      if (!got.ok()) return Annotate(got.status(), absl::StrCat(desc, ": allgather among host leaders"));
      hosts = std::move(*got);
    }
    all = Pack(hosts);
  }
  uint64_t len = all.size();
  PSYNC_RETURN_IF_ERROR(shm::Broadcast(*p.local, desc, "allgather length", &len, sizeof(len), 0));
  all.resize(len);
  PSYNC_RETURN_IF_ERROR(shm::Broadcast(*p.local, desc, "allgather", all.data(), len, 0));
  PSYNC_ASSIGN_OR_RETURN(std::vector<std::string> hosts, Unpack(all, static_cast<size_t>(p.topology.num_hosts())));
  std::vector<std::string> out(static_cast<size_t>(p.topology.world_size()));
  for (int h = 0; h < p.topology.num_hosts(); ++h) {
    const std::vector<int>& ranks = p.topology.ranks_on_host(h);
    PSYNC_ASSIGN_OR_RETURN(std::vector<std::string> parts, Unpack(hosts[static_cast<size_t>(h)], ranks.size()));
    for (size_t k = 0; k < ranks.size(); ++k) out[static_cast<size_t>(ranks[k])] = std::move(parts[k]);
  }
  return out;
}

}  // namespace psync::comm::hier
