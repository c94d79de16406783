-- Grant a tool call every limit it falls under, all or none, atomically (shared.limiter).
-- Time is Redis's own (TIME), so the clocks of the Hands do not matter.
--
-- KEYS[2i - 1]  rate key of the i-th limit: its theoretical arrival time (GCRA), in ms of
--               Redis's clock; it expires once it is in the past
-- KEYS[2i]      slots key of the i-th limit: a sorted set of the calls holding a slot, each
--               scored by its deadline (ms); a holder that dies stops renewing, and its
--               slot is dropped here once the deadline passes
-- ARGV[1]       the holder: who takes the slots
-- ARGV[2]       slot TTL in ms: the deadline is now + this, moved on by limit_renew.lua
-- ARGV[3]       how far ahead (ms) a start may be reserved: a call whose turn comes within
--               this is granted now, to start at its turn, so that the time it takes to
--               ask again is not lost from the rate
-- ARGV[3i + 1]  the i-th limit's interval in ms between two starts (0: no rate)
-- ARGV[3i + 2]  its tolerance in ms: how far ahead of the rate a burst may run
-- ARGV[3i + 3]  its concurrency (0: none)
--
-- Returns {1, start_in_ms} when every limit granted the call (its turn spent, its slots
-- taken): it starts start_in_ms from now; else {0, wait_ms, i, kind} for the first limit
-- that refused: kind 1 for a rate (wait_ms: until its turn is within reach), 2 for a
-- concurrency (wait_ms: until the earliest deadline, when a dead holder's slot would
-- free), and nothing is taken (expired slots are dropped).

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
local ttl = tonumber(ARGV[2])
local reach = tonumber(ARGV[3])
local limits = #KEYS / 2
local arrivals = {}
local start = 0
for i = 1, limits do
  local interval = tonumber(ARGV[3 * i + 1])
  local tolerance = tonumber(ARGV[3 * i + 2])
  local concurrency = tonumber(ARGV[3 * i + 3])
  local slots = KEYS[2 * i]
  if concurrency > 0 then
    redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
    if redis.call('ZCARD', slots) >= concurrency then
      local first = redis.call('ZRANGE', slots, 0, 0, 'WITHSCORES')
      return {0, math.ceil(tonumber(first[2]) - now), i, 2}
    end
  end
  if interval > 0 then
    local tat = math.max(tonumber(redis.call('GET', KEYS[2 * i - 1]) or '0'), now)
    local turn = tat - tolerance - now
    if turn > reach then
      return {0, math.ceil(turn - reach), i, 1}
    end
    arrivals[i] = tat + interval
    start = math.max(start, turn)
  end
end
for i = 1, limits do
  if arrivals[i] then
    local expires = math.ceil(arrivals[i] - now) + 1
    redis.call('SET', KEYS[2 * i - 1], string.format('%.3f', arrivals[i]), 'PX', expires)
  end
  if tonumber(ARGV[3 * i + 3]) > 0 then
    redis.call('ZADD', KEYS[2 * i], string.format('%.3f', now + ttl), ARGV[1])
    redis.call('PEXPIRE', KEYS[2 * i], ttl * 2)
  end
end
return {1, math.ceil(start)}
