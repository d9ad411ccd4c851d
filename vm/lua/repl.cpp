// The REPL (API.md section 7). Each input is first compiled as `return <line>` so that an
// expression prints its values (as Lua 5.3's REPL does), then as statements ending in an
// expression (`x = 1; x.shape`), then as statements; while the parser stops at '<eof>' the chunk
// is incomplete and continuation lines are read (lua.c's technique). crescent.repl shows the
// values (tables pretty-printed, `_` the last one; a trailing `;` hides them) and gives help().
// On a terminal lines come from GNU readline (editing, history, completion of globals, fields
// and tensor methods); otherwise they are read plainly, without prompts, so input can be piped.
#include "vm/lua/repl.hpp"

#include <readline/history.h>
#include <readline/readline.h>
#include <sys/select.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <crescent/crescent.h>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
}

#include "vm/config.hpp"

namespace cr {

std::string version_line() { return "crescent " CRESCENT_VERSION " (" LUAJIT_VERSION ")"; }

namespace {

constexpr const char* kPrompt = "> ";
constexpr const char* kContinuePrompt = ">> ";
constexpr int kHistoryLines = 1000;

// ---- Ctrl-C -----------------------------------------------------------------------------------
// While a chunk runs, Ctrl-C sets a hook that raises "interrupted!" at the next Lua instruction
// (lua.c's technique). Loops compiled by the JIT never look at hooks, so the code typed at the
// REPL (and the functions it defines) runs in LuaJIT's interpreter: Ctrl-C stops any such loop
// and the session goes on. A second unanswered Ctrl-C (a JIT-compiled loop of a script loaded
// with -i or require) ends the process; while a line is read, Ctrl-C cancels it. This state is
// process-wide because signal dispositions are: the REPL belongs to the executable, never to
// embedding hosts.
std::atomic<lua_State*> g_running{nullptr};
volatile std::sig_atomic_t g_sigint = 0;

void stop_hook(lua_State* L, lua_Debug*) {
  lua_sethook(L, nullptr, 0, 0);
  luaL_error(L, "interrupted!");
}

void on_sigint(int) {
  lua_State* L = g_running.load();
  if (L && g_sigint) {  // the first Ctrl-C went unanswered: JIT-compiled loops never run hooks
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  g_sigint = 1;
  if (L) lua_sethook(L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

void install_sigint() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked read returns EINTR, so the input can be cancelled
  sigaction(SIGINT, &sa, nullptr);
}

enum class Input { kLine, kEof, kInterrupted };

// ---- plain input (pipes, files) ---------------------------------------------------------------
Input read_plain(std::string& out) {
  out.clear();
  std::fflush(stdout);
  for (int c;;) {
    c = std::getc(stdin);
    if (c == EOF) {
      if (std::ferror(stdin) && errno == EINTR && g_sigint) {
        std::clearerr(stdin);
        g_sigint = 0;
        return Input::kInterrupted;
      }
      return out.empty() ? Input::kEof : Input::kLine;  // a last line without '\n' still counts
    }
    if (c == '\n') break;
    out += char(c);
  }
  if (!out.empty() && out.back() == '\r') out.pop_back();
  return Input::kLine;
}

// ---- readline (terminals) ---------------------------------------------------------------------
// The callback interface lets the loop below wait in select(), where Ctrl-C arrives as EINTR and
// can cancel the line cleanly; readline() itself would keep reading after the signal.
char* g_rl_line = nullptr;
bool g_rl_done = false;

void on_rl_line(char* line) {
  g_rl_line = line;  // null at end of input (Ctrl-D on an empty line)
  g_rl_done = true;
  rl_callback_handler_remove();  // the next read installs the handler with its own prompt
}

Input read_terminal(const char* prompt, std::string& out) {
  g_rl_done = false;
  g_rl_line = nullptr;
  rl_callback_handler_install(prompt, on_rl_line);
  while (!g_rl_done) {
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(STDIN_FILENO, &fds);
    if (select(STDIN_FILENO + 1, &fds, nullptr, nullptr, nullptr) < 0) {
      if (errno == EINTR && g_sigint) {
        g_sigint = 0;
        rl_callback_sigcleanup();
        rl_free_line_state();
        rl_callback_handler_remove();
        std::fputs("\n", stdout);
        return Input::kInterrupted;
      }
      if (errno == EINTR) continue;
      rl_callback_handler_remove();
      return Input::kEof;
    }
    rl_callback_read_char();
  }
  if (!g_rl_line) return Input::kEof;
  out = g_rl_line;
  std::free(g_rl_line);
  return Input::kLine;
}

// ---- completion -------------------------------------------------------------------------------
// `a.b.c` walks tables from the globals with raw lookups (no metamethods run while typing),
// also through a metatable's __index table (classes); a tensor offers crescent's methods.
lua_State* g_complete_L = nullptr;
std::vector<std::string> g_matches;
size_t g_next_match = 0;

const char* const kKeywords[] = {"and", "break", "do", "else", "elseif", "end", "false", "for",
                                 "function", "goto", "if", "in", "local", "nil", "not", "or",
                                 "repeat", "return", "then", "true", "until", "while"};

// Replaces the value on the top of the stack by the table its fields come from (or nil): a
// tensor handle (a userdata with crescent's tensor metatable) offers crescent's methods, other
// userdata (files) the table of their metatable's __index.
void fields_table(lua_State* L) {
  if (lua_type(L, -1) != LUA_TUSERDATA) return;
  lua_getfield(L, LUA_GLOBALSINDEX, "crescent");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "is_tensor");
    lua_pushvalue(L, -3);
    bool tensor = lua_pcall(L, 1, 1, 0) == 0 && lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (tensor) {
      lua_getfield(L, -1, "_methods");
      lua_replace(L, -3);
      lua_pop(L, 1);
      return;
    }
  }
  lua_pop(L, 1);
  if (lua_getmetatable(L, -1)) {
    lua_getfield(L, -1, "__index");
    lua_replace(L, -3);
    lua_pop(L, 1);
  } else {
    lua_pop(L, 1);
    lua_pushnil(L);
  }
}

void add_keys(lua_State* L, const std::string& prefix, const std::string& stem, int depth) {
  if (!lua_istable(L, -1) || depth > 4) return;
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) continue;
    size_t n;
    const char* k = lua_tolstring(L, -1, &n);
    if (n >= stem.size() && std::memcmp(k, stem.data(), stem.size()) == 0) g_matches.push_back(prefix + std::string(k, n));
  }
  if (lua_getmetatable(L, -1)) {  // methods of class instances live in the metatable's __index
    lua_pushstring(L, "__index");
    lua_rawget(L, -2);
    add_keys(L, prefix, stem, depth + 1);
    lua_pop(L, 2);
  }
}

