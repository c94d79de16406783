-- Take free leases and hand out their fencing tokens, each atomically: one round trip
-- acquires every lease a batch of callers asks for.
--
-- KEYS[2i - 1]  lease key of the i-th resource: "<owner>:<token>" of the current holder,
--               expiring with the lease
-- KEYS[2i]      its fence key: the resource's token counter, expiring ARGV[2] ms after its
--               last use
-- ARGV[1]       lease TTL in milliseconds
-- ARGV[2]       counter TTL in milliseconds: an idle resource's counter is forgotten, as in a
--               restart, and the store's refusal raises the next one past its fence
-- ARGV[2i + 1]  owner of the i-th acquisition
-- ARGV[2i + 2]  its floor: the token must be greater than this (the highest fence the store
--               has seen), because the counter starts over when Redis restarts empty
--
-- Returns one number per resource: the new token, or 0 when another holder has the lease.

local tokens = {}
for i = 1, #KEYS / 2 do
  local lease, fence = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('EXISTS', lease) == 1 then
    tokens[i] = 0
  else
    local counter = tonumber(redis.call('GET', fence) or '0')
    if counter < tonumber(ARGV[2 * i + 2]) then
      redis.call('SET', fence, ARGV[2 * i + 2])
    end
    local token = redis.call('INCR', fence)
    redis.call('PEXPIRE', fence, ARGV[2])
    -- The token is part of the holder so that a stale Lease of the same owner cannot renew
    -- or release a newer acquisition.
    redis.call('SET', lease, string.format('%s:%d', ARGV[2 * i + 1], token), 'PX', ARGV[1])
    tokens[i] = token
  end
end
return tokens
