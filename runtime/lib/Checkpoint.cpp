//===- Checkpoint.cpp - atomic checkpoints in safetensors + JSON ----------===//

#include "moert/Checkpoint.h"
#include "moec/contract/NestingDepth.h"

#include <algorithm>
#include <functional>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

using namespace moert;
using nlohmann::json;

/// The safetensors `__metadata__` key of the state saved with the tensors.
static const char kStateKey[] = "moec.state";

/// JSON nested deeper than this is refused before parsing (moec/contract/NestingDepth.h).
static constexpr size_t kMaxJsonDepth = 64;

json moert::parseJsonObject(const std::string &text, std::string &why) {
  if (moec::contract::findTooDeep(text, kMaxJsonDepth, moec::contract::kJsonNesting)) {
    why = "nests deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return json(json::value_t::discarded);
  }
  json value = json::parse(text, nullptr, false);
  if (value.is_discarded() || !value.is_object()) {
    why = "is not a JSON object";
    return json(json::value_t::discarded);
  }
  return value;
}

/// A JSON value as an error message quotes it: at most 60 characters.
static std::string quote(const json &value) {
  std::string text = value.dump();
  return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

static std::string directoryOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

bool moert::writeFileAtomicWith(const std::string &path, std::string &error,
                                const std::function<bool(const ByteSink &)> &write) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    error = tmp + ": cannot create: " + std::strerror(errno);
    return false;
  }
  auto put = [&](const char *data, size_t size) {
    size_t written = 0;
    while (written < size) {
      ssize_t n = ::write(fd, data + written, size - written);
      if (n < 0) {
        if (errno == EINTR)
          continue;
        error = tmp + ": write failed: " + std::strerror(errno);
        return false;
      }
      written += static_cast<size_t>(n);
    }
    return true;
  };
  if (!write(put)) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return false;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    error = tmp + ": cannot flush to disk: " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    error = path + ": cannot replace: " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  int dirfd = ::open(directoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd >= 0) {
    ::fsync(dirfd);
    ::close(dirfd);
  }
  return true;
}

bool moert::writeFileAtomic(const std::string &path, const std::string &contents,
                            std::string &error) {
  return writeFileAtomicWith(
      path, error, [&](const auto &put) { return put(contents.data(), contents.size()); });
}

