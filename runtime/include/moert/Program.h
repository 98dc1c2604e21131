/*===- Program.h - the ABI between a generated step program and moert ----===*
 *
 * moec emits a step program (C++) that defines `moec_program`; the runtime's
 * trainer (libmoert_main) reads it, owns every buffer, and calls the step.
 * Plain C types: the runtime links no MLIR, LLVM or Halide compiler.
 *
 *===----------------------------------------------------------------------===*/

#ifndef MOERT_PROGRAM_H
#define MOERT_PROGRAM_H

#include "moec/contract/Abi.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char *name;
  int rank;
  int64_t shape[8];
  int init;     /* enum moert_init */
  double scale; /* std (normal) or bound (uniform) */
  int adamw;    /* 1 when an AdamW update owns moments for it */
  /* > 1 when this is one rank's block of a tensor split along dimension 0
   * over the ep axis (moe-partition's expert shards): `shape` is the block,
   * the full tensor has shape[0] * shard_parts rows (with shard_layer >= 0,
   * that layer's experts, layer_experts[shard_layer]), and ep rank e holds
   * rows [e * shape[0], (e + 1) * shape[0]). */
  int shard_parts;
  /* With shard_parts > 1: null when ep rank e holds the contiguous rows
   * above; else the global row of each held row, in ep rank order (rank e's
   * row j is global row shard_rows[e * shape[0] + j]; -1: an empty
   * position; a row may repeat on several ranks, replicas), for a placement
   * other than equal blocks in order (pinned, uneven, replicated experts). */
  const int32_t *shard_rows;
  /* The MoE layer whose placement says which rows each ep rank holds (the
   * trainer's table, moert_context.run.expert_order, which starts as
   * shard_rows or the contiguous blocks and which online rebalancing
   * changes); -1: the rows above, fixed. */
  int shard_layer;
  /* > 1 with ZeRO (moe-shard-optimizer): the AdamW update owns this rank's
   * ceil(n / zero_parts) elements of the parameter read as a vector of n
   * (its moments hold those only), and the parameter is allocated
   * zero_parts * ceil(n / zero_parts) floats, the tail zero. zero_axes:
   * the group's grid axes (MOERT_AXIS_*). */
  int zero_parts, zero_axes;
  /* >= 0 with tensor parallelism: `shape` is one tp rank's slice along
   * this dimension (rank t of the grid's tp holds the t-th of tp equal
   * slices); the full tensor is tp times larger along it. -1: not split. */
  int tp_dim;
} moert_param_info;

struct moert_comm;
struct moert_codec;

/* A learning-rate schedule (moe.lr_schedule): over steps t = step + 1, a
 * linear warm-up to `lr` in warmup_steps, then `kind`'s decay (enum
 * moert_lr_schedule) to min_lr at total_steps. */
typedef struct {
  double lr, min_lr;
  int64_t warmup_steps, total_steps;
  int kind;
} moert_lr_schedule_config;

/* The context a step runs in: one per rank, owned by the trainer, passed to
 * every step and every runtime helper. Its fields are grouped by who writes
 * them and when; each group states its direction. */

/* trainer -> program, for the whole run: set before the first step (the
 * trainer's Rank::bindContext and startBackground, its components'
 * configure and onStart), read by the step and the helpers. Between steps
 * only expert_order's tables change (the rebalancer moves experts);
 * nothing changes during a step. */