void collect_matches(lua_State* L, const std::string& word) {
  int top = lua_gettop(L);
  size_t cut = word.find_last_of(".:");
  std::string stem = cut == std::string::npos ? word : word.substr(cut + 1);
  lua_pushvalue(L, LUA_GLOBALSINDEX);
  if (cut == std::string::npos) {
    for (const char* k : kKeywords)
      if (std::strncmp(k, stem.c_str(), stem.size()) == 0) g_matches.emplace_back(k);
  } else {
    for (size_t b = 0; b <= cut && lua_istable(L, -1);) {
      size_t e = word.find_first_of(".:", b);
      lua_pushlstring(L, word.data() + b, e - b);
      lua_rawget(L, -2);
      lua_remove(L, -2);
      fields_table(L);
      b = e + 1;
    }
  }
  add_keys(L, word.substr(0, cut == std::string::npos ? 0 : cut + 1), stem, 0);
  lua_settop(L, top);
  std::sort(g_matches.begin(), g_matches.end());
  g_matches.erase(std::unique(g_matches.begin(), g_matches.end()), g_matches.end());
}

char* next_match(const char* text, int state) {
  if (state == 0) {
    g_matches.clear();
    g_next_match = 0;
    collect_matches(g_complete_L, text);
  }
  return g_next_match < g_matches.size() ? strdup(g_matches[g_next_match++].c_str()) : nullptr;
}

