-- Delete leases, each only if the caller still holds it (compare-and-delete), and record what
-- the store had committed for each resource: one round trip releases every lease a batch of
-- callers lets go of.
--
-- KEYS[2i - 1]  lease key of the i-th lease
-- KEYS[2i]      its witness key (see acquire.lua)
-- ARGV[1]       counter TTL in milliseconds: the witness lives as long as the fence key
-- ARGV[2i]      the i-th lease's holder: "<owner>:<token>", as acquire.lua stored it
-- ARGV[2i + 1]  what its holder committed last -- a session's version, an operation's final
--               fence -- or "" for nothing. Recorded even when the lease had expired: a
--               commit the store acknowledged is a fact whoever holds the lease now; the
--               larger value is kept, since the store only moves forward.
--
-- Returns one number per lease: 1 when deleted, 0 when it expired or another holder has it.

local released = {}
for i = 1, #KEYS / 2 do
  local lease, witness = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('GET', lease) == ARGV[2 * i] then
    released[i] = redis.call('DEL', lease)
  else
    released[i] = 0
  end
  local committed = tonumber(ARGV[2 * i + 1])
  if committed and committed > tonumber(redis.call('GET', witness) or '-1') then
    redis.call('SET', witness, ARGV[2 * i + 1], 'PX', ARGV[1])
  end
end
return released
