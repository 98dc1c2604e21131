//===- CheckpointFuzzer.cpp - libFuzzer target: the checkpoint reader -----===//
//
// Bytes as a checkpoint directory, as `--resume` reads it: everything
// before the first "\n==state.json==\n" is tensors.safetensors, anything
// after it state.json (absent when there is no separator). The reader, the
// state check a resume makes, and a contract: what loads encodes and decodes
// back to the same tensors.
//
//===----------------------------------------------------------------------===//

#include "FuzzContract.h"

#include "moert/Checkpoint.h"

#include <cstring>
#include <fstream>
#include <unistd.h>

static const char kSeparator[] = "\n==state.json==\n";

static std::string scratchDir() {
  static std::string dir = [] {
    char name[] = "/tmp/moec-fuzz-checkpoint.XXXXXX";
    if (!::mkdtemp(name))
      moec::fuzz::broken("cannot create a scratch directory");
    return std::string(name);
  }();
  return dir;
}

static void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string input(reinterpret_cast<const char *>(data), size);
  size_t cut = input.find(kSeparator);
  std::string dir = scratchDir();
  writeFile(dir + "/tensors.safetensors", input.substr(0, cut));
  if (cut == std::string::npos)
    ::unlink((dir + "/state.json").c_str());
  else
    writeFile(dir + "/state.json", input.substr(cut + std::strlen(kSeparator)));

  moert::TensorMap tensors;
  nlohmann::json state;
  std::string error, note;
  bool ok = moert::loadCheckpoint(dir, tensors, state, error, &note);
  moec::fuzz::checkError(ok, error, "loadCheckpoint");
  if (!ok)
    return 0;
  if (!state.is_object())
    moec::fuzz::broken("loadCheckpoint returned a state that is not an object");
  moert::ResumeState resume;
  error.clear();
  moec::fuzz::checkError(moert::readResumeState(state, dir, 0, resume, error), error,
                         "readResumeState");

  moert::TensorMap again;
  if (!moert::decodeSafetensors(moert::encodeSafetensors(tensors), "re-encoded", again, error))
    moec::fuzz::broken("loaded tensors do not survive encoding: " + error);
  if (again.size() != tensors.size())
    moec::fuzz::broken("re-encoding changed the number of tensors");
  for (const auto &[name, t] : tensors) {
    const moert::HostTensor &u = again.at(name);
    if (u.shape != t.shape || u.data.size() != t.data.size() ||
        std::memcmp(u.data.data(), t.data.data(), t.data.size() * sizeof(float)) != 0)
      moec::fuzz::broken("re-encoding changed tensor '" + name + "'");
  }
  return 0;
}
