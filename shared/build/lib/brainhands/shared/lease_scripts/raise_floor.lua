-- Move a resource's token counter up to a floor; never down.
--
-- KEYS[1]  fence key: the resource's token counter
-- ARGV[1]  floor: the highest fence the store has seen for the resource
-- ARGV[2]  counter TTL in milliseconds (see acquire.lua)
--
-- Returns the counter afterwards.

local counter = tonumber(redis.call('GET', KEYS[1]) or '0')
if counter < tonumber(ARGV[1]) then
  counter = tonumber(ARGV[1])
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return counter
