-- Sluice check: decides every limit of one check and writes them all, or none,
-- as one atomic step. Mirrors memory/algorithms.go operation for operation; all
-- values are integers below 2^53, exact in Lua's doubles.
--
-- KEYS: one per limit (all share one hash tag).
-- ARGV: now_ms ("" = use the server's TIME), cost, then per limit:
--       algorithm ("t" token bucket, "s" sliding window, "f" fixed window),
--       capacity, p1, p2 (token bucket: refill tokens, interval ms;
--       windows: window ms, unused).
--       algorithm "c" is a concurrency limit (capacity, unused, unused).
--       algorithm "F" is a calendar fixed window (limit, period table,
--       unused); "k" and "K" a credits limit with a set (or no) refill and
--       an add refill (refill amount, period table or "", max). A period
--       table is "i,b0,b1,b2,b3" (see sluice.Limit.AppendPeriodTable).
--       A check that takes a hold has one more key, the hold's record, and
--       more arguments: reserve ("1" or "0"), hold ttl ms, hold nonce,
--       tenant, rule, subject, and "H" last.
--       A lease (see lease_cost) is such a reserved hold with one more key,
--       the subject's demands, and ends in want, holder and "L"; a renew
--       has one more key, the old lease's record, and ends in want,
--       holder, the old lease's nonce, its unused units and "R".
-- Reply: {allowed, now_ms, then per limit: allowed, remaining, reset_ms,
--        retry_ms, then the number of expired leases dropped, and for a
--        lease the cost granted (or 1, the cost of a deny), and for a renew
--        the old lease's return status and, when returned, what it granted
--        (see hold_op); a renew giving back too much is {'too_many',
--        granted}}.
--
-- The same script settles, releases or extends a hold (see hold_op below)
-- when ARGV[1] is "hold": one script, so both share the algorithms.
--
-- When ARGV[1] is "B" it decides a batch of plain checks (buckets and
-- windows, no hold or lease) in order, at one instant: ARGV[2] is now_ms
-- for all ("" = TIME), then per check its number of limits and its own
-- arguments (as above; its now is not read), and KEYS holds every check's
-- keys in the same order. The reply is the checks' replies one after
-- another. The checks share the call's own cost and its TIME (see
-- redis/batch.go).