char** complete(const char* text, int, int) {
  rl_attempted_completion_over = 1;  // never fall back to file names
  rl_completion_append_character = '\0';  // readline resets it to ' ' before each completion
  return rl_completion_matches(text, next_match);
}

// ---- history ----------------------------------------------------------------------------------
std::string history_path() {
  if (const char* p = env_setting(Setting::History)) return p;  // "" disables the file
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.crescent_history" : std::string();
}

// In-memory readline history, mirrored entry by entry into the history file when it is usable
// (appending keeps the entries of concurrent sessions); an unusable file is silently skipped.
// An entry is a whole chunk (a multi-line block recalls as one); in the file each entry follows a
// "#<time>" line, readline's multi-line format. A file without them (one line an entry, as older
// versions wrote) is read line by line and rewritten so.
class History {
 public:
  History() : path_(history_path()) {
    using_history();
    stifle_history(kHistoryLines);
    history_comment_char = '#';
    history_write_timestamps = 1;
    history_multiline_entries = 1;
    if (path_.empty()) return;
    int rc = lines_only() ? (read_lines(), write_history(path_.c_str())) : read_history(path_.c_str());
    if (rc == ENOENT) rc = write_history(path_.c_str());  // create it, so appends work
    if (rc != 0) path_.clear();
  }
  ~History() {
    if (!path_.empty()) history_truncate_file(path_.c_str(), kHistoryLines);
  }
  void add(const std::string& entry) {
    if (entry.find_first_not_of(" \t\n") == std::string::npos || entry == last_) return;
    last_ = entry;
    add_history(entry.c_str());
    if (!path_.empty() && append_history(1, path_.c_str()) != 0) path_.clear();
  }

 private:
  // The file exists, is not empty and does not start with a "#<digits>" line.
  bool lines_only() const {
    FILE* f = std::fopen(path_.c_str(), "r");
    if (!f) return false;
    char first[64] = {};
    const bool got = std::fgets(first, sizeof first, f) != nullptr;
    std::fclose(f);
    if (!got) return false;
    size_t n = std::strspn(first + (first[0] == '#'), "0123456789");
    return !(first[0] == '#' && n > 0 && (first[n + 1] == '\n' || first[n + 1] == '\0'));
  }
  void read_lines() {
    FILE* f = std::fopen(path_.c_str(), "r");
    if (!f) return;
    char* line = nullptr;
    size_t cap = 0;
    for (ssize_t n; (n = getline(&line, &cap, f)) > 0;) {
      if (line[n - 1] == '\n') line[n - 1] = '\0';
      if (*line) add_history(line);
    }
    std::free(line);
    std::fclose(f);
  }

  std::string path_, last_;
};

// ---- the loop ---------------------------------------------------------------------------------
enum class Chunk { kReady, kSyntaxError, kEof, kInterrupted };

class Repl {
 public:
  explicit Repl(LuaVM& vm) : vm_(vm), L_(vm.state()), tty_(isatty(STDIN_FILENO)) {
    if (!tty_) return;
    history_ = std::make_unique<History>();
    rl_readline_name = "crescent";
    rl_catch_signals = 0;  // Ctrl-C is ours (on_sigint)
    rl_basic_word_break_characters = " \t\n\"\\'`><=;+-*/%^~#&|(){}[],";
    rl_attempted_completion_function = complete;
    g_complete_L = L_;
  }
  ~Repl() { g_complete_L = nullptr; }

  int run() {
    install_sigint();
    if (!setup()) return 1;
    if (tty_) std::printf("%s  (Ctrl-D exits, help() helps)\n", version_line().c_str());
    top_ = lua_gettop(L_);
    for (;;) {
      lua_settop(L_, top_);
      std::string line;
      Input in = read(kPrompt, line);
      if (in == Input::kEof) break;
      if (in == Input::kInterrupted) continue;
      switch (compile(line)) {
        case Chunk::kReady: execute(); break;
        case Chunk::kSyntaxError: report(lua_tostring(L_, -1)); break;
        case Chunk::kInterrupted: break;
        case Chunk::kEof: return finish();
      }
    }
    return finish();
  }

