"""Lua scripts of the Redis backend. Each runs atomically, so window, state and probe slot move together.

KEYS (all share the circuit's hash tag `{provider/model}`, see redis_backend.circuit_tag):
  1 = state hash, 2 = sorted set of the counted outcomes, 3 = sorted set of the failures, 4 = sorted set
  of released probe tickets (score = when the ticket may be forgotten, Redis TIME ms).
The window sets hold one member per `record` call, not per outcome: score = the call's time in ms,
member = `seq:count` (a per-circuit sequence number and how many outcomes that call counted). The state
hash keeps their running sums (`wt`, `wf`), so a call costs the same for one outcome or a thousand;
an absent sum is rebuilt from its set, and an empty or missing set counts zero.
ARGV[1] = time override in ms ('' in production: the script reads Redis TIME, the one clock every
process shares). ARGV[2] = transition channel, ARGV[3] = provider, ARGV[4] = model.
Every script replies with the eight circuit fields of `reply()` after its own leading values.
"""

from health.breaker.types import WINDOW_MAX

PRELUDE = r"""
local function now_ms()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Redis TIME even in test mode: a caller's deadline is real time (its socket timeout), not the breaker's clock.
local function real_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function num(v)
  if v == false or v == nil or v == '' then return nil end
  return tonumber(v)
end
local function fmt(n)
  if n == nil then return '' end
  return string.format('%d', n)
end
local function load()
  local v = redis.call('HMGET', KEYS[1], 'state', 'gen', 'opened_at', 'cooldown_until', 'consec',
                       'lf_at', 'lf_label', 'probe_at', 'wt', 'wf')
  return {
    exists = v[1] ~= false,
    state = v[1] or 'closed', gen = tonumber(v[2] or '0'), opened_at = num(v[3]),
    cooldown_until = num(v[4]), consec = tonumber(v[5] or '0'), lf_at = num(v[6]),
    lf_label = v[7] or '', probe_at = num(v[8]), wt = num(v[9]), wf = num(v[10]),
  }
end
local function save(c)
  redis.call('HSET', KEYS[1], 'state', c.state, 'gen', fmt(c.gen), 'opened_at', fmt(c.opened_at),
             'cooldown_until', fmt(c.cooldown_until), 'consec', fmt(c.consec), 'lf_at', fmt(c.lf_at),
             'lf_label', c.lf_label, 'probe_at', fmt(c.probe_at), 'wt', fmt(c.wt), 'wf', fmt(c.wf))
end
-- The window sets: how many outcomes a member stands for, and the sum of a list of members.
local function sum(members)
  local total = 0
  for _, m in ipairs(members) do
    local at = string.find(m, ':', 1, true)
    total = total + (at and tonumber(string.sub(m, at + 1)) or 1)
  end
  return total
end
-- The outcomes of one window set newer than `horizon` (ms), from its stored sum (nil = rebuild it).
-- `trim` also removes the older members; otherwise nothing is written.
local function live(key, stored, horizon, trim)
  if redis.call('EXISTS', key) == 0 then return 0 end
  if stored == nil then stored = sum(redis.call('ZRANGE', key, 0, -1)) end
  local stale = redis.call('ZRANGEBYSCORE', key, '-inf', horizon)
  if #stale == 0 then return stored end
  if trim then redis.call('ZREMRANGEBYSCORE', key, '-inf', horizon) end
  return stored - sum(stale)
end
local function reply(c)
  return {c.state, fmt(c.gen), fmt(c.opened_at), fmt(c.cooldown_until), fmt(c.consec), fmt(c.lf_at),
          c.lf_label, fmt(c.probe_at)}
end
local function publish(c)
  redis.call('PUBLISH', ARGV[2], cjson.encode({p = ARGV[3], m = ARGV[4], f = reply(c)}))
end
local function concat(head, c)
  for _, v in ipairs(reply(c)) do table.insert(head, v) end
  return head
end
"""

