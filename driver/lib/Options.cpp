//===- Options.cpp - the driver's flags, bound to its option structs ------===//

#include "moe/Driver/Options.h"

#include "llvm/ADT/STLExtras.h"

using namespace llvm;
using namespace moec::driver;
using moec::codegen::Gemm;

void OptionsBinder::positional(std::string &field, StringRef description) {
  options.push_back(std::make_unique<cl::opt<std::string, true>>(
      cl::Positional, cl::desc(description), cl::location(field), cl::cat(category)));
}

bool OptionsBinder::given(StringRef name) const {
  return llvm::any_of(options, [&](const std::unique_ptr<cl::Option> &o) {
    return o->ArgStr == name && o->getNumOccurrences();
  });
}

void OptionsBinder::hideOtherOptions() const {
  for (auto &entry : cl::getRegisteredOptions())
    if (entry.second->getOptionHiddenFlag() == cl::NotHidden &&
        !llvm::is_contained(entry.second->Categories, &category) &&
        !llvm::is_contained(ArrayRef<StringRef>{"help", "help-list", "version"}, entry.first))
      entry.second->setHiddenFlag(cl::Hidden);
}

void moec::driver::bindGemmOption(OptionsBinder &binder, Gemm &field, StringRef description) {
  binder.opt("gemm", field, cl::desc(description),
             cl::values(clEnumValN(Gemm::Auto, "auto",
                                   "OpenBLAS for large products, Halide for small ones (default)"),
                        clEnumValN(Gemm::Halide, "halide", "Halide schedules only"),
                        clEnumValN(Gemm::Blas, "blas", "OpenBLAS sgemm extern stages")));
}

void ImportOptions::bindHFOptions(OptionsBinder &binder, StringRef hfFlag) {
  std::string with = "With " + hfFlag.str() + ": ";
  binder.opt("seq-len", seqLen,
             cl::desc(binder.keep(
                 with + "tokens per sequence (default: min(max_position_embeddings, 4096))")));
  binder.opt("batch-size", batchSize,
             cl::desc(binder.keep(with + "sequences per step (default 1)")));
  binder.opt(
      "dtype", dtype,
      cl::desc(binder.keep(with + "the type the step computes in, f32 (default), or bf16 or f16 "
                                  "(mixed precision: f32 master weights, docs/MixedPrecision.md)")),
      cl::value_desc("f32|bf16|f16"));
  binder.opt(
      "override", overrides,
      cl::desc(binder.keep(with + "set top-level config.json fields first, KEY=VALUE,... "
                                  "(e.g. num_hidden_layers=2,hidden_size=256,num_experts=8); "
                                  "for a MoEC model JSON, its fields (n_layers=4,moe.top_k=1)")),
      cl::value_desc("list"));
  binder.opt(
      "optimizer", optimizer,
      cl::desc(binder.keep(with + "optimiser settings, KEY=VALUE,... (the model JSON's optimizer "
                                  "fields: lr, warmup_steps, total_steps, min_lr, schedule, "
                                  "weight_decay, grad_clip, eps); a MoEC model JSON's too")),
      cl::value_desc("list"));
  binder.opt(
      "capacity-factor", capacityFactor,
      cl::desc(binder.keep(with + "expert capacity factor, a number or 'dropless' (default: the "
                                  "family's own routing: dropless, Switch Transformers' "
                                  "expert_capacity)")),
      cl::value_desc("F|dropless"));
}

bool ImportOptions::anyHFOptionGiven(const OptionsBinder &binder, bool json) {
  return llvm::any_of(ArrayRef<StringRef>{"seq-len", "batch-size", "dtype", "override", "optimizer",
                                          "capacity-factor"},
                      [&](StringRef name) {
                        return binder.given(name) &&
                               !(json && (name == "override" || name == "optimizer"));
                      });
}

