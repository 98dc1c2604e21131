//===- HFWeights.h - HuggingFace weights in and out -------------*- C++ -*-===//
//
// --init-hf DIR starts every rank from a HuggingFace checkpoint directory
// instead of the seed's initialisation: DIR/config.json must describe the
// model the binary was compiled for (architectureDifferences names what
// differs) and one MoEC reproduces exactly (no "not reproduced" item); each
// rank then converts only its blocks (its experts, its tensor-parallel
// slices) from the mapped safetensors files. --export-hf DIR writes
// config.json and safetensors under the family's names at the end of a run
// (training, --eval-only, or a --resume without data), in the model's
// precision or --export-dtype; whether the model has a family is checked
// before the first step. Internal to libmoert_main.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_HFWEIGHTS_H
#define MOERT_LIB_TRAINER_HFWEIGHTS_H

#include "Component.h"

#include "moert/HFCheckpoint.h"

#include "moe/Frontend/ModelSpec.h"

namespace moert::trainer {

/// --init-hf: every rank's parameters from o.initHF (after
/// initialiseParameters, instead of a --resume).
void loadHFWeights(Rank &r);

class HFExport : public Component {
public:
  using Component::Component;
  void configure() override;
  void onFinish(const RunEnd &end) override;
  void withoutTraining() override;

private:
  void write();
  std::string family;
  nlohmann::json config;                      ///< config.json to write (without torch_dtype)
  moert::HFDtype dtype = moert::HFDtype::F32; ///< of the tensors written
  moec::frontend::ModelSpec spec;             ///< the compiled model
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_HFWEIGHTS_H
