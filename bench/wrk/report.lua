-- report.lua: prints wrk's figures as one machine-readable line for bench/run.
--
-- The line starts with "BENCH_JSON " and holds the summary (requests,
-- duration, errors by kind) and wrk's latency figures in microseconds.
--
-- wrk records one latency sample per write: from the write to the last
-- response it asked for. Before done() runs, wrk 4 "corrects" its histogram
-- for coordinated omission, adding phantom samples at n-e, n-2e, ... for each
-- sample n >= 2e, where e = duration / (requests / connections). Without
-- pipelining e is about the mean latency and only the tail gets phantoms, so
-- the percentiles are the ones wrk prints and everyone quotes. With pipelining
-- e is DEPTH times too small, the phantoms fall below the recorded minimum,
-- which percentile() starts from, and it returns 0 for p90 and p99 (Haywire's
-- README shows the same "99% 0.00us"). bench/run therefore reports no
-- percentiles for pipelined runs. Debian's wrk does not expose the histogram
-- buckets to Lua (latency[i] returns i), so the correction cannot be undone
-- here.

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,' ..
    '"lat_min_us":%d,"lat_mean_us":%.1f,"lat_max_us":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.max,
    latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
