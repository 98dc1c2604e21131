/*===- Comm.h - collectives between ranks --------------------------------===*
 *
 * The communicator API generated step programs and the trainer use: one C
 * ABI over registered backends (moert/CommBackend.h): ranks as threads of
 * one process (the default, and what the tests use) and ranks as MPI
 * processes (moert/MpiComm.h). Every collective
 * works on a group: an explicit list of global ranks, the caller included,
 * in the same order on every member (the order sets the layout of
 * per-member chunks and the summation order, so results are bit-identical
 * on every member and independent of timing).
 *
 * Members of a group must call its collectives in the same order (as with
 * MPI communicators). A collective that does not complete within the
 * communicator's timeout returns non-zero and moert_comm_error() names the
 * collective, the group and the ranks that did not arrive: a dead or stuck
 * peer is an error, never a hang.
 *
 * Byte counters (moert_comm_bytes) count the payload each rank sends to
 * other ranks:
 *   all_reduce     (p-1)/p of the buffer twice (ring reduce-scatter +
 *                  all-gather), 2 (p-1) * count * 4 / p bytes
 *   all_to_all_v   the chunks for the other members
 *   all_gather     its chunk to each of the other p-1 members
 *   reduce_scatter the chunks of the other members, (p-1) * count * 4
 *   broadcast      the root sends bytes to p-1 members; others send nothing
 * so they equal the analytical volumes of docs/CostModel.md.
 *
 * Buffers with a memory space (moert_buffer): every collective also has a
 * form (moert_*_buffer) whose buffers say where their bytes live, on the
 * host or in a device allocation (a halide_buffer_t with its device
 * interface, as the device layer of moert/Device.h makes them), so a
 * communicator that moves device memory itself (NCCL, a vendor CCL) needs
 * no change of this API. The host backends (threads, MPI) stage a device
 * buffer through host memory: its bytes are copied to a host buffer with
 * the device interface's copy_to_host before the collective and back with
 * copy_to_device after it (only the buffers the collective writes), and
 * counted as the device layer's copies (moert_device_copied). The float*
 * and void* entry points are the host form.
 *
 * Backends are chosen at run time by name (moert/CommBackend.h).
 *
 *===----------------------------------------------------------------------===*/

#ifndef MOERT_COMM_H
#define MOERT_COMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct moert_comm moert_comm;

enum moert_collective {
  MOERT_ALL_REDUCE = 0,
  MOERT_ALL_TO_ALL = 1,
  MOERT_ALL_GATHER = 2,
  MOERT_REDUCE_SCATTER = 3,
  MOERT_BROADCAST = 4,
  MOERT_BARRIER = 5,
  MOERT_NUM_COLLECTIVES = 6
};

int moert_comm_rank(const moert_comm *comm);
int moert_comm_size(const moert_comm *comm);

/* Emulates a slower network (the trainer's --emulate-link): after each
 * collective, the rank waits what the transfer would take on a link of
 * `bytes_per_second` with `latency_seconds` per message: its bytes on the
 * wire (the larger of sent and received) over the bandwidth, plus the
 * latency of each of its sequential messages (a ring all-reduce 2 (p-1),
 * an all-to-all or all-gather p-1, a broadcast or barrier ceil(log2 p)).
 * 0 bandwidth: no emulation. */
void moert_comm_emulate_link(moert_comm *comm, double bytes_per_second, double latency_seconds);

/* Places the ranks on nodes (hosts): rank r runs on node node_of[r], for
 * each of the communicator's ranks (null: every rank on one node, the
 * default). The collectives then count the bytes this rank sends to ranks
 * of other nodes (moert_comm_inter_node_bytes), under the algorithms the
 * emulated link assumes: a ring all-reduce sends its bytes across when the
 * next member in the ring is on another node; an all-to-all, all-gather or
 * reduce-scatter its pieces for members of other nodes; a broadcast root
 * its bytes to each member of another node. The map is shared with the
 * communicator's duplicates. Returns 1, with the error set, for a negative
 * node. Set it before any duplicate runs a collective (it is not locked). */
int moert_comm_set_nodes(moert_comm *comm, const int32_t *node_of);

/* The link between nodes (the trainer's --emulate-inter-node): the bytes a
 * collective sends to other nodes take `bytes_per_second` and
 * `latency_seconds` per message to another node, the rest the link of
 * moert_comm_emulate_link. 0 bandwidth: every byte takes that link's time
 * (no separate inter-node link). */
void moert_comm_emulate_inter_node(moert_comm *comm, double bytes_per_second,
                                   double latency_seconds);

/* Bytes this rank sent to ranks of other nodes in collectives of kind
 * `collective` so far (all of its bytes when every rank is its own node). */
int64_t moert_comm_inter_node_bytes(const moert_comm *comm, int collective);

