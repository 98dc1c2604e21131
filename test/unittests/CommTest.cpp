//===- CommTest.cpp - the threads communicator and the backend table -----===//
//
// Collectives between ranks that are threads: results against serial
// references (bit for bit, and the same bits on every member), concurrent
// sub-groups, ragged all-to-all, byte counters equal to the analytical
// volumes, and a missing peer that turns into an error naming it instead of
// a hang. Every registered backend that holds its ranks in this process
// passes the shared checks (CommConformance.h) through the buffer API; the
// MPI backend passes them in MpiCommTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "CommConformance.h"
#include "moert/Comm.h"
#include "moert/CommBackend.h"
#include "moert/Codecs.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

std::vector<float> dataOf(int rank, int count) {
  std::mt19937 rng(100 + rank);
  std::normal_distribution<float> n;
  std::vector<float> v(count);
  for (float &x : v)
    x = n(rng);
  return v;
}

/// Runs `body(comm)` on `ranks` threads; failures are recorded per rank.
struct Ranks {
  std::function<int(moert_comm *)> body;
  std::vector<std::string> errors;
  std::mutex mutex;
  static int trampoline(moert_comm *comm, void *user) {
    auto *run = static_cast<Ranks *>(user);
    int rc = run->body(comm);
    if (rc != 0) {
      std::lock_guard<std::mutex> lock(run->mutex);
      run->errors.push_back(moert_comm_error(comm));
    }
    return rc;
  }
  int operator()(int ranks, double timeout = 10) {
    errors.assign(0, "");
    return moert_run_threads(ranks, timeout, trampoline, this);
  }
};

TEST(CommTest, AllReduceIsTheSerialSumOnEveryRank) {
  const int ranks = 4, count = 1000;
  std::vector<std::vector<float>> results(ranks);
  Ranks run;
  run.body = [&](moert_comm *comm) {
    int r = moert_comm_rank(comm);
    std::vector<float> data = dataOf(r, count);
    const int32_t all[] = {0, 1, 2, 3};
    int rc = moert_all_reduce_f32(comm, data.data(), count, all, ranks);
    results[r] = data;
    return rc;
  };
  ASSERT_EQ(run(ranks), 0);
  std::vector<float> want(count, 0.0f);
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> d = dataOf(r, count);
    for (int k = 0; k < count; ++k)
      want[k] += d[k];
  }
  for (int r = 0; r < ranks; ++r)
    EXPECT_EQ(std::memcmp(results[r].data(), want.data(), count * sizeof(float)), 0)
        << "rank " << r;
}

TEST(CommTest, SubGroupsRunConcurrentlyAndCountBytes) {
  const int count = 100;
  std::vector<float> results(4);
  std::vector<int64_t> bytes(4);
  Ranks run;
  run.body = [&](moert_comm *comm) {
    int r = moert_comm_rank(comm);
    // {0, 2} and {1, 3}: strided groups, as expert replicas over dp.
    const int32_t even[] = {0, 2}, odd[] = {1, 3};
    float data[count];
    for (int k = 0; k < count; ++k)
      data[k] = static_cast<float>(r);
    int rc = moert_all_reduce_f32(comm, data, count, r % 2 ? odd : even, 2);
    results[r] = data[0];
    bytes[r] = moert_comm_bytes(comm, MOERT_ALL_REDUCE);
    return rc;
  };
  ASSERT_EQ(run(4), 0);
  EXPECT_EQ(results, (std::vector<float>{2, 4, 2, 4}));
  // Ring all-reduce: 2 (p-1)/p of 400 bytes.
  EXPECT_EQ(bytes, (std::vector<int64_t>{400, 400, 400, 400}));
}

