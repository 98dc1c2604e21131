//===- AsyncComm.cpp - all-reduces that run beside the step ---------------===//
//
// `moe.all_reduce async` (moe-schedule) starts a gradient bucket's
// reduction on the rank's background channel: a worker thread with its own
// communicator (moert_comm_dup), so the step's blocking collectives and the
// background ones never match each other. Jobs run in the order they were
// started, the same on every member, as collectives need. With
// moert_context.run.async_yield the worker starts no job while the step is in a
// blocking collective: the dispatch and combine all-to-alls go first (as
// Lina schedules them). `moe.wait` blocks until its bucket is done; only
// that blocked time counts as the step's communication, and the bucket's
// own run is recorded on the trace's background lane.
//
// Without a second communicator (MPI without MPI_THREAD_MULTIPLE) a start
// runs its reduction at once, as a blocking collective: the same bits.
//
// `moe.all_to_all async` (moe-pipeline-experts: the chunks of an expert
// phase's dispatch and combine) runs on a channel of its own, a second
// worker with a third communicator, so that an exchange never queues
// behind a gradient bucket; while one runs, the buckets that yield wait,
// as they do for the step's blocking all-to-alls. moert_step_exchange_wait
// completes one; the exchange is the blocking one's code, so the bits are
// the same.
//
// With moert_context.inputs.staleness (delayed gradients), a start reduces a copy
// of its inputs, and the wait of the next step gives that sum corrected by
// how the rank's own gradient changed since (delayed averaging with local
// correction): sum(t-1) + own x (g(t) - g(t-1)), where own x g is the
// rank's own estimate of the sum (g for a mean, p g for a sum over p). The
// reduction has a whole step to finish. With no reduction from the step
// before (the first delayed step), the wait completes this step's and
// gives its exact sum. The corrections differ by rank, so the data
// replicas' parameters drift apart (AdamW and clipping are not linear).
//
//===----------------------------------------------------------------------===//

#include "../comm/CommImpl.h"
#include "CopyBytes.h"
#include "StepReduce.h"
#include "Trace.h"
#include "moert/Program.h"

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Job {
  std::vector<float *> targets; ///< where the wait puts the result
  std::vector<float> copy;      ///< delayed: the inputs, reduced in place
  std::vector<float> local;     ///< delayed: the inputs, kept
  double localScale = 1;        ///< delayed: the rank's own estimate of the result per input
  bool delayed = false;         ///< waited for in the next step
  std::vector<float *> outs;
  std::vector<const float *> ins;
  std::vector<int64_t> counts;
  std::vector<int64_t> shards; ///< a ZeRO reduce-scatter's (empty: an all-reduce)
  std::vector<int32_t> group;
  int mean = 0;
  double scale = 1;
  int rc = 0;
  std::string error;
  bool done = false;
  double start = 0, end = 0;
  int64_t bytes[MOERT_NUM_COLLECTIVES] = {};
  int64_t interNodeBytes[MOERT_NUM_COLLECTIVES] = {}; ///< of those, to other nodes
  /// An exchange's work over the channel's communicator (empty: a reduction).
  std::function<int(moert_comm *)> work;

  int run(moert_comm *comm) {
    int64_t before[MOERT_NUM_COLLECTIVES] = {}, interBefore[MOERT_NUM_COLLECTIVES] = {};
    if (comm) {
      std::copy(comm->bytes, comm->bytes + MOERT_NUM_COLLECTIVES, before);
      std::copy(comm->interNodeBytes, comm->interNodeBytes + MOERT_NUM_COLLECTIVES, interBefore);
    }
    start = moert::nowSeconds();
    rc = work ? work(comm)
         : shards.empty()
             ? moert::reduceBucket(comm, group.data(), static_cast<int>(group.size()),
                                   static_cast<int>(outs.size()), outs.data(), ins.data(),
                                   counts.data(), mean, scale)
             : moert::reduceScatterBucket(comm, group.data(), static_cast<int>(group.size()),
                                          static_cast<int>(outs.size()), outs.data(), ins.data(),
                                          counts.data(), shards.data(), mean, scale);
    end = moert::nowSeconds();
    if (comm) {
      for (int k = 0; k < MOERT_NUM_COLLECTIVES; ++k) {
        bytes[k] = comm->bytes[k] - before[k];
        interNodeBytes[k] = comm->interNodeBytes[k] - interBefore[k];
      }
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
    // Jobs nobody waited for (a step that failed, or the last delayed
    // step's): their failures still get said.
    for (auto &[handle, queued] : jobs)
      for (auto &job : queued)
        if (job->done && job->rc)
          std::fprintf(stderr, "warning: background all-reduce #%d failed after its step: %s\n",
                       handle, job->error.c_str());
    if (comm)
      moert_comm_free(comm);
  }

  bool background() const { return comm != nullptr; }

  /// Queues `job` under `handle`; false when that handle already has
  /// `limit` jobs not taken (1; 2 with delayed gradients: last step's).
  bool submit(int handle, std::unique_ptr<Job> job, size_t limit) {
    std::lock_guard<std::mutex> lock(mutex);
    auto &mine = jobs[handle];
    if (mine.size() >= limit)
      return false;
    Job *raw = job.get();
    mine.push_back(std::move(job));
    if (raw->done)
      return true;
    queue.push_back(raw);
    cv.notify_all();
    return true;
  }

  /// Delayed gradients: a finished job's buffers back to `handle`'s pool,
  /// and out again for its next start (no allocation, so no page faults
  /// or unmapping every step).
  void recycle(int handle, std::unique_ptr<Job> job) {
    std::lock_guard<std::mutex> lock(mutex);
    spare[handle] = std::move(job);
  }
  void reuse(int handle, Job &job) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = spare.find(handle);
    if (it == spare.end() || !it->second)
      return;
    job.copy = std::move(it->second->copy);
    job.local = std::move(it->second->local);
    spare.erase(it);
  }

  /// Blocks until the newest job of `handle` is done; leaves it queued.
  Job *finishNewest(int handle) {
    std::unique_lock<std::mutex> lock(mutex);
    auto it = jobs.find(handle);
    if (it == jobs.end() || it->second.empty())
      return nullptr;
    Job *job = it->second.back().get();
    cv.wait(lock, [&] { return job->done; });
    return job;
  }

  /// The job of `handle` started last (null: none), to read its targets.
  Job *newest(int handle) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = jobs.find(handle);
    return it == jobs.end() || it->second.empty() ? nullptr : it->second.back().get();
  }

  /// Blocks until the oldest job of `handle` is done and takes it; null
  /// when `handle` has fewer than `least` jobs.
  std::unique_ptr<Job> take(int handle, size_t least = 1) {
    std::unique_lock<std::mutex> lock(mutex);
    auto it = jobs.find(handle);
    if (it == jobs.end() || it->second.size() < least)
      return nullptr;
    Job *job = it->second.front().get();
    cv.wait(lock, [&] { return job->done; });
    std::unique_ptr<Job> owned = std::move(it->second.front());
    it->second.pop_front();
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
      if (around)
        around(+1);
      job->run(comm);
      if (around)
        around(-1);
      lock.lock();
      job->done = true;
      cv.notify_all();
    }
  }

