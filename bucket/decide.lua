-- decide.lua: one Tollgate decision, atomically, in one round trip.
--
-- KEYS: nl bucket keys, then ns multiplier hash keys, then nk lock keys,
-- then the trust set key of each lock flagged in ARGV.
-- ARGV[1] now in microseconds, or "0" for Redis TIME
-- ARGV[2] nl, ARGV[3] ns, ARGV[4] nk, ARGV[5] cost, ARGV[6] expiry slack in ms
-- ARGV[7] the request's device id ("" when none)
-- ARGV[8 .. 7+nk] per lock: "1" when a trust set key follows for it, else "0"
-- then per subject: static multiplier, unverified multiplier, cached ("" to read
--   the subject's hash, else "mult pen" known to the caller's L1 cache)
-- then per limit: burst, rate, period_us, shadow ("1"/"0"), nsub, nsub subject indexes (1-based)
--
-- Reply: {2, now, kind, until_us, rule, lock_index} when a lock is in force, else
-- {allowed, now, then per limit: ok, tokens, eff_burst, reset_us, retry_us,
--  then per subject: "mult pen" when read from its hash ("1" for neutral), else ""}.
--
-- Tokens are counted in micro-tokens (U = 10^6 per token), whole numbers
-- held exactly in Lua's doubles, stored as "tokens last_us" and returned as
-- integers: no fraction is ever formatted or parsed. Refill rounds down.
--
-- The arithmetic mirrors evaluate() in memory.go operation for operation;
-- change both or neither (the conformance tests compare them bit for bit).
local nl = tonumber(ARGV[2])
local ns = tonumber(ARGV[3])
local nk = tonumber(ARGV[4])
local cost = tonumber(ARGV[5])
local slack = tonumber(ARGV[6])
local now
if ARGV[1] == "0" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local fmt = string.format

-- A lock is "kind until_us flags rule"; flags "x" exempts the devices in
-- the lock's trust set (attested devices that logged in to the account).
local device = ARGV[7]
local tk = nl + ns + nk
for i = 1, nk do
  local tkey = nil
  if ARGV[7 + i] == "1" then
    tk = tk + 1
    tkey = KEYS[tk]
  end
  local v = redis.call("GET", KEYS[nl + ns + i])
  if v then
    local kind, us, flags, rule = string.match(v, "^(%S+) (%S+) (%S+) ?(.*)$")
    local u = tonumber(us)
    if u and u > now then
      local exempt = false
      if flags == "x" and tkey and device ~= "" then
        exempt = redis.call("SISMEMBER", tkey, device) == 1
      end
      if not exempt then
        return {2, now, kind, us, rule, i}
      end
    end
  end
end