TEST(CommTest, RaggedAllToAllDeliversEveryChunk) {
  const int ranks = 3;
  std::vector<std::string> received(ranks);
  std::vector<int64_t> sent(ranks);
  Ranks run;
  run.body = [&](moert_comm *comm) {
    int r = moert_comm_rank(comm);
    // Rank r sends (r + j + 1) bytes of value 'a' + r to rank j.
    std::vector<int64_t> sendBytes(ranks), recvBytes(ranks);
    std::string send, recv;
    for (int j = 0; j < ranks; ++j) {
      sendBytes[j] = r + j + 1;
      recvBytes[j] = j + r + 1;
      send += std::string(sendBytes[j], static_cast<char>('a' + r));
    }
    recv.resize(6 + 3 * r); // sum over j of (j + r + 1)
    const int32_t all[] = {0, 1, 2};
    int rc = moert_all_to_all_v(comm, send.data(), sendBytes.data(), recv.data(), recvBytes.data(),
                                all, ranks);
    received[r] = recv;
    sent[r] = moert_comm_bytes(comm, MOERT_ALL_TO_ALL);
    return rc;
  };
  ASSERT_EQ(run(ranks), 0);
  EXPECT_EQ(received[0], "abbccc");
  EXPECT_EQ(received[1], "aabbbcccc");
  EXPECT_EQ(received[2], "aaabbbbccccc");
  // Bytes to the other ranks only: rank 0 sends 2 + 3, rank 1 2 + 4.
  EXPECT_EQ(sent, (std::vector<int64_t>{5, 6, 7}));
}

TEST(CommTest, CountsTheBytesThatCrossNodes) {
  // 4 ranks on 2 nodes ({0, 1} and {2, 3}).
  const int ranks = 4;
  std::vector<std::vector<int64_t>> inter(ranks), total(ranks);
  Ranks run;
  run.body = [&](moert_comm *comm) {
    int r = moert_comm_rank(comm);
    const int32_t nodeOf[] = {0, 0, 1, 1}, all[] = {0, 1, 2, 3};
    if (moert_comm_set_nodes(comm, nodeOf) != 0)
      return 1;
    // An all-to-all: rank r sends 10 (j + 1) + r bytes to rank j.
    std::vector<int64_t> sendBytes(ranks), recvBytes(ranks);
    for (int j = 0; j < ranks; ++j)
      sendBytes[j] = 10 * (j + 1) + r, recvBytes[j] = 10 * (r + 1) + j;
    std::vector<char> send(200), recv(200);
    int rc = moert_all_to_all_v(comm, send.data(), sendBytes.data(), recv.data(), recvBytes.data(),
                                all, ranks);
    // A ring all-reduce of 100 floats: 600 bytes to the next rank, across
    // nodes from ranks 1 and 3 only.
    std::vector<float> data(100, 1.0f);
    rc = rc ? rc : moert_all_reduce_f32(comm, data.data(), 100, all, ranks);
    // An all-gather of 8 bytes: 8 to each member of the other node.
    char piece[8] = {}, gathered[32];
    rc = rc ? rc : moert_all_gather(comm, piece, 8, gathered, all, ranks);
    // Within a node only: nothing crosses.
    const int32_t mine[] = {r < 2 ? 0 : 2, r < 2 ? 1 : 3};
    rc = rc ? rc : moert_all_reduce_f32(comm, data.data(), 100, mine, 2);
    for (int k = 0; k < MOERT_NUM_COLLECTIVES; ++k) {
      inter[r].push_back(moert_comm_inter_node_bytes(comm, k));
      total[r].push_back(moert_comm_bytes(comm, k));
    }
    return rc;
  };
  ASSERT_EQ(run(ranks), 0) << (run.errors.empty() ? "" : run.errors[0]);
  for (int r = 0; r < ranks; ++r) {
    int64_t a2a = r < 2 ? (30 + r) + (40 + r) : (10 + r) + (20 + r);
    EXPECT_EQ(inter[r][MOERT_ALL_TO_ALL], a2a) << "rank " << r;
    EXPECT_EQ(inter[r][MOERT_ALL_REDUCE], r % 2 ? 600 : 0) << "rank " << r;
    EXPECT_EQ(total[r][MOERT_ALL_REDUCE], 600 + 400) << "rank " << r;
    EXPECT_EQ(inter[r][MOERT_ALL_GATHER], 16) << "rank " << r;
  }
}

