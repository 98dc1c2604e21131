//===- Sampling.h - text sampling (--sample) --------------------*- C++ -*-===//
//
// --sample N: after training (or, with --resume and no --data, from the
// checkpoint alone), N tokens continuing --prompt at --temperature among
// the --top-k most likely, printed by the lead rank.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_SAMPLING_H
#define MOERT_LIB_TRAINER_SAMPLING_H

#include "Component.h"

#include "moert/Tokenizer.h"

#include <random>

namespace moert::trainer {

class Sampling : public Component {
public:
  using Component::Component;
  void configure() override;
  void onFinish(const RunEnd &end) override;
  void withoutTraining() override;

private:
  void sampleText();
  int32_t sampleNext(const std::vector<int32_t> &context, std::vector<int32_t> &in,
                     const std::vector<int32_t> &tg, moert::AlignedFloats &logits,
                     std::mt19937_64 &rng);
  void printSample(const std::vector<int32_t> &prompt, const std::vector<int32_t> &context,
                   const std::vector<int32_t> &generated);
  /// The prompt as token ids (--tokenizer's, bytes of text, or ids).
  std::vector<int32_t> promptTokens() const;

  moert::Tokenizer tokenizer; ///< --tokenizer, when given
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_SAMPLING_H