typedef struct {
  float **params;  /* one buffer per parameter, f32 */
  float **moments; /* 2 per parameter (m, v); null when adamw == 0 */
  char *activations;
  char *gradients;
  /* The rank's communicator (null on one rank) and its grid coordinates:
   * rank = (d * ep + e) * tp + t. */
  struct moert_comm *comm;
  int rank, dp, ep, tp;
  /* Per MoE layer: its experts by position (position p of the dispatch
   * buffer holds expert expert_order[layer][p], or nothing for -1; of the
   * layer's P positions, moert_program.layer_positions, ep rank r holds
   * [r P/ep, (r+1) P/ep)). Null: the step program's own orders. The
   * trainer changes them when it moves or replicates experts. */
  const int32_t *const *expert_order;
  /* The relative speeds of the ep ranks of this rank's data replica (ep
   * entries; the trainer's --emulate-cluster, else a mixed cluster's token
   * shares over the largest), by which moert_place_slots
   * splits a replicated expert's slots; null: equal. */
  const double *ep_speeds;
  /* Emulation and tracing (the trainer's --emulate-cluster and --trace):
   * each outermost collective of StepComm.cpp first ends the compute since
   * runtime.step_mark: it waits compute_slowdown times the compute's
   * duration (a device 1 / (1 + compute_slowdown) as fast; 0: no wait) and
   * records the compute and then the collective in `trace` when not null. */
  double compute_slowdown;
  struct moert_trace *trace;
  /* Whether background all-reduces yield to the step's blocking collectives
   * (no bucket starts while one runs: dispatch and combine first; the
   * trainer's --comm-priority). */
  int async_yield;
  /* The schedule the step's moe.lr_schedule follows: the compiled one
   * (moert_program.lr_schedule) with the trainer's --lr, --min-lr,
   * --warmup-steps, --lr-schedule and --total-steps applied. */
  moert_lr_schedule_config lr_schedule;
} moert_run_context;

/* trainer -> program, per training step: the trainer fills them fresh for
 * each step (its components' beforeStep) and installs them for train_step
 * only; outside it (evaluations, the trainer's own collectives) they are
 * all 0. */
typedef struct {
  /* Local steps (the trainer's --local-steps): when not 0, the step's
   * all-reduces leave out the dp axis, so each data replica (its ep group)
   * trains on its own batch: a mean over the remaining members, and a sum
   * over dp estimated as dp times the replica's own. */
  int replica_local;
  /* 1: delayed gradients (the trainer's --staleness 1): a background
   * reduction started in step t is waited for in step t + 1, whose wait
   * writes it corrected by the change of the rank's own gradient,
   * sum(t-1) + own x (g(t) - g(t-1)) (own x g: the rank's estimate of the
   * sum; the first delayed step waits for its own exact sum). 0: each waits
   * for its own reduction. */
  int staleness;
  /* Dynamic loss scaling (f16 models: moert_program.loss_scale != 0): the
   * training step seeds its backward with loss_scale, and
   * moert_step_global_norm divides the gradients (and their norm) by it
   * (outputs.skip_update). The trainer adjusts it between steps. */
  float loss_scale;
} moert_step_inputs;

/* program -> trainer, per training step: the step and the helpers it calls
 * write them; the trainer zeroes them before each step and reads them
 * after it. */
typedef struct {
  /* The step's global gradient norm, before clipping (the whole model's on
   * every rank), and its learning rate (the schedule's). */
  float grad_norm, lr;
  /* Set by moert_step_global_norm when, with loss scaling, the norm is not
   * finite (an overflow): the step's AdamW updates do not run. */
  int skip_update;
  /* Seconds this rank spent in the step's collectives (the all-reduces,
   * all-to-alls and replica sums of StepComm.cpp, packing and waiting for
   * peers included; on one rank their local copies), accumulated; and the
   * seconds background all-reduces ran (their exposed part, the waits, is
   * in comm_seconds; async_wait_seconds of it). Collectives between steps
   * (evaluations, the trainer's) add to them too, until the next step
   * zeroes them. */
  double comm_seconds;
  double async_seconds;
  double async_wait_seconds;
} moert_step_outputs;

/* program -> trainer, per training step, into buffers the trainer owns:
 * the trainer points them once for the run (null: not wanted), each
 * training step overwrites them. */
typedef struct {
  int32_t *expert_counts; /* per MoE layer, its experts' routed token-slots */
  int32_t *dropped_slots; /* per MoE layer, token-slots past the capacity */
  /* Per MoE layer, its experts' token-slots within the capacity: the rows
   * each expert computes (expert_counts less the dropped ones). */
  int32_t *kept_slots;
  /* One double per parameter (moert_program.params order): the squared L2
   * norm of this rank's gradient of each parameter the step updates (a
   * shard's own block for expert shards). */
  double *grad_squares;
  /* Per MoE layer, two floats: the layer's balancing loss (Switch's E x
   * sum_e f_e P_e, 1 when balanced; the mean over the rank's routing
   * groups) and its z-loss (the mean squared log-sum-exp of the router
   * logits over the rank's tokens), both before their coefficients. */
  float *router_losses;
} moert_step_buffers;

