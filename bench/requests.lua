-- wrk script of lectern-bench (bench/src/load.rs embeds it).
--
-- The file named after `--` holds one request per line, "<API key>\t<path and query>";
-- each request picks a line at random, so a file with one line per workspace spreads
-- the load over random workspaces, each with its own key. At the end, one line
-- "LECTERN_BENCH {json}" reports the totals and percentiles (microseconds).

local keys, paths = {}, {}
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("thread_number", threads)
end

function init(args)
  for line in io.lines(args[1]) do
    local key, path = line:match("^([^\t]*)\t(.+)$")
    if key then
      keys[#keys + 1] = key
      paths[#paths + 1] = path
    end
  end
  math.randomseed(os.time() * 7919 + thread_number)
end

function request()
  local i = math.random(#paths)
  return wrk.format("GET", paths[i], { ["X-API-Key"] = keys[i] })
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    'LECTERN_BENCH {"requests":%d,"duration_us":%d,"mean_us":%d,"p50_us":%d,"p99_us":%d,"max_us":%d,'
      .. '"non_2xx":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d}\n',
    summary.requests, summary.duration, latency.mean, latency:percentile(50), latency:percentile(99), latency.max,
    errors.status, errors.connect, errors.read, errors.write, errors.timeout))
end
