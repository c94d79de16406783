-- Extend leases, each only if the caller still holds it (compare-and-extend): one round trip
-- renews every lease a process holds.
--
-- KEYS[i]       lease key of the i-th lease
-- ARGV[2i - 1]  its holder: "<owner>:<token>", as acquire.lua stored it
-- ARGV[2i]      its TTL in milliseconds
--
-- Returns one number per lease: 1 when extended, 0 when it expired or another holder has it.

local renewed = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[2 * i - 1] then
    renewed[i] = redis.call('PEXPIRE', key, ARGV[2 * i])
  else
    renewed[i] = 0
  end
end
return renewed
