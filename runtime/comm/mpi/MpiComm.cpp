//===- MpiComm.cpp - collectives between ranks that are MPI processes -----===//
//
// The MPI backend of moert/Comm.h (OpenMPI). Every group becomes an MPI
// communicator (MPI_Comm_create_group over MPI_COMM_WORLD, ranks in member
// order, created once and cached). Collectives are the non-blocking MPI-3
// ones, polled against a deadline: a peer that never arrives is an error
// naming the collective and the group after the timeout, not a hang (the
// trainer then aborts the job with MPI_Abort).
//
// The backend "mpi" of moert/CommBackend.h: moert_mpi_register adds it to
// the table, and a static initialiser below calls it, so a binary that
// links this object (moec links libmoert_mpi whole) offers --comm mpi.
//
//===----------------------------------------------------------------------===//

#include "moert/MpiComm.h"

#include "../CommImpl.h"
#include "moert/CommBackend.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

using moert::groupText;

namespace {

class MpiComm : public moert_comm {
public:
  MpiComm(double timeoutSeconds, MPI_Comm base) : base(base), timeout(timeoutSeconds) {
    MPI_Comm_rank(base, &rank);
    MPI_Comm_size(base, &size);
  }
  ~MpiComm() override {
    for (auto &entry : comms)
      MPI_Comm_free(&entry.second);
    if (base != MPI_COMM_WORLD)
      MPI_Comm_free(&base);
  }

  /// MPI_Comm_dup of the base: its own matching (groups, tags). Two
  /// threads calling MPI at once need MPI_THREAD_MULTIPLE.
  moert_comm *duplicate() override {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    MPI_Comm copy;
    if (provided < MPI_THREAD_MULTIPLE || MPI_Comm_dup(base, &copy) != MPI_SUCCESS)
      return nullptr;
    MPI_Comm_set_errhandler(copy, MPI_ERRORS_RETURN);
    return new MpiComm(timeout, copy);
  }

  bool allReduce(float *data, int64_t count, const int32_t *group, int n, int) override {
    MPI_Comm c;
    MPI_Request req;
    return fits(count, "all_reduce") && commOf(group, n, c) &&
           run("all_reduce", group, n,
               MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, c,
                              &req),
               req);
  }

  bool allToAllV(const void *send, const int64_t *sendBytes, void *recv, const int64_t *recvBytes,
                 const int32_t *group, int n, int) override {
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    int64_t so = 0, ro = 0;
    for (int j = 0; j < n; ++j) {
      if (!fits(sendBytes[j], "all_to_all_v") || !fits(recvBytes[j], "all_to_all_v") ||
          !fits(so + sendBytes[j], "all_to_all_v") || !fits(ro + recvBytes[j], "all_to_all_v"))
        return false;
      sc[j] = static_cast<int>(sendBytes[j]);
      rc[j] = static_cast<int>(recvBytes[j]);
      sd[j] = static_cast<int>(so);
      rd[j] = static_cast<int>(ro);
      so += sendBytes[j];
      ro += recvBytes[j];
    }
    MPI_Comm c;
    MPI_Request req;
    return commOf(group, n, c) && run("all_to_all_v", group, n,
                                      MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv,
                                                     rc.data(), rd.data(), MPI_BYTE, c, &req),
                                      req);
  }

  bool allGather(const void *send, int64_t bytes, void *recv, const int32_t *group, int n,
                 int) override {
    MPI_Comm c;
    MPI_Request req;
    return fits(bytes * n, "all_gather") && commOf(group, n, c) &&
           run("all_gather", group, n,
               MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv,
                              static_cast<int>(bytes), MPI_BYTE, c, &req),
               req);
  }

  bool reduceScatter(const float *send, float *recv, int64_t count, const int32_t *group, int n,
                     int) override {
    MPI_Comm c;
    MPI_Request req;
    return fits(count * n, "reduce_scatter") && commOf(group, n, c) &&
           run("reduce_scatter", group, n,
               MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM, c,
                                         &req),
               req);
  }

  bool broadcast(void *data, int64_t bytes, int rootIndex, const int32_t *group, int n,
                 int) override {
    MPI_Comm c;
    MPI_Request req;
    return fits(bytes, "broadcast") && commOf(group, n, c) &&
           run("broadcast", group, n,
               MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, rootIndex, c, &req), req);
  }

  bool barrier(const int32_t *group, int n, int) override {
    MPI_Comm c;
    MPI_Request req;
    return commOf(group, n, c) && run("barrier", group, n, MPI_Ibarrier(c, &req), req);
  }

