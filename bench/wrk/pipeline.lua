-- pipeline.lua: sends DEPTH pipelined GETs per write, like Haywire's
-- pipelined_get.lua. Usage: wrk -s pipeline.lua URL -- DEPTH
-- Each GET asks for the URL's path (wrk.path: "/" for the hello scenarios,
-- "/17.txt" for fpipe16) with wrk's Host and any -H headers.
-- wrk counts each pipelined response as one request.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "report.lua")

init = function(args)
  local depth = tonumber(args[1]) or 1
  local r = {}
  for i = 1, depth do
    r[i] = wrk.format("GET", wrk.path)
  end
  req = table.concat(r)
end

request = function()
  return req
end