/// The safetensors header of `tensors` (length prefix, JSON, padding); the
/// tensors' data follow it in map order.
static std::string safetensorsHeader(const TensorMap &tensors,
                                     const std::map<std::string, std::string> &metadata) {
  json header = json::object();
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto &[name, t] : tensors) {
    uint64_t bytes = t.data.size() * sizeof(float);
    header[name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad the header with spaces to 8-byte alignment, as the format allows.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + text;
}

std::string moert::encodeSafetensors(const TensorMap &tensors,
                                     const std::map<std::string, std::string> &metadata) {
  std::string out = safetensorsHeader(tensors, metadata);
  for (const auto &[name, t] : tensors)
    out.append(reinterpret_cast<const char *>(t.data.data()), t.data.size() * sizeof(float));
  return out;
}

/// Writes the safetensors file of `tensors` to `path` atomically, header
/// then each tensor straight from memory (no copy of the whole file).
static bool writeSafetensorsAtomic(const std::string &path, const TensorMap &tensors,
                                   const std::map<std::string, std::string> &metadata,
                                   std::string &error) {
  std::string header = safetensorsHeader(tensors, metadata);
  return writeFileAtomicWith(path, error, [&](const auto &put) {
    if (!put(header.data(), header.size()))
      return false;
    for (const auto &[name, t] : tensors)
      if (!put(reinterpret_cast<const char *>(t.data.data()), t.data.size() * sizeof(float)))
        return false;
    return true;
  });
}

/// Decodes a safetensors file whose header JSON is `headerText`, followed by
/// `dataSize` bytes of tensor data that `read(begin, end, dst)` copies out
/// (from memory, or from the file itself). Errors name `origin`.
static bool decodeSafetensorsWith(const std::string &headerText, uint64_t dataSize,
                                  const std::string &origin,
                                  const std::function<bool(uint64_t, uint64_t, char *)> &read,
                                  TensorMap &tensors, std::string &error,
                                  std::map<std::string, std::string> *metadata) {
  auto fail = [&](const std::string &message) {
    error = origin + ": " + message;
    return false;
  };
  std::string why;
  json header = parseJsonObject(headerText, why);
  if (header.is_discarded())
    return fail("the header " + why);
  if (metadata)
    metadata->clear();
  tensors.clear();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      // A map of strings (the safetensors format).
      if (!it.value().is_object())
        return fail("__metadata__ is not an object of strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string())
          return fail("__metadata__ '" + m.key() + "' is not a string");
        if (metadata)
          (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    std::string what = "tensor '" + it.key() + "'", why;
    SafetensorsEntry entry;
    if (!readSafetensorsEntry(it.value(), {{"F32", sizeof(float)}}, dataSize, entry, why))
      return fail(what + ": " + why);
    ranges.push_back({entry.begin, entry.end});
    HostTensor t{entry.shape, std::vector<float>(entry.elements)};
    if (entry.elements && !read(entry.begin, entry.end, reinterpret_cast<char *>(t.data.data())))
      return fail(what + ": cannot read its data: " + std::strerror(errno));
    tensors[it.key()] = std::move(t);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      return fail("tensor data ranges overlap");
  return true;
}

bool moert::readSafetensorsEntry(const json &entry,
                                 const std::vector<std::pair<std::string, size_t>> &dtypes,
                                 uint64_t dataSize, SafetensorsEntry &out, std::string &why) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    why = "needs dtype, shape and data_offsets";
    return false;
  }
  size_t width = 0;
  std::string names;
  for (const auto &[name, bytes] : dtypes) {
    names += (names.empty() ? "" : ", ") + name;
    if (entry["dtype"] == name)
      out.dtype = name, width = bytes;
  }
  if (!width) {
    why = "dtype " + quote(entry["dtype"]) + " is not supported (" + names +
          (dtypes.size() == 1 ? " only)" : ")");
    return false;
  }
  const json &shape = entry["shape"], &offsets = entry["data_offsets"];
  if (!shape.is_array() || shape.size() > 8 || !offsets.is_array() || offsets.size() != 2 ||
      !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    why = "malformed shape or data_offsets";
    return false;
  }
  out.shape.clear();
  out.elements = 1;
  for (const json &d : shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40)) {
      why = "bad dimension " + quote(d);
      return false;
    }
    out.elements *= d.get<uint64_t>();
    if (out.elements > (uint64_t(1) << 40)) {
      why = "too many elements";
      return false;
    }
    out.shape.push_back(d.get<int64_t>());
  }
  out.begin = offsets[0].get<uint64_t>(), out.end = offsets[1].get<uint64_t>();
  if (out.begin > out.end || out.end > dataSize) {
    why = "data_offsets [" + std::to_string(out.begin) + ", " + std::to_string(out.end) +
          "] outside the data (" + std::to_string(dataSize) + " bytes)";
    return false;
  }
  if (out.end - out.begin != out.elements * width) {
    why = std::to_string(out.end - out.begin) + " bytes of data for " +
          std::to_string(out.elements) + " " + out.dtype + " elements";
    return false;
  }
  return true;
}

/// The length prefix of a safetensors header, checked against the file's
/// `size`.
static bool headerLength(const unsigned char *prefix, uint64_t size, const std::string &origin,
                         uint64_t &n, std::string &error) {
  n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(prefix[i]) << (8 * i);
  if (n > size - 8) {
    error = origin + ": header length " + std::to_string(n) + " exceeds the file (" +
            std::to_string(size) + " bytes)";
    return false;
  }
  return true;
}