 private:
  // crescent.repl's globals (T, help) and its show function, kept at stack index show_.
  bool setup() {
    if (!vm_.run_string("require('crescent.repl').setup()", "=[crescent] repl")) return report(vm_.error()), false;
    lua_getglobal(L_, "require");
    lua_pushstring(L_, "crescent.repl");
    lua_call(L_, 1, 1);
    lua_getfield(L_, -1, "show");
    lua_remove(L_, -2);
    show_ = lua_gettop(L_);
    return true;
  }

  // Piped input that met an error exits 1 (after running the rest), as a script would.
  int finish() {
    lua_settop(L_, top_);
    if (tty_) std::fputs("\n", stdout);
    std::fflush(stdout);
    return failed_ && !tty_ ? 1 : 0;
  }

  Input read(const char* prompt, std::string& line) { return tty_ ? read_terminal(prompt, line) : read_plain(line); }

  // The parser gave up at the end of the text: more lines may complete the chunk.
  bool incomplete() const {
    size_t n;
    const char* msg = lua_tolstring(L_, -1, &n);
    const size_t k = sizeof(LUA_QL("<eof>")) - 1;
    return msg && n >= k && std::strcmp(msg + n - k, LUA_QL("<eof>")) == 0;
  }

  bool load(const std::string& code) { return luaL_loadbuffer(L_, code.data(), code.size(), "=stdin") == 0; }

  // An expression list, so its values print. Run through a function, not as `return <list>`:
  // that tail call would drop the chunk's frame, and error("x") would lose its "stdin:1:".
  bool load_values(const std::string& statements, std::string list) {
    size_t end = list.find_last_not_of(" \t\n");
    if (end != std::string::npos && list[end] == ';') list.erase(end);  // `x;`: shown quietly
    if (!load(statements + "return " + list)) return false;
    lua_pop(L_, 1);
    return load(statements + "return (function(...) return ... end)(" + list + "\n)");
  }

  // The position of the last `;` that ends a statement: not one inside a string or a comment.
  static size_t last_semicolon(const std::string& code) {
    size_t last = std::string::npos, i = 0, n = code.size();
    auto long_bracket = [&](size_t at) -> int {  // `[[`, `[==[`: its level, or -1
      if (at >= n || code[at] != '[') return -1;
      size_t j = at + 1;
      while (j < n && code[j] == '=') ++j;
      return j < n && code[j] == '[' ? int(j - at - 1) : -1;
    };
    auto skip_long = [&](size_t at, int level) {  // past the closing `]==]` (or to the end)
      std::string close(size_t(level) + 2, '=');
      close.front() = close.back() = ']';
      size_t e = code.find(close, at + size_t(level) + 2);
      return e == std::string::npos ? n : e + close.size();
    };
    while (i < n) {
      const char c = code[i];
      if (c == '-' && i + 1 < n && code[i + 1] == '-') {
        if (int level = long_bracket(i + 2); level >= 0) i = skip_long(i + 2, level);
        else i = std::min(n, code.find('\n', i) == std::string::npos ? n : code.find('\n', i));
      } else if (c == '"' || c == '\'') {
        for (++i; i < n && code[i] != c && code[i] != '\n'; ++i)
          if (code[i] == '\\') ++i;
        ++i;
      } else if (int level = long_bracket(i); level >= 0) {
        i = skip_long(i, level);
      } else {
        if (c == ';') last = i;
        ++i;
      }
    }
    return last;
  }

  // `x = 1; x.shape`: statements, then an expression after the last `;` (on the same line, so
  // that an error in it names its line).
  bool load_tail_expression(const std::string& code) {
    size_t cut = last_semicolon(code);
    if (cut == std::string::npos || code.find_first_not_of(" \t\n", cut + 1) == std::string::npos) return false;
    if (load_values(code.substr(0, cut + 1), code.substr(cut + 1))) return true;
    lua_pop(L_, 1);
    return false;
  }

