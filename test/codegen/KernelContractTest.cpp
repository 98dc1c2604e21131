//===- KernelContractTest.cpp - the registry against the generators ------===//
//
// The kernel-family registry (codegen/lib/KernelFamilies.cpp) states each
// generator's arguments in call order and its scratch bound; the step
// program calls kernels by position. These tests tie the registry to what
// the generators produce: every variant's argument names (from its Halide
// metadata) are its registry row's signature, every generator the registry
// names is tested here, and every family names a moe compute op.
//
//===----------------------------------------------------------------------===//

#include "KernelVariants.h"

#include "moe/Codegen/KernelRegistry.h"
#include "moe/InitAllDialects.h"
#include "moert/ScratchPool.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "KernelVariants.inc"

namespace {
// Kernels allocate their scratch from moert's pool, as in generated
// binaries, so that its peak can be measured.
void *poolMalloc(void *, size_t size) { return moert_scratch_alloc(size); }
void poolFree(void *, void *ptr) { moert_scratch_free(ptr); }
struct InstallPool {
  InstallPool() {
    halide_set_custom_malloc(poolMalloc);
    halide_set_custom_free(poolFree);
  }
} installPool;

const KernelVariant *find(const char *name) {
  for (const KernelVariant &v : kernelVariants())
    if (std::strcmp(v.name, name) == 0)
      return &v;
  return nullptr;
}
} // namespace

const std::vector<KernelVariant> &kernelVariants() {
  static const std::vector<KernelVariant> all(std::begin(kKernelVariants),
                                              std::end(kKernelVariants));
  return all;
}

ScratchWithin::ScratchWithin(std::initializer_list<const char *> variants) : variants(variants) {
  moert_scratch_reset_peak();
}

ScratchWithin::~ScratchWithin() {
  int64_t bound = 0;
  std::string names;
  for (const char *name : variants) {
    const KernelVariant *v = find(name);
    EXPECT_NE(v, nullptr) << "no kernel variant " << name;
    if (!v)
      continue;
    bound = std::max(bound, moec::codegen::scratchBound(v->generator, v->params));
    names += std::string(names.empty() ? "" : ", ") + name;
  }
  EXPECT_LE(moert_scratch_peak(), bound)
      << "kernel scratch of " << names << " exceeds the compiler's bound";
}

TEST(KernelContractTest, ArgumentsAreTheRegistrySignature) {
  for (const KernelVariant &v : kernelVariants()) {
    const halide_filter_metadata_t *meta = v.metadata();
    bool found = false;
    for (const moec::codegen::KernelFamily &row : moec::codegen::kernelFamilies()) {
      if (row.generator != v.generator)
        continue;
      found = true;
      ASSERT_EQ(static_cast<size_t>(meta->num_arguments), row.signature.size())
          << v.name << " (family " << row.family.str() << ")";
      for (int i = 0; i < meta->num_arguments; ++i)
        EXPECT_EQ(std::string(meta->arguments[i].name), row.signature[i].str())
            << v.name << " argument " << i << " (family " << row.family.str() << ")";
    }
    EXPECT_TRUE(found) << v.name << ": no registry row uses generator " << v.generator;
  }
}

TEST(KernelContractTest, EveryGeneratorIsTested) {
  for (const moec::codegen::KernelFamily &row : moec::codegen::kernelFamilies()) {
    if (row.generator.empty())
      continue;
    bool tested = std::any_of(kernelVariants().begin(), kernelVariants().end(),
                              [&](const KernelVariant &v) { return row.generator == v.generator; });
    EXPECT_TRUE(tested) << "generator " << row.generator.str() << " (family " << row.family.str()
                        << ") has no kernel test variant";
  }
}

TEST(KernelContractTest, EveryFamilyNamesAMoEOp) {
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  for (const moec::codegen::KernelFamily &row : moec::codegen::kernelFamilies())
    EXPECT_TRUE(mlir::RegisteredOperationName::lookup(("moe." + row.family).str(), &context))
        << "family " << row.family.str();
}

TEST(KernelContractTest, ScratchBoundFollowsTheParams) {
  using moec::codegen::scratchBound;
  // 512 bytes of pool slack for each of up to 16 blocks, plus the payload.
  EXPECT_EQ(scratchBound("add", {"size=40"}), 8192);
  EXPECT_EQ(scratchBound("embedding_grad", {"tokens=6", "vocab=10", "width=16"}),
            8192 + 4 * (6 + 160));
  EXPECT_GT(
      scratchBound("ffn_grad", {"groups=2", "rows=8", "width=4", "hidden=8", "activation=swiglu"}),
      scratchBound("ffn_grad", {"groups=2", "rows=8", "width=4", "hidden=8", "activation=gelu"}));
  std::vector<std::string> params = {"rows_total=3", "blas=true", "rows=12", "theta=1e4"};
  moec::codegen::GeneratorParams v(params);
  EXPECT_EQ(v("blas"), 1);
  EXPECT_EQ(v("rows"), 12);
  EXPECT_EQ(v("theta"), 0);
  EXPECT_EQ(v("absent"), 0);
  EXPECT_EQ(v.text("theta"), "1e4");
}
