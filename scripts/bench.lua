-- scripts/bench.lua: wrk script for scripts/bench, the load benchmark of POST /v1/check.
--
-- Usage: wrk -s scripts/bench.lua http://127.0.0.1:8080/v1/check [-- MODE [POOL]]
--   MODE  "spread" (default): each request picks one of POOL distinct (ip, user, device)
--                             triples at random (POOL defaults to 10000).
--         "hot":              every request carries the same single key.
--   Without script args, MODE and POOL come from the env vars BENCH_KEYS and BENCH_POOL.
--
-- Every request body looks like
--   {"endpoint":"POST /bench","ip":"10.0.39.16","user_id":"u_10000","device_id":"d_10000","cost":1}
-- The IPs are only values in the JSON body (keys for the limiter's buckets); no traffic goes
-- to them. All requests are formatted once, in init(), so request() only picks one and the
-- cost of building bodies stays out of the measurement.
--
-- Pacing: with BENCH_RATE (requests per second, all connections together) and BENCH_CONNS (the
-- connection count given to wrk) set, each connection waits about BENCH_CONNS / BENCH_RATE s
-- after each answer before its next request (wrk's delay(), in whole milliseconds: the two
-- nearest are drawn so that their mean is the interval). scripts/bench uses it to run the no-op
-- handler at the limiter's own rate; the achieved rate is a little lower (the answer's own time
-- adds to the wait) and is what gets reported.
--
-- When the run ends, done() prints one machine-readable line for scripts/bench:
--   BENCH_RESULT requests=N duration_us=N rps=X p50_us=X p99_us=X non2xx=N connect_err=N ...
-- (non2xx counts responses with a status of 400 or more, like wrk's "Non-2xx or 3xx responses").

local counter = 0

-- setup runs once per thread, in the main Lua state, before the thread starts.
function setup(thread)
  counter = counter + 1
  thread:set("thread_id", counter)
end

local requests, nrequests

-- BENCH_BODY=envoy writes the same decision as envoyproxy/ratelimit's POST /json takes it
-- (scripts/bench-peers): domain bench, the four descriptors benchgrpc sends over gRPC.
-- BENCH_BODY=gubernator writes it as gubernator's POST /v1/GetRateLimits takes it: the four
-- limits as token buckets of bench-policy.yaml's rates (benchgrpc's gubernator path sends the same).
local envoy = os.getenv("BENCH_BODY") == "envoy"
local gubernator = os.getenv("BENCH_BODY") == "gubernator"

local function body(ip, user, device)
  if gubernator then
    local function req(name, key, limit)
      return string.format('{"name":"%s","unique_key":"%s","hits":1,"limit":%d,"duration":1000,"burst":%d}',
        name, key, limit, limit)
    end
    return '{"requests":[' .. req("ip", ip, 100000) .. ',' .. req("route", "POST /bench", 10000000) .. ','
      .. req("user", user, 100000) .. ',' .. req("device", device, 100000) .. ']}'
  end
  if envoy then
    return string.format(
      '{"domain":"bench","descriptors":[{"entries":[{"key":"remote_address","value":"%s"}]},'
        .. '{"entries":[{"key":"method","value":"POST"},{"key":"path","value":"/bench"}]},'
        .. '{"entries":[{"key":"user_id","value":"%s"}]},{"entries":[{"key":"device_id","value":"%s"}]}]}',
      ip, user, device)
  end
  return string.format(
    '{"endpoint":"POST /bench","ip":"%s","user_id":"%s","device_id":"%s","cost":1}',
    ip, user, device)
end

local function format(b)
  -- wrk.format adds Host and Content-Length; nil path means the path of the URL.
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, b)
end

-- init runs in each thread's own Lua state.
function init(args)
  local mode = args[1] or os.getenv("BENCH_KEYS") or "spread"
  local pool = tonumber(args[2] or os.getenv("BENCH_POOL") or "") or 10000
  requests = {}
  if mode == "hot" then
    requests[1] = format(body("10.255.255.1", "u_hot", "d_hot"))
  elseif mode == "spread" then
    if pool < 1 or pool > 16777216 then
      error("bench.lua: POOL must be between 1 and 16777216, got " .. tostring(pool))
    end
    for i = 1, pool do
      -- 10.x.y.z with x.y.z the 24 bits of i: distinct for every i in the pool.
      local ip = string.format("10.%d.%d.%d",
        math.floor(i / 65536) % 256, math.floor(i / 256) % 256, i % 256)
      requests[i] = format(body(ip, "u_" .. i, "d_" .. i))
    end
  else
    error("bench.lua: unknown mode '" .. tostring(mode) .. "' (want spread or hot)")
  end
  nrequests = #requests
  -- A different sequence in each thread (thread_id is set by setup).
  math.randomseed(os.time() * 1000 + (thread_id or 0) * 7919)
  for _ = 1, 10 do math.random() end
end

local rate, conns = tonumber(os.getenv("BENCH_RATE") or ""), tonumber(os.getenv("BENCH_CONNS") or "")
if rate and conns and rate > 0 and conns > 0 then
  local interval = conns / rate * 1000 -- ms between one connection's requests
  local lo = math.floor(interval)
  local frac = interval - lo
  function delay()
    if math.random() < frac then return lo + 1 end
    return lo
  end
end

function request()
  if nrequests == 1 then
    return requests[1]
  end
  return requests[math.random(nrequests)]
end

function done(summary, latency, _)
  local secs = summary.duration / 1e6
  local rps = 0
  if secs > 0 then rps = summary.requests / secs end
  io.write(string.format(
    "BENCH_RESULT requests=%d duration_us=%d rps=%.2f p50_us=%.1f p99_us=%.1f non2xx=%d "
      .. "connect_err=%d read_err=%d write_err=%d timeout_err=%d\n",
    summary.requests, summary.duration, rps,
    latency:percentile(50), latency:percentile(99), summary.errors.status,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout))
end