public:
  /// Called with +1 before and -1 after each job the worker runs.
  std::function<void(int)> around;

private:
  moert_comm *comm; ///< the duplicate (owned); null: run at the start
  std::thread worker;
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Job *> queue;
  std::map<int, std::deque<std::unique_ptr<Job>>> jobs;
  std::map<int, std::unique_ptr<Job>> spare;
  bool stop = false, yield = true;
  int busy = 0;
};

/// A rank's background channels: gradient reductions, and exchanges
/// (made at the first async all_to_all).
struct Channels {
  std::unique_ptr<Engine> reduce, exchange;
  ~Channels() {
    exchange.reset(); // its worker may hold back `reduce`'s
    reduce.reset();
  }
};

Channels &channelsOf(moert_context *ctx) {
  if (!ctx->runtime.async_comm) {
    // Every rank gets here at its first start (under MPI the duplicate is
    // a collective): the step program starts the same buckets everywhere.
    auto *channels = new Channels;
    channels->reduce =
        std::make_unique<Engine>(ctx->run.comm ? moert_comm_dup(ctx->run.comm) : nullptr);
    ctx->runtime.async_comm = channels;
  }
  return *static_cast<Channels *>(ctx->runtime.async_comm);
}

Engine &engineOf(moert_context *ctx) {
  auto &engine = *channelsOf(ctx).reduce;
  engine.setYield(ctx->run.async_yield != 0);
  return engine;
}

Engine &exchangeOf(moert_context *ctx) {
  Channels &channels = channelsOf(ctx);
  if (!channels.exchange) {
    // Likewise a collective under MPI, at the step's first async exchange.
    channels.exchange =
        std::make_unique<Engine>(ctx->run.comm ? moert_comm_dup(ctx->run.comm) : nullptr);
    Engine *reduce = channels.reduce.get();
    bool yield = ctx->run.async_yield != 0;
    channels.exchange->around = [reduce, yield](int delta) { reduce->foreground(delta, yield); };
  }
  return *channels.exchange;
}

