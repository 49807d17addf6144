#include "psync/ddp/no_sync.h"

#include "worker/ddp/reducer.h"

namespace psync::ddp {

NoSync::NoSync(Reducer& reducer) : reducer_(&reducer), previous_(reducer.sync_enabled()) {
  reducer_->SetSyncEnabled(false);
}

NoSync::~NoSync() {
  if (reducer_) reducer_->SetSyncEnabled(previous_);
}

}  // namespace psync::ddp