# ARGV[5] = probe timeout in ms, [6] = the caller's deadline in Redis TIME ms ('' = none), [7] = the
# caller's ticket ('' = none). Reply: allowed ('1', '0', or 'late' when the deadline had passed: the
# caller's clock offset may be wrong), probe, then the circuit.
ALLOW = (
    PRELUDE
    + r"""
local now = now_ms()
local c = load()
if c.state == 'closed' then return concat({'1', '0'}, c) end
if c.state == 'open' then
  if now < c.cooldown_until then return concat({'0', '0'}, c) end
elseif c.probe_at ~= nil and now < c.probe_at + tonumber(ARGV[5]) then
  return concat({'0', '0'}, c)
end
-- The caller stopped waiting for this reply (the script runs late, say after a frozen connection resumed)
-- or has released its ticket: a slot granted now would be held by nobody until the probe timeout.
if ARGV[6] ~= '' or ARGV[7] ~= '' then
  local real = real_ms()
  if ARGV[6] ~= '' and real > tonumber(ARGV[6]) then return concat({'late', '0'}, c) end
  local forget_at = ARGV[7] ~= '' and redis.call('ZSCORE', KEYS[4], ARGV[7])
  if forget_at and tonumber(forget_at) > real then return concat({'0', '0'}, c) end
end
-- Half-open with a free (or abandoned) slot: this caller is the probe.
c.state = 'half_open'
c.probe_at = now
c.gen = c.gen + 1
save(c)
redis.call('HSET', KEYS[1], 'probe_ticket', ARGV[7])
publish(c)
return concat({'1', '1'}, c)
"""
)

# ARGV[5] = how long to remember the tickets (ms), [6..] = tickets whose allow() the caller gave up on.
# Frees the slot if one of them holds it; remembers each ticket (until Redis TIME + ARGV[5]) so that its
# allow, should it still arrive, grants nothing. Tickets past their time are dropped on every release, so
# the set holds only the releases of the last ARGV[5] ms. Reply: 'released' | 'ignored', then the circuit.
RELEASE = (
    PRELUDE
    + r"""
local real = real_ms()
local forget_at = real + tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', real)
for i = 6, #ARGV do redis.call('ZADD', KEYS[4], forget_at, ARGV[i]) end
-- The key goes when its last member does (another engine may remember tickets for longer).
local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[4], tonumber(last[2])) end
local c = load()
local holder = redis.call('HGET', KEYS[1], 'probe_ticket')
if c.state == 'half_open' and c.probe_at ~= nil and holder then
  for i = 6, #ARGV do
    if ARGV[i] == holder then
      c.probe_at = nil
      c.gen = c.gen + 1
      save(c)
      redis.call('HDEL', KEYS[1], 'probe_ticket')
      publish(c)
      return concat({'released'}, c)
    end
  end
end
return concat({'ignored'}, c)
"""
)

# ARGV[5] ticket generation, [6] '1' when the ticket is the probe, [7] threshold, [8] window ms,
# [9] minimum requests, [10] initial cooldown ms, [11] cooldown cap ms, then runs from [12]: verdict
# (s/f/c), failure label, count. A probe's call has one run of one; a closed circuit's call carries every
# outcome of one generation that the caller collected since its last call, in order, run-length encoded.
# The runs are applied one outcome at a time, as if each were its own call (the circuit opens at the
# outcome that crosses the threshold and the rest are ignored), but the window gains one member per key.
# Reply: 'ignored' | 'counted' | 'returned' (a cancelled probe gave its slot back) | 'transition' (this
# call opened, reopened or closed the circuit: the caller emits the one event of it), then the script's
# time (ms), the window's failures and total ('' unless counted in a closed window), then the circuit.
RECORD = (
    PRELUDE
    + f"local KEEP_MS = {WINDOW_MAX * 1000}\n"
    + r"""
local now = now_ms()
local c = load()
local function answer(status, fails, total)
  return concat({status, fmt(now), fmt(fails), fmt(total)}, c)
end
if tonumber(ARGV[5]) ~= c.gen then return answer('ignored') end
local probe = ARGV[6] == '1'
local function open()
  c.consec = c.consec + 1
  local cap = math.max(tonumber(ARGV[11]), tonumber(ARGV[10]))
  local cd = tonumber(ARGV[10]) * math.pow(2, math.min(c.consec - 1, 20))
  if cd > cap then cd = cap end
  c.state = 'open'
  c.opened_at = now
  c.cooldown_until = now + cd
  c.probe_at = nil
  c.gen = c.gen + 1
end
if probe then
  local verdict = ARGV[12]
  if verdict == 'c' then
    if c.state == 'half_open' and c.probe_at ~= nil then
      c.probe_at = nil  -- a cancelled probe gives the slot back at once
      -- Every change bumps the generation, so mirrors can order pub/sub messages and replies.
      c.gen = c.gen + 1
      save(c)
      publish(c)
      return answer('returned')
    end
    return answer('ignored')
  end
  if c.state ~= 'half_open' then return answer('ignored') end
  if verdict == 'f' then
    c.lf_at = now
    c.lf_label = ARGV[13]
    open()
  else
    c.state = 'closed'
    c.gen = c.gen + 1
    c.consec = 0
    c.cooldown_until = nil
    c.opened_at = nil
    c.probe_at = nil
    c.wt = 0
    c.wf = 0
    redis.call('DEL', KEYS[2], KEYS[3])
  end
  save(c)
  publish(c)
  return answer('transition')
end
if c.state ~= 'closed' then return answer('ignored') end
local window = tonumber(ARGV[8])
local horizon = fmt(now - window)
local total = live(KEYS[2], c.wt, horizon, true)
local fails = live(KEYS[3], c.wf, horizon, true)
local threshold, minimum = tonumber(ARGV[7]), tonumber(ARGV[9])
local added, added_failures, opened = 0, 0, false
for i = 12, #ARGV - 2, 3 do
  local verdict, n = ARGV[i], tonumber(ARGV[i + 2])
  if verdict == 'f' then
    -- The circuit opens at the first failure after which both the threshold and the minimum are met.
    local need = math.max(threshold - fails, minimum - total, 1)
    if need <= n then n = need; opened = true end
    fails = fails + n
    added_failures = added_failures + n
    c.lf_at = now
    c.lf_label = ARGV[i + 1]
  elseif verdict == 's' then
    -- A success can open it too: the failures already meet the threshold and it completes the minimum.
    if fails >= threshold then
      local need = math.max(minimum - total, 1)
      if need <= n then n = need; opened = true end
    end
  else
    n = 0  -- a cancelled call that was not the probe counts for nothing
  end
  total = total + n
  added = added + n
  if opened then break end
end
if added == 0 then return answer('ignored') end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('ZADD', KEYS[2], fmt(now), seq .. ':' .. added)
if added_failures > 0 then redis.call('ZADD', KEYS[3], fmt(now), seq .. ':' .. added_failures) end
-- Kept as long as the longest window allowed, not this one: reads never drop events, so a window widened after
-- a quiet spell counts what the wider window covers, as the memory engine does. Recording still trims.
redis.call('PEXPIRE', KEYS[2], math.max(window, KEEP_MS))
redis.call('PEXPIRE', KEYS[3], math.max(window, KEEP_MS))
c.wt = total
c.wf = fails
if opened then
  open()
  save(c)
  publish(c)
  return answer('transition', fails, total)
end
save(c)
return answer('counted', fails, total)
"""
)

