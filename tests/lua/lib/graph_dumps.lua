-- The graph dumps of T.config.debug_dir (vm/graph: one *.graph.txt a compiled graph, its
-- recorded, optimised and scheduled forms) for specs that check what a rewrite made.
local T = require "crescent"
local SH = require "shell"

local M = {}

-- Runs f with T.config.debug_dir at a fresh directory (the old setting back after, also when f
-- raises); returns the text of every graph dump written, then f's first result.
function M.capture(f)
  local dir, saved = SH.tmpdir(), T.config.debug_dir
  T.config.debug_dir = dir
  local ok, result = pcall(f)
  T.config.debug_dir = saved
  local texts = {}
  for _, name in ipairs(SH.ls(dir)) do
    if name:match("%.graph%.txt$") then texts[#texts + 1] = SH.read(dir .. "/" .. name) end
  end
  SH.rm(dir)
  if not ok then error(result, 0) end
  return texts, result
end

-- A dump's optimised graph (nil when it has none).
function M.optimised(text) return text:match("%-%- optimised\n(.-)%-%- compile time") end

return M
