-- Delete leases, each only if the caller still holds it (compare-and-delete): one round trip
-- releases every lease a batch of callers lets go of.
--
-- KEYS[i]  lease key of the i-th lease
-- ARGV[i]  its holder: "<owner>:<token>", as acquire.lua stored it
--
-- Returns one number per lease: 1 when deleted, 0 when it expired or another holder has it.

local released = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i] then
    released[i] = redis.call('DEL', key)
  else
    released[i] = 0
  end
end
return released