/* The runtime helpers' own state (StepComm.cpp, AsyncComm.cpp, Codecs,
 * moert/Device.h): created on first use and freed by their *_free
 * functions; the program does not touch it, and the trainer only starts
 * and ends step_mark around each step, reads the codec counters (its
 * communication report) and saves and restores the codec state with a
 * checkpoint. */
typedef struct {
  /* Compressed collectives: their per-tensor state (error-feedback
   * residuals, PowerSGD factors; freed by moert_codec_states_free), the
   * bytes they sent, and the bytes the uncompressed collective would have
   * sent (ring volume), accumulated over the run. */
  void *codec_states;
  int64_t codec_sent[6]; /* by enum moert_collective (moert/Comm.h) */
  int64_t codec_uncompressed;
  /* Background all-reduces (moe.all_reduce async,
   * moert_step_all_reduce_start): the rank's engine (a worker thread and a
   * second communicator; created at the first start, freed by
   * moert_async_free). */
  void *async_comm;
  /* Device targets (moert/Device.h): the rank's arenas on the device, made
   * by the first step; null on the host. */
  void *device;
  /* While a step runs with compute_slowdown or a trace: the monotonic time
   * (seconds) the current compute began (the step's start or the last
   * collective's end); 0 outside a step. */
  double step_mark;
  /* A step of micro-batches (moert_program.micro_batches > 1): the one
   * running, of how many (moert_step_micro_batch; 0 of 0 or 1 outside);
   * the gradient sums (moert_step_accumulate) and the selection biases'
   * load counts (moert_step_balance_bias) over them, freed by
   * moert_micro_batches_free. */
  int32_t micro_batch, micro_batches;
  float *grad_accum;
  int64_t grad_accum_floats;
  void *bias_loads;
} moert_runtime_state;

typedef struct {
  moert_run_context run;       /* trainer -> program, for the run */
  moert_step_inputs inputs;    /* trainer -> program, each training step */
  moert_step_outputs outputs;  /* program -> trainer, each training step */
  moert_step_buffers buffers;  /* program -> trainer, into the trainer's buffers */
  moert_runtime_state runtime; /* the runtime helpers' own */
} moert_context;

/* Filled by the step program with named fields (C++20 designated
 * initialisers), so that a field added at the end keeps old programs
 * compiling; `abi_version` is MOERT_ABI_VERSION of the header the program
 * was compiled against, and the trainer refuses any other. */