bool moert::decodeSafetensors(const std::string &bytes, const std::string &origin,
                              TensorMap &tensors, std::string &error,
                              std::map<std::string, std::string> *metadata) {
  if (bytes.size() < 8) {
    error = origin + ": truncated: no safetensors header length";
    return false;
  }
  uint64_t n;
  if (!headerLength(reinterpret_cast<const unsigned char *>(bytes.data()), bytes.size(), origin, n,
                    error))
    return false;
  const char *data = bytes.data() + 8 + n;
  return decodeSafetensorsWith(
      bytes.substr(8, n), bytes.size() - 8 - n, origin,
      [&](uint64_t begin, uint64_t end, char *dst) {
        std::memcpy(dst, data + begin, end - begin);
        return true;
      },
      tensors, error, metadata);
}

/// decodeSafetensors on the file at `path`, reading each tensor's data
/// straight into it: a resume holds the tensors, not also the file's bytes.
static bool decodeSafetensorsFile(const std::string &path, TensorMap &tensors, std::string &error,
                                  std::map<std::string, std::string> *metadata) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    error = path + ": cannot read: not a regular file";
    return false;
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fstat(fd, &info) != 0) {
    error = path + ": cannot read: " + std::strerror(errno);
    if (fd >= 0)
      ::close(fd);
    return false;
  }
  auto readAt = [&](uint64_t offset, uint64_t size, char *dst) {
    while (size) {
      ssize_t got = ::pread(fd, dst, size, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0)
        return false;
      dst += got, offset += static_cast<uint64_t>(got), size -= static_cast<uint64_t>(got);
    }
    return true;
  };
  uint64_t size = static_cast<uint64_t>(info.st_size), n = 0;
  unsigned char prefix[8];
  bool ok = false;
  if (size < 8)
    error = path + ": truncated: no safetensors header length";
  else if (!readAt(0, 8, reinterpret_cast<char *>(prefix)))
    error = path + ": cannot read: " + std::strerror(errno);
  else if (headerLength(prefix, size, path, n, error)) {
    std::string header(n, '\0');
    if (n && !readAt(8, n, &header[0]))
      error = path + ": cannot read: " + std::strerror(errno);
    else
      ok = decodeSafetensorsWith(
          header, size - 8 - n, path,
          [&](uint64_t begin, uint64_t end, char *dst) {
            return readAt(8 + n + begin, end - begin, dst);
          },
          tensors, error, metadata);
  }
  ::close(fd);
  return ok;
}

static bool readFile(const std::string &path, std::string &out, std::string &error) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    error = path + ": cannot read: not a regular file";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot read: " + std::strerror(errno);
    return false;
  }
  // One buffer of the file's size (a stream's copy would double a
  // checkpoint's peak memory on resume).
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size < 0) {
    error = path + ": cannot read: not seekable";
    return false;
  }
  out.assign(static_cast<size_t>(size), '\0');
  if (size > 0 && !in.read(&out[0], size)) {
    error = path + ": cannot read: " + std::strerror(errno);
    return false;
  }
  return true;
}

void moert::removeStaleTemporaries(const std::string &dir) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return;
  while (dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    size_t tmp = name.rfind(".tmp.");
    if (tmp == std::string::npos)
      continue;
    char *end = nullptr;
    long pid = std::strtol(name.c_str() + tmp + 5, &end, 10);
    if (!end || *end || pid <= 0)
      continue;
    // Another live process's save is not ours to remove.
    if (pid != getpid() && ::kill(static_cast<pid_t>(pid), 0) == 0)
      continue;
    ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

/// Keeps the save of `step` (`tensors` with `metadata`) as
/// `dir/step-<step>.safetensors` and removes the oldest such files beyond
/// `keep`. A copy, not a hard link: `cp step-N.safetensors
/// tensors.safetensors` would otherwise write through to the kept file.
static bool keepSave(const std::string &dir, const TensorMap &tensors,
                     const std::map<std::string, std::string> &metadata, long long step, int keep,
                     std::string &error) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%012lld.safetensors", step);
  if (!writeSafetensorsAtomic(dir + "/" + name, tensors, metadata, error))
    return false;
  std::vector<std::string> steps;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string file = e->d_name;
      if (file.size() == std::strlen(name) && file.rfind("step-", 0) == 0 &&
          file.compare(file.size() - 12, 12, ".safetensors") == 0)
        steps.push_back(file);
    }
    ::closedir(d);
  }
  std::sort(steps.begin(), steps.end()); // zero-padded: by step
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i)
    ::unlink((dir + "/" + steps[i]).c_str());
  return true;
}