/* A second communicator over the same ranks, for collectives another
 * thread runs while this one's run (the step's background all-reduces):
 * its collectives never match this one's, and the two share the emulated
 * link. Every rank calls it at the same point (under MPI it is a
 * collective). Null when the backend cannot run two at once (MPI without
 * MPI_THREAD_MULTIPLE). Free it with moert_comm_free before `comm`. */
moert_comm *moert_comm_dup(moert_comm *comm);
void moert_comm_free(moert_comm *comm);

/* Sum of `count` floats over the group, in place. */
int moert_all_reduce_f32(moert_comm *comm, float *data, int64_t count, const int32_t *group,
                         int group_size);
/* Member i sends send_bytes[j] bytes (consecutive in `send`, in member
 * order) to member j and receives recv_bytes[j] from it (consecutive in
 * `recv`); what j sends to i must equal what i expects from j. */
int moert_all_to_all_v(moert_comm *comm, const void *send, const int64_t *send_bytes, void *recv,
                       const int64_t *recv_bytes, const int32_t *group, int group_size);
/* recv = the members' `bytes`-byte chunks in member order. */
int moert_all_gather(moert_comm *comm, const void *send, int64_t bytes, void *recv,
                     const int32_t *group, int group_size);
/* recv (count floats) = sum over members of their send chunk for this
 * member (send holds group_size chunks of count floats). */
int moert_reduce_scatter_f32(moert_comm *comm, const float *send, float *recv, int64_t count,
                             const int32_t *group, int group_size);
/* The root's (a global rank in the group) `bytes` to every member. */
int moert_broadcast(moert_comm *comm, void *data, int64_t bytes, int root, const int32_t *group,
                    int group_size);
int moert_barrier(moert_comm *comm, const int32_t *group, int group_size);

/* Where a buffer's bytes live. */
typedef enum moert_memory_space {
  MOERT_MEMORY_HOST = 0,  /* `data` */
  MOERT_MEMORY_DEVICE = 1 /* the device allocation of `device` */
} moert_memory_space;

struct halide_buffer_t;

/* A collective's buffer: `bytes` bytes at `data` (host), or the first
 * `bytes` bytes of the device allocation of `device` (device: a dense
 * halide_buffer_t with a device allocation and its device_interface; its
 * host field, if any, is not read). A device buffer whose host copy is the
 * newer one (host_dirty) is read from the host. After a collective writes
 * a device buffer, its device copy is the newer one (device_dirty). */
typedef struct moert_buffer {
  void *data;
  int64_t bytes;
  moert_memory_space space;
  struct halide_buffer_t *device;
} moert_buffer;

moert_buffer moert_host_buffer(void *data, int64_t bytes);
moert_buffer moert_device_buffer(struct halide_buffer_t *device, int64_t bytes);

/* The collectives above on buffers in either memory space, with the same
 * semantics, checks, byte counters and emulated link (all_reduce and
 * broadcast in place). Counts follow the buffers' sizes: all_reduce sums
 * data->bytes / 4 floats; all_to_all_v's send and recv hold exactly the
 * sum of send_bytes and of recv_bytes; all_gather sends send->bytes and
 * recv holds group_size times that; reduce_scatter receives recv->bytes / 4
 * floats of send's group_size chunks. A size that does not fit is an error
 * naming the sizes. */
int moert_all_reduce_buffer(moert_comm *comm, const moert_buffer *data, const int32_t *group,
                            int group_size);
int moert_all_to_all_v_buffer(moert_comm *comm, const moert_buffer *send, const int64_t *send_bytes,
                              const moert_buffer *recv, const int64_t *recv_bytes,
                              const int32_t *group, int group_size);
int moert_all_gather_buffer(moert_comm *comm, const moert_buffer *send, const moert_buffer *recv,
                            const int32_t *group, int group_size);
int moert_reduce_scatter_buffer(moert_comm *comm, const moert_buffer *send,
                                const moert_buffer *recv, const int32_t *group, int group_size);
int moert_broadcast_buffer(moert_comm *comm, const moert_buffer *data, int root,
                           const int32_t *group, int group_size);

/* The last failure's message ("" when none). */
const char *moert_comm_error(const moert_comm *comm);
/* Bytes this rank sent, per collective kind (see above). */
int64_t moert_comm_bytes(const moert_comm *comm, int collective);

/* Runs fn(comm, user) on `ranks` threads, one communicator each, with the
 * given timeout per collective; returns 0 when every rank returned 0, else
 * the first non-zero result (by rank). */
int moert_run_threads(int ranks, double timeout_seconds, int (*fn)(moert_comm *comm, void *user),
                      void *user);

#ifdef __cplusplus
}
#endif

#endif /* MOERT_COMM_H */
