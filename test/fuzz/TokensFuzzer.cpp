//===- TokensFuzzer.cpp - libFuzzer target: training data files -----------===//
//
// Bytes as a `--data` file, read as raw text (a token per byte) and as a
// nanoGPT .bin of uint16 tokens, then sampled as training windows. Contract:
// every sampled token lies in [0, the stream's largest token], every target
// is the token after its input, and a range too short for one window is an
// error, not a read past the end.
//
//===----------------------------------------------------------------------===//

#include "FuzzContract.h"

#include "moert/Data.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <unistd.h>

static std::string scratchFile(const char *suffix) {
  char name[] = "/tmp/moec-fuzz-tokens.XXXXXX";
  int fd = ::mkstemp(name);
  if (fd < 0)
    moec::fuzz::broken("cannot create a scratch file");
  ::close(fd);
  std::string path = std::string(name) + suffix;
  ::rename(name, path.c_str());
  return path;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string text = scratchFile(".txt"), bin = scratchFile(".bin");
  for (const std::string &path : {text, bin}) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
    }
    moert::TokenStream tokens;
    std::string error;
    bool ok = moert::loadTokens(path, moert::DataFormat::Auto, tokens, error);
    moec::fuzz::checkError(ok, error, "loadTokens");
    if (!ok)
      continue;
    if (tokens.size() == 0)
      moec::fuzz::broken("loadTokens accepted an empty stream");
    // The first byte picks the window; the split holds out a tenth.
    int64_t seqLen = data[0] % 17 + 1, batch = data[0] % 3 + 1;
    size_t end = moert::trainSplitEnd(tokens.size(), 0.1);
    for (auto [begin, stop] : {std::pair<size_t, size_t>{0, end}, {end, tokens.size()}}) {
      moert::BatchSampler sampler(tokens, begin, stop, batch, seqLen, size);
      // A resumed run starts anywhere in the draw sequence.
      uint64_t position = 0;
      std::memcpy(&position, data, std::min<size_t>(size, sizeof position));
      sampler.setPosition(position);
      if (!sampler.valid(error)) {
        moec::fuzz::checkError(false, error, "BatchSampler::valid");
        continue;
      }
      std::vector<int32_t> inputs, targets;
      for (int step = 0; step < 3; ++step) {
        sampler.next(inputs, targets);
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (inputs[i] < 0 || inputs[i] > tokens.maxToken || targets[i] < 0 ||
              targets[i] > tokens.maxToken)
            moec::fuzz::broken("a sampled token lies outside the stream's range");
          if (i % seqLen + 1 < static_cast<size_t>(seqLen) && targets[i] != inputs[i + 1])
            moec::fuzz::broken("a target is not the next input");
        }
      }
    }
  }
  return 0;
}