  // Lua 5.1's `=expr`, and `? obj` (help; `? x:sum` is the method x.sum).
  static std::string rewrite(const std::string& line) {
    if (!line.empty() && line[0] == '=') return "return " + line.substr(1);
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] != '?') return line;
    std::string obj = line.substr(b + 1);
    size_t colon = obj.find_last_of(':');
    if (colon != std::string::npos && obj.find_first_of("(\"'", colon) == std::string::npos) obj[colon] = '.';
    return "help(" + obj + ")";
  }

  // Leaves the compiled chunk (kReady) or the syntax error message (kSyntaxError) on the stack.
  Chunk compile(const std::string& first) {
    std::string code = rewrite(first), entry = first;  // entry: the chunk as typed, for the history
    for (;;) {
      bool open_expression = false;  // `1 +` is no statement, but an unfinished expression
      if (load_values("", code)) break;
      open_expression = incomplete();
      lua_pop(L_, 1);
      if (load_tail_expression(code) || load(code)) break;
      if (!incomplete() && !open_expression) break;
      lua_pop(L_, 1);
      std::string more;
      Input in = read(kContinuePrompt, more);
      if (in == Input::kInterrupted) return Chunk::kInterrupted;
      if (in == Input::kEof) {  // report the unfinished chunk, then stop
        if (!load(code)) report(lua_tostring(L_, -1));
        return Chunk::kEof;
      }
      code += "\n" + more;
      entry += "\n" + more;
    }
    if (tty_) history_->add(entry);
    quiet_ = code.find_last_not_of(" \t\n") != std::string::npos && code[code.find_last_not_of(" \t\n")] == ';';
    return lua_isfunction(L_, -1) ? Chunk::kReady : Chunk::kSyntaxError;
  }

  // Runs the chunk on the stack and prints what it returns with the global `print` (tostring:
  // tensors print as PyTorch does). Errors print with their traceback; the loop goes on.
  void execute() {
    int base = lua_gettop(L_) - 1;
    luaJIT_setmode(L_, -1, LUAJIT_MODE_ALLFUNC | LUAJIT_MODE_OFF);  // (interruptible: see Ctrl-C above)
    g_sigint = 0;
    g_running.store(L_);
    const auto start = std::chrono::steady_clock::now();
    bool ok = vm_.pcall(0, LUA_MULTRET);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    int n = lua_gettop(L_) - base;
    if (!ok) report(vm_.error());
    else if (n > 0) {
      lua_pushvalue(L_, show_);
      lua_pushboolean(L_, quiet_);
      lua_insert(L_, base + 1);
      lua_insert(L_, base + 1);
      if (!vm_.pcall(n + 1, 0)) report("error showing the result (" + vm_.error() + ")");
    }
    if (timing()) std::printf("(%.1f ms)\n", ms);
    g_running.store(nullptr);
    lua_sethook(L_, nullptr, 0, 0);
    g_sigint = 0;
  }

  // T.config.repl_timing (read raw: T.config's __index is a plain table).
  bool timing() {
    lua_getglobal(L_, "crescent");
    bool on = false;
    if (lua_istable(L_, -1)) {
      lua_getfield(L_, -1, "config");
      if (lua_istable(L_, -1)) {
        lua_getfield(L_, -1, "repl_timing");
        on = lua_toboolean(L_, -1);
        lua_pop(L_, 1);
      }
      lua_pop(L_, 1);
    }
    lua_pop(L_, 1);
    return on;
  }

  void report(const std::string& msg) {
    failed_ = true;
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", msg.c_str());
    std::fflush(stderr);
  }

  LuaVM& vm_;
  lua_State* L_;
  bool tty_;
  int top_ = 0, show_ = 0;
  bool quiet_ = false;  // the chunk ends in `;`: its values are not shown
  bool failed_ = false;  // some chunk raised an error
  std::unique_ptr<History> history_;
};

}  // namespace

int run_repl(LuaVM& vm) {
  Repl repl(vm);
  return repl.run();
}

}  // namespace cr
