// The table of settings (see config.hpp).
#include "vm/config.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "vm/error.hpp"

namespace cr {
namespace {

struct SettingDef {
  const char *env, *fallback, *doc;
};
#define CR_SETTING_DEF(id, env, fallback, doc) {env, fallback, doc},
constexpr SettingDef kSettings[] = {CR_SETTINGS(CR_SETTING_DEF)};
#undef CR_SETTING_DEF

}  // namespace

const char* setting_name(Setting s) { return kSettings[size_t(s)].env; }
const char* env_setting(Setting s) { return std::getenv(setting_name(s)); }
bool find_setting(const std::string& variable, Setting* s) {
  for (size_t i = 0; i < std::size(kSettings); ++i)
    if (variable == kSettings[i].env) return *s = Setting(i), true;
  return false;
}

std::string settings_help() {
  size_t width = 0;
  for (const SettingDef& d : kSettings) width = std::max(width, std::strlen(d.env));
  std::string out;
  for (const SettingDef& d : kSettings)
    out += cat("  ", d.env, std::string(width + 2 - std::strlen(d.env), ' '), d.doc, " (default: ", d.fallback, ")\n");
  return out;
}

const Logs& env_logs() {
  static const Logs logs = [] {
    Logs l;
    if (const char* e = env_setting(Setting::Logs)) l.parse(e);
    return l;
  }();
  return logs;
}

}  // namespace cr
