package attestation

import "github.com/redis/go-redis/v9"

// advanceScript stores a device's status after a verified assertion only
// when the stored status is for the same key and its counter is lower: a
// compare-and-set, so two assertions with one counter cannot both pass.
// KEYS[1] the status key; ARGV[1] key id; ARGV[2] new counter; ARGV[3] the
// new status JSON; ARGV[4] its time to live in milliseconds.
// Reply {code, last counter}: 1 stored; -1 counter not greater; -2 no
// status or another key; -3 the stored status is not valid JSON.
var advanceScript = redis.NewScript(`
local cur = redis.call("GET", KEYS[1])
if not cur then
  return {-2, 0}
end
local ok, s = pcall(cjson.decode, cur)
if not ok or type(s) ~= "table" then
  return {-3, 0}
end
if s["key_id"] ~= ARGV[1] then
  return {-2, 0}
end
local last = tonumber(s["counter"]) or 0
if last >= tonumber(ARGV[2]) then
  return {-1, last}
end
redis.call("SET", KEYS[1], ARGV[3], "PX", ARGV[4])
return {1, last}
`)