typedef struct moert_program {
  int abi_version;
  int num_params;
  const moert_param_info *params;
  int64_t activation_bytes, gradient_bytes;
  int64_t batch, seq_len, vocab;
  uint64_t seed;
  /* One training step: forward, backward, optimiser. Returns 0, or a
   * non-zero kernel error code (the message went to the error handler). */
  int (*train_step)(moert_context *ctx, const int32_t *tokens, const int32_t *targets, int32_t step,
                    float *loss);
  /* The forward loss only (validation, sampling); parameters are not
   * changed. When `logits` is not null it receives the next-token logits,
   * batch x seq_len x vocab floats (row-major). */
  int (*eval_step)(moert_context *ctx, const int32_t *tokens, const int32_t *targets, float *loss,
                   float *logits);
  /* MoE layers in order: experts and capacity (slots per expert and routing
   * group) each. */
  int num_moe_layers;
  const int32_t *layer_experts;
  const int32_t *layer_capacity;
  /* The compiler's bound on kernel scratch (the largest kernel's
   * intermediates); kernels allocate it from moert/ScratchPool.h. */
  int64_t planned_scratch_bytes;
  /* The grid the step was partitioned for (moe-partition); 1 x 1 x 1 for a
   * one-rank program. `batch` above is one rank's share. */
  int grid_dp, grid_ep, grid_tp;
  /* The learning-rate schedule compiled into the step (the model's
   * optimizer settings); null when the step has no moe.lr_schedule. */
  const moert_lr_schedule_config *lr_schedule;
  /* Bytes one rank sends per training step, by collective kind (the
   * MOERT_ALL_REDUCE and MOERT_ALL_TO_ALL counters of moert/Comm.h): the
   * compiler's analytical volume, for the trainer to check the counters
   * against. Indexed by enum moert_collective. */
  int64_t step_comm_bytes[6];
  /* Ragged all_to_alls (dispatch and combine without capacity padding) send
   * a routing-dependent volume: at most this many bytes per step and rank
   * (every block full, counts included), on top of step_comm_bytes. */
  int64_t step_ragged_bound;
  /* Compressed all-reduces: steps before `codec_warmup_steps` run them
   * uncompressed; after that they send step_codec_bytes per step and rank
   * instead of step_codec_uncompressed (both in step_comm_bytes' terms). */
  int64_t codec_warmup_steps, step_codec_bytes, step_codec_uncompressed;
  /* Per MoE layer, the positions of its placement (a multiple of ep; more
   * than layer_experts when ranks hold uneven counts or replicas), and
   * whether each position may hold a replica (1: the program reduces
   * replicas' gradients, moe.replica_sum). */
  const int32_t *layer_positions;
  const int32_t *layer_replicas;
  /* Per MoE layer, the model layer it belongs to (its router parameter's
   * prefix, such as "l3"), for the metrics. */
  const char *const *layer_names;
  /* Background all-reduce buckets the training step starts (moe-schedule's
   * async buckets; 0 when compiled with moec --schedule=blocking or for one
   * rank). */
  int async_buckets;
  /* Unequal token shares (a mixed cluster's data replicas, moe.token_shares):
   * per data replica (d * ep + e), its sequences of the global batch and the
   * program it runs (one per distinct share, compiled into one binary; this
   * program is replica 0's). Null: every replica runs this program on
   * `batch` sequences. */
  const int64_t *replica_batches;
  const struct moert_program *const *replica_programs;
  /* The initial dynamic loss scale (f16 models, moe.loss_scale); 0: none. */
  double loss_scale;
  /* Device targets (moec --target opencl|cuda; null on the host): the
   * trainer calls device_sync before it reads a rank's parameters or moments
   * between steps (checkpoints, migrations, local steps' outer step),
   * device_wrote after it wrote them, and device_free when the rank ends
   * (moert/Device.h). */
  int (*device_sync)(moert_context *ctx);
  void (*device_wrote)(moert_context *ctx);
  void (*device_free)(moert_context *ctx);
  /* The Halide target the kernels were compiled for (one kernel's
   * metadata, e.g. "x86-64-linux-avx-avx2-f16c-fma-sse41"); null: no
   * kernels. The trainer refuses a CPU that lacks its features (an illegal
   * instruction otherwise). */
  const char *(*kernel_target)(void);
  /* The model the step was built from (the module's moe.model): a JSON
   * object {"spec": the MoEC model JSON, "hf_config": the config.json of a
   * HuggingFace import}; null when the step was built from IR without it.
   * HuggingFace weights in and out (--init-hf, --export-hf) read it. */
  const char *model_json;
  /* Micro-batches per training step (moec --micro-batches, gradient
   * accumulation): train_step and eval_step take `batch` sequences and run
   * their kernels on batch / micro_batches at a time (train_step sums the
   * gradients before the update). 0 or 1: one. */
  int64_t micro_batches;
  /* With micro-batches: the bytes of the gradient sums the rank holds
   * besides the planned buffers (moert_step_accumulate); 0 otherwise. */
  int64_t accumulator_bytes;
} moert_program;

/* moe.place_slots: slots from expert order to the placement's positions.
 * `order` has `positions` entries (an expert in [0, experts), or -1 for an
 * empty position); expert e's slot s = e * block + i goes to its position q
 * at q * block + i when e has one position, and out_counts[q] = in_counts[e].
 * A replicated expert's valid slots, i < min(in_counts[e], block), are cut
 * into consecutive runs, one per replica in position order (slot i to row
 * i - the run's start), sized so that the ep ranks finish as evenly as this
 * rank's counts predict (each rank's token-slots over its speed,
 * ctx->run.ep_speeds; ctx null: one rank); out_counts[q] is the run's length.
 * -1 stays -1; an empty position counts 0. Returns non-zero (message on
 * stderr) when a slot names an expert without a position or the order names
 * one out of range. */
int moert_place_slots(const moert_context *ctx, int32_t *out_slots, const int32_t *in_slots,
                      int64_t n, int32_t *out_counts, const int32_t *in_counts, int32_t experts,
                      const int32_t *order, int32_t positions, int64_t block);
/* moe.place_slots' chunks and ranks (moe-pipeline-experts): moves the
 * dispatch blocks of moert_place_slots' result from rank by rank to chunk by
 * chunk: position q E' + j G + l (E' = positions / ranks, G = E' / chunks)
 * goes to block j ranks G + q G + l, its slots and count with it. Non-zero
 * (message on stderr) when positions is not a multiple of ranks x chunks. */