void ParallelOptions::bindOptions(OptionsBinder &binder) {
  binder.opt("ranks", ranks,
             cl::desc("Partition the step over N ranks (data x expert parallel): the binary runs "
                      "them as threads, or one per process under mpirun"));
  binder.opt("ep", ep,
             cl::desc("Expert-parallel degree of --ranks (default: the largest divisor of N that "
                      "divides every layer's experts; dp = N / ep), or forced on a --cluster "
                      "plan"));
  binder.opt("dp", dp,
             cl::desc("Data-parallel degree of --ranks (ep = N / (dp tp)), or forced on a "
                      "--cluster plan"));
  binder.opt("tp", tp,
             cl::desc("Tensor-parallel degree of --ranks (attention heads and FFN widths split, "
                      "Megatron-style), or forced on a --cluster plan"));
  binder.opt("zero", zero,
             cl::desc("ZeRO stage of a partitioned step: 1 shards the AdamW moments over the "
                      "data replicas (reduce-scatter the gradients, update the shard, "
                      "all-gather the parameters), 2 frees each full gradient once reduced "
                      "too, 0 keeps both replicated (default: 0, or the --cluster plan's "
                      "choice)"),
             cl::value_desc("0|1|2"));
  binder.opt("pin-experts", pinExperts,
             cl::desc("With --cluster: pin experts to ep ranks, EXPERT@RANK,... "
                      "(moe-plan-sharding pin=)"),
             cl::value_desc("list"));
  binder.opt("redundant-experts", redundantExperts,
             cl::desc("Spare expert positions per MoE layer of a partitioned step (ep > 1), "
                      "empty until the binary's --rebalance-every fills them with replicas of "
                      "hot experts"));
  binder.opt("routing-groups", routingGroups,
             cl::desc("Route tokens in G groups of whole sequences (default: --ranks); a "
                      "one-rank binary with G groups trains exactly as G ranks"));
  binder.opt("token-shares", tokenShares,
             cl::desc("Sequences of the batch per data replica, B0,B1,... (unequal shares for "
                      "devices of unequal speed: each replica runs its own step program); with "
                      "one rank, routing groups of these sizes, which trains exactly as the "
                      "replicas do"));
  binder.opt("expert-chunks", expertChunks,
             cl::desc("With --ranks: pipeline each expert phase's dispatch, expert FFNs and "
                      "combine in N chunks of experts, so that chunks compute while others are "
                      "on the wire (moe-pipeline-experts; default 1: off)"));
}

void CompressOptions::bindOptions(OptionsBinder &binder) {
  binder.opt("compress-grad", grad,
             cl::desc("With --ranks: compress the gradient all-reduces with CODEC (fp16, bf16, "
                      "int8[:block], topk[:ratio], sign, powersgd[:rank]; error feedback on)"),
             cl::value_desc("codec"));
  binder.opt("compress-embedding", embedding,
             cl::desc("With --ranks: the codec of the token embedding and LM head gradients "
                      "(default: --compress-grad's; alone, only they are compressed). They are "
                      "row-sparse, not low-rank: e.g. int8 or none beside powersgd"),
             cl::value_desc("codec"));
  binder.opt("compress-dispatch", dispatch,
             cl::desc("With --ranks: send the dispatch/combine token payloads as fp16, bf16 or "
                      "int8[:block]"),
             cl::value_desc("codec"));
  binder.opt("compress-warmup", warmup, cl::desc("Uncompressed steps before the codec applies"));
  binder.opt("no-error-feedback", noErrorFeedback,
             cl::desc("Drop what topk, sign and powersgd do not send (for comparison)"));
}

void StepOptions::bindOptions(OptionsBinder &binder) {
  binder.opt("recompute-ffn", recomputeFFN,
             cl::desc("FFN backward recomputes the pre-activations instead of saving them in "
                      "the forward (less activation memory, slower step)"));
  binder.opt("recompute", recompute,
             cl::desc("Recompute each layer's activations in the backward instead of keeping "
                      "them from the forward (full activation checkpointing: a layer's input "
                      "and routing kept; one more forward; the same results; default: off, or "
                      "the --cluster plan's choice)"));
  binder.opt("dense-experts", denseExperts,
             cl::desc("Expert FFNs compute every capacity slot, empty ones included, instead of "
                      "the routed rows only (for comparison)"));
  binder.opt("micro-batches", microBatches,
             cl::desc("Run each training step as M micro-batches of batch / M sequences, "
                      "gradients summed before the update (gradient accumulation: the memory "
                      "of one micro-batch's activations; default: 1, or the --cluster plan's "
                      "choice)"),
             cl::value_desc("M"));
  binder.opt("schedule", schedule, cl::desc("When the gradient all-reduces run"),
             cl::values(clEnumValN(Schedule::Overlap, "overlap",
                                   "in the background, each bucket from when its last gradient "
                                   "exists to the optimiser (moe-schedule; default)"),
                        clEnumValN(Schedule::Blocking, "blocking",
                                   "one after another after the backward, each blocking the "
                                   "step")));
}

