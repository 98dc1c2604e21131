//===- CopyBytes.h - memcpy that accepts empty ranges -----------*- C++ -*-===//
//
// std::memcpy's pointers must not be null even when nothing is copied, and
// an empty std::vector's data() may be null: collectives of zero elements
// copy through this instead (UBSan checks it).
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_COPYBYTES_H
#define MOERT_LIB_COPYBYTES_H

#include <cstddef>
#include <cstring>

namespace moert {

inline void copyBytes(void *to, const void *from, size_t bytes) {
  if (bytes)
    std::memcpy(to, from, bytes);
}

} // namespace moert

#endif // MOERT_LIB_COPYBYTES_H
