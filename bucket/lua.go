package bucket

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed decide.lua
var decideSource string

// decideScript evaluates one decision; see decide.lua for its arguments.
var decideScript = redis.NewScript(decideSource)

// summarizeLua ends the scripts that change a subject's multiplier hash
// (KEYS[1]): it drops the hash's expired and malformed entries, keeps its
// expiry at its last entry's, and rewrites the summary decide.lua reads
// (KEYS[2]: the entries in force, "attestation" and unreadable values
// left out, as little-endian float64 pairs value, expires_us) with the
// same expiry, or deletes it with the hash: a summary exists exactly when
// its hash does.
const summarizeLua = `
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local h = redis.call("HGETALL", KEYS[1])
local last = 0
local never = false
local kept = 0
local parts = {}
for f = 2, #h, 2 do
  local vs, es = string.match(h[f], "^(%S+) (%S+)")
  local v, e = tonumber(vs), tonumber(es)
  if e == nil or (e ~= 0 and e <= now) then
    redis.call("HDEL", KEYS[1], h[f - 1])
  else
    kept = kept + 1
    if e == 0 then never = true elseif e > last then last = e end
    if v and v >= 0 and h[f - 1] ~= "attestation" then
      parts[#parts + 1] = struct.pack("<dd", v, e)
    end
  end
end
if kept == 0 then -- the last field went, and the hash with it
  redis.call("DEL", KEYS[2])
  return 1
end
redis.call("SET", KEYS[2], table.concat(parts))
if never then
  redis.call("PERSIST", KEYS[1])
else
  redis.call("PEXPIREAT", KEYS[1], math.ceil(last / 1000))
  redis.call("PEXPIREAT", KEYS[2], math.ceil(last / 1000))
end
return 1
`

// setMultiplierScript sets one source's multiplier on a subject hash and
// summarizes it (summarizeLua). KEYS[1] hash, KEYS[2] its summary;
// ARGV[1] source; ARGV[2] "value expires_us reason".
var setMultiplierScript = redis.NewScript(`redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])` + summarizeLua)

// clearMultiplierScript removes one source's multiplier from a subject
// hash and summarizes it (summarizeLua). KEYS[1] hash, KEYS[2] its
// summary; ARGV[1] source.
var clearMultiplierScript = redis.NewScript(`redis.call("HDEL", KEYS[1], ARGV[1])` + summarizeLua)

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

// setLockScript writes the lock ARGV[1] at KEYS[1], expiring at ARGV[2]
// (Unix ms, PXAT), and returns the value it replaced (nil for none).
var setLockScript = redis.NewScript(`
local prev = redis.call("GET", KEYS[1])
redis.call("SET", KEYS[1], ARGV[1], "PXAT", ARGV[2])
return prev
`)

// setRuleLockScript writes the lock ARGV[1] at a rule's own lock key
// KEYS[1], expiring at ARGV[2] (Unix ms, PXAT), adds the rule ARGV[3] to
// the subject's set of such rules KEYS[2] (same slot) and keeps the set
// alive until its latest lock's end; it returns the value it replaced.
var setRuleLockScript = redis.NewScript(`
local prev = redis.call("GET", KEYS[1])
redis.call("SET", KEYS[1], ARGV[1], "PXAT", ARGV[2])
redis.call("SADD", KEYS[2], ARGV[3])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = redis.call("PTTL", KEYS[2])
if ttl < 0 or now + ttl < tonumber(ARGV[2]) then
  redis.call("PEXPIREAT", KEYS[2], ARGV[2])
end
return prev
`)

// getLocksScript returns {TIME seconds, TIME µs, the value at each of
// the first ARGV[2] KEYS (lock strings; false for none)}; ARGV[1] "1"
// also deletes every key (the lock keys and, after them, their rule set).
var getLocksScript = redis.NewScript(`
local t = redis.call("TIME")
local out = {t[1], t[2]}
for i = 1, tonumber(ARGV[2]) do
  out[i + 2] = redis.call("GET", KEYS[i])
end
if ARGV[1] == "1" then redis.call("DEL", unpack(KEYS)) end
return out
`)

// multipliersScript returns {TIME seconds, TIME µs, HGETALL of KEYS[1]}.
var multipliersScript = redis.NewScript(`
local t = redis.call("TIME")
return {t[1], t[2], redis.call("HGETALL", KEYS[1])}
`)

// indexScript records ARGV[1] in the listing index KEYS[1], scored by TIME
// in ms, and keeps the newest ARGV[2] members. With ARGV[3] "nx" it only
// adds a missing member (a re-assertion keeps its place in listings).
var indexScript = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == "nx" then
  if redis.call("ZADD", KEYS[1], "NX", now, ARGV[1]) == 0 then return 0 end
else
  redis.call("ZADD", KEYS[1], now, ARGV[1])
end
redis.call("ZREMRANGEBYRANK", KEYS[1], 0, -tonumber(ARGV[2]) - 1)
return 1
`)

// pruneScript removes from the listing index KEYS[1] the members a
// listing found out of force (ARGV pairs from ARGV[2]: member, the score
// it read), each only if its score is unchanged (no write listed it
// again since the read) and older than ARGV[1] ms by TIME (a grace for
// writes in flight). It returns how many it removed.
var pruneScript = redis.NewScript(`
local t = redis.call("TIME")
local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV - 1, 2 do
  local seen = tonumber(ARGV[i + 1])
  local score = redis.call("ZSCORE", KEYS[1], ARGV[i])
  if score and tonumber(score) == seen and seen <= cutoff then
    redis.call("ZREM", KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
`)
