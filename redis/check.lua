-- Sluice check: decides every limit of one check and writes them all, or none,
-- as one atomic step. Mirrors memory/algorithms.go operation for operation; all
-- values are integers below 2^53, exact in Lua's doubles.
--
-- KEYS: one per limit (all share one hash tag).
-- ARGV: now_ms ("" = use the server's TIME), cost, then per limit:
--       algorithm ("t" token bucket, "s" sliding window, "f" fixed window),
--       capacity, p1, p2 (token bucket: refill tokens, interval ms;
--       windows: window ms, unused).
-- Reply: {allowed, now_ms, then per limit: allowed, remaining, reset_ms, retry_ms}.

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local cost = tonumber(ARGV[2])

-- Keys expire when dropping them loses nothing. With the server's clock the
-- TTL is exact. An injected time (tests) runs apart from the clock Redis
-- expires keys by, so those keys get an hour of slack; the state records its
-- own logical expiry ('e'), so the slack never changes a decision.
local ttl_slack = 0
if ARGV[1] ~= '' then
  ttl_slack = 3600000
end

local function ceildiv(a, b)
  return math.floor((a + b - 1) / b)
end

local function fmt(x)
  return string.format('%.0f', x)
end

-- The live state of a key, or nil when there is none or it has expired.
local function load(key, now)
  local v = redis.call('HMGET', key, 'a', 'b', 'c', 'e')
  if not v[1] then
    return nil
  end
  local st = {a = tonumber(v[1]), b = tonumber(v[2]), c = tonumber(v[3]), e = tonumber(v[4])}
  if st.e <= now then
    return nil
  end
  return st
end

-- Returns allowed, remaining, reset, retry, write, next state.
local function token_bucket(capacity, n, p, st, now, cost)
  local full = capacity * p
  local tokens, last = full, now
  if st then
    tokens, last = st.a, st.b
    if st.c ~= p then
      tokens = math.min(math.floor(tokens / st.c), capacity) * p
    end
    if now > last then
      if now - last >= ceildiv(full - math.min(tokens, full), n) then
        tokens = full
      else
        tokens = tokens + (now - last) * n
      end
      last = now
    end
    tokens = math.min(tokens, full)
  end
  local allowed, write, retry = false, false, 0
  local need = cost * p
  if tokens >= need then
    allowed = true
    tokens = tokens - need
    write = cost > 0
  else
    retry = ceildiv(need - tokens, n)
  end
  local reset = ceildiv(full - tokens, n)
  -- Also written on a deny when it outlives the stored state: a raised
  -- capacity or lowered rate must not let the key expire (and refill) before
  -- the retry_after reported now.
  local extend = st ~= nil and now + reset > st.e
  return allowed, math.floor(tokens / p), reset, retry, write, {tokens, last, p}, extend
end

local function sliding_window(limit, w, st, now, cost)
  local idx = math.floor(now / w)
  local curr, prev = 0, 0
  if st then
    if st.a == idx then
      curr, prev = st.b, st.c
    elseif st.a == idx - 1 then
      prev = st.b
    end
  end
  local elapsed = now - idx * w
  local allowed, write, retry = false, false, 0
  if prev * (w - elapsed) + (curr + cost) * w <= limit * w then
    allowed = true
    curr = curr + cost
    write = cost > 0
  elseif curr + cost <= limit then
    retry = math.max(1, w - elapsed - math.floor((limit - curr - cost) * w / prev))
  else
    retry = w - elapsed + math.max(0, w - math.floor((limit - cost) * w / curr))
  end
  local remaining = math.max(0, math.floor((limit * w - prev * (w - elapsed) - curr * w) / w))
  local reset = 0
  if curr > 0 then
    reset = 2 * w - elapsed
  elseif prev > 0 then
    reset = w - elapsed
  end
  return allowed, remaining, reset, retry, write, {idx, curr, prev}
end

local function fixed_window(limit, w, st, now, cost)
  local idx = math.floor(now / w)
  local curr = 0
  if st and st.a == idx then
    curr = st.b
  end
  local elapsed = now - idx * w
  local allowed, write, retry = false, false, 0
  if curr + cost <= limit then
    allowed = true
    curr = curr + cost
    write = cost > 0
  else
    retry = w - elapsed
  end
  local reset = 0
  if curr > 0 then
    reset = w - elapsed
  end
  return allowed, math.max(0, limit - curr), reset, retry, write, {idx, curr, 0}
end

-- A clock can step backwards (NTP, a failover to a host whose clock is
-- behind). Deciding at such a time would reopen a window that is already
-- spent, so a limit is decided at the time its state was last written when
-- that is later, and the waits it reports are counted from the real now.
local function decide(i, cost)
  local base = 2 + (i - 1) * 4
  local algo = ARGV[base + 1]
  local capacity = tonumber(ARGV[base + 2])
  local p1 = tonumber(ARGV[base + 3])
  local st = load(KEYS[i], now)
  local skew = 0
  if st then
    if algo == 't' then
      skew = math.max(0, st.b - now)
    else
      skew = math.max(0, st.a * p1 - now)
    end
  end
  local allowed, remaining, reset, retry, write, nxt, extend
  if algo == 't' then
    allowed, remaining, reset, retry, write, nxt, extend = token_bucket(capacity, p1, tonumber(ARGV[base + 4]), st, now + skew, cost)
  elseif algo == 's' then
    allowed, remaining, reset, retry, write, nxt = sliding_window(capacity, p1, st, now + skew, cost)
  else
    allowed, remaining, reset, retry, write, nxt = fixed_window(capacity, p1, st, now + skew, cost)
  end
  if retry > 0 then
    retry = retry + skew
  end
  if reset > 0 then
    reset = reset + skew
  end
  return allowed, remaining, reset, retry, write, nxt, extend or false
end

local function store(key, nxt, reset)
  redis.call('HSET', key, 'a', fmt(nxt[1]), 'b', fmt(nxt[2]), 'c', fmt(nxt[3]), 'e', fmt(now + reset))
  redis.call('PEXPIRE', key, reset + ttl_slack)
end

local results = {}
local all = true
for i = 1, #KEYS do
  local allowed, remaining, reset, retry, write, nxt, extend = decide(i, cost)
  results[i] = {allowed, remaining, reset, retry, write, nxt, extend}
  all = all and allowed
end

local reply = {all and 1 or 0, now}
for i = 1, #KEYS do
  local r = results[i]
  if not all and r[1] then
    -- Nothing is consumed: report this limit as a peek sees it.
    r = {decide(i, 0)}
  end
  if (all and r[5]) or r[7] then
    store(KEYS[i], r[6], r[3])
  end
  reply[#reply + 1] = r[1] and 1 or 0
  reply[#reply + 1] = r[2]
  reply[#reply + 1] = r[3]
  reply[#reply + 1] = r[4]
end
return reply
