-- decide.lua: a batch of Tollgate decisions, each atomic, in one round trip.
--
-- One EVALSHA carries n decisions (concurrent requests batched by the
-- caller's lanes; n is 1 on Redis Cluster, where one script's keys share a
-- slot). They run one after another inside the script, so each is atomic and
-- all-or-nothing, and Redis pays the script call, TIME and the reply once
-- per batch rather than once per decision.
--
-- ARGV[1] n, the number of decisions. KEYS and the rest of ARGV hold the
-- decisions one after another, two ARGV each: the decision's numbers as
-- one string of little-endian float64s (read with one struct.unpack: no
-- per-number ARGV or tonumber), then the request's device id ("" when
-- none). The numbers:
--   nkeys (the decision's key count), now in microseconds (0 for Redis
--   TIME, read once per batch), nl, ns, nk, cost, expiry slack in ms,
--   per lock: 1 when a trust set key follows for it, else 0,
--   per subject: static multiplier, unverified multiplier, cached (0 to
--     read the subject's hash, 1 when the caller's L1 cache knows it), mult,
--     pen (what the cache knows; 0 0 when not cached)
--   then per limit: burst, rate, period_us, flags (shadow 1/0, plus 2
--     times the kind: 0 bucket, 1 quota, 2 concurrency; see "Quotas and
--     concurrency" below for what rate and period_us hold then), nsub,
--     nsub subject indexes (1-based)
--   then, when a limit is a concurrency limit, the lease: two 48-bit
--     integers (just before the own section)
--   then the indexes (1-based) of the no limits with a device bucket of
--     their own, and last no itself (0 when none): always the last numbers
-- and its keys: nl bucket keys, then the multiplier hash keys of the
-- subjects not cached, in order, then nk lock keys, then the trust set key
-- of each lock flagged 1, then (when no > 0) the no own buckets and the
-- trust set that decides whether they are used (see ownKeys).
--
-- Reply: one entry per decision, in order:
-- {3, message} when it failed (a key holding the wrong type), else
-- {2, now, kind, until_us, rule, lock_index} when a lock is in force, else
-- a string of little-endian float64s: allowed, now, then per limit its
--  tokens t (what is left after the decision), sent as t when the limit
--  allowed and as -1 - t when not (t is never below 0), followed for a
--  quota or concurrency limit by eff_burst, reset_us and retry_us; then
--  per subject read from its hash (not cached) its mult and pen; then,
--  when no > 0, 1 if the device was trusted (it took from its own
--  buckets), else 0. A bucket's eff_burst, reset and retry follow from its
--  tokens, the limit's numbers and its subjects' multipliers, which the
--  caller has: it computes them (parsePacked in redis.go), so the script
--  neither computes nor packs them.
--
-- Tokens are counted in micro-tokens (U = 10^6 per token), whole numbers
-- held exactly in Lua's doubles, stored as tokens and last_us packed as
-- two little-endian float64s (16 bytes; the text "tokens last_us" of
-- earlier builds is still read) and returned as integers: no number is
-- ever formatted or parsed. Refill rounds down.
-- Locks and buckets are read with one MGET per batch, before the first
-- decision (the script writes no lock, and no bucket before the batch's
-- end, so each decision sees what a read of its own would have seen), each
-- key once however many decisions name it. A bucket that a
-- decision of the batch has written is not read or written again: later
-- decisions of the batch take its state from the batch's own table, and
-- each bucket written is SET once, after the last decision (a hot bucket,
-- such as a route's or a global limit's, costs one read and one write per
-- batch instead of one per decision). Decisions still run one after
-- another on the state the ones before them left: the same answers as
-- one script per decision.
--
-- Multiplier hashes: one EXISTS over all the batch's hashes comes first,
-- and when it finds none no decision reads them (most subjects have no
-- multiplier in force; an absent hash reads as empty). When it finds
-- some, one MGET reads their summaries (see below) and no HGETALL runs,
-- unless a hash without a summary is among them.
--
-- The arithmetic mirrors evaluate() in memory.go operation for operation;
-- change both or neither (the conformance tests compare them bit for bit).
-- Globals and library functions used per decision, as locals: a global is
-- a table lookup at every use in Lua 5.1, a local is a register.
local KEYS, ARGV = KEYS, ARGV
local rcall = redis.call
local match = string.match
local floor, ceil, mmin = math.floor, math.ceil, math.min
local pack, sunpack = struct.pack, struct.unpack
local unpack, tonumber, tostring, pcall, type = unpack, tonumber, tostring, pcall, type
local U = 1000000
local clock = nil
local nomult = false -- true when the batch's multiplier hashes are all absent
local packfmts = {} -- struct formats by value count, built once per batch

-- Multiplier summaries: beside each subject's hash (KEYS "...:m") its
-- writers keep a string "...:ms" holding the hash's entries in force as
-- little-endian float64 pairs (value, expires_us; 0 never), "attestation"
-- and malformed entries left out: what subject() would take from the
-- hash, read with the batch's one MGET instead of an HGETALL per subject.
-- The two are written by one script and expire together, so a summary
-- exists exactly when its hash does; a hash without one (written by a
-- build before summaries) is read as before.
local sums = nil -- by hash key: its summary, or false; nil: not read
local legacy = false -- some hash of the batch has no summary
-- Entries of the subject being evaluated (reused: see st below).
local evs, ees = {}, {}

-- entries fills evs and ees with the multiplier entries of the subject
-- whose hash is key and returns their count.
local function entries(key)
  local s = nil
  if sums then s = sums[key] end
  if s then
    local n = #s / 16
    if n == 0 then return 0 end
    if n == 1 then
      evs[1], ees[1] = sunpack("<dd", s)
      return 1
    end
    local f = packfmts[2 * n]
    if not f then
      f = "<" .. string.rep("d", 2 * n)
      packfmts[2 * n] = f
    end
    local d = {sunpack(f, s)}
    for k = 1, n do
      evs[k] = d[2 * k - 1]
      ees[k] = d[2 * k]
    end
    return n
  end
  if sums and not legacy then return 0 end -- no summary, so no hash
  local h = rcall("HGETALL", key)
  local n = 0
  for f = 2, #h, 2 do
    local vs, es = match(h[f], "^(%S+) (%S+)")
    local v = tonumber(vs)
    local e = tonumber(es)
    -- "attestation" entries (written by the first edition) are ignored:
    -- the caller proves attestation per request (device tokens) and
    -- passes it in static and unverified
    if v and e and v >= 0 and h[f - 1] ~= "attestation" then
      n = n + 1
      evs[n] = v
      ees[n] = e
    end
  end
  return n
end

-- subject returns a subject's effective multiplier and when its lowest
-- penalty ends (0 when unknown or none), from its stored entries and the
-- caller's static and unverified multipliers.
local function subject(key, static, unverified, now)
  local lo = static
  local hi = static
  local n = 0
  if not nomult then n = entries(key) end
  if unverified < lo then lo = unverified end
  if unverified > hi then hi = unverified end
  if n == 0 then
    -- no stored multiplier: the common case
    if lo < 1 then return lo, 0 end
    return hi, 0
  end
  local known = lo -- the lowest caller-known multiplier
  local live = false -- an entry in force
  for k = 1, n do
    local v, e = evs[k], ees[k]
    if e == 0 or e > now then
      live = true
      if v < lo then lo = v end
      if v > hi then hi = v end
    end
  end
  local pen = 0
  if lo < 1 then
    -- when the lowest penalty ends: the latest expiry among the entries at
    -- the lowest value; 0 (unknown) when one never ends or a caller-known
    -- multiplier (static, unverified) is the lowest
    if live and known > lo then
      for k = 1, n do
        local v, e = evs[k], ees[k]
        if v == lo and (e == 0 or e > now) then
          if e == 0 then pen = -1 elseif pen >= 0 and e > pen then pen = e end
        end
      end
    end
    if pen < 0 then pen = 0 end
    return lo, pen
  end
  return hi, 0
end

-- The batch's written buckets: widx maps a key to its slot w, numbered in
-- the order first written (nw of them); wkey[w], wtok[w], wlast[w] and
-- wttl[w] hold the key, the tokens, last_us and the expiry (ms) of its
-- latest state: one hash entry per key, the rest array slots.
local widx, nw = {}, 0
local wkey, wtok, wlast, wttl = {}, {}, {}, {}

-- slot returns key's slot among the written buckets, making one.
local function slot(key)
  local w = widx[key]
  if not w then
    nw = nw + 1
    w = nw
    widx[key] = w
    wkey[w] = key
  end
  return w
end

-- What the batch's one MGET read, by key (false: no such string key).
local vals = {}
-- Space every decision of the batch reuses, overwritten in place (a
-- table costs Redis an allocation and its growth): per subject its
-- multiplier, penalty end and whether it was read; per limit i, at
-- 6i-5 .. 6i, tokens, last, effb, per, ok and (a quota's or a
-- concurrency limit's) retry; the reply's numbers.
local mults, pens, fresh, st, reply = {}, {}, {}, {}, {}
local skeys = {} -- per limit, the key of the bucket it takes from

-- isTrusted reports whether device is among the trusted devices at key at
-- now (µs): a sorted set scored by each device's end in µs, so each
-- device's trust ends on its own. A plain set (written before devices had
-- their own ends, read during an upgrade until the next enrolment turns
-- it into a sorted set) trusts its members while it lives.
local function isTrusted(key, device, now)
  local s = redis.pcall("ZSCORE", key, device)
  if type(s) == "table" and s.err then return rcall("SISMEMBER", key, device) == 1 end
  return s ~= false and tonumber(s) > now
end

-- trusted_devices: own (7.1). A limit takes from its key, KEYS[kb + i],
-- unless the decision's device is in the trust set of the own section: a
-- trusted device of the request's account then takes from its own bucket
-- (the limit's key plus the device), a budget an attacker cannot spend.
-- ownKeys returns 1 when the device is trusted, and then lkeys[i] is the
-- bucket limit i takes from, for every limit; 0 when it is not, nil when
-- the decision has no own section (lkeys is left as it was).
local lkeys = {}
local function ownKeys(kb, a, device, now)
  local nv = #a - 1 -- struct.unpack's last value is its next position
  local no = a[nv]
  if no == 0 then return nil end
  local ob = kb + a[1] - no - 1 -- the own buckets follow KEYS[ob]
  if device == "" or not isTrusted(KEYS[ob + no + 1], device, now) then return 0 end
  for i = 1, a[3] do lkeys[i] = KEYS[kb + i] end
  for k = 1, no do lkeys[a[nv - no + k - 1]] = KEYS[ob + k] end
  return 1
end

-- Quotas and concurrency (beside the buckets, a limit may be one of these).
--
-- A quota (kind 1) counts in UTC calendar periods: rate holds the period
-- (1 day, 2 week starting Monday, 3 month), period_us 0. Its key holds
-- the micro-units used and the period's start in µs, packed as a bucket's
-- state is (read and written by the batch as buckets are), expiring
-- slack after the period's end; a count of an earlier period is 0.
-- tokens is what is left (never below 0), reset the next period's start.
--
-- A concurrency limit (kind 2) admits burst * multiplier (rounded down)
-- requests in flight: its key is a sorted set of lease ids scored by
-- their expiry in µs (rate 0, period_us the lease's TTL). A decision that
-- takes (cost > 0) adds its lease, the decision's two last numbers, to
-- every concurrency limit's set; the caller's release removes it, and an
-- expired lease no longer counts. The set's key lives until its latest
-- lease expires (plus the slack), whatever TTL the newest one had. tokens counts free slots in micro-units
-- (U per slot), reset is when the earliest lease in force expires (now
-- when none).
local kinds, xused, xreset, xend = {}, {}, {}, {}

-- calendar returns the start and the end (the next period's start) in µs
-- of the UTC period (1 day, 2 week, 3 month) holding now (µs).
local function calendar(unit, now)
  local day = floor(now / 86400000000)
  local s, e
  if unit == 1 then
    s, e = day, day + 1
  elseif unit == 2 then
    s = day - (day + 3) % 7 -- 1970-01-01 was a Thursday
    e = s + 7
  else
    -- the month of day (H. Hinnant's civil_from_days)
    local z = day + 719468
    local era = floor(z / 146097)
    local doe = z - era * 146097
    local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
    local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
    local mp = floor((5 * doy + 2) / 153)
    local d = doy - floor((153 * mp + 2) / 5) + 1
    local y, mo = yoe + era * 400, mp + 3
    if mo > 12 then
      y, mo = y + 1, mo - 12
    end
    local len = 31
    if mo == 2 then
      len = 28
      if y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0) then len = 29 end
    elseif mo == 4 or mo == 6 or mo == 9 or mo == 11 then
      len = 30
    end
    s = day - d + 1
    e = s + len
  end
  return s * 86400000000, e * 86400000000
end

-- fmtus formats a µs time for a command (a Lua number would go with 14
-- significant digits).
local function fmtus(us) return string.format("%.0f", us) end

-- special evaluates limit i of kind (quota or concurrency) whose key is
-- key and whose capacity before rounding is cap, into st (as the bucket
-- loop does) and xused, xreset, xend; it returns whether it allows.
local function special(i, kind, key, cap, rate, period, pend, unknown, cost, now)
  local o = 6 * i
  local effb, tokens, need, retry
  if kind == 1 then
    local s, e = calendar(rate, now)
    local t, l
    local w = widx[key]
    if w then
      t, l = wtok[w], wlast[w]
    else
      local v = vals[key]
      if v and #v == 16 then t, l = sunpack("<dd", v) end
    end
    local used = 0
    if t and l == s then used = t end
    effb = floor(cap * U)
    tokens = effb - used
    if tokens < 0 then tokens = 0 end
    need = cost
    st[o - 4] = s
    xused[i], xreset[i], xend[i] = used, e, e
    retry = e - now
  else
    local live = rcall("ZCOUNT", key, "(" .. fmtus(now), "+inf")
    local first = rcall("ZRANGEBYSCORE", key, "(" .. fmtus(now), "+inf", "WITHSCORES", "LIMIT", 0, 1)
    effb = floor(cap) * U
    tokens = effb - live * U
    if tokens < 0 then tokens = 0 end
    need = 0
    if cost > 0 then need = U end
    local soonest = now
    if first[2] then soonest = tonumber(first[2]) end
    st[o - 4] = now
    xused[i], xreset[i], xend[i] = live, soonest, now + period
    retry = soonest - now
  end
  local ok = tokens >= need
  if ok then
    retry = 0
  elseif need > effb then
    if pend > now and not unknown then retry = pend - now else retry = 3600000000 end
  end
  st[o - 5] = tokens
  st[o - 3] = effb
  st[o - 2] = 0
  st[o - 1] = ok
  st[o] = retry
  return ok
end

-- lease adds the decision's lease to every concurrency limit's set (all of
-- them before any other write of the decision, so a refused write leaves
-- no state of it); it reports whether it added any.
local function lease(kb, nl, a, now, slack)
  local id = nil
  for i = 1, nl do
    if kinds[i] == 2 and st[6 * i - 1] then
      -- a's last entry is struct.unpack's next position, after the numbers;
      -- the lease precedes the own section (its count no, then no indexes)
      if not id then
        local t = a[#a - 1] + 1
        id = string.format("%012x%012x", a[#a - 2 - t], a[#a - 1 - t])
      end
      local key = KEYS[kb + i]
      rcall("ZADD", key, fmtus(xend[i]), id)
      rcall("ZREMRANGEBYSCORE", key, "-inf", fmtus(now))
      -- the set lives until its latest lease expires, which may be an
      -- older one's: a reload that shortened lease_ttl must not make the
      -- set vanish with the slots of longer leases still held
      local last = tonumber(rcall("ZRANGE", key, -1, -1, "WITHSCORES")[2])
      if last < xend[i] then last = xend[i] end
      rcall("PEXPIRE", key, string.format("%d", ceil((last - now) / 1000) + slack))
    end
  end
  return id ~= nil
end

-- take commits a decision that takes from limit i of a special kind and
-- returns what is left: a quota's count is written with the batch's
-- buckets (its lease was added by lease).
local function take(i, key, tokens, cost, now, slack)
  if kinds[i] == 2 then
    if xreset[i] == now or xend[i] < xreset[i] then xreset[i] = xend[i] end
    return tokens - U
  end
  local w = slot(key)
  wtok[w] = xused[i] + cost
  wlast[w] = st[6 * i - 4]
  wttl[w] = ceil((xend[i] - now) / 1000) + slack
  return tokens - cost
end

-- decide evaluates the decision whose keys follow KEYS[kb] (its lock keys
-- KEYS[lk]: after its buckets and the hashes it reads, as the batch's
-- first pass found), whose numbers are a (see the header) and whose
-- device is device, and returns its reply and whether it wrote a bucket.
local function decide(kb, lk, a, device)
  local nl, ns, nk, cost, slack = a[3], a[4], a[5], a[6], a[7]
  local now
  if a[2] == 0 then
    if not clock then
      local t = rcall("TIME")
      clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = clock
  else
    now = a[2]
  end
  local argi = 8 + nk -- the subjects' numbers

  -- the keys of the subjects read from their hashes: after the buckets
  local sk = kb + nl

  -- A lock is "kind until_us flags rule"; flags "x" exempts the devices in
  -- the lock's trust set (attested devices that logged in to the account).
  local tk = lk + nk
  for i = 1, nk do
    local tkey = nil
    if a[7 + i] == 1 then
      tk = tk + 1
      tkey = KEYS[tk]
    end
    local v = vals[KEYS[lk + i]]
    if v then
      local kind, us, flags, rule = match(v, "^(%S+) (%S+) (%S+) ?(.*)$")
      local u = tonumber(us)
      if u and u > now then
        local exempt = false
        if flags == "x" and tkey and device ~= "" then
          exempt = isTrusted(tkey, device, now)
        end
        if not exempt then
          return {2, now, kind, us, rule, i}, false
        end
      end
    end
  end

  for j = 1, ns do
    if a[argi + 2] == 1 then
      -- the caller's L1 cache already knows this subject's multiplier
      mults[j] = a[argi + 3]
      pens[j] = a[argi + 4]
      fresh[j] = false
    else
      fresh[j] = true
      sk = sk + 1
      mults[j], pens[j] = subject(KEYS[sk], a[argi], a[argi + 1], now)
    end
    argi = argi + 5
  end

  local trusted = ownKeys(kb, a, device, now)
  local own = trusted == 1
  local allowed = 1
  -- xk: some limit is a quota or a concurrency limit (most decisions
  -- have token buckets only, and skip the lease)
  local xk = false
  cost = floor(cost * U)
  for i = 1, nl do
    local burst = a[argi]
    local rate = a[argi + 1]
    local period = a[argi + 2]
    local fl = a[argi + 3] -- shadow 1 or 0, plus 2 times the kind
    local nsub = a[argi + 4]
    argi = argi + 5
    local m = 1
    for s = argi, argi + nsub - 1 do m = m * mults[a[s]] end
    local o = 6 * i
    local key
    if own then key = lkeys[i] else key = KEYS[kb + i] end
    skeys[i] = key
    if fl >= 2 then
      local kind = floor(fl / 2)
      kinds[i] = kind
      xk = true
      -- when the penalties end, for the retry of a limit no wait can pass
      -- (a bucket's is the caller's to compute)
      local pend, unknown = 0, false
      for s = argi, argi + nsub - 1 do
        local j = a[s]
        if mults[j] < 1 then
          if pens[j] == 0 then unknown = true elseif pens[j] > pend then pend = pens[j] end
        end
      end
      argi = argi + nsub
      if not special(i, kind, key, burst * m, rate, period, pend, unknown, cost, now) and fl % 2 == 0 then
        allowed = 0
      end
    else
      kinds[i] = 0
      argi = argi + nsub
      local effb = floor(burst * m * U)
      local per = rate * m * U / period
      local tokens = effb
      local last = now
      local t, l
      local w = widx[key]
      if w then
        t, l = wtok[w], wlast[w]
      else
        local v = vals[key]
        if v then
          if #v == 16 then
            t, l = sunpack("<dd", v)
          else
            -- the text form "tokens last_us" of builds before the packed one
            local ts, ls = match(v, "^(%d+) (%d+)$")
            t = tonumber(ts)
            l = tonumber(ls)
          end
        end
      end
      if t and l then
        local el = 0
        if l > now then last = l else el = now - l end
        tokens = t + floor(el * per)
        if tokens > effb then tokens = effb end
      end
      local ok = tokens >= cost
      if not ok and fl == 0 then allowed = 0 end
      st[o - 5] = tokens
      st[o - 4] = last
      st[o - 3] = effb
      st[o - 2] = per
      st[o - 1] = ok
    end
  end

  local wrote = false
  local takes = allowed == 1 and cost > 0
  if takes and xk then wrote = lease(kb, nl, a, now, slack) end
  reply[1] = allowed
  reply[2] = now
  local r = 2
  for i = 1, nl do
    local o = 6 * i
    local tokens, ok = st[o - 5], st[o - 1]
    if takes and ok then
      if kinds[i] ~= 0 then
        tokens = take(i, skeys[i], tokens, cost, now, slack)
      else
        tokens = tokens - cost
        -- written once, after the batch (see the header)
        local w = slot(skeys[i])
        wtok[w] = tokens
        wlast[w] = st[o - 4]
        wttl[w] = ceil((st[o - 3] - tokens) / st[o - 2] / 1000) + slack
      end
      wrote = true
    end
    if ok then reply[r + 1] = tokens else reply[r + 1] = -1 - tokens end
    r = r + 1
    if kinds[i] ~= 0 then
      reply[r + 1] = st[o - 3]
      reply[r + 2] = xreset[i]
      reply[r + 3] = st[o]
      r = r + 3
    end
  end
  -- then the multiplier and penalty end of each subject read from its
  -- hash, for the caller's cache (it knows the others')
  for j = 1, ns do
    if fresh[j] then
      reply[r + 1] = mults[j]
      reply[r + 2] = pens[j]
      r = r + 2
    end
  end
  if trusted then
    r = r + 1
    reply[r] = trusted
  end
  -- one binary string of little-endian doubles: every value is exact (the
  -- integers are below 2^53) and Redis sends one value instead of r
  local pf = packfmts[r]
  if not pf then
    pf = "<" .. string.rep("d", r)
    packfmts[r] = pf
  end
  return pack(pf, unpack(reply, 1, r)), wrote
end

local n = tonumber(ARGV[1])
local out = {}
local wrote = {}
local as = {}
-- Every decision's numbers, unpacked once; the multiplier hash keys of
-- the whole batch (read as the header says); and its lock and bucket
-- keys, each once.
local mk, nmk = {}, 0
local rk, nrk = {}, 0
local kbs, lks = {}, {} -- per decision: where its keys and its lock keys start
local function wants(key)
  if vals[key] == nil then
    vals[key] = false
    nrk = nrk + 1
    rk[nrk] = key
  end
end
local kb = 0
for d = 1, n do
  local blob = ARGV[2 * d]
  local nv = #blob / 8
  local uf = packfmts[nv]
  if not uf then
    uf = "<" .. string.rep("d", nv)
    packfmts[nv] = uf
  end
  local a = {sunpack(uf, blob)}
  as[d] = a
  local nl = a[3]
  for i = 1, nl do wants(KEYS[kb + i]) end
  local sk = kb + nl
  local argi = 8 + a[5]
  for j = 1, a[4] do
    if a[argi + 5 * (j - 1) + 2] ~= 1 then
      sk = sk + 1
      nmk = nmk + 1
      mk[nmk] = KEYS[sk]
    end
  end
  for i = 1, a[5] do wants(KEYS[sk + i]) end
  local no = a[nv] -- own buckets (7.1): read with the others
  for i = 1, no do wants(KEYS[kb + a[1] - no - 1 + i]) end
  kbs[d], lks[d] = kb, sk
  kb = kb + a[1]
end
for i = 1, nrk, 512 do
  local j = mmin(i + 511, nrk)
  local got = rcall("MGET", unpack(rk, i, j))
  for k = i, j do vals[rk[k]] = got[k - i + 1] end
end
if nmk >= 1 then
  local found = 0
  for i = 1, nmk, 512 do
    found = found + rcall("EXISTS", unpack(mk, i, mmin(i + 511, nmk)))
  end
  if found == 0 then
    nomult = true
  else
    -- the hashes' summaries, with one MGET; EXISTS counts a key named
    -- twice twice, and so does this count, so fewer summaries than
    -- hashes means some hash has none (a build before summaries wrote it)
    sums = {}
    local nsum = 0
    local sk = {}
    for i = 1, nmk, 512 do
      local j = mmin(i + 511, nmk)
      for k = i, j do sk[k - i + 1] = mk[k] .. "s" end
      local got = rcall("MGET", unpack(sk, 1, j - i + 1))
      for k = i, j do
        local g = got[k - i + 1]
        sums[mk[k]] = g
        if g then nsum = nsum + 1 end
      end
    end
    legacy = nsum < found
  end
end
for d = 1, n do
  -- one decision's error (a key of the wrong type) is its own: it is
  -- answered {3, message}, it wrote nothing, and the batch goes on
  local ok, r, w = pcall(decide, kbs[d], lks[d], as[d], ARGV[2 * d + 1])
  if ok then
    out[d] = r
    wrote[d] = w
  else
    if type(r) == "table" then r = r.err end
    out[d] = {3, tostring(r)}
  end
end
-- Every bucket the batch took from, written once with its latest state.
-- Should a write fail (out of memory: Redis then refuses the script's
-- first write and so every write), the decisions that took tokens fail
-- with it: none of their state was kept.
-- Expiries repeat (most buckets of a policy refill within the same
-- millisecond), so each is formatted once per batch: a number passed to
-- redis.call is formatted by Redis with snprintf at every call.
local ttls = {}
local ok, err = pcall(function()
  for w = 1, nw do
    local ttl = wttl[w]
    local ts = ttls[ttl]
    if not ts then
      ts = string.format("%d", ttl)
      ttls[ttl] = ts
    end
    rcall("SET", wkey[w], pack("<dd", wtok[w], wlast[w]), "PX", ts)
  end
end)
if not ok then
  if type(err) == "table" then err = err.err end
  for d = 1, n do
    if wrote[d] then out[d] = {3, tostring(err)} end
  end
end
return out