/// Queues `job` on `engine`; 1 (the message in moert_comm_error) when its
/// handle's last start was not waited for.
int submit(moert_context *ctx, Engine &engine, int handle, std::unique_ptr<Job> job, size_t limit,
           const char *what) {
  if (engine.submit(handle, std::move(job), limit))
    return 0;
  if (ctx->run.comm)
    ctx->run.comm->error = "rank " + std::to_string(ctx->run.rank) + ": background " + what + " #" +
                           std::to_string(handle) + " started again before its wait";
  return 1;
}

} // namespace

extern "C" void moert_async_init(moert_context *ctx) { engineOf(ctx); }

void moert::asyncForeground(moert_context *ctx, int delta) {
  if (ctx->runtime.async_comm)
    static_cast<Channels *>(ctx->runtime.async_comm)
        ->reduce->foreground(delta, ctx->run.async_yield != 0);
}

extern "C" int moert_step_all_reduce_start(moert_context *ctx, int handle, int n,
                                           float *const *outs, const float *const *ins,
                                           const int64_t *counts, int axes, int mean,
                                           double scale) {
  Engine &engine = engineOf(ctx);
  auto job = std::make_unique<Job>();
  job->targets.assign(outs, outs + n);
  job->counts.assign(counts, counts + n);
  job->mean = mean;
  int p = moert::bucketGroup(ctx, axes, mean, scale, job->group);
  job->scale = scale;
  // A group of one has nothing to wait for: never delayed (exact).
  bool delayed = ctx->inputs.staleness > 0 && p > 1;
  job->delayed = delayed;
  if (delayed) {
    // The step's buffers change before the next step's wait: reduce a copy.
    int64_t total = 0;
    for (int t = 0; t < n; ++t)
      total += counts[t];
    engine.reuse(handle, *job);
    job->copy.resize(static_cast<size_t>(total));
    job->local.resize(static_cast<size_t>(total));
    for (int64_t t = 0, at = 0; t < n; at += counts[t], ++t) {
      moert::copyBytes(job->copy.data() + at, ins[t], static_cast<size_t>(counts[t]) * 4);
      job->outs.push_back(job->copy.data() + at);
    }
    job->ins.assign(job->outs.begin(), job->outs.end());
    std::copy(job->copy.begin(), job->copy.end(), job->local.begin());
    // A sum over the group estimated as p times the rank's own.
    job->localScale = scale * (mean ? 1.0 : static_cast<double>(p));
  } else {
    job->outs.assign(outs, outs + n);
    job->ins.assign(ins, ins + n);
  }
  if (p == 1 || !engine.background()) {
    // Nothing to send, or no second channel: now, as a blocking one.
    if (int rc = moert_step_all_reduce_bucket(ctx, n, job->outs.data(), job->ins.data(), counts,
                                              axes, mean, scale))
      return rc;
    job->done = true;
  }
  return submit(ctx, engine, handle, std::move(job), delayed ? 2 : 1, "all-reduce");
}

extern "C" int moert_step_reduce_scatter_start(moert_context *ctx, int handle, int n,
                                               float *const *outs, const float *const *ins,
                                               const int64_t *counts, const int64_t *shards,
                                               int axes, int mean, double scale) {
  Engine &engine = engineOf(ctx);
  auto job = std::make_unique<Job>();
  job->targets.assign(outs, outs + n);
  job->outs.assign(outs, outs + n);
  job->ins.assign(ins, ins + n);
  job->counts.assign(counts, counts + n);
  job->shards.assign(shards, shards + n);
  job->mean = mean;
  job->scale = scale;
  job->group.resize(static_cast<size_t>(std::max(ctx->run.dp, 1) * std::max(ctx->run.ep, 1) *
                                        std::max(ctx->run.tp, 1)));
  int p = moert_grid_group(ctx, axes, job->group.data());
  job->group.resize(static_cast<size_t>(p));
  if (p == 1 || !engine.background()) {
    // Nothing to send, or no second channel: now, as a blocking one.
    if (int rc = moert_step_reduce_scatter(ctx, n, outs, ins, counts, shards, axes, mean, scale))
      return rc;
    job->done = true;
  }
  return submit(ctx, engine, handle, std::move(job), 1, "reduce-scatter");
}

extern "C" int moert_step_all_to_all_ragged_start(moert_context *ctx, int handle, float *out,
                                                  const float *in, const int64_t *shape, int split,
                                                  int concat, int axes, const int32_t *counts,
                                                  int32_t *recv, const moert_codec *codec) {
  Engine &engine = exchangeOf(ctx);
  if (!engine.background()) {
    // No second channel: now, as a blocking one.
    if (int rc = moert_step_all_to_all_ragged(ctx, out, in, shape, split, concat, axes, counts,
                                              recv, codec))
      return rc;
    auto job = std::make_unique<Job>();
    job->done = true;
    engine.submit(handle, std::move(job), 1);
    return 0;
  }
  auto job = std::make_unique<Job>();
  std::vector<int64_t> dims(shape, shape + 3);
  const moert_context *step = ctx;
  job->work = [=](moert_comm *comm) {
    return moert::raggedAllToAll(step, comm, out, in, dims.data(), split, concat, axes, counts,
                                 recv, codec);
  };
  return submit(ctx, engine, handle, std::move(job), 1, "all_to_all");
}

