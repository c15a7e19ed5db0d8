-- paths.lua: kawipiko's "real" scenario (real10k). Usage:
--   wrk -s paths.lua URL -- LIST
-- LIST has one request path per line (filetree.RealFiles writes it: every
-- file of the tree once, in a fixed shuffled order). wrk's one thread walks
-- the list for all its connections, wrapping around, so the server sees
-- 10,000 different paths in no order it could predict. Every request is
-- formatted once, in init: per request wrk only picks the next one.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "report.lua")

local reqs, n, i = {}, 0, 0

init = function(args)
  for line in io.lines(args[1]) do
    n = n + 1
    reqs[n] = wrk.format("GET", line)
  end
  if n == 0 then
    error("paths.lua: no paths in " .. tostring(args[1]))
  end
end

request = function()
  i = i % n + 1
  return reqs[i]
end