int moert_chunk_positions(int32_t *slots, int64_t n, int32_t *counts, int32_t positions,
                          int64_t block, int32_t ranks, int32_t chunks);
/* Ends the compute since ctx->runtime.step_mark (emulated slowdown, trace) and
 * starts the next at now; nothing outside a step. The trainer calls it at
 * the end of each step. */
void moert_step_end_compute(moert_context *ctx);
/* Scalar routines the step program calls (lr schedule, fill). */
float moert_lr_schedule(int32_t step, double lr, double min_lr, int64_t warmup, int64_t total,
                        int schedule);
void moert_fill(float *data, int64_t count, float value);
/* Fills `count` 16-bit elements (bf16 or f16) with the bits `bits`. */
void moert_fill_half(uint16_t *data, int64_t count, uint16_t bits);
/* Widens `count` bf16 (`bf16` != 0) or f16 elements to f32. */
void moert_widen(float *out, const uint16_t *in, int64_t count, int bf16);

/* Collectives of a partitioned step (runtime/lib/StepComm.cpp) over the
 * group of ranks that differ from ctx's only in the grid axes of
 * `axes` (a bit mask of enum moert_axis, moec/contract/Abi.h). Return 0, or non-zero after a
 * communicator error (moert_comm_error names it). */
/* Fills `members` (global ranks, in axis order) and returns the size. */
int moert_grid_group(const moert_context *ctx, int axes, int32_t *members);
/* out = scale * (sum, or mean when `mean`, over the group of in). */
int moert_step_all_reduce(moert_context *ctx, float *out, const float *in, int64_t count, int axes,
                          int mean, double scale);
/* ZeRO (moe-shard-optimizer). A sharded tensor of `count` floats is read as
 * one vector padded with zeros to P * shard (shard = ceil(count / P), P the
 * size of the group of `axes`); member i owns elements [i shard,
 * (i + 1) shard). */
/* This rank's first owned element: its index in the group times `shard`. */
int64_t moert_step_shard_offset(const moert_context *ctx, int axes, int64_t shard);
/* out (shard floats) = this rank's elements of in (count floats, zeros past
 * its end): no communication (a compressed all-reduce's result). */
void moert_step_shard_slice(const moert_context *ctx, float *out, const float *in, int64_t count,
                            int64_t shard, int axes);
/* For each of `n` tensors (ins[i], counts[i] floats; outs[i], shards[i]
 * floats): outs[i] = scale * (sum, or mean when `mean`, over the group of
 * this rank's elements of ins[i], zeros past counts[i]); one collective for
 * all of them. */
int moert_step_reduce_scatter(moert_context *ctx, int n, float *const *outs,
                              const float *const *ins, const int64_t *counts, const int64_t *shards,
                              int axes, int mean, double scale);
/* moert_step_reduce_scatter started in the background under `handle`
 * (moe-schedule's async reduce-scatter bucket); moert_step_wait completes
 * it. */
int moert_step_reduce_scatter_start(moert_context *ctx, int handle, int n, float *const *outs,
                                    const float *const *ins, const int64_t *counts,
                                    const int64_t *shards, int axes, int mean, double scale);
/* Every member's owned elements of each of `n` parameters (params[i],
 * allocated P * shards[i] floats) to every member, so each holds the whole
 * parameters; one collective for all of them. */
int moert_step_gather_params(moert_context *ctx, int n, float *const *params, const int64_t *shards,
                             int axes);
/* `n` all-reduces of the same group, reduction and scale as one bucket: the
 * inputs are packed, reduced by one collective (one rendezvous, one
 * latency), and unpacked into the outputs, as DDP buckets gradients. */
int moert_step_all_reduce_bucket(moert_context *ctx, int n, float *const *outs,
                                 const float *const *ins, const int64_t *counts, int axes, int mean,
                                 double scale);
/* moe.all_to_all (dense): `in` of shape[rank] splits into P chunks along
 * `split`; chunk p goes to member p; chunks received concatenate along
 * `concat` in member order into `out`. */
int moert_step_all_to_all(moert_context *ctx, float *out, const float *in, const int64_t *shape,
                          int rank, int split, int concat, int axes,
                          const struct moert_codec *codec);