# ARGV[5] window ms. Reply: exists, now, failures, total, then the circuit. Writes nothing.
SNAPSHOT = (
    PRELUDE
    + r"""
local now = now_ms()
local c = load()
local horizon = fmt(now - tonumber(ARGV[5]))
local fails = live(KEYS[3], c.wf, horizon, false)
local total = live(KEYS[2], c.wt, horizon, false)
local exists = '0'
if c.exists then exists = '1' end
return concat({exists, fmt(now), fmt(fails), fmt(total)}, c)
"""
)

# ARGV[5] window ms. Reply: now, failures and total before, the circuit before, then the circuit after.
RESET = (
    PRELUDE
    + r"""
local now = now_ms()
local c = load()
local horizon = fmt(now - tonumber(ARGV[5]))
local fails = live(KEYS[3], c.wf, horizon, false)
local total = live(KEYS[2], c.wt, horizon, false)
local head = concat({fmt(now), fmt(fails), fmt(total)}, c)
redis.call('DEL', KEYS[2], KEYS[3])
local fresh = {state = 'closed', gen = c.gen + 1, consec = 0, lf_label = '', wt = 0, wf = 0}
redis.call('DEL', KEYS[1])
save(fresh)
publish(fresh)
for _, v in ipairs(reply(fresh)) do table.insert(head, v) end
return head
"""
)

# Put back an open circuit Redis has lost (an empty restart, a flush), as this process last knew it, unless the
# circuit is there again (another process restored it, or traffic made it anew). ARGV[5..10] = gen, opened_at,
# cooldown_until, consec, lf_at, lf_label. Reply: '1' restored / '0' left alone, then the circuit.
RESTORE = (
    PRELUDE
    + r"""
local c = load()
if c.exists then return concat({'0'}, c) end
c = {state = 'open', gen = tonumber(ARGV[5]), opened_at = num(ARGV[6]), cooldown_until = num(ARGV[7]),
     consec = tonumber(ARGV[8]), lf_at = num(ARGV[9]), lf_label = ARGV[10], wt = 0, wf = 0}
save(c)
publish(c)
return concat({'1'}, c)
"""
)

SCRIPTS = {
    "allow": ALLOW,
    "record": RECORD,
    "snapshot": SNAPSHOT,
    "reset": RESET,
    "release": RELEASE,
    "restore": RESTORE,
}
