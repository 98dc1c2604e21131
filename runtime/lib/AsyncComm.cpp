//===- AsyncComm.cpp - all-reduces that run beside the step ---------------===//
//
// `moe.all_reduce async` (moe-schedule) starts a gradient bucket's
// reduction on the rank's background channel: a worker thread with its own
// communicator (moert_comm_dup), so the step's blocking collectives and the
// background ones never match each other. Jobs run in the order they were
// started, the same on every member, as collectives need. With
// moert_context.async_yield the worker starts no job while the step is in a
// blocking collective: the dispatch and combine all-to-alls go first (as
// Lina schedules them). `moe.wait` blocks until its bucket is done; only
// that blocked time counts as the step's communication, and the bucket's
// own run is recorded on the trace's background lane.
//
// Without a second communicator (MPI without MPI_THREAD_MULTIPLE) a start
// runs its reduction at once, as a blocking collective: the same bits.
//
//===----------------------------------------------------------------------===//

#include "CommImpl.h"
#include "StepReduce.h"
#include "Trace.h"
#include "moert/Program.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Job {
  std::vector<float *> outs;
  std::vector<const float *> ins;
  std::vector<int64_t> counts;
  std::vector<int32_t> group;
  int mean = 0;
  double scale = 1;
  int rc = 0;
  std::string error;
  bool done = false;
  double start = 0, end = 0;
  int64_t bytes[MOERT_NUM_COLLECTIVES] = {};

  int run(moert_comm *comm) {
    int64_t before[MOERT_NUM_COLLECTIVES] = {};
    if (comm)
      std::copy(comm->bytes, comm->bytes + MOERT_NUM_COLLECTIVES, before);
    start = moert::nowSeconds();
    rc = moert::reduceBucket(comm, group.data(), static_cast<int>(group.size()),
                             static_cast<int>(outs.size()), outs.data(), ins.data(), counts.data(),
                             mean, scale);
    end = moert::nowSeconds();
    if (comm) {
      for (int k = 0; k < MOERT_NUM_COLLECTIVES; ++k)
        bytes[k] = comm->bytes[k] - before[k];
      if (rc)
        error = comm->error;
    }
    return rc;
  }
};

class Engine {
public:
  explicit Engine(moert_comm *comm) : comm(comm) {
    if (comm)
      worker = std::thread([this] { loop(); });
  }
  ~Engine() {
    if (worker.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        stop = true;
      }
      cv.notify_all();
      worker.join();
    }
    if (comm)
      moert_comm_free(comm);
  }

  bool background() const { return comm != nullptr; }

  /// Queues `job` under `handle`; false when that handle is in use.
  bool submit(int handle, std::unique_ptr<Job> job) {
    std::lock_guard<std::mutex> lock(mutex);
    if (jobs.count(handle))
      return false;
    Job *raw = job.get();
    jobs[handle] = std::move(job);
    if (raw->done)
      return true;
    queue.push_back(raw);
    cv.notify_all();
    return true;
  }

  /// Blocks until the job of `handle` is done and takes it (null: none).
  std::unique_ptr<Job> take(int handle) {
    std::unique_lock<std::mutex> lock(mutex);
    auto it = jobs.find(handle);
    if (it == jobs.end())
      return nullptr;
    Job *job = it->second.get();
    cv.wait(lock, [&] { return job->done; });
    std::unique_ptr<Job> owned = std::move(it->second);
    jobs.erase(it);
    return owned;
  }

  /// The step enters (+1) or leaves (-1) a blocking collective.
  void foreground(int delta, bool yield) {
    if (!yield || !comm)
      return;
    std::lock_guard<std::mutex> lock(mutex);
    busy += delta;
    if (!busy)
      cv.notify_all();
  }

  void setYield(bool y) {
    std::lock_guard<std::mutex> lock(mutex);
    yield = y;
  }

private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      cv.wait(lock, [&] { return stop || (!queue.empty() && !(yield && busy > 0)); });
      if (queue.empty())
        return; // stopping, nothing left
      if (yield && busy > 0 && !stop)
        continue;
      Job *job = queue.front();
      queue.pop_front();
      lock.unlock();
      job->run(comm);
      lock.lock();
      job->done = true;
      cv.notify_all();
    }
  }

  moert_comm *comm; ///< the duplicate (owned); null: run at the start
  std::thread worker;
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Job *> queue;
  std::map<int, std::unique_ptr<Job>> jobs;
  bool stop = false, yield = true;
  int busy = 0;
};

Engine &engineOf(moert_context *ctx) {
  if (!ctx->async_comm) {
    // Every rank gets here at its first start (under MPI the duplicate is
    // a collective): the step program starts the same buckets everywhere.
    moert_comm *copy = ctx->comm ? moert_comm_dup(ctx->comm) : nullptr;
    ctx->async_comm = new Engine(copy);
  }
  auto &engine = *static_cast<Engine *>(ctx->async_comm);
  engine.setYield(ctx->async_yield != 0);
  return engine;
}

} // namespace

void moert::asyncForeground(moert_context *ctx, int delta) {
  if (ctx->async_comm)
    static_cast<Engine *>(ctx->async_comm)->foreground(delta, ctx->async_yield != 0);
}

extern "C" int moert_step_all_reduce_start(moert_context *ctx, int handle, int n,
                                           float *const *outs, const float *const *ins,
                                           const int64_t *counts, int axes, int mean,
                                           double scale) {
  Engine &engine = engineOf(ctx);
  auto job = std::make_unique<Job>();
  job->outs.assign(outs, outs + n);
  job->ins.assign(ins, ins + n);
  job->counts.assign(counts, counts + n);
  job->mean = mean;
  int p = moert::bucketGroup(ctx, axes, mean, scale, job->group);
  job->scale = scale;
  if (p == 1 || !engine.background()) {
    // Nothing to send, or no second channel: now, as a blocking one.
    if (int rc = moert_step_all_reduce_bucket(ctx, n, outs, ins, counts, axes, mean, scale))
      return rc;
    job->done = true;
  }
  if (!engine.submit(handle, std::move(job))) {
    if (ctx->comm)
      ctx->comm->error = "rank " + std::to_string(ctx->rank) + ": background all-reduce #" +
                         std::to_string(handle) + " started again before its wait";
    return 1;
  }
  return 0;
}

extern "C" int moert_step_wait(moert_context *ctx, int handle) {
  std::unique_ptr<Job> job;
  double start = moert::nowSeconds();
  {
    moert::CommTimer timer(ctx, "wait (background all-reduce)", /*foreground=*/false);
    job = ctx->async_comm ? static_cast<Engine *>(ctx->async_comm)->take(handle) : nullptr;
  }
  ctx->async_wait_seconds += moert::nowSeconds() - start;
  if (!job) {
    if (ctx->comm)
      ctx->comm->error = "rank " + std::to_string(ctx->rank) + ": wait on background all-reduce #" +
                         std::to_string(handle) + ", which was not started";
    return 1;
  }
  if (job->end > job->start) {
    ctx->async_seconds += job->end - job->start;
    if (ctx->trace)
      ctx->trace->add(moert::TraceLane::Background, "all_reduce (background)", job->start,
                      job->end);
  }
  if (ctx->comm) {
    for (int k = 0; k < MOERT_NUM_COLLECTIVES; ++k)
      ctx->comm->bytes[k] += job->bytes[k];
    if (job->rc)
      ctx->comm->error = job->error;
  }
  return job->rc;
}

extern "C" void moert_async_free(moert_context *ctx) {
  delete static_cast<Engine *>(ctx->async_comm);
  ctx->async_comm = nullptr;
}
