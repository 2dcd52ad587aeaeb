package bucket

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed decide.lua
var decideSource string

// decideScript evaluates one decision; see decide.lua for its arguments.
var decideScript = redis.NewScript(decideSource)

// setMultiplierScript sets one source's multiplier on a subject hash, drops
// expired entries and keeps the hash's expiry at its last entry's.
// KEYS[1] hash; ARGV[1] source; ARGV[2] "value expires_us reason".
var setMultiplierScript = redis.NewScript(`
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local h = redis.call("HGETALL", KEYS[1])
local last = 0
local never = false
for f = 2, #h, 2 do
  local e = tonumber(string.match(h[f], "^%S+ (%S+)"))
  if e == nil then
    redis.call("HDEL", KEYS[1], h[f - 1])
  elseif e == 0 then
    never = true
  elseif e <= now then
    redis.call("HDEL", KEYS[1], h[f - 1])
  elseif e > last then
    last = e
  end
end
if never then
  redis.call("PERSIST", KEYS[1])
elseif last > 0 then
  redis.call("PEXPIREAT", KEYS[1], math.ceil(last / 1000))
end
return 1
`)

// Scripts of the admin and Cluster paths. Each reads Redis's TIME on the
// node that holds its key, so an expiry is judged by the clock decide.lua
// uses, never by the host's.

// timeScript returns TIME ({seconds, microseconds}) from the node of KEYS[1].
var timeScript = redis.NewScript(`
local t = redis.call("TIME")
return {t[1], t[2]}
`)

// getLockScript returns {TIME seconds, TIME µs, the lock value or nil};
// ARGV[1] "1" also deletes the lock. KEYS[1] lock.
var getLockScript = redis.NewScript(`
local v = redis.call("GET", KEYS[1])
local t = redis.call("TIME")
if ARGV[1] == "1" and v then redis.call("DEL", KEYS[1]) end
return {t[1], t[2], v}
`)

// multipliersScript returns {TIME seconds, TIME µs, HGETALL of KEYS[1]}.
var multipliersScript = redis.NewScript(`
local t = redis.call("TIME")
return {t[1], t[2], redis.call("HGETALL", KEYS[1])}
`)

// indexScript records ARGV[1] in the listing index KEYS[1], scored by TIME
// in ms, and keeps the newest ARGV[2] members.
var indexScript = redis.NewScript(`
local t = redis.call("TIME")
redis.call("ZADD", KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[1])
redis.call("ZREMRANGEBYRANK", KEYS[1], 0, -tonumber(ARGV[2]) - 1)
return 1
`)
