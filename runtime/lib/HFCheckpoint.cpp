//===- HFCheckpoint.cpp - HuggingFace safetensors checkpoints -------------===//

#include "moert/HFCheckpoint.h"
#include "moert/Checkpoint.h"
#include "moert/Codecs.h"

#include "CopyBytes.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <limits>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace moert;
using nlohmann::json;

namespace {

const char kSingleFile[] = "model.safetensors";
const char kIndexFile[] = "model.safetensors.index.json";
/// Headers (and indexes) larger than this are refused before parsing.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

bool dtypeFromName(const std::string &name, HFDtype &out) {
  for (HFDtype d : {HFDtype::F32, HFDtype::BF16, HFDtype::F16})
    if (name == safetensorsName(d)) {
      out = d;
      return true;
    }
  return false;
}

/// A weight file's name as an index may give it: a plain file name.
bool plainFileName(const std::string &name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
}

bool readSmallFile(const std::string &path, std::string &out, std::string &error) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) {
    error = path + ": cannot read: " + std::strerror(errno);
    return false;
  }
  char buffer[1 << 16];
  size_t n;
  out.clear();
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) {
    out.append(buffer, n);
    if (out.size() > kMaxHeaderBytes) {
      std::fclose(f);
      error = path + ": larger than " + std::to_string(kMaxHeaderBytes >> 20) + " MiB";
      return false;
    }
  }
  std::fclose(f);
  return true;
}

} // namespace

const char *moert::safetensorsName(HFDtype dtype) {
  return dtype == HFDtype::F32 ? "F32" : dtype == HFDtype::BF16 ? "BF16" : "F16";
}

const char *moert::torchName(HFDtype dtype) {
  return dtype == HFDtype::F32 ? "float32" : dtype == HFDtype::BF16 ? "bfloat16" : "float16";
}

size_t moert::bytesOf(HFDtype dtype) { return dtype == HFDtype::F32 ? 4 : 2; }

int64_t HFTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

HFCheckpointReader::~HFCheckpointReader() {
  for (Mapping &m : mappings)
    if (m.base)
      ::munmap(m.base, m.size);
}

/// Maps `dir/file` and records its tensors after checking its header.
bool HFCheckpointReader::mapFile(const std::string &dir, const std::string &file,
                                 std::string &error) {
  std::string path = dir + "/" + file;
  auto fail = [&](const std::string &message) {
    error = path + ": " + message;
    return false;
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info;
  if (fd < 0 || ::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    std::string why = fd < 0 ? std::strerror(errno) : "not a regular file";
    if (fd >= 0)
      ::close(fd);
    return fail("cannot read: " + why);
  }
  uint64_t size = static_cast<uint64_t>(info.st_size);
  void *base = size ? ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (size < 8)
    return fail("truncated: no safetensors header length");
  if (base == MAP_FAILED)
    return fail(std::string("cannot map: ") + std::strerror(errno));
  mappings.push_back({base, size});
  const auto *bytes = static_cast<const unsigned char *>(base);
  uint64_t headerBytes = 0;
  for (int i = 7; i >= 0; --i)
    headerBytes = headerBytes << 8 | bytes[i];
  if (headerBytes > kMaxHeaderBytes || headerBytes > size - 8)
    return fail("truncated or not a safetensors file: a header of " + std::to_string(headerBytes) +
                " bytes in a file of " + std::to_string(size));
  std::string why;
  json header =
      parseJsonObject(std::string(reinterpret_cast<const char *>(bytes) + 8, headerBytes), why);
  if (header.is_discarded())
    return fail("the safetensors header " + why);
  const unsigned char *data = bytes + 8 + headerBytes;
  uint64_t dataSize = size - 8 - headerBytes;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__")
      continue;
    std::string what = "tensor '" + it.key() + "'";
    SafetensorsEntry entry;
    if (!readSafetensorsEntry(it.value(), {{"F32", 4}, {"BF16", 2}, {"F16", 2}}, dataSize, entry,
                              why))
      return fail(what + ": " + why);
    HFTensor t;
    t.file = file;
    dtypeFromName(entry.dtype, t.dtype);
    t.shape = entry.shape;
    t.data = data + entry.begin;
    if (!all.emplace(it.key(), std::move(t)).second)
      return fail(what + " appears in more than one file");
  }
  return true;
}

bool HFCheckpointReader::open(const std::string &dir, std::string &error) {
  struct stat info;
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    error = dir + ": not a directory (a HuggingFace model directory: config.json and " +
            kSingleFile + " or " + kIndexFile + " with its shards)";
    return false;
  }
  std::string indexPath = dir + "/" + kIndexFile;
  if (::stat((dir + "/" + kSingleFile).c_str(), &info) == 0)
    return mapFile(dir, kSingleFile, error);
  if (::stat(indexPath.c_str(), &info) != 0) {
    error = dir + ": holds neither " + kSingleFile + " nor " + kIndexFile;
    return false;
  }
  std::string text, why;
  if (!readSmallFile(indexPath, text, error))
    return false;
  json index = parseJsonObject(text, why);
  if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    error = indexPath + ": " + (why.empty() ? "has no \"weight_map\" object" : why);
    return false;
  }
  // Each shard once, in the order the map names them; then every mapped
  // tensor must be in the file the map names.
  std::vector<std::string> files;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string() || !plainFileName(it.value().get<std::string>())) {
      error = indexPath + ": weight_map \"" + it.key() + "\": expected a file name in " + dir +
              ", got " + it.value().dump();
      return false;
    }
    if (std::find(files.begin(), files.end(), it.value().get<std::string>()) == files.end())
      files.push_back(it.value().get<std::string>());
  }
  for (const std::string &file : files)
    if (!mapFile(dir, file, error))
      return false;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    auto found = all.find(it.key());
    if (found == all.end() || found->second.file != it.value().get<std::string>()) {
      error = indexPath + ": weight_map puts \"" + it.key() + "\" in " +
              it.value().get<std::string>() + ", which does not hold it";
      return false;
    }
  }
  return true;
}

