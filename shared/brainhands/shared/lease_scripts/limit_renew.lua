-- Move on the deadlines of held concurrency slots (limit_take.lua), each only if its holder
-- still holds it: one round trip renews every slot a Hands holds.
--
-- KEYS[i]   slots key of the i-th slot
-- ARGV[1]   slot TTL in ms: each deadline becomes now + this, by Redis's clock
-- ARGV[i + 1]  the i-th slot's holder
--
-- Returns one number per slot: 1 when renewed, 0 when it was gone (its deadline passed, or
-- Redis restarted empty).

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
local ttl = tonumber(ARGV[1])
local renewed = {}
for i, slots in ipairs(KEYS) do
  if redis.call('ZSCORE', slots, ARGV[i + 1]) then
    redis.call('ZADD', slots, 'XX', string.format('%.3f', now + ttl), ARGV[i + 1])
    redis.call('PEXPIRE', slots, ttl * 2)
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
