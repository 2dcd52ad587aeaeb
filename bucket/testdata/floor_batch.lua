-- floor_batch.lua: the least a batch of decide.lua's decisions can ask of
-- Redis, for BenchmarkRedisScriptCost's floor (a denominator, never a
-- store). It takes decide.lua's keys and arguments unchanged (for
-- decisions of token buckets with no lock and no own bucket, whose keys
-- past the buckets are multiplier hashes), sends the same commands (one
-- MGET of the buckets, one EXISTS of the hashes, TIME, a SET ... PX per
-- bucket written) and answers each decision as decide.lua's reply begins
-- (allowed, now, each bucket's tokens; not the subjects' multipliers), and
-- does only a token bucket's arithmetic: no multiplier applied, no lock,
-- no shadow limit, no quota, concurrency or own bucket, no error of one
-- decision kept from the others. What decide.lua costs beyond it is the
-- price of those.
local n = tonumber(ARGV[1])
local rcall, unpack = redis.call, unpack
local pack, sunpack = struct.pack, struct.unpack
local floor, ceil = math.floor, math.ceil
local U = 1000000
local fmts = {} -- struct formats by value count
local function fmt(n)
  local f = fmts[n]
  if not f then
    f = "<" .. string.rep("d", n)
    fmts[n] = f
  end
  return f
end

local as, kbs, vals = {}, {}, {}
local rk, nrk, mk, nmk = {}, 0, {}, 0
local kb = 0
for d = 1, n do
  local blob = ARGV[2 * d]
  local a = {sunpack(fmt(#blob / 8), blob)}
  as[d], kbs[d] = a, kb
  local nl = a[3]
  for i = 1, nl do
    local key = KEYS[kb + i]
    if vals[key] == nil then
      vals[key] = false
      nrk = nrk + 1
      rk[nrk] = key
    end
  end
  for i = nl + 1, a[1] do
    nmk = nmk + 1
    mk[nmk] = KEYS[kb + i]
  end
  kb = kb + a[1]
end
local got = rcall("MGET", unpack(rk, 1, nrk))
for k = 1, nrk do vals[rk[k]] = got[k] end
if nmk > 0 then rcall("EXISTS", unpack(mk, 1, nmk)) end
local t = rcall("TIME")
local clock = tonumber(t[1]) * 1000000 + tonumber(t[2])

local wtok, wlast, wttl, wkey, nw = {}, {}, {}, {}, 0
local tk, eb, pr, reply = {}, {}, {}, {}
local out = {}
for d = 1, n do
  local a, kb = as[d], kbs[d]
  local nl, cost, slack = a[3], floor(a[6] * U), a[7]
  local now = clock
  if a[2] ~= 0 then now = a[2] end -- the caller's time, when it sends one
  local argi = 8 + a[5] + 5 * a[4] -- the limits' numbers
  local allowed = 1
  for i = 1, nl do
    local effb = floor(a[argi] * U)
    local per = a[argi + 1] * U / a[argi + 2]
    argi = argi + 5 + a[argi + 4]
    local key = KEYS[kb + i]
    local tokens, tt, l = effb, wtok[key], wlast[key]
    if not tt then
      local v = vals[key]
      if v then tt, l = sunpack("<dd", v) end
    end
    if tt then
      tokens = tt + floor((now - l) * per)
      if tokens > effb then tokens = effb end
    end
    tk[i], eb[i], pr[i] = tokens, effb, per
    if tokens < cost then allowed = 0 end
  end
  reply[1], reply[2] = allowed, now
  for i = 1, nl do
    local tokens = tk[i]
    if allowed == 1 then
      tokens = tokens - cost
      local key = KEYS[kb + i]
      if not wtok[key] then
        nw = nw + 1
        wkey[nw] = key
      end
      wtok[key], wlast[key] = tokens, now
      wttl[key] = ceil((eb[i] - tokens) / pr[i] / 1000) + slack
    end
    if tk[i] >= cost then reply[i + 2] = tokens else reply[i + 2] = -1 - tokens end
  end
  out[d] = pack(fmt(nl + 2), unpack(reply, 1, nl + 2))
end
local ttls = {} -- each expiry formatted once
for w = 1, nw do
  local key = wkey[w]
  local ttl = wttl[key]
  local ts = ttls[ttl]
  if not ts then
    ts = string.format("%d", ttl)
    ttls[ttl] = ts
  end
  rcall("SET", key, pack("<dd", wtok[key], wlast[key]), "PX", ts)
end
return out
