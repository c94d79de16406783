-- Take a free lease and hand out its fencing token, atomically.
--
-- KEYS[1]  lease key: "<owner>:<token>" of the current holder, expiring with the lease
-- KEYS[2]  fence key: the resource's token counter, expiring ARGV[4] ms after its last use
-- ARGV[1]  owner
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  floor: the token must be greater than this (the highest fence the store has
--          seen), because the counter starts over when Redis restarts empty
-- ARGV[4]  counter TTL in milliseconds: an idle resource's counter is forgotten, as in a
--          restart, and the store's refusal raises the next one past its fence
--
-- Returns the new token, or 0 when another holder has the lease.

if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if counter < tonumber(ARGV[3]) then
  redis.call('SET', KEYS[2], ARGV[3])
end
local token = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
-- The token is part of the holder so that a stale Lease of the same owner cannot renew or
-- release a newer acquisition.
redis.call('SET', KEYS[1], string.format('%s:%d', ARGV[1], token), 'PX', ARGV[2])
return token
