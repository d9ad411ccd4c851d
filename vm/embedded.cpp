#include "vm/embedded.hpp"

#include <cstring>

namespace cr {

const char* find_embedded(const EmbeddedFile* table, int n, const char* name) {
  for (int i = 0; i < n; ++i)
    if (std::strcmp(table[i].name, name) == 0) return table[i].source;
  return nullptr;
}

}  // namespace cr