void BackendOptions::bindOptions(OptionsBinder &binder) {
  bindGemmOption(binder, gemm, "Who computes the linear and FFN contractions");
  binder.opt("target", target, cl::desc("Where the kernels run"), codegen::TargetValues());
  for (const codegen::TargetBackend *backend : codegen::targetBackends())
    for (const codegen::TargetOption &option : backend->options())
      binder.opt(option.name, targetFlags[option.name.str()], cl::desc(option.description));
  binder.opt("host-target", hostTarget,
             cl::desc("The CPU the host kernels (and the host side of device kernels) run on: "
                      "'host' (default: this machine's CPU features), an x86-64 level or LLVM "
                      "CPU name (x86-64-v3, x86-64-v4, znver4, sapphirerapids), several names "
                      "comma-separated (the features all have: a cluster of mixed CPUs), or a "
                      "Halide target arch-bits-os-features, e.g. "
                      "x86-64-linux-avx-avx2-f16c-fma-sse41"));
  binder.opt("j", jobs,
             cl::desc("Run N kernel generators (and step-program compiles) at once (default: "
                      "one per hardware thread, at most 8)"),
             cl::value_desc("N"));
  binder.opt("no-kernel-cache", noKernelCache,
             cl::desc("Generate every kernel, ignoring the kernel cache ($MOEC_KERNEL_CACHE, "
                      "else ~/.cache/moec/kernels; MOEC_KERNEL_CACHE=none disables it)"));
}

void ExtensionOptions::bindOptions(OptionsBinder &binder) {
  binder.list("load-pass-plugin", plugins,
              cl::desc("Load an MLIR pass plugin (repeatable): its passes can then be named "
                       "by --pass-before/--pass-after"),
              cl::value_desc("lib.so"));
  binder.list("pass-before", before,
              cl::desc("Run PASSES (a list of module passes, e.g. 'moe-count-routers,cse') "
                       "just before the first pipeline pass named ANCHOR (repeatable)"),
              cl::value_desc("ANCHOR=PASSES"));
  binder.list("pass-after", after,
              cl::desc("Run PASSES just after the first pipeline pass named ANCHOR "
                       "(repeatable; moec -v lists the pipeline's passes)"),
              cl::value_desc("ANCHOR=PASSES"));
}

void CompileOptions::bindOptions(OptionsBinder &binder) {
  binder.positional(import.model, "<model.json|model.mlir>");
  binder.opt("hf", import.hf, cl::desc("The model is a HuggingFace config.json"));
  binder.opt("cluster", import.cluster, cl::desc("Cluster description"),
             cl::value_desc("cluster.json"));
  binder.opt("o", output, cl::desc("Output (file or directory)"), cl::value_desc("path"));
  binder.opt("emit", emit, cl::desc("Stop after a stage"),
             cl::values(clEnumValN(Emit::Mlir, "mlir", "the lowered training step (moe IR)"),
                        clEnumValN(Emit::Plan, "plan", "the buffer plan and kernel list (JSON)"),
                        clEnumValN(Emit::Kernels, "kernels",
                                   "generate every kernel into <o>/kernels with a manifest"),
                        clEnumValN(Emit::Cpp, "cpp", "the C++ step program"),
                        clEnumValN(Emit::Exe, "exe", "the training executable (default)")));
  binder.opt("v", verbose, cl::desc("Show each stage and its time"));
  import.bindHFOptions(binder, "--hf");
  parallel.bindOptions(binder);
  compress.bindOptions(binder);
  step.bindOptions(binder);
  backend.bindOptions(binder);
  extensions.bindOptions(binder);
}
