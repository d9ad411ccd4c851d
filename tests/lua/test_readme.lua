-- Every ```lua block of the README runs as written (issue 36): each in a fresh crescent process,
-- in a new directory, after `local T = require "crescent"` and the code of an HTML comment
-- `<!-- readme-test setup: CODE -->` on the line before it (the values a fragment assumes, such
-- as the user's checkpoint). `<!-- readme-test: skip -->` there marks a block not meant to run.
local SH = require "shell"

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local README = here .. "../../README.md"

-- { line =, code =, setup =, skip = } for each ```lua block.
local function blocks(text)
  local found, lines, i = {}, {}, 0
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  while i < #lines do
    i = i + 1
    if lines[i] == "```lua" then
      local before, body, first = lines[i - 1] or "", {}, i
      i = i + 1
      while lines[i] and lines[i] ~= "```" do body[#body + 1] = lines[i]; i = i + 1 end
      found[#found + 1] = { line = first, code = table.concat(body, "\n"), skip = before:find("<!-- readme-test: skip -->", 1, true),
                            setup = before:match("^<!%-%- readme%-test setup: (.*) %-%->$") }
    end
  end
  return found
end

describe("README.md", function()
  local list = blocks(SH.read(README))
  it("has Lua examples", function() expect.truthy(#list >= 5, "found " .. #list .. " ```lua blocks") end)
  for _, b in ipairs(list) do
    it(("runs the ```lua block of line %d"):format(b.line), function()
      if b.skip then expect.skip("marked readme-test: skip") end
      local bin = expect.need_bin()
      if bin:sub(1, 1) ~= "/" then bin = (SH.run("pwd"):gsub("%s+$", "")) .. "/" .. bin end  -- (it runs elsewhere)
      SH.with_dir(function(dir)
        SH.write(dir .. "/example.lua", 'local T = require "crescent"\n' .. (b.setup or "") .. "\n" .. b.code .. "\n")
        local out, status = SH.run(("cd %s && %s CRESCENT_HISTORY= %s example.lua"):format(SH.quote(dir),
          SH.child_env or "", SH.quote(bin)))
        if status ~= 0 then error(("README.md:%d: the block exits %d:\n%s"):format(b.line, status, out), 0) end
      end)
    end)
  end
end)
