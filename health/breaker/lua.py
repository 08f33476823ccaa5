"""Lua scripts of the Redis backend. Each runs atomically, so window, state and probe slot move together.

KEYS (all share the circuit's hash tag `{provider/model}`, see redis_backend.circuit_tag):
  1 = state hash, 2 = sorted set of every counted outcome, 3 = sorted set of the failures
  (score = time in ms, member = per-circuit sequence number), 4 = sorted set of released probe
  tickets (score = when the ticket may be forgotten, Redis TIME ms).
ARGV[1] = time override in ms ('' in production: the script reads Redis TIME, the one clock every
process shares). ARGV[2] = transition channel, ARGV[3] = provider, ARGV[4] = model.
Every script replies with the eight circuit fields of `reply()` after its own leading values.
"""

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
                       'lf_at', 'lf_label', 'probe_at')
  return {
    exists = v[1] ~= false,
    state = v[1] or 'closed', gen = tonumber(v[2] or '0'), opened_at = num(v[3]),
    cooldown_until = num(v[4]), consec = tonumber(v[5] or '0'), lf_at = num(v[6]),
    lf_label = v[7] or '', probe_at = num(v[8]),
  }
end
local function save(c)
  redis.call('HSET', KEYS[1], 'state', c.state, 'gen', fmt(c.gen), 'opened_at', fmt(c.opened_at),
             'cooldown_until', fmt(c.cooldown_until), 'consec', fmt(c.consec), 'lf_at', fmt(c.lf_at),
             'lf_label', c.lf_label, 'probe_at', fmt(c.probe_at))
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

# ARGV[5] ticket generation, [6] '1' when the ticket is the probe, [7] verdict s/f/c, [8] failure label,
# [9] threshold, [10] window ms, [11] minimum requests, [12] initial cooldown ms, [13] cooldown cap ms.
# Reply: 'ignored' | 'counted' | 'returned' (a cancelled probe gave its slot back) | 'transition' (this
# call opened, reopened or closed the circuit: the caller emits the one event of it), then the script's
# time (ms), the window's failures and total ('' unless counted in a closed window), then the circuit.
RECORD = (
    PRELUDE
    + r"""
local now = now_ms()
local c = load()
local function answer(status, fails, total)
  return concat({status, fmt(now), fmt(fails), fmt(total)}, c)
end
if tonumber(ARGV[5]) ~= c.gen then return answer('ignored') end
local probe = ARGV[6] == '1'
local verdict = ARGV[7]
if verdict == 'c' then
  if probe and c.state == 'half_open' and c.probe_at ~= nil then
    c.probe_at = nil  -- a cancelled probe gives the slot back at once
    -- Every change bumps the generation, so mirrors can order pub/sub messages and replies.
    c.gen = c.gen + 1
    save(c)
    publish(c)
    return answer('returned')
  end
  return answer('ignored')
end
local failed = verdict == 'f'
local function open()
  c.consec = c.consec + 1
  local cap = math.max(tonumber(ARGV[13]), tonumber(ARGV[12]))
  local cd = tonumber(ARGV[12]) * math.pow(2, math.min(c.consec - 1, 20))
  if cd > cap then cd = cap end
  c.state = 'open'
  c.opened_at = now
  c.cooldown_until = now + cd
  c.probe_at = nil
  c.gen = c.gen + 1
end
if probe then
  if c.state ~= 'half_open' then return answer('ignored') end
  if failed then
    c.lf_at = now
    c.lf_label = ARGV[8]
    open()
  else
    c.state = 'closed'
    c.gen = c.gen + 1
    c.consec = 0
    c.cooldown_until = nil
    c.opened_at = nil
    c.probe_at = nil
    redis.call('DEL', KEYS[2], KEYS[3])
  end
  save(c)
  publish(c)
  return answer('transition')
end
if c.state ~= 'closed' then return answer('ignored') end
local window = tonumber(ARGV[10])
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('ZADD', KEYS[2], fmt(now), seq)
if failed then
  redis.call('ZADD', KEYS[3], fmt(now), seq)
  c.lf_at = now
  c.lf_label = ARGV[8]
end
local horizon = fmt(now - window)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', horizon)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', horizon)
redis.call('PEXPIRE', KEYS[2], window)
redis.call('PEXPIRE', KEYS[3], window)
local total = redis.call('ZCARD', KEYS[2])
local fails = redis.call('ZCARD', KEYS[3])
if fails >= tonumber(ARGV[9]) and total >= tonumber(ARGV[11]) then
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
local horizon = '(' .. fmt(now - tonumber(ARGV[5]))
local fails = redis.call('ZCOUNT', KEYS[3], horizon, '+inf')
local total = redis.call('ZCOUNT', KEYS[2], horizon, '+inf')
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
local horizon = '(' .. fmt(now - tonumber(ARGV[5]))
local fails = redis.call('ZCOUNT', KEYS[3], horizon, '+inf')
local total = redis.call('ZCOUNT', KEYS[2], horizon, '+inf')
local head = concat({fmt(now), fmt(fails), fmt(total)}, c)
redis.call('DEL', KEYS[2], KEYS[3])
local fresh = {state = 'closed', gen = c.gen + 1, consec = 0, lf_label = ''}
redis.call('DEL', KEYS[1])
save(fresh)
publish(fresh)
for _, v in ipairs(reply(fresh)) do table.insert(head, v) end
return head
"""
)

SCRIPTS = {"allow": ALLOW, "record": RECORD, "snapshot": SNAPSHOT, "reset": RESET, "release": RELEASE}