/* A codec of moe.all_reduce (moert/Codecs.h); `kind` is an enum
 * moert_codec_kind (moec/contract/Abi.h). */
typedef struct moert_codec {
  int kind;
  int64_t block_size;
  double ratio;
  int64_t rank;
  int error_feedback;
} moert_codec;
/* moert_step_all_reduce with the payload compressed by `codec`: fp16, bf16
 * and int8 by an all-to-all of encoded chunks (each member sums its chunk's
 * decoded partials in member order) and an all-gather of the encoded sums;
 * topk and sign by an all-gather of every member's encoding (with
 * error feedback); powersgd by all-reducing P = M Q and Q = M^T P (rank r,
 * Q warm-started, error feedback), M viewed as [rows, cols]. `site` names
 * the tensor's state. Results are bit-identical on every member. */
int moert_step_all_reduce_codec(moert_context *ctx, float *out, const float *in, int64_t count,
                                int axes, int mean, double scale, const moert_codec *codec,
                                int site, int64_t rows, int64_t cols);
void moert_codec_states_free(moert_context *ctx);

/* moe.all_reduce async: starts moert_step_all_reduce_bucket's reduction of
 * the n tensors in the background under `handle` (a small integer, unique
 * among the step's started and not yet waited reductions); the inputs must
 * stay unchanged and the outputs unread until moert_step_wait(handle).
 * Every member starts its reductions in the same order. Results equal the
 * blocking collective's bit for bit. */
int moert_step_all_reduce_start(moert_context *ctx, int handle, int n, float *const *outs,
                                const float *const *ins, const int64_t *counts, int axes, int mean,
                                double scale);
/* moe.wait: blocks until the reduction of `handle` is done; non-zero, with
 * the message in moert_comm_error, when it failed or was not started. */
int moert_step_wait(moert_context *ctx, int handle);
/* moe.all_to_all async (moe-pipeline-experts): starts
 * moert_step_all_to_all_ragged's exchange on the rank's background exchange
 * channel under `handle` (unique among the step's started and not yet
 * waited exchanges); `in`, `counts` and `shape` must stay unchanged and
 * `out`, `recv` unread until moert_step_exchange_wait(handle). Every member
 * starts its exchanges in the same order; the results equal the blocking
 * exchange's bit for bit. */
int moert_step_all_to_all_ragged_start(moert_context *ctx, int handle, float *out, const float *in,
                                       const int64_t *shape, int split, int concat, int axes,
                                       const int32_t *counts, int32_t *recv,
                                       const struct moert_codec *codec);
int moert_step_exchange_wait(moert_context *ctx, int handle);
/* Creates the rank's background engine now (its second communicator is a
 * collective under MPI: every rank calls this at the same point) rather
 * than at the first start. */
void moert_async_init(moert_context *ctx);
void moert_async_free(moert_context *ctx);

/* The ragged form on a dispatch buffer (moe.all_to_all ... counts): `shape`
 * is [E, C, D] (split 0, concat 1) or [E/P, P*C, D] (split 1, concat 0);
 * counts[i] (capped at C) are the valid leading rows of input block i, and
 * only they travel, after the counts; recv[i] receives the valid rows of
 * output block i; other rows of `out` are zero. Indexing: for [E, C, D] block
 * e; for [A, P*C, D] block (a, q) at a * P + q. */
int moert_step_all_to_all_ragged(moert_context *ctx, float *out, const float *in,
                                 const int64_t *shape, int split, int concat, int axes,
                                 const int32_t *counts, int32_t *recv,
                                 const struct moert_codec *codec);
/* Both all_to_alls take an optional `codec` (fp16, bf16 or int8; null: raw
 * floats): each member's payload for each peer is encoded on the wire. */
/* The L2 norm of the gradients into *norm and ctx->outputs.grad_norm; squares of
 * the `sharded` ones (null: none) are summed over the group of `axes` (each
 * rank holds a different shard; `copies[i]`, when not null, members hold
 * the same one, and each counts 1/copies[i]). With ctx->buffers.grad_squares set, each
 * gradient's squared norm is also recorded at its parameter's index,
 * `param_of[i]` (-1: none; `param_of` may be null). `tables` (null: none)
 * gives per gradient the placement of its rows (`rows[i]` of them, at this
 * ep rank's positions of a table of `positions[i]` entries; null for a
 * gradient without one): a row of an expert at n positions counts 1/n, an
 * empty position nothing. */
