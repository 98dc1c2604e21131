//===- CommRegistry.cpp - the table of communicator backends --------------===//
//
// moert/CommBackend.h: threads first (ThreadComm.cpp), then what the
// binary's libraries register. A function-local table, so registrations
// from static initialisers of other objects find it constructed.
//
//===----------------------------------------------------------------------===//

#include "CommImpl.h"
#include "moert/CommBackend.h"

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<const moert_comm_backend *> backends{&moert::threadsBackend()};
  std::string names;
};

Registry &registry() {
  static Registry r;
  return r;
}

} // namespace

extern "C" void moert_comm_register_backend(const moert_comm_backend *backend) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const moert_comm_backend *&b : r.backends)
    if (std::strcmp(b->name, backend->name) == 0) {
      b = backend;
      return;
    }
  r.backends.push_back(backend);
}

extern "C" const moert_comm_backend *moert_comm_backend_named(const char *name) {
  for (int i = 0; const moert_comm_backend *b = moert_comm_backend_at(i); ++i)
    if (std::strcmp(b->name, name) == 0)
      return b;
  return nullptr;
}

extern "C" const moert_comm_backend *moert_comm_backend_at(int i) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return i >= 0 && i < static_cast<int>(r.backends.size()) ? r.backends[i] : nullptr;
}

extern "C" const moert_comm_backend *moert_comm_backend_default(void) {
  for (int i = 0; const moert_comm_backend *b = moert_comm_backend_at(i); ++i)
    if (b->launched && b->launched())
      return b;
  return moert_comm_backend_at(0);
}

extern "C" const char *moert_comm_backend_names(void) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.names.clear();
  for (const moert_comm_backend *b : r.backends)
    r.names += (r.names.empty() ? "" : ", ") + std::string(b->name);
  return r.names.c_str();
}