const HFTensor *HFCheckpointReader::find(const std::string &name) const {
  auto it = all.find(name);
  return it == all.end() ? nullptr : &it->second;
}

void HFCheckpointReader::read(const HFTensor &t, int64_t begin, int64_t count, float *out) {
  size_t width = bytesOf(t.dtype);
  const unsigned char *p = t.data + static_cast<size_t>(begin) * width;
  converted += static_cast<uint64_t>(count) * width;
  if (t.dtype == HFDtype::F32) {
    moert::copyBytes(out, p, static_cast<size_t>(count) * 4);
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    uint16_t bits = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
    out[i] = t.dtype == HFDtype::BF16 ? bf16ToFloat(bits) : halfToFloat(bits);
  }
}

uint64_t HFCheckpointReader::totalBytes() const {
  uint64_t total = 0;
  for (const auto &[name, t] : all)
    total += static_cast<uint64_t>(t.numel()) * bytesOf(t.dtype);
  return total;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

/// The safetensors file of `tensors[first, last)` in `dtype`.
bool writeShard(const std::string &path, const std::vector<HFTensorOut> &tensors, size_t first,
                size_t last, HFDtype dtype, std::string &error) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (size_t i = first; i < last; ++i) {
    uint64_t bytes = tensors[i].data.size() * bytesOf(dtype);
    header[tensors[i].name] = {{"dtype", safetensorsName(dtype)},
                               {"shape", tensors[i].shape},
                               {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // the data 8-byte aligned
  return writeFileAtomicWith(path, error, [&](const ByteSink &put) {
    unsigned char prefix[8];
    for (int b = 0; b < 8; ++b)
      prefix[b] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * b));
    if (!put(reinterpret_cast<const char *>(prefix), 8) || !put(text.data(), text.size()))
      return false;
    std::vector<unsigned char> buffer;
    for (size_t i = first; i < last; ++i) {
      const std::vector<float> &v = tensors[i].data;
      if (dtype == HFDtype::F32) {
        if (!put(reinterpret_cast<const char *>(v.data()), v.size() * 4))
          return false;
        continue;
      }
      buffer.resize(v.size() * 2);
      for (size_t k = 0; k < v.size(); ++k) {
        uint16_t bits = dtype == HFDtype::BF16 ? floatToBF16(v[k]) : floatToHalf(v[k]);
        buffer[2 * k] = static_cast<unsigned char>(bits);
        buffer[2 * k + 1] = static_cast<unsigned char>(bits >> 8);
      }
      if (!put(reinterpret_cast<const char *>(buffer.data()), buffer.size()))
        return false;
    }
    return true;
  });
}

/// `model-00001-of-00003.safetensors`, HuggingFace's shard names.
std::string shardName(size_t i, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return name;
}

/// Removes weight files in `dir` (a single file, an index, shards) that
/// are not in `kept`.
void removeStaleWeights(const std::string &dir, const std::set<std::string> &kept) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return;
  std::vector<std::string> stale;
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    bool weights = name == kSingleFile || name == kIndexFile ||
                   (name.rfind("model-", 0) == 0 && name.find("-of-") != std::string::npos &&
                    name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0);
    if (weights && !kept.count(name))
      stale.push_back(name);
  }
  ::closedir(d);
  for (const std::string &name : stale)
    ::unlink((dir + "/" + name).c_str());
}

} // namespace

bool moert::writeHFCheckpoint(const std::string &dir, const std::vector<HFTensorOut> &tensors,
                              HFDtype dtype, uint64_t maxShardBytes, std::string &error) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    error = dir + ": cannot create: " + std::strerror(errno);
    return false;
  }
  // Shards in order, each at most maxShardBytes (a larger tensor alone).
  std::vector<size_t> starts = {0};
  uint64_t inShard = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t bytes = tensors[i].data.size() * bytesOf(dtype);
    if (inShard > 0 && inShard + bytes > maxShardBytes) {
      starts.push_back(i);
      inShard = 0;
    }
    inShard += bytes;
    total += bytes;
  }
  starts.push_back(tensors.size());
  size_t shards = starts.size() - 1;
  std::set<std::string> written;
  if (shards == 1) {
    written.insert(kSingleFile);
    if (!writeShard(dir + "/" + kSingleFile, tensors, 0, tensors.size(), dtype, error))
      return false;
  } else {
    json map = json::object();
    for (size_t s = 0; s < shards; ++s) {
      std::string name = shardName(s, shards);
      written.insert(name);
      for (size_t i = starts[s]; i < starts[s + 1]; ++i)
        map[tensors[i].name] = name;
      if (!writeShard(dir + "/" + name, tensors, starts[s], starts[s + 1], dtype, error))
        return false;
    }
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    written.insert(kIndexFile);
    if (!writeFileAtomic(dir + "/" + kIndexFile, index.dump(2) + "\n", error))
      return false;
  }
  removeStaleWeights(dir, written);
  return true;
}
