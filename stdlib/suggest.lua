-- crescent.suggest: "did you mean" for a misspelt name - the known names nearest to it.
local M = {}

-- Edits (insert, delete, replace, swap of neighbours) from a to b, or more than `limit`.
local function distance(a, b, limit)
  if math.abs(#a - #b) > limit then return limit + 1 end
  local prev2, prev, cur = {}, {}, {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    cur = { [0] = i }
    local best = i
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      local d = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then d = math.min(d, prev2[j - 2] + 1) end
      cur[j] = d
      best = math.min(best, d)
    end
    if best > limit then return limit + 1 end
    prev2, prev = prev, cur
  end
  return prev[#b]
end

-- The names (keys of the tables given) within a third of `name`'s length in edits (at least
-- one), or equal but for case; the nearest first, at most three.
function M.near(name, ...)
  local limit, found, lower = math.max(1, math.floor(#name / 3)), {}, name:lower()
  for i = 1, select("#", ...) do
    for k in pairs((select(i, ...))) do
      if type(k) == "string" and k ~= name and k:sub(1, 1) ~= "_" then
        local d = k:lower() == lower and 0 or distance(name, k, limit)
        if d <= limit then found[#found + 1] = { k, d } end
      end
    end
  end
  table.sort(found, function(a, b) return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1]) end)
  local names = {}
  for i = 1, math.min(3, #found) do names[i] = found[i][1] end
  return names
end

-- " (did you mean x?)", " (did you mean x or y?)", ... or "" when nothing is near.
function M.hint(name, ...)
  local names = M.near(name, ...)
  if #names == 0 then return "" end
  local last = table.remove(names)
  return " (did you mean " .. (#names > 0 and table.concat(names, ", ") .. " or " or "") .. last .. "?)"
end

return M