-- When ARGV[1] is "reset" it resets a subject's counters: KEYS are the
-- counters, then the subject's generation key (see gen_key); ARGV[2] is how
-- long the generation must outlive the holds open now, ms. Each counter is
-- deleted and its generation bumped in one step, so a hold charged before
-- the reset settles nothing into the fresh counter (the reset gave its
-- charge back). Reply: {counters reset}.
if ARGV[1] == 'reset' then
  local gk = KEYS[#KEYS]
  for i = 1, #KEYS - 1 do
    redis.call('DEL', KEYS[i])
    redis.call('HINCRBY', gk, KEYS[i], 1)
  end
  local keep = tonumber(ARGV[2])
  if redis.call('PTTL', gk) < keep then
    redis.call('PEXPIRE', gk, keep)
  end
  return {#KEYS - 1}
end

local hold_mode = ARGV[1] == 'hold'
local topup_mode = ARGV[1] == 'topup'
local batch_mode = ARGV[1] == 'B'
local now_arg = ARGV[1]
if hold_mode or topup_mode then
  now_arg = ARGV[2]
elseif batch_mode then
  now_arg = ARGV[2]
end
local now
if now_arg == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(now_arg)
end
local cost = tonumber(ARGV[2])

-- Keys expire when dropping them loses nothing. With the server's clock the
-- TTL is exact. An injected time (tests) runs apart from the clock Redis
-- expires keys by, so those keys get an hour of slack; the state records its
-- own logical expiry ('e'), so the slack never changes a decision.
local ttl_slack = 0
if now_arg ~= '' then
  ttl_slack = 3600000
end

local function ceildiv(a, b)
  return math.floor((a + b - 1) / b)
end

-- fmt writes an integer exactly (every value here is one, below 2^53):
-- '%d' formats it as an integer, where '%.0f' or Redis's own conversion of
-- a Lua number go through glibc's slower floating-point printing.
local function fmt(x)
  return string.format('%d', x)
end

-- The expiry of a state that dropping would lose (a credits balance), and
-- the bound of a balance (sluice.MaxCredits).
local never = 4503599627370496
local max_credits = 1125899906842624

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
  -- Tokens below zero are a settled hold's debt.
  return allowed, math.max(0, math.floor(tokens / p)), reset, retry, write, {tokens, last, p}, extend
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

-- Defined below the plain checks' path (see plain_check), which needs none
-- of them: a function costs Redis's CPU at every call of the script.
local calendar_window, credits

-- A clock can step backwards (NTP, a failover to a host whose clock is
-- behind). Deciding at such a time would reopen a window that is already
-- spent, so a limit is decided at the time its state was last written when
-- that is later, and the waits it reports are counted from the real now.
local function decide_limit(algo, capacity, p1, p2, st, cost)
  if algo == 'F' then
    return calendar_window(capacity, p1, st, now, cost)
  elseif algo == 'k' or algo == 'K' then
    return credits(algo, capacity, p1, p2, st, now, cost)
  end
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
    allowed, remaining, reset, retry, write, nxt, extend = token_bucket(capacity, p1, p2, st, now + skew, cost)
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

-- store writes a state that expires after reset, or at expire when given
-- (credits; never: kept).
local function store(key, nxt, reset, expire)
  expire = expire or now + reset
  redis.call('HSET', key, 'a', fmt(nxt[1]), 'b', fmt(nxt[2]), 'c', fmt(nxt[3]), 'e', fmt(expire))
  if expire >= never then
    redis.call('PERSIST', key)
  else
    redis.call('PEXPIRE', key, fmt(expire - now + ttl_slack))
  end
end

-- plain_check decides a plain check (only buckets and windows, no hold or
-- lease) of n limits, whose keys follow KEYS[kb] and whose arguments (now,
-- cost, then four per limit) follow ARGV[ab], and writes its reply into out
-- after out[at].
-- It is the general path below (decide, then write or peek) with less
-- work: each state is read once, and a deny's peek of the limits that
-- allowed reuses it, since nothing was written in between. Most checks are
-- plain, and Redis's CPU per check is what every instance shares.
local function plain_check(kb, ab, n, out, at)
  local c = tonumber(ARGV[ab + 2])
  if n == 1 then
    local key = KEYS[kb + 1]
    local allowed, remaining, reset, retry, write, nxt, extend = decide_limit(ARGV[ab + 3],
      tonumber(ARGV[ab + 4]), tonumber(ARGV[ab + 5]), tonumber(ARGV[ab + 6]), load(key, now), c)
    if (allowed and write) or extend then
      store(key, nxt, reset)
    end
    local a = allowed and 1 or 0
    out[at + 1], out[at + 2], out[at + 3], out[at + 4] = a, now, a, remaining
    out[at + 5], out[at + 6], out[at + 7] = reset, retry, 0
    return
  end
  out[at + 1] = 1
  out[at + 2] = now
  local all = true
  local parts = {}
  for i = 1, n do
    local base = ab + 2 + (i - 1) * 4
    local key, algo = KEYS[kb + i], ARGV[base + 1]
    local capacity, p1, p2 = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
    local st = load(key, now)
    local allowed, remaining, reset, retry, write, nxt, extend = decide_limit(algo, capacity, p1, p2, st, c)
    parts[i] = {key, algo, capacity, p1, p2, st, allowed, remaining, reset, retry, write, nxt, extend}
    all = all and allowed
  end
  for i = 1, n do
    local r = parts[i]
    local allowed, remaining, reset, retry, write, nxt, extend = r[7], r[8], r[9], r[10], r[11], r[12], r[13]
    if not all and allowed then
      -- Nothing is consumed: report this limit as a peek sees it.
      allowed, remaining, reset, retry, write, nxt, extend = decide_limit(r[2], r[3], r[4], r[5], r[6], 0)
    end
    if (all and write) or extend then
      store(r[1], nxt, reset)
    end
    local o = at + 2 + (i - 1) * 4
    out[o + 1] = allowed and 1 or 0
    out[o + 2] = remaining
    out[o + 3] = reset
    out[o + 4] = retry
  end
  if not all then
    out[at + 1] = 0
  end
  out[at + 3 + 4 * n] = 0 -- no leases expired: a plain check has none
end

if batch_mode then
  local out, kb, ab, at = {}, 0, 2, 0
  while ab < #ARGV do
    local n = tonumber(ARGV[ab + 1])
    plain_check(kb, ab + 1, n, out, at)
    kb = kb + n
    ab = ab + 3 + 4 * n
    at = at + 3 + 4 * n
  end
  return out
end
if not hold_mode and not topup_mode and ARGV[#ARGV] ~= 'H' and ARGV[#ARGV] ~= 'L' and ARGV[#ARGV] ~= 'R' then
  local plain = true
  for i = 1, #KEYS do
    local algo = ARGV[2 + (i - 1) * 4 + 1]
    if algo ~= 't' and algo ~= 's' and algo ~= 'f' then
      plain = false
      break
    end
  end
  if plain then
    local out = {}
    if #KEYS == 1 then
      out = {0, 0, 0, 0, 0, 0, 0} -- sized for its reply: filled, not grown
    end
    plain_check(0, 0, #KEYS, out, 0)
    return out
  end
end

-- The period of a table (see the header) that holds t: its index, start,
-- end, the bounds and its position in them; nil when t is outside the
-- table, that is when this instance's clock and Redis's are more than a
-- period apart.
local function period_at(tbl, t)
  local i0, b0, b1, b2, b3 = string.match(tbl, '^(%-?%d+),(%-?%d+),(%-?%d+),(%-?%d+),(%-?%d+)$')
  if not i0 then
    return nil
  end
  local b = {tonumber(b0), tonumber(b1), tonumber(b2), tonumber(b3)}
  for k = 1, 3 do
    if t >= b[k] and t < b[k + 1] then
      return tonumber(i0) + k - 1, b[k], b[k + 1], b, k
    end
  end
  return nil
end

-- Limits whose second parameter is a period table, not a number.
local function tabled(algo)
  return algo == 'F' or algo == 'k' or algo == 'K'
end
local function param(algo, v)
  if tabled(algo) then
    return v
  end
  return tonumber(v)
end

-- A fixed window of calendar periods. A state from a later period than
-- now's (a clock stepped back) is judged in its own period, so a spent quota
-- is not reopened. Mirrors calendarWindow in memory/algorithms.go.
function calendar_window(limit, tbl, st, now, cost)
  local idx, _, pend, b, k = period_at(tbl, now)
  if not idx then
    return nil
  end
  if st and st.a > idx then
    if k > 2 then
      return nil
    end
    idx, pend = st.a, b[k + 2]
  end
  local curr = 0
  if st and st.a == idx then
    curr = st.b
  end
  local allowed, write, retry = false, false, 0
  if curr + cost <= limit then
    allowed = true
    curr = curr + cost
    write = cost > 0
  else
    retry = pend - now
  end
  local reset = 0
  if curr > 0 then
    reset = pend - now
  end
  return allowed, math.max(0, limit - curr), reset, retry, write, {idx, curr, 0}
end

-- The balance after the refills due from period last to idx. Mirrors
-- sluice.Limit.ApplyRefill.
local function apply_refill(algo, amount, maxb, balance, last, idx)
  if amount <= 0 or idx <= last then
    return balance
  end
  if algo == 'k' then
    return amount
  end
  local n = idx - last
  if maxb > 0 then
    if balance >= maxb then
      return balance
    end
    if n >= ceildiv(maxb - balance, amount) then
      return maxb
    end
    return balance + n * amount
  end
  if n >= ceildiv(max_credits - math.min(balance, max_credits), amount) then
    return math.max(balance, max_credits)
  end
  return balance + n * amount
end

-- A credits balance: state a = last refill period applied, b = balance.
-- Returns as the others, then the state's expiry: a set refill's balance
-- may go at the next refill, which restores it anyway; others never.
-- Mirrors credits in memory/algorithms.go.
function credits(algo, amount, tbl, maxb, st, now, cost)
  local refills = tbl ~= ''
  local idx, pend, start = 0, 0, 0
  if refills then
    idx, start, pend = period_at(tbl, now)
    if not idx then
      return nil
    end
  end
  local balance, last = amount, idx
  if st then
    balance = apply_refill(algo, amount, maxb, st.b, st.a, idx)
    last = math.max(st.a, idx)
  end
  local allowed, write, retry = false, false, 0
  if balance >= cost then
    allowed = true
    balance = balance - cost
    write = cost > 0
  elseif refills then
    retry = pend - now
  end
  local reset, expire = 0, never
  if refills then
    reset = pend - now
    if algo == 'k' and last == idx then
      expire = pend
    end
  end
  return allowed, balance, reset, retry, write, {last, balance, 0}, false, expire
end

-- A concurrency limit: leases in a sorted set scored by expiry, member
-- "nonce:weight". Expired leases are dropped first (and counted); a check
-- fits while held + cost <= capacity. A deny's retry is when enough leases
-- expire, earliest first: an upper bound, since holders release sooner.
-- Returns allowed, remaining, reset, retry, write, expired.
local function concurrency(key, capacity, cost, take_until)
  local expired = redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local held, latest = 0, now
  for j = 1, #all, 2 do
    held = held + tonumber(string.match(all[j], ':(%d+)$'))
    latest = math.max(latest, tonumber(all[j + 1]))
  end
  local allowed, write, retry = false, false, 0
  if held + cost <= capacity then
    allowed = true
    if cost > 0 then
      write = true
      held = held + cost
      latest = math.max(latest, take_until)
    end
  else
    local left = held
    for j = 1, #all, 2 do
      left = left - tonumber(string.match(all[j], ':(%d+)$'))
      if left + cost <= capacity then
        retry = tonumber(all[j + 1]) - now
        break
      end
    end
  end
  return allowed, math.max(0, capacity - held), latest - now, retry, write, expired
end

-- settle_limit corrects one reserved rate limit by diff (charged - actual;
-- > 0 refunds) at now: a token bucket refills to now and gets tokens back
-- up to capacity, or goes into debt down to minus its capacity; a window's count is corrected in the
-- window the estimate was charged to, while it still counts. Returns
-- whether it wrote. Mirrors settle in memory/holds.go.
local function settle_limit(key, algo, capacity, p1, p2, window, diff)
  if diff == 0 then
    return false
  end
  local st = load(key, now)
  if algo == 'k' or algo == 'K' then
    -- Credits: given back, or taken down to an empty balance (never
    -- below). A refund after a set refill replaced the balance the
    -- estimate came from changes nothing: the refill restored it.
    local _, _, _, _, _, nxt, _, expire = decide_limit(algo, capacity, p1, p2, st, 0)
    if not nxt or (diff > 0 and algo == 'k' and nxt[1] ~= window) then
      return false
    end
    nxt[2] = math.max(0, math.min(max_credits, nxt[2] + diff))
    store(key, nxt, 0, expire)
    return true
  end
  if algo == 't' then
    local full = capacity * p2
    local _, _, _, _, _, nxt = decide_limit(algo, capacity, p1, p2, st, 0)
    local tokens = math.max(-full, math.min(full, nxt[1] + diff * p2))
    if not st and tokens >= full then
      return false
    end
    local expire = nxt[2] + ceildiv(full - tokens, p1)
    redis.call('HSET', key, 'a', fmt(tokens), 'b', fmt(nxt[2]), 'c', fmt(p2), 'e', fmt(expire))
    redis.call('PEXPIRE', key, expire - now + ttl_slack)
    return true
  end
  if not st then
    return false
  end
  if st.a == window then
    st.b = math.max(0, st.b - diff)
  elseif algo == 's' and st.a == window + 1 then
    st.c = math.max(0, st.c - diff)
  else
    return false
  end
  local _, _, reset, _, _, nxt = decide_limit(algo, capacity, p1, p2, st, 0)
  if not nxt then
    return false
  end
  store(key, nxt, reset)
  return true
end

-- hold_op settles ('s'), releases ('r') or extends ('x') the hold whose
-- record is KEYS[1], or returns a lease ('l', the cost being the unused
-- units; {'too_many', granted} when that is more than it granted).
-- ARGV: 'hold', now, action, cost, tenant, nonce, then,
-- for a settle judged against the limits as they are now, per current rate
-- limit: key, algorithm, capacity, p1, p2 (as a check passes them).
-- Reply: {status, rule, subject, expires_in_ms, leases_freed, refunded},
-- and for a lease returned what it granted; or {'too_large', key,
-- capacity} when the cost can never fit that limit.
-- The record names the limits' keys, all under the record's hash tag.
-- hold_apply is hold_op on the record rec, with current limits from
-- ARGV[cur] on (none when cur is past ARGV's end); a lease's renew calls it
-- to return the old lease (see lease_cost).
-- gen_key is the generation hash of the subject whose hold record is rec
-- (prefix{tag}:hold:nonce): prefix{tag}:gen, under the same hash tag. It maps
-- a counter's key to the number of resets it has had; none means 0.
local function gen_key(rec, nonce)
  return string.sub(rec, 1, #rec - #nonce - 5) .. 'gen'
end

-- keep_gen makes the generation hash gk, when there is one, outlive a hold
-- record that lives ttl ms from now: a settle compares against it.
local function keep_gen(gk, ttl)
  local left = redis.call('PTTL', gk)
  if left ~= -2 and left < 2 * ttl + ttl_slack then
    redis.call('PEXPIRE', gk, 2 * ttl + ttl_slack)
  end
end

local function hold_apply(rec, action, actual, tenant, nonce, cur)
  local f = redis.call('HMGET', rec, 't', 'r', 's', 'e', 'ttl', 'n', 'd')
  if not f[1] or f[1] ~= tenant then
    return {'unknown', '', '', 0, 0, 0}
  end
  local rule, subject = f[2], f[3]
  local e, ttl, n = tonumber(f[4]), tonumber(f[5]), tonumber(f[6])
  if now >= e + ttl then
    return {'unknown', '', '', 0, 0, 0}
  end
  if f[7] == '1' then
    return {'finished', rule, subject, 0, 0, 0}
  end
  if now >= e then
    return {'expired', rule, subject, 0, 0, 0}
  end
  local parts = {}
  for j = 1, n do
    local v = redis.call('HMGET', rec, 'k' .. j, 'a' .. j, 'c' .. j, 'x' .. j, 'y' .. j, 'w' .. j, 'i' .. j, 'g' .. j)
    -- gen: the counter's generation at the charge; nil in a record an older
    -- version wrote, which settles as that version did.
    parts[j] = {key = v[1], algo = v[2], capacity = tonumber(v[3]), p1 = param(v[2], v[4]), p2 = tonumber(v[5]),
      charged = tonumber(v[6]), window = tonumber(v[7]), gen = v[8] and tonumber(v[8])}
  end
  -- A part whose counter has a current limit is settled under it.
  for j = cur, #ARGV, 5 do
    for _, p in ipairs(parts) do
      if p.key == ARGV[j] and p.algo == ARGV[j + 1] then
        p.now_capacity, p.now_p1, p.now_p2 = tonumber(ARGV[j + 2]), param(p.algo, ARGV[j + 3]), tonumber(ARGV[j + 4])
      end
    end
  end
  -- A lease's return ('l') settles it at what was used: granted (its
  -- parts' charge) minus the unused units given back.
  local granted
  if action == 'l' then
    if actual > parts[1].charged then
      return {'too_many', parts[1].charged}
    end
    granted = parts[1].charged
    action, actual = 's', granted - actual
  end
  local member_of = function(p)
    return nonce .. ':' .. fmt(p.charged)
  end
  if action == 'x' then
    local until_ms = now + ttl
    for _, p in ipairs(parts) do
      if p.algo == 'c' and redis.call('ZADD', p.key, 'XX', 'CH', until_ms, member_of(p)) == 1 then
        redis.call('PEXPIRE', p.key, math.max(redis.call('PTTL', p.key), 2 * ttl + ttl_slack))
      end
    end
    redis.call('HSET', rec, 'e', fmt(until_ms))
    redis.call('PEXPIRE', rec, 2 * ttl + ttl_slack)
    keep_gen(gen_key(rec, nonce), ttl)
    return {'extended', rule, subject, ttl, 0, 0}
  end
  local status, refunded = 'released', 0
  if action == 's' then
    for _, p in ipairs(parts) do
      if p.algo ~= 'c' and not (p.algo == 'k' or p.algo == 'K') and actual > p.capacity then
        return {'too_large', p.key, p.capacity}
      end
    end
    local gk = gen_key(rec, nonce)
    for _, p in ipairs(parts) do
      if p.algo ~= 'c' then
        -- A counter reset since the charge got it all back from the reset:
        -- correcting the fresh counter would give the estimate back twice.
        local current = p.gen
        if p.gen then
          current = tonumber(redis.call('HGET', gk, p.key)) or 0
        end
        if current == p.gen then
          settle_limit(p.key, p.algo, p.now_capacity or p.capacity, p.now_p1 or p.p1, p.now_p2 or p.p2, p.window,
            p.charged - actual)
        end
        if p.charged > actual then
          refunded = 1
        end
      end
    end
    status = 'settled'
  end
  local freed = 0
  for _, p in ipairs(parts) do
    if p.algo == 'c' then
      freed = freed + redis.call('ZREM', p.key, member_of(p))
    end
  end
  redis.call('HSET', rec, 'd', '1')
  if granted then
    -- A lease's return also says what it granted, so its holder's use
    -- (granted - unused) can be counted.
    return {status, rule, subject, 0, freed, refunded, granted}
  end
  return {status, rule, subject, 0, freed, refunded}
end
local function hold_op()
  return hold_apply(KEYS[1], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6], 7)
end

-- topup_op tops up the credits balance KEYS[1] once per idempotency
-- record KEYS[2] (its value the record's expiry, ms, so an injected time
-- judges it too), after the refills due. ARGV: 'topup', now, algorithm
-- ('k' or 'K'), refill amount, period table or '', max, 'a' (add) or 's'
-- (set), the value, the record's ttl ms. Reply: {balance, applied}.
-- Mirrors memory/credits.go.
local function topup_op()
  local key, idem = KEYS[1], KEYS[2]
  local algo, amount, tbl, maxb = ARGV[3], tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
  local op, value, ttl = ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
  local _, _, _, _, _, nxt, _, expire = credits(algo, amount, tbl, maxb, load(key, now), now, 0)
  if not nxt then
    error('sluice: the clock of Redis and of this instance are more than a calendar period apart')
  end
  local seen = redis.call('GET', idem)
  if seen and tonumber(seen) > now then
    return {nxt[2], 0}
  end
  if op == 's' then
    nxt[2] = value
  else
    nxt[2] = math.min(nxt[2] + value, max_credits)
  end
  store(key, nxt, 0, expire)
  redis.call('SET', idem, fmt(now + ttl), 'PX', ttl + ttl_slack)
  return {nxt[2], 1}
end

if hold_mode then
  return hold_op()
end
if topup_mode then
  return topup_op()
end

-- A check. With a hold, the key after the limits' is its record; a lease
-- (ARGV ends in 'L') is a reserved hold whose cost the script chooses, and
-- has one more key, the subject's demands (see lease_cost).
-- A renew (ARGV ends in 'R') is a lease that first returns the holder's
-- old lease: one more key, its record, and after the holder its nonce and
-- unused units.
local renewing = ARGV[#ARGV] == 'R'
local leasing = ARGV[#ARGV] == 'L' or renewing
local holding = ARGV[#ARGV] == 'H' or leasing
local nlimits = #KEYS
local reserve, hold_ttl, nonce, take_until = false, 0, '', now
if holding then
  nlimits = #KEYS - 1
  if renewing then
    nlimits = #KEYS - 3
  elseif leasing then
    nlimits = #KEYS - 2
  end
  local h = 2 + 4 * nlimits
  reserve = ARGV[h + 1] == '1'
  hold_ttl = tonumber(ARGV[h + 2])
  nonce = ARGV[h + 3]
  take_until = now + hold_ttl
end

local expired = 0
local function decide(i, c)
  local base = 2 + (i - 1) * 4
  local algo = ARGV[base + 1]
  local capacity = tonumber(ARGV[base + 2])
  if algo == 'c' then
    local allowed, remaining, reset, retry, write, gone = concurrency(KEYS[i], capacity, c, take_until)
    expired = expired + gone
    return allowed, remaining, reset, retry, write, nil, false
  end
  local allowed, remaining, reset, retry, write, nxt, extend, expire =
    decide_limit(algo, capacity, param(algo, ARGV[base + 3]), tonumber(ARGV[base + 4]), load(KEYS[i], now), c)
  if allowed == nil then
    error('sluice: the clock of Redis and of this instance are more than a calendar period apart')
  end
  return allowed, remaining, reset, retry, write, nxt, extend, expire
end

-- lease_cost records the holder's demand and returns its grant: what the
-- limits have left, shared in proportion to the live demands of every
-- holder when they ask for more (1 when nothing is left: the cost of the
-- check whose deny answers). Mirrors memory/leases.go and
-- sluice.LeaseShare. ARGV after the hold's: want, holder, then 'L' (or a
-- renew's old nonce, unused units and 'R'). The demands are a hash of
-- holder to "want:expiry ms".
local max_lease_holders = 1000
local function lease_cost()
  local h = 2 + 4 * nlimits
  local want, holder = tonumber(ARGV[h + 7]), ARGV[h + 8]
  local left = -1
  for i = 1, nlimits do
    local _, remaining = decide(i, 0)
    if left < 0 or remaining < left then
      left = remaining
    end
  end
  local dkey = KEYS[nlimits + 2]
  local demands = redis.call('HGETALL', dkey)
  local total, live, known = want, 0, false
  for j = 1, #demands, 2 do
    local w, e = string.match(demands[j + 1], '^(%d+):(%d+)$')
    if tonumber(e) <= now then
      redis.call('HDEL', dkey, demands[j])
    else
      live = live + 1
      if demands[j] == holder then
        known = true
      else
        total = total + tonumber(w)
      end
    end
  end
  if known or live < max_lease_holders then
    redis.call('HSET', dkey, holder, fmt(want) .. ':' .. fmt(now + hold_ttl))
    redis.call('PEXPIRE', dkey, math.max(redis.call('PTTL', dkey), hold_ttl + ttl_slack))
  end
  if left <= 0 then
    return 1
  elseif total <= left then
    return math.min(want, left)
  end
  return math.min(want, left, math.max(1, math.floor(left * want / total)))
end
local returned, returned_granted = '', 0
if renewing then
  -- The old lease's units go back first, so this grant can hand them out
  -- again. A return that gives back too much changes nothing: it is
  -- refused before anything is written.
  local h = 2 + 4 * nlimits
  local r = hold_apply(KEYS[#KEYS], 'l', tonumber(ARGV[h + 10]), ARGV[h + 4], ARGV[h + 9], #ARGV + 1)
  if r[1] == 'too_many' then
    return r
  end
  returned, returned_granted = r[1], r[7] or 0
end
if leasing then
  cost = lease_cost()
end

local results = {}
local all = true
for i = 1, nlimits do
  local allowed, remaining, reset, retry, write, nxt, extend, expire = decide(i, cost)
  results[i] = {allowed, remaining, reset, retry, write, nxt, extend, expire}
  all = all and allowed
end

local reply = {all and 1 or 0, now}
for i = 1, nlimits do
  local r = results[i]
  if not all and r[1] then
    -- Nothing is consumed: report this limit as a peek sees it.
    r = {decide(i, 0)}
  end
  if ARGV[2 + (i - 1) * 4 + 1] == 'c' then
    if all and r[5] then
      redis.call('ZADD', KEYS[i], take_until, nonce .. ':' .. fmt(cost))
      -- Kept a TTL past its last lease, so the next check can count the
      -- leases that expired unreleased (holders that crashed).
      redis.call('PEXPIRE', KEYS[i], r[3] + hold_ttl + ttl_slack)
    end
  elseif (all and r[5]) or r[7] then
    store(KEYS[i], r[6], r[3], r[8])
  end
  reply[#reply + 1] = r[1] and 1 or 0
  reply[#reply + 1] = r[2]
  reply[#reply + 1] = r[3]
  reply[#reply + 1] = r[4]
end

if all and holding then
  -- The hold's record: what each part took, so settling is exact.
  local h = 2 + 4 * nlimits
  local rec = KEYS[nlimits + 1]
  local fields = {'t', ARGV[h + 4], 'r', ARGV[h + 5], 's', ARGV[h + 6], 'e', fmt(take_until), 'ttl', fmt(hold_ttl)}
  local n = 0
  -- The generations of the reserved counters, so a settle can tell a reset
  -- in between. Only a subject once reset has a generation hash.
  local gk, gens = gen_key(rec, nonce), nil
  if reserve and redis.call('EXISTS', gk) == 1 then
    gens = true
    keep_gen(gk, hold_ttl)
  end
  for i = 1, nlimits do
    local base = 2 + (i - 1) * 4
    local algo = ARGV[base + 1]
    if algo == 'c' or reserve then
      n = n + 1
      local window = 0
      if algo == 's' or algo == 'f' or tabled(algo) then
        window = results[i][6][1]
      end
      local suffix = tostring(n)
      for _, kv in ipairs({{'k', KEYS[i]}, {'a', algo}, {'c', ARGV[base + 2]}, {'x', ARGV[base + 3]},
          {'y', ARGV[base + 4]}, {'w', fmt(cost)}, {'i', fmt(window)}}) do
        fields[#fields + 1] = kv[1] .. suffix
        fields[#fields + 1] = kv[2]
      end
      if algo ~= 'c' then
        local g = '0'
        if gens then
          g = redis.call('HGET', gk, KEYS[i]) or '0'
        end
        fields[#fields + 1] = 'g' .. suffix
        fields[#fields + 1] = g
      end
    end
  end
  fields[#fields + 1] = 'n'
  fields[#fields + 1] = tostring(n)
  redis.call('HSET', rec, unpack(fields))
  redis.call('PEXPIRE', rec, 2 * hold_ttl + ttl_slack)
end
reply[#reply + 1] = expired
if leasing then
  reply[#reply + 1] = cost
end
if renewing then
  reply[#reply + 1] = returned
  reply[#reply + 1] = returned_granted
end
return reply
