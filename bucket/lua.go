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