TEST(CommTest, GatherScatterAndBroadcast) {
  const int ranks = 4;
  std::vector<std::vector<int32_t>> gathered(ranks);
  std::vector<std::vector<float>> scattered(ranks);
  std::vector<double> broadcast(ranks);
  Ranks run;
  run.body = [&](moert_comm *comm) {
    int r = moert_comm_rank(comm);
    const int32_t all[] = {0, 1, 2, 3};
    int32_t mine = 10 * r;
    gathered[r].resize(ranks);
    if (moert_all_gather(comm, &mine, sizeof mine, gathered[r].data(), all, ranks))
      return 1;
    // Chunk j of rank r holds r + j (2 floats): rank j gets sum_r (r + j).
    std::vector<float> send(2 * ranks);
    for (int j = 0; j < ranks; ++j)
      send[2 * j] = send[2 * j + 1] = static_cast<float>(r + j);
    scattered[r].resize(2);
    if (moert_reduce_scatter_f32(comm, send.data(), scattered[r].data(), 2, all, ranks))
      return 1;
    double value = r == 2 ? 3.25 : 0;
    if (moert_broadcast(comm, &value, sizeof value, 2, all, ranks))
      return 1;
    broadcast[r] = value;
    return moert_barrier(comm, all, ranks);
  };
  ASSERT_EQ(run(ranks), 0) << (run.errors.empty() ? "" : run.errors[0]);
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(gathered[r], (std::vector<int32_t>{0, 10, 20, 30}));
    float want = static_cast<float>(6 + 4 * r);
    EXPECT_EQ(scattered[r], (std::vector<float>{want, want}));
    EXPECT_EQ(broadcast[r], 3.25);
  }
}

TEST(CommTest, AMissingPeerIsAnErrorNamingItNotAHang) {
  Ranks run;
  run.body = [&](moert_comm *comm) {
    int r = moert_comm_rank(comm);
    if (r == 2)
      return 0; // never joins
    const int32_t all[] = {0, 1, 2};
    float x = 1;
    return moert_all_reduce_f32(comm, &x, 1, all, 3);
  };
  auto start = std::chrono::steady_clock::now();
  EXPECT_NE(run(3, 0.2), 0);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 5.0);
  ASSERT_EQ(run.errors.size(), 2u);
  for (const std::string &e : run.errors)
    EXPECT_NE(e.find("all_reduce #0 on group [0, 1, 2] timed out after 0.2"), std::string::npos)
        << e;
  EXPECT_NE(run.errors[0].find("rank(s) 2 did not arrive"), std::string::npos) << run.errors[0];
}

