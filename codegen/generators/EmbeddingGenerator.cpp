//===- EmbeddingGenerator.cpp - Halide generators of embedding ------------===//
//
// `embedding`:      y[t, d] = table[ids[t], d]
// `embedding_grad`: dtable[v, d] = sum over t with ids[t] = v of dy[t, d]
// Ids outside [0, vocab) make the kernel fail with an error, never read or
// write out of bounds.
//
//===----------------------------------------------------------------------===//

#include "Shapes.h"

using namespace Halide;
using moec_codegen::checkedIndex;
using moec_codegen::constrainDense;
using moec_codegen::narrowed;
using moec_codegen::widened;

namespace {

class Embedding : public moec_codegen::MoEGenerator<Embedding> {
public:
  GeneratorParam<int> tokens{"tokens", 1};
  GeneratorParam<int> vocab{"vocab", 1};
  GeneratorParam<int> width{"width", 1};

  Input<Buffer<int32_t, 1>> ids{"ids"};
  Input<Buffer<void, 2>> table{"table"};
  Output<Buffer<void, 2>> y{"y"};

  Var d{"d"}, t{"t"};
  Func id{"id"};

  void configure() { storage(table, y); }

  void generate() {
    id(t) = checkedIndex(get_target(), ids(t), 0, vocab, "token id out of range:");
    y(d, t) = narrowed(y, widened(table)(d, clamp(id(t), 0, vocab - 1)));
  }

  void schedule() {
    ids.dim(0).set_bounds(0, tokens);
    constrainDense(table, {width, vocab});
    constrainDense(y, {width, tokens});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    id.compute_root();
    y.parallel(t);
    if (width >= vec)
      y.vectorize(d, vec, TailStrategy::GuardWithIf);
  }
};

class EmbeddingGrad : public moec_codegen::MoEGenerator<EmbeddingGrad> {
public:
  GeneratorParam<int> tokens{"tokens", 1};
  GeneratorParam<int> vocab{"vocab", 1};
  GeneratorParam<int> width{"width", 1};

  Input<Buffer<int32_t, 1>> ids{"ids"};
  Input<Buffer<void, 2>> dy{"dy"};
  Output<Buffer<void, 2>> dtable{"dtable"};

  Var d{"d"}, v{"v"};
  Func acc{"acc"}, id{"id"};

  void configure() { storage(dy, dtable); }

  void generate() {
    Var t;
    id(t) = checkedIndex(get_target(), ids(t), 0, vocab, "token id out of range:");
    RDom r(0, tokens);
    acc(d, v) = 0.0f;
    acc(d, clamp(id(r), 0, vocab - 1)) += widened(dy)(d, r);
    dtable(d, v) = narrowed(dtable, acc(d, v));
  }

  void schedule() {
    ids.dim(0).set_bounds(0, tokens);
    constrainDense(dy, {width, tokens});
    constrainDense(dtable, {width, vocab});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    id.compute_root();
    acc.compute_root();
    if (width >= vec) {
      acc.vectorize(d, vec, TailStrategy::GuardWithIf);
      acc.update().vectorize(d, vec, TailStrategy::GuardWithIf);
      dtable.vectorize(d, vec, TailStrategy::GuardWithIf);
    }
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(Embedding, embedding)
HALIDE_REGISTER_GENERATOR(EmbeddingGrad, embedding_grad)
