// Tensor files: safetensors (T.save / T.load) and NumPy .npy (T.save_npy / T.load_npy).
// Readers validate every header field and size against the file and throw cr::Error naming
// the file and the problem; they never trust a length they have not checked.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "vm/tensor.hpp"

namespace cr {
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& items);
std::vector<std::pair<std::string, Tensor>> load_safetensors(const std::string& path);
void save_npy(const std::string& path, const Tensor& t);
Tensor load_npy(const std::string& path);
// The same readers over bytes in memory (used by the fuzz targets).
std::vector<std::pair<std::string, Tensor>> parse_safetensors(const std::string& bytes, const std::string& what);
Tensor parse_npy(const std::string& bytes, const std::string& what);
}  // namespace cr