// A member that arrives after the others timed out fails with their
// message; it must not take the collective as complete and read buffers
// whose owners have left (that was a use-after-free: a segfault in a
// training run's background engine after a --comm-timeout).
TEST(CommTest, AMemberArrivingAfterTheOthersGaveUpFailsToo) {
  Ranks run;
  run.body = [&](moert_comm *comm) {
    int r = moert_comm_rank(comm);
    if (r == 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
    const int32_t all[] = {0, 1, 2};
    std::vector<float> x(64, 1.0f); // freed when a rank returns
    return moert_all_reduce_f32(comm, x.data(), 64, all, 3);
  };
  EXPECT_NE(run(3, 0.1), 0);
  ASSERT_EQ(run.errors.size(), 3u);
  for (const std::string &e : run.errors)
    EXPECT_NE(e.find("all_reduce #0 on group [0, 1, 2] timed out after 0.1"), std::string::npos)
        << e;
}

TEST(CommTest, BadGroupsAreErrors) {
  Ranks run;
  run.body = [&](moert_comm *comm) {
    if (moert_comm_rank(comm) != 0)
      return 0;
    float x = 0;
    const int32_t notMine[] = {1}, twice[] = {0, 0}, outside[] = {0, 7};
    int failures = 0;
    failures += moert_all_reduce_f32(comm, &x, 1, notMine, 1) != 0;
    std::string a = moert_comm_error(comm);
    failures += moert_all_reduce_f32(comm, &x, 1, twice, 2) != 0;
    std::string b = moert_comm_error(comm);
    failures += moert_all_reduce_f32(comm, &x, 1, outside, 2) != 0;
    std::string c = moert_comm_error(comm);
    EXPECT_EQ(a, "rank 0: rank 0 is not in group [1]");
    EXPECT_EQ(b, "rank 0: group [0, 0] names a rank twice");
    EXPECT_EQ(c, "rank 0: group [0, 7] names a rank outside [0, 2)");
    return failures == 3 ? 0 : 1;
  };
  EXPECT_EQ(run(2), 0);
}

/// The registered backends whose ranks this process holds (threads; MPI
/// runs in MpiCommTest under mpirun).
std::vector<std::string> inProcessBackends() {
  std::vector<std::string> names;
  for (int i = 0; const moert_comm_backend *b = moert_comm_backend_at(i); ++i)
    if (!b->rank_per_process)
      names.push_back(b->name);
  return names;
}

class CommBackendTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CommBackendTest, PassesTheSharedChecksOnHostBuffers) {
  const auto &[name, ranks] = GetParam();
  const moert_comm_backend *backend = moert_comm_backend_named(name.c_str());
  ASSERT_NE(backend, nullptr);
  std::vector<std::string> failures;
  std::mutex mutex;
  struct Run {
    std::vector<std::string> *failures;
    std::mutex *mutex;
  } run{&failures, &mutex};
  auto body = [](moert_comm *comm, void *user) {
    auto *r = static_cast<Run *>(user);
    std::vector<std::string> mine = moert::test::checkCollectives(comm);
    std::lock_guard<std::mutex> lock(*r->mutex);
    r->failures->insert(r->failures->end(), mine.begin(), mine.end());
    return mine.empty() ? 0 : 1;
  };
  char error[256] = "";
  EXPECT_EQ(backend->run(nullptr, ranks, 10.0, body, &run, error, sizeof error), 0) << error;
  for (const std::string &f : failures)
    ADD_FAILURE() << name << ": " << f;
}