private:
  bool fail(const std::string &message) {
    error = message;
    return false;
  }

  bool fits(int64_t value, const char *what) {
    return value <= INT_MAX || fail(std::string(what) + ": " + std::to_string(value) +
                                    " elements exceed what one MPI call takes (INT_MAX)");
  }

  /// The MPI communicator of a group (members in group order), cached.
  bool commOf(const int32_t *group, int n, MPI_Comm &out) {
    std::string key = groupText(group, n);
    auto it = comms.find(key);
    if (it != comms.end()) {
      out = it->second;
      return true;
    }
    // Creating a communicator blocks until every member takes part, so the
    // members first shake hands point to point, under the timeout: a member
    // that never arrives is named instead of hanging the creation.
    int tag = static_cast<int>(std::hash<std::string>()(key) & 0x7fff);
    if (!handshake(group, n, tag, key))
      return false;
    MPI_Group world, sub;
    MPI_Comm_group(base, &world);
    std::vector<int> ranks(group, group + n);
    MPI_Group_incl(world, n, ranks.data(), &sub);
    int rc = MPI_Comm_create_group(base, sub, tag, &out);
    MPI_Group_free(&sub);
    MPI_Group_free(&world);
    if (rc != MPI_SUCCESS)
      return fail("cannot create an MPI communicator for group " + key);
    MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
    comms[key] = out;
    return true;
  }

  std::chrono::steady_clock::time_point deadlineFromNow() const {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(timeout));
  }

  /// Every member sends a token to every other and waits for theirs.
  bool handshake(const int32_t *group, int n, int tag, const std::string &key) {
    std::vector<MPI_Request> requests;
    std::vector<int> tokens(n, 0), peers;
    int one = 1;
    for (int j = 0; j < n; ++j) {
      if (group[j] == rank)
        continue;
      MPI_Request r;
      MPI_Irecv(&tokens[j], 1, MPI_INT, group[j], tag, base, &r);
      requests.push_back(r);
      peers.push_back(j);
    }
    std::vector<MPI_Request> sends;
    for (int j = 0; j < n; ++j) {
      if (group[j] == rank)
        continue;
      MPI_Request r;
      MPI_Isend(&one, 1, MPI_INT, group[j], tag, base, &r);
      sends.push_back(r);
    }
    auto deadline = deadlineFromNow();
    int done = 0;
    while (!done) {
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
      if (done)
        break;
      if (std::chrono::steady_clock::now() > deadline) {
        std::string missing;
        for (size_t i = 0; i < peers.size(); ++i)
          if (!tokens[peers[i]])
            missing += (missing.empty() ? "" : ", ") + std::to_string(group[peers[i]]);
        return fail("the first collective on group " + key + " timed out after " +
                    std::to_string(timeout) + " s: rank(s) " + missing + " did not arrive");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
    return true;
  }

  /// Polls a started non-blocking collective until it completes or the
  /// deadline passes.
  bool run(const char *what, const int32_t *group, int n, int started, MPI_Request &req) {
    if (started != MPI_SUCCESS)
      return fail(std::string(what) + " on group " + groupText(group, n) +
                  " could not start (MPI error " + std::to_string(started) + ")");
    auto deadline = deadlineFromNow();
    int done = 0;
    for (unsigned spin = 0;; ++spin) {
      if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return fail(std::string(what) + " on group " + groupText(group, n) + " failed");
      if (done)
        return true;
      if (std::chrono::steady_clock::now() > deadline)
        return fail(std::string(what) + " on group " + groupText(group, n) + " timed out after " +
                    std::to_string(timeout) +
                    " s: a member is dead, stuck or called another collective");
      if (spin > 1000)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  MPI_Comm base; ///< MPI_COMM_WORLD, or a duplicate of it
  double timeout;
  std::map<std::string, MPI_Comm> comms;
};

} // namespace

extern "C" int moert_mpi_launched(void) {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

extern "C" moert_comm *moert_mpi_init(int *argc, char ***argv, double timeoutSeconds) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    // Multiple: the step's background all-reduces run on a second thread.
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return new MpiComm(timeoutSeconds, MPI_COMM_WORLD);
}

extern "C" void moert_mpi_finalize(moert_comm *comm) {
  delete comm;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised)
    MPI_Finalize();
}

extern "C" void moert_mpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

namespace {

moert_comm *initBackend(int *argc, char ***argv, double timeoutSeconds, char *, size_t) {
  return moert_mpi_init(argc, argv, timeoutSeconds);
}

/// This process's rank of `comm`, which must hold `ranks` processes.
int runBackend(moert_comm *comm, int ranks, double, int (*fn)(moert_comm *, void *), void *user,
               char *error, size_t errorSize) {
  if (moert_comm_size(comm) != ranks) {
    std::snprintf(error, errorSize,
                  "mpirun started %d processes; this binary was compiled for %d ranks",
                  moert_comm_size(comm), ranks);
    return -1;
  }
  return fn(comm, user);
}

const moert_comm_backend kBackend = {"mpi",       1,          moert_mpi_launched,
                                     initBackend, runBackend, moert_mpi_finalize};

[[maybe_unused]] const bool registered = (moert_mpi_register(), true);

} // namespace

extern "C" void moert_mpi_register(void) { moert_comm_register_backend(&kBackend); }