int moert_step_global_norm(moert_context *ctx, const float *const *grads, const int64_t *sizes,
                           const unsigned char *sharded, const int64_t *copies, const int *param_of,
                           int count, int axes, const int32_t *const *tables,
                           const int32_t *positions, const int64_t *rows, float *norm);
/* The same from partial sums of squares (moe.sum_squares, a device target's
 * global norm): `sums[i]` holds sizes[i] of them for gradient i, rows[i]
 * rows of sizes[i] / rows[i] with `tables`, and they add as they are. Not
 * with loss scaling, which divides the gradients themselves. */
int moert_step_global_norm_squares(moert_context *ctx, const float *const *sums,
                                   const int64_t *sizes, const unsigned char *sharded,
                                   const int64_t *copies, const int *param_of, int count, int axes,
                                   const int32_t *const *tables, const int32_t *positions,
                                   const int64_t *rows, float *norm);
/* moe.replica_sum: `in` holds `rows` rows of `row_size` floats, this rank's
 * positions [e rows, (e+1) rows) of `table` (`positions` entries, e this
 * rank's index in the group of `axes`); each row of an expert at several
 * positions becomes the sum of that expert's rows over the group, in
 * position order (bit-identical on every replica). Sends nothing when no
 * expert has two positions. */
int moert_step_replica_sum(moert_context *ctx, float *out, const float *in, int64_t rows,
                           int64_t row_size, const int32_t *table, int32_t positions, int axes);
/* This rank's runs of placed rows: its positions [e rows, (e+1) rows) of
 * `table` (`positions` entries, e its ep index) that hold an expert, as
 * (first row, row count) pairs in `runs` (2 x rows entries at most).
 * Returns the number of runs. The AdamW update of a placed expert tensor
 * runs over them only. */
int moert_step_placed_runs(const moert_context *ctx, const int32_t *table, int32_t positions,
                           int64_t rows, int64_t *runs);
/* The bytes one member sends in that replica sum (ring all-reduce of the
 * replicated experts' rows; 0 without replicas), as the trainer accounts
 * it. */
int64_t moert_replica_sum_bytes(const int32_t *table, int32_t positions, int64_t row_size,
                                int group);
/* Micro-batches (moert_program.micro_batches): the training step's loop
 * says which one runs (index of count; 0 of 1 after the step), and the
 * step's code asks whether it is the first (metrics start over) or the
 * last (what acts on the summed gradients runs then). */
void moert_step_micro_batch(moert_context *ctx, int32_t index, int32_t count);
static inline int moert_step_first_micro_batch(const moert_context *ctx) {
  return ctx->runtime.micro_batch == 0;
}
static inline int moert_step_last_micro_batch(const moert_context *ctx) {
  return ctx->runtime.micro_batch + 1 >= ctx->runtime.micro_batches;
}
/* Sums gradient `grad` (n floats) over the micro-batches, at `offset` of
 * the rank's accumulator of `total` floats: the first micro-batch's is
 * kept, the next ones' added, and in the last `grad` becomes the mean,
 * (sum + grad) / count. Nothing with one micro-batch. Returns non-zero
 * (message on stderr) when the accumulator cannot be allocated or the
 * range is outside it. */
int moert_step_accumulate(moert_context *ctx, float *grad, int64_t n, int64_t offset,
                          int64_t total);
/* Frees the micro-batch state (the trainer, when a rank ends). */
void moert_micro_batches_free(moert_context *ctx);
/* moe.balance_bias, DeepSeek-V3's auxiliary-loss-free load rule: counts
 * the `count` expert indices `ids` (each in [0, experts)), sums the counts
 * exactly over the group of `axes` (0: this rank's only), and moves each
 * expert's selection bias by `rate` towards balance:
 * bias[e] += rate * sign(mean - load[e]). Every member applies the same
 * update. With micro-batches, each one's counts are kept and the update
 * runs in the last, on the step's. Returns non-zero for an index out of range (with a message on
 * stderr) or a communicator error. */
int moert_step_balance_bias(moert_context *ctx, float *bias, int32_t experts, const int32_t *ids,
                            int64_t count, double rate, int axes);

#ifdef __cplusplus
}
#endif

#endif /* MOERT_PROGRAM_H */
