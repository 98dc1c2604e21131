//===- CommBuffers.cpp - collectives on buffers with a memory space -------===//
//
// The moert_*_buffer forms of moert/Comm.h: each stages its buffers in
// host memory (HostStaging.h: a device buffer is copied to the host and,
// when the collective writes it, back), then runs the host form, so every
// backend's checks, byte counters and emulated link apply unchanged. A
// backend that moves device memory itself would take device buffers here
// instead of staging them (docs/AddingACommunicator.md).
//
//===----------------------------------------------------------------------===//

#include "CommImpl.h"
#include "HostStaging.h"

#include <string>

using moert::HostStaging;

namespace {

int fail(moert_comm *comm, const char *what, const std::string &message) {
  comm->error = "rank " + std::to_string(comm->rank) + ": " + what + ": " + message;
  return 1;
}

/// `bytes` as a float count, or -1 when it is not a whole number of floats.
int64_t floats(int64_t bytes) { return bytes >= 0 && bytes % 4 == 0 ? bytes / 4 : -1; }

/// Stages `b` for collective `what`; 1 with comm's error set on failure.
int stage(moert_comm *comm, const char *what, HostStaging &s, const moert_buffer &b, bool read) {
  std::string error;
  return s.open(b, read, error) ? 0 : fail(comm, what, error);
}

/// Ends a staged collective that returned `rc`: written buffers go back.
int unstage(moert_comm *comm, const char *what, int rc, HostStaging &s, bool written) {
  std::string error;
  if (rc == 0 && !s.close(written, error))
    return fail(comm, what, error);
  return rc;
}

std::string sizes(int64_t a, int64_t b) {
  return std::to_string(a) + " bytes where " + std::to_string(b) + " are expected";
}

} // namespace

extern "C" {

moert_buffer moert_host_buffer(void *data, int64_t bytes) {
  return {data, bytes, MOERT_MEMORY_HOST, nullptr};
}

moert_buffer moert_device_buffer(struct halide_buffer_t *device, int64_t bytes) {
  return {nullptr, bytes, MOERT_MEMORY_DEVICE, device};
}

int moert_all_reduce_buffer(moert_comm *comm, const moert_buffer *data, const int32_t *group,
                            int n) {
  const char *what = "all_reduce";
  int64_t count = floats(data->bytes);
  if (count < 0)
    return fail(comm, what,
                std::to_string(data->bytes) + " bytes are not a whole number of floats");
  HostStaging s;
  if (stage(comm, what, s, *data, true))
    return 1;
  int rc = moert_all_reduce_f32(comm, static_cast<float *>(s.data()), count, group, n);
  return unstage(comm, what, rc, s, true);
}

int moert_all_to_all_v_buffer(moert_comm *comm, const moert_buffer *send, const int64_t *sendBytes,
                              const moert_buffer *recv, const int64_t *recvBytes,
                              const int32_t *group, int n) {
  const char *what = "all_to_all_v";
  int64_t sent = 0, received = 0;
  for (int j = 0; j < n && group; ++j) {
    sent += sendBytes[j];
    received += recvBytes[j];
  }
  if (sent != send->bytes)
    return fail(comm, what, "the send buffer holds " + sizes(send->bytes, sent));
  if (received != recv->bytes)
    return fail(comm, what, "the receive buffer holds " + sizes(recv->bytes, received));
  HostStaging in, out;
  if (stage(comm, what, in, *send, true) || stage(comm, what, out, *recv, false))
    return 1;
  int rc = moert_all_to_all_v(comm, in.data(), sendBytes, out.data(), recvBytes, group, n);
  return unstage(comm, what, rc, out, true);
}

int moert_all_gather_buffer(moert_comm *comm, const moert_buffer *send, const moert_buffer *recv,
                            const int32_t *group, int n) {
  const char *what = "all_gather";
  if (recv->bytes != send->bytes * n)
    return fail(comm, what, "the receive buffer holds " + sizes(recv->bytes, send->bytes * n));
  HostStaging in, out;
  if (stage(comm, what, in, *send, true) || stage(comm, what, out, *recv, false))
    return 1;
  int rc = moert_all_gather(comm, in.data(), send->bytes, out.data(), group, n);
  return unstage(comm, what, rc, out, true);
}

int moert_reduce_scatter_buffer(moert_comm *comm, const moert_buffer *send,
                                const moert_buffer *recv, const int32_t *group, int n) {
  const char *what = "reduce_scatter";
  int64_t count = floats(recv->bytes);
  if (count < 0)
    return fail(comm, what,
                std::to_string(recv->bytes) + " bytes are not a whole number of floats");
  if (send->bytes != recv->bytes * n)
    return fail(comm, what, "the send buffer holds " + sizes(send->bytes, recv->bytes * n));
  HostStaging in, out;
  if (stage(comm, what, in, *send, true) || stage(comm, what, out, *recv, false))
    return 1;
  int rc = moert_reduce_scatter_f32(comm, static_cast<const float *>(in.data()),
                                    static_cast<float *>(out.data()), count, group, n);
  return unstage(comm, what, rc, out, true);
}

int moert_broadcast_buffer(moert_comm *comm, const moert_buffer *data, int root,
                           const int32_t *group, int n) {
  const char *what = "broadcast";
  bool isRoot = comm->rank == root; // only the root's bytes are read
  HostStaging s;
  if (stage(comm, what, s, *data, isRoot))
    return 1;
  int rc = moert_broadcast(comm, s.data(), data->bytes, root, group, n);
  return unstage(comm, what, rc, s, !isRoot);
}

} // extern "C"