INSTANTIATE_TEST_SUITE_P(Backends, CommBackendTest,
                         ::testing::Combine(::testing::ValuesIn(inProcessBackends()),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const auto &info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

int launchedNow() { return 1; }

TEST(CommRegistryTest, NamesDefaultsAndRegistration) {
  ASSERT_NE(moert_comm_backend_at(0), nullptr);
  EXPECT_STREQ(moert_comm_backend_at(0)->name, "threads");
  EXPECT_EQ(moert_comm_backend_named("nccl"), nullptr);
  EXPECT_EQ(moert_comm_backend_named("threads"), moert_comm_backend_at(0));
  // Nothing launched this test: the default is threads.
  EXPECT_EQ(moert_comm_backend_default(), moert_comm_backend_at(0));
  EXPECT_EQ(std::string(moert_comm_backend_names()).find("threads"), 0u);
  // A backend whose launcher started this process becomes the default; a
  // name registered again replaces the first registration.
  static moert_comm_backend launched = *moert_comm_backend_at(0);
  launched.name = "launched-threads";
  launched.launched = launchedNow;
  moert_comm_register_backend(&launched);
  EXPECT_EQ(moert_comm_backend_named("launched-threads"), &launched);
  EXPECT_EQ(moert_comm_backend_default(), &launched);
  static moert_comm_backend again = launched;
  moert_comm_register_backend(&again);
  EXPECT_EQ(moert_comm_backend_named("launched-threads"), &again);
  std::string names = moert_comm_backend_names();
  EXPECT_EQ(names.find("launched-threads"), names.rfind("launched-threads")) << names;
  EXPECT_NE(names.find("threads, "), std::string::npos) << names;
  // It runs ranks as threads do.
  char error[64] = "";
  EXPECT_EQ(
      again.run(
          nullptr, 2, 5.0, [](moert_comm *, void *) { return 0; }, nullptr, error, sizeof error),
      0);
  EXPECT_EQ(
      again.run(
          nullptr, 0, 5.0, [](moert_comm *, void *) { return 0; }, nullptr, error, sizeof error),
      -1);
  EXPECT_STREQ(error, "threads: 0 ranks with a timeout of 5 s");
}

TEST(CommBufferTest, SizesThatDoNotFitAreErrorsNamingThem) {
  Ranks run;
  run.body = [&](moert_comm *comm) {
    const int32_t all[] = {0, 1};
    float x[3] = {};
    int failures = 0;
    moert_buffer odd = moert_host_buffer(x, 6), nine = moert_host_buffer(x, 9),
                 eight = moert_host_buffer(x, 8), four = moert_host_buffer(x, 4);
    failures += moert_all_reduce_buffer(comm, &odd, all, 2) != 0;
    std::string a = moert_comm_error(comm);
    failures += moert_reduce_scatter_buffer(comm, &nine, &four, all, 2) != 0;
    std::string b = moert_comm_error(comm);
    const int64_t sends[] = {4, 4};
    failures += moert_all_to_all_v_buffer(comm, &four, sends, &eight, sends, all, 2) != 0;
    std::string c = moert_comm_error(comm);
    moert_buffer device = moert_device_buffer(nullptr, 4);
    failures += moert_all_reduce_buffer(comm, &device, all, 2) != 0;
    std::string d = moert_comm_error(comm);
    std::string r = "rank " + std::to_string(moert_comm_rank(comm)) + ": ";
    EXPECT_EQ(a, r + "all_reduce: 6 bytes are not a whole number of floats");
    EXPECT_EQ(b, r + "reduce_scatter: the send buffer holds 9 bytes where 8 are expected");
    EXPECT_EQ(c, r + "all_to_all_v: the send buffer holds 4 bytes where 8 are expected");
    EXPECT_EQ(d, r + "all_reduce: a device buffer without a device allocation");
    return failures == 4 ? 0 : 1;
  };
  EXPECT_EQ(run(2), 0);
}

// The codecs' buffer forms on host buffers give the pointer forms' bytes
// (CommDeviceTest.cpp runs them on device buffers).
TEST(CommBufferTest, CodecsOnHostBuffersEqualThePointerForms) {
  for (const char *name : {"fp16", "int8:64", "topk:0.1"}) {
    moert::CodecSpec spec;
    std::string error;
    ASSERT_TRUE(moert::parseCodec(name, spec, error)) << error;
    std::vector<float> x = dataOf(3, 300);
    moert::CodecState a, b;
    std::vector<uint8_t> want, got(moert::encodedBytes(spec, 300));
    moert::encode(spec, x.data(), 300, want, a);
    moert_buffer in = moert_host_buffer(x.data(), 1200),
                 bytes = moert_host_buffer(got.data(), static_cast<int64_t>(got.size()));
    ASSERT_TRUE(moert::encodeBuffer(spec, in, bytes, b, error)) << error;
    EXPECT_EQ(got, want) << name;
    EXPECT_EQ(b.residual, a.residual) << name;
    std::vector<float> wantDecoded(300), gotDecoded(300, -1.0f);
    moert::decode(spec, want.data(), 300, wantDecoded.data());
    moert_buffer out = moert_host_buffer(gotDecoded.data(), 1200);
    ASSERT_TRUE(moert::decodeBuffer(spec, bytes, out, error)) << error;
    EXPECT_EQ(gotDecoded, wantDecoded) << name;
  }
  moert::CodecSpec fp16;
  moert::CodecState state;
  std::string error;
  float x[4] = {};
  uint8_t bytes[8];
  moert_buffer in = moert_host_buffer(x, 16), shortBytes = moert_host_buffer(bytes, 7);
  EXPECT_FALSE(moert::encodeBuffer(fp16, in, shortBytes, state, error));
  EXPECT_EQ(error, "the encoded buffer holds 7 bytes where 8 are expected");
}

} // namespace