bool moert::saveCheckpoint(const std::string &dir, const TensorMap &tensors, const json &state,
                           std::string &error, int keep) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    error = dir + ": cannot create the checkpoint directory: " + std::strerror(errno);
    return false;
  }
  removeStaleTemporaries(dir);
  // The tensors carry their state: renaming them into place is the commit.
  // state.json follows as a readable copy.
  std::map<std::string, std::string> metadata = {{kStateKey, state.dump()}};
  return writeSafetensorsAtomic(dir + "/tensors.safetensors", tensors, metadata, error) &&
         writeFileAtomic(dir + "/state.json", state.dump(2) + "\n", error) &&
         (keep <= 1 || keepSave(dir, tensors, metadata, state.value("step", 0LL), keep, error));
}

bool moert::loadCheckpoint(const std::string &dir, TensorMap &tensors, json &state,
                           std::string &error, std::string *note) {
  std::string text;
  std::map<std::string, std::string> metadata;
  if (!decodeSafetensorsFile(dir + "/tensors.safetensors", tensors, error, &metadata))
    return false;
  bool haveText = readFile(dir + "/state.json", text, error);
  std::string why, mirrorWhy;
  json mirror = haveText ? parseJsonObject(text, mirrorWhy) : json();
  auto it = metadata.find(kStateKey);
  if (it == metadata.end()) {
    // Written before the state moved into the tensors' header.
    if (!haveText)
      return false;
    if (mirror.is_discarded()) {
      error = dir + "/state.json " + mirrorWhy;
      return false;
    }
    state = std::move(mirror);
    return true;
  }
  state = parseJsonObject(it->second, why);
  if (state.is_discarded()) {
    error = dir + "/tensors.safetensors: the recorded state (" + kStateKey + ") " + why;
    return false;
  }
  // (A discarded value compares unequal to nothing: test it first.)
  if (note && haveText && mirror.is_discarded())
    *note =
        dir + "/state.json " + mirrorWhy + " (an edit?); using the state saved with the tensors";
  else if (note && mirror != state)
    *note = dir + "/state.json " + (haveText ? "does not match" : "is missing beside") +
            " the state saved with the tensors (a save interrupted between its two files?); "
            "using the tensors' state";
  error.clear();
  return true;
}

/// An integer >= 0 (JSON text parses those as unsigned; built values may be
/// signed).
static bool isCount(const json &value) {
  return value.is_number_unsigned() || (value.is_number_integer() && value.get<int64_t>() >= 0);
}

bool moert::readResumeState(const json &state, const std::string &where, uint64_t seed,
                            ResumeState &out, std::string &error) {
  const json &step = state.contains("step") ? state["step"] : json();
  const json &position = state.contains("data_position") ? state["data_position"] : json();
  if (!isCount(step) || step.get<uint64_t>() > uint64_t(std::numeric_limits<long long>::max())) {
    error = where + ": \"step\" must be an integer >= 0, got " + quote(step);
    return false;
  }
  if (!isCount(position)) {
    error = where + ": \"data_position\" must be an integer >= 0, got " + quote(position);
    return false;
  }
  if (state.contains("seed") &&
      (!isCount(state["seed"]) || state["seed"].get<uint64_t>() != seed)) {
    error = where + ": written with seed " + quote(state["seed"]) + ", this run uses " +
            std::to_string(seed) + " (pass --seed to continue it)";
    return false;
  }
  out.step = step.get<long long>();
  out.dataPosition = position.get<uint64_t>();
  return true;
}
