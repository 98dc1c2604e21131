//===- TargetRegistryTest.cpp - targets as registered back ends -----------===//
//
// The registry of moec's targets (moe/Codegen/TargetBackend.h): the three
// back ends, their options and Halide targets, the `--target` flag's
// values; and a back end defined here, registered nowhere, that the step
// program emitter serves as it serves OpenCL and CUDA, so that a vendor
// target needs no change to the emitter.
//
//===----------------------------------------------------------------------===//

#include "moe/Codegen/StepProgram.h"
#include "moe/Codegen/TargetBackend.h"
#include "moe/Frontend/JsonDoc.h"
#include "moe/Frontend/ModelSpec.h"
#include "moe/Frontend/ModelToMLIR.h"
#include "moe/Transforms/Pipelines.h"

#include "TestUtils.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"

#include <gtest/gtest.h>

using namespace moec::codegen;

namespace {

std::string errorText(llvm::Error error) { return llvm::toString(std::move(error)); }

TEST(TargetRegistryTest, ListsTheTargetsHostFirst) {
  EXPECT_EQ(targetNames(), "host, opencl, cuda");
  EXPECT_EQ(&defaultTarget(), lookupTarget("host"));
  EXPECT_EQ(lookupTarget("rocm"), nullptr);
  llvm::Expected<const TargetBackend *> bad = parseTarget("rocm");
  ASSERT_FALSE(bad);
  EXPECT_EQ(errorText(bad.takeError()), "unknown target 'rocm' (expected host, opencl, cuda)");
  for (const TargetBackend *backend : targetBackends())
    EXPECT_FALSE(backend->description().empty()) << backend->name().str();
}

TEST(TargetRegistryTest, DeviceTargetsKeepArenasOnTheDevice) {
  const TargetBackend &host = *lookupTarget("host");
  EXPECT_FALSE(host.onDevice());
  EXPECT_TRUE(host.preludeIncludes().empty());
  EXPECT_EQ(host.bufferAlignment(), 64);
  EXPECT_TRUE(host.blasGemm() && host.expertChunks() && host.sixteenBitFloats());
  EXPECT_FALSE(host.deviceNorm());
  for (llvm::StringRef name : {"opencl", "cuda"}) {
    const TargetBackend &device = *lookupTarget(name);
    EXPECT_EQ(device.deviceInterface(), ("halide_" + name + "_device_interface").str());
    ASSERT_EQ(device.preludeIncludes().size(), 2u);
    EXPECT_EQ(device.preludeIncludes()[1], "moert/Device.h");
    EXPECT_EQ(device.bufferAlignment(), 512);
    EXPECT_TRUE(device.deviceNorm());
    EXPECT_FALSE(device.blasGemm() || device.expertChunks() || device.sixteenBitFloats());
  }
}

TEST(TargetRegistryTest, HalideTargetsAndOptions) {
  const std::string cpu = "x86-64-linux-avx-avx2-f16c-fma-sse41";
  EXPECT_EQ(halideTarget(*lookupTarget("host"), cpu, {}), cpu);
  EXPECT_EQ(halideTarget(*lookupTarget("opencl"), cpu, {}), cpu + "-opencl");
  const TargetBackend &cuda = *lookupTarget("cuda");
  EXPECT_EQ(halideTarget(cuda, cpu, {}), cpu + "-cuda-cuda_capability_80");
  EXPECT_EQ(halideTarget(cuda, cpu, {{"cuda-capability", "75"}}), cpu + "-cuda-cuda_capability_75");

  EXPECT_FALSE(checkTargetOption(cuda, "cuda-capability", "86"));
  EXPECT_EQ(errorText(checkTargetOption(cuda, "cuda-capability", "71")),
            "--cuda-capability 71: Halide targets 30, 32, 35, 50, 61, 70, 75, 80 or 86");
  EXPECT_EQ(errorText(checkTargetOption(*lookupTarget("opencl"), "cuda-capability", "80")),
            "--cuda-capability applies to --target=cuda");
  EXPECT_EQ(errorText(checkTargetOption(cuda, "opencl-platform", "0")),
            "--opencl-platform applies to no target");
}

TEST(TargetRegistryTest, AHalideTargetNamesItsDevice) {
  EXPECT_EQ(targetInHalideTarget("x86-64-linux-avx2"), nullptr);
  EXPECT_EQ(targetInHalideTarget("x86-64-linux-avx2-opencl"), lookupTarget("opencl"));
  EXPECT_EQ(targetInHalideTarget("x86-64-linux-cuda_capability_75"), lookupTarget("cuda"));
}

TEST(TargetRegistryTest, TargetValuesMakeAFlag) {
  llvm::cl::opt<const TargetBackend *> flag("test-target", llvm::cl::desc("Where"),
                                            TargetValues(), llvm::cl::init(&defaultTarget()));
  const TargetBackend *value = nullptr;
  EXPECT_FALSE(flag.getParser().parse(flag, "test-target", "cuda", value));
  EXPECT_EQ(value, lookupTarget("cuda"));
  testing::internal::CaptureStderr();
  EXPECT_TRUE(flag.getParser().parse(flag, "test-target", "rocm", value));
  EXPECT_NE(testing::internal::GetCapturedStderr().find("Cannot find option named 'rocm'"),
            std::string::npos);
  flag.removeArgument();

  // With external storage, as a driver's options struct binds it.
  const TargetBackend *field = &defaultTarget();
  llvm::cl::opt<const TargetBackend *, true> bound("test-bound-target", llvm::cl::desc("Where"),
                                                   llvm::cl::location(field), TargetValues());
  EXPECT_FALSE(bound.addOccurrence(0, "test-bound-target", "opencl"));
  EXPECT_EQ(field, lookupTarget("opencl"));
  bound.removeArgument();
}

/// A device back end registered nowhere: what a vendor folder would add.
class VendorBackend final : public TargetBackend {
public:
  llvm::StringRef name() const override { return "vendor"; }
  llvm::StringRef description() const override { return "a test device"; }
  std::string halideFeatures(const TargetOptionValues &) const override { return "-vendor"; }
  llvm::StringRef deviceInterface() const override { return "halide_vendor_device_interface"; }
  llvm::ArrayRef<llvm::StringRef> preludeIncludes() const override {
    static const llvm::StringRef headers[] = {"VendorRuntime.h", "moert/Device.h"};
    return headers;
  }
  int64_t bufferAlignment() const override { return 512; }
  bool deviceNorm() const override { return true; }
  bool sixteenBitFloats() const override { return false; }
  bool blasGemm() const override { return false; }
  bool expertChunks() const override { return false; }
};

class StepProgramTargetTest : public moe_test::MoETest {
protected:
  /// The step program of a one-layer MoE model, lowered for `backend`.
  std::string program(const TargetBackend &backend) {
    moec::frontend::DiagnosticList diags;
    auto doc = moec::frontend::JsonDoc::parse("m.json", R"({
      "vocab_size": 32, "d_model": 16, "n_layers": 1, "n_heads": 2, "seq_len": 8,
      "batch_size": 2, "moe": {"num_experts": 2, "top_k": 1, "expert_ffn_dim": 16}})",
                                              diags);
    std::optional<moec::frontend::ModelSpec> spec =
        doc ? moec::frontend::readModelJson(std::move(doc), diags) : std::nullopt;
    EXPECT_TRUE(spec) << diags.str();
    if (!spec)
      return "";
    mlir::OwningOpRef<mlir::ModuleOp> module = moec::frontend::buildModule(*spec, context);
    mlir::PassManager pm(&context);
    mlir::moe::TrainPipelineOptions options;
    options.lower = true;
    options.bufferAlignment = backend.bufferAlignment();
    options.deviceNorm = backend.deviceNorm();
    mlir::moe::buildTrainPipeline(pm, options);
    EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
    auto calls = KernelCalls::collect(*module, backend.blasGemm() ? Gemm::Auto : Gemm::Halide);
    EXPECT_TRUE(mlir::succeeded(calls));
    std::string text;
    llvm::raw_string_ostream os(text);
    EXPECT_TRUE(mlir::succeeded(emitStepProgram(*module, *calls, os, {}, backend)));
    return text;
  }
};

TEST_F(StepProgramTargetTest, AnUnregisteredDeviceBackEndDrivesTheEmitter) {
  std::string vendor = program(VendorBackend());
  EXPECT_NE(vendor.find("#include \"VendorRuntime.h\"\n#include \"moert/Device.h\"\n"),
            std::string::npos);
  EXPECT_NE(vendor.find("moert_device_attach(ctx, halide_vendor_device_interface(), \"vendor\""),
            std::string::npos);
  EXPECT_NE(vendor.find("moert_device_call(ctx, "), std::string::npos);
  EXPECT_NE(vendor.find(".device_sync = moert_device_sync"), std::string::npos);
  EXPECT_EQ(vendor.find("moert_kernel_profile_clock"), std::string::npos);

  std::string host = program(defaultTarget());
  EXPECT_EQ(host.find("moert_device_"), std::string::npos);
  EXPECT_NE(host.find("moert_kernel_profile_clock"), std::string::npos);
}

} // namespace
