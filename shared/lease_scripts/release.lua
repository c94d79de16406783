-- Delete a lease, only if the caller still holds it (compare-and-delete).
--
-- KEYS[1]  lease key
-- ARGV[1]  holder: "<owner>:<token>", as acquire.lua stored it
--
-- Returns 1 when deleted, 0 when the lease expired or another holder has it.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
