// store_wait.cpp — await_store_change (see store_wait.hpp).
#include "bootstrap/store_wait.hpp"

#ifdef PSTATE_HAVE_ETCD
#include "bootstrap/etcd_store.hpp"
#endif

#include <thread>

namespace pstate {

void await_store_change(Store &store, std::chrono::milliseconds pause) {
#ifdef PSTATE_HAVE_ETCD
  if (auto *etcd = dynamic_cast<EtcdStore *>(&store)) return etcd->await_change();
#endif
  std::this_thread::sleep_for(pause);
}

}  // namespace pstate
