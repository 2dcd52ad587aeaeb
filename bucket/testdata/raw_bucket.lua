-- raw_bucket.lua: the bare one-key token bucket that benchmarks compare
-- decide.lua against (the denominator of Redis CPU per decision): one
-- TIME, one HMGET, one HSET and a PEXPIRE, no multipliers, no locks.
-- KEYS[1] the bucket; ARGV[1] rate (tokens/s), ARGV[2] burst.
-- Returns 1 when a token was taken, 0 when the bucket is empty.
-- Used by BenchmarkRawEvalSha, BenchmarkRedisScriptCost and scripts/bench.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rate = tonumber(ARGV[1]) / 1000000
local burst = tonumber(ARGV[2])
local v = redis.call("HMGET", KEYS[1], "t", "l")
local tokens = burst
if v[1] then tokens = math.min(burst, tonumber(v[1]) + (now - tonumber(v[2])) * rate) end
local ok = 0
if tokens >= 1 then tokens = tokens - 1; ok = 1 end
redis.call("HSET", KEYS[1], "t", tostring(tokens), "l", tostring(now))
redis.call("PEXPIRE", KEYS[1], 60000)
return ok
