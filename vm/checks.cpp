#include "vm/checks.hpp"

#include "vm/error.hpp"

namespace cr {

void raise_check(const int64_t* word, const CheckSites& sites, const char* later) {
  const int64_t site = word[2] - 1;
  if (site < 0) return;
  const CheckSite s = size_t(site) < sites.size() ? sites[size_t(site)] : CheckSite{"", "a gather", "its dim"};
  std::string msg = cat(s.op, ": index ", word[0], " is out of range for ", s.what, " (expected 1..", word[1], ")");
  if (later) throw Error(cat(s.where.empty() ? "" : cat(s.where, ": "), msg, later));
  if (s.where.empty()) throw Error(msg);
  throw LocatedError(cat(s.where, ": ", msg));
}

}  // namespace cr