local argi = 8 + nk
local mults = {}
local pens = {}
-- subject returns a subject's effective multiplier and when its lowest
-- penalty ends (0 when unknown or none), from its hash and the caller's
-- static and unverified multipliers.
local function subject(key, static, unverified)
  local lo = static
  local hi = static
  local attested = false
  local h = redis.call("HGETALL", key)
  local vals = {}
  local exps = {}
  for f = 2, #h, 2 do
    local vs, es = string.match(h[f], "^(%S+) (%S+)")
    local v = tonumber(vs)
    local e = tonumber(es)
    if v and e and v >= 0 and (e == 0 or e > now) then
      vals[#vals + 1] = v
      exps[#exps + 1] = e
      if v < lo then lo = v end
      if v > hi then hi = v end
      if h[f - 1] == "attestation" then attested = true end
    end
  end
  -- the unverified multiplier applies while no attestation is in force
  local floor = static
  if not attested then
    if unverified < lo then lo = unverified end
    if unverified > hi then hi = unverified end
    if unverified < floor then floor = unverified end
  end
  local pen = 0
  if lo < 1 then
    -- when the lowest penalty ends: the latest expiry among the entries at
    -- the lowest value; 0 (unknown) when one never ends or a caller-known
    -- multiplier (static, unverified) is the lowest
    if floor > lo then
      for k = 1, #vals do
        if vals[k] == lo then
          if exps[k] == 0 then pen = -1 elseif pen >= 0 and exps[k] > pen then pen = exps[k] end
        end
      end
    end
    if pen < 0 then pen = 0 end
    return lo, pen
  end
  return hi, 0
end

local fresh = {}
for j = 1, ns do
  local static = tonumber(ARGV[argi])
  local unverified = tonumber(ARGV[argi + 1])
  local cached = ARGV[argi + 2]
  argi = argi + 3
  if cached ~= "" then
    -- the caller's L1 cache already knows this subject's multiplier
    local ms, ps = string.match(cached, "^(%S+) (%S+)$")
    mults[j] = tonumber(ms)
    pens[j] = tonumber(ps)
  else
    fresh[j] = true
    mults[j], pens[j] = subject(KEYS[nl + j], static, unverified)
  end
end

local allowed = 1
local U = 1000000
cost = math.floor(cost * U)
local toks, lasts, effbs, pers, oks, retries = {}, {}, {}, {}, {}, {}
for i = 1, nl do
  local burst = tonumber(ARGV[argi])
  local rate = tonumber(ARGV[argi + 1])
  local period = tonumber(ARGV[argi + 2])
  local shadow = ARGV[argi + 3] == "1"
  local nsub = tonumber(ARGV[argi + 4])
  argi = argi + 5
  local m = 1
  local pend = 0
  local unknown = false
  for s = 1, nsub do
    local j = tonumber(ARGV[argi])
    argi = argi + 1
    m = m * mults[j]
    if mults[j] < 1 then
      if pens[j] == 0 then unknown = true elseif pens[j] > pend then pend = pens[j] end
    end
  end
  local effb = math.floor(burst * m * U)
  local per = rate * m * U / period
  local tokens = effb
  local last = now
  local v = redis.call("GET", KEYS[i])
  if v then
    local ts, ls = string.match(v, "^(%d+) (%d+)$")
    local t = tonumber(ts)
    local l = tonumber(ls)
    if t and l then
      local el = 0
      if l > now then last = l else el = now - l end
      tokens = t + math.floor(el * per)
      if tokens > effb then tokens = effb end
    end
  end
  local ok = tokens >= cost
  local retry = 0
  if not ok then
    if not shadow then allowed = 0 end
    if cost > effb then
      if pend > now and not unknown then retry = pend - now else retry = 3600000000 end
    else
      retry = math.ceil((cost - tokens) / per)
    end
  end
  toks[i] = tokens
  lasts[i] = last
  effbs[i] = effb
  pers[i] = per
  oks[i] = ok
  retries[i] = retry
end

local reply = {allowed, now}
for i = 1, nl do
  local tokens = toks[i]
  if allowed == 1 and oks[i] and cost > 0 then
    tokens = tokens - cost
    local ttl = math.ceil((effbs[i] - tokens) / pers[i] / 1000) + slack
    redis.call("SET", KEYS[i], fmt("%d %d", tokens, lasts[i]), "PX", ttl)
  end
  local reset = now
  if effbs[i] > tokens and pers[i] > 0 then
    reset = now + math.ceil((effbs[i] - tokens) / pers[i])
  end
  local ok = 0
  if oks[i] then ok = 1 end
  reply[#reply + 1] = ok
  reply[#reply + 1] = tokens
  reply[#reply + 1] = effbs[i]
  reply[#reply + 1] = reset
  reply[#reply + 1] = retries[i]
end
-- then, per subject read from its hash: "mult pen" for the caller's cache
for j = 1, ns do
  if fresh[j] and mults[j] == 1 and pens[j] == 0 then
    reply[#reply + 1] = "1" -- the common case, neutral: no formatting
  elseif fresh[j] then
    reply[#reply + 1] = fmt("%.17g %.17g", mults[j], pens[j])
  else
    reply[#reply + 1] = ""
  end
end
return reply
