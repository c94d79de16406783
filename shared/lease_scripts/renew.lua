-- Extend a lease, only if the caller still holds it (compare-and-extend).
--
-- KEYS[1]  lease key
-- ARGV[1]  holder: "<owner>:<token>", as acquire.lua stored it
-- ARGV[2]  lease TTL in milliseconds
--
-- Returns 1 when extended, 0 when the lease expired or another holder has it.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