extern "C" int moert_step_exchange_wait(moert_context *ctx, int handle) {
  auto *channels = static_cast<Channels *>(ctx->runtime.async_comm);
  Engine *engine = channels ? channels->exchange.get() : nullptr;
  std::unique_ptr<Job> job;
  double start = moert::nowSeconds();
  {
    moert::CommTimer timer(ctx, "wait (background all_to_all)", /*foreground=*/false);
    job = engine ? engine->take(handle) : nullptr;
  }
  ctx->outputs.async_wait_seconds += moert::nowSeconds() - start;
  if (!job) {
    if (ctx->run.comm)
      ctx->run.comm->error = "rank " + std::to_string(ctx->run.rank) +
                             ": wait on background all_to_all #" + std::to_string(handle) +
                             ", which was not started";
    return 1;
  }
  if (job->end > job->start) {
    ctx->outputs.async_seconds += job->end - job->start;
    if (ctx->run.trace)
      ctx->run.trace->add(moert::TraceLane::Background, "all_to_all (background)", job->start,
                          job->end);
  }
  if (ctx->run.comm) {
    for (int k = 0; k < MOERT_NUM_COLLECTIVES; ++k) {
      ctx->run.comm->bytes[k] += job->bytes[k];
      ctx->run.comm->interNodeBytes[k] += job->interNodeBytes[k];
    }
    if (job->rc)
      ctx->run.comm->error = job->error;
  }
  return job->rc;
}

extern "C" int moert_step_wait(moert_context *ctx, int handle) {
  auto *channels = static_cast<Channels *>(ctx->runtime.async_comm);
  Engine *engine = channels ? channels->reduce.get() : nullptr;
  Job *current = engine ? engine->newest(handle) : nullptr;
  bool delayed = current && current->delayed;
  std::unique_ptr<Job> job;
  double start = moert::nowSeconds();
  {
    moert::CommTimer timer(ctx, "wait (background all-reduce)", /*foreground=*/false);
    // Delayed: last step's job, when there is one besides this step's; on
    // the first delayed step, this step's own, completed here and kept as
    // the next step's "last".
    job = engine ? engine->take(handle, delayed ? 2 : 1) : nullptr;
    if (delayed && !job && engine)
      engine->finishNewest(handle);
  }
  ctx->outputs.async_wait_seconds += moert::nowSeconds() - start;
  if (!current) {
    if (ctx->run.comm)
      ctx->run.comm->error = "rank " + std::to_string(ctx->run.rank) +
                             ": wait on background all-reduce #" + std::to_string(handle) +
                             ", which was not started";
    return 1;
  }
  if (delayed) {
    // Last step's reduction, corrected by how this rank's own gradient
    // changed since: out = sum(t-1) + own x (g(t) - g(t-1)). On the first
    // delayed step, this step's exact sum (waited for above).
    const float *now = current->local.data();
    const float *before = job ? job->local.data() : nullptr;
    const float *sum = job ? job->copy.data() : current->copy.data();
    double own = current->localScale;
    for (size_t t = 0, at = 0; t < current->targets.size(); at += current->counts[t], ++t) {
      float *out = current->targets[t];
      for (int64_t k = 0; k < current->counts[t]; ++k) {
        size_t i = at + static_cast<size_t>(k);
        out[k] =
            job ? static_cast<float>(sum[i] + own * (double(now[i]) - double(before[i]))) : sum[i];
      }
    }
    if (!job)
      return current->rc;
  }
  int rc = job->rc;
  if (job->end > job->start) {
    ctx->outputs.async_seconds += job->end - job->start;
    if (ctx->run.trace)
      ctx->run.trace->add(moert::TraceLane::Background,
                          job->shards.empty() ? "all_reduce (background)"
                                              : "reduce_scatter (background)",
                          job->start, job->end);
  }
  if (ctx->run.comm) {
    for (int k = 0; k < MOERT_NUM_COLLECTIVES; ++k) {
      ctx->run.comm->bytes[k] += job->bytes[k];
      ctx->run.comm->interNodeBytes[k] += job->interNodeBytes[k];
    }
    if (job->rc)
      ctx->run.comm->error = job->error;
  }
  if (delayed)
    engine->recycle(handle, std::move(job));
  return rc;
}

extern "C" void moert_async_free(moert_context *ctx) {
  delete static_cast<Channels *>(ctx->runtime.async_comm);
  ctx->runtime.async_comm = nullptr;
}
