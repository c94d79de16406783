-- Delete leases, each only if the caller still holds it (compare-and-delete), and record what
-- the store had committed for each resource: one round trip releases every lease a batch of
-- callers lets go of.
--
-- KEYS[3i - 2]  lease key of the i-th lease
-- KEYS[3i - 1]  its witness key (see acquire.lua)
-- KEYS[3i]      its handed-over key (see acquire.lua)
-- ARGV[1]       counter TTL in milliseconds: the witness lives as long as the fence key
-- ARGV[2]       handed-over TTL in milliseconds
-- ARGV[3i]      the i-th lease's holder: "<owner>:<token>", as acquire.lua stored it
-- ARGV[3i + 1]  what its holder committed last -- a session's version, an operation's final
--               fence -- or "" for nothing. Recorded even when the lease had expired: a
--               commit the store acknowledged is a fact whoever holds the lease now; the
--               larger value is kept, since the store only moves forward.
-- ARGV[3i + 2]  its token if the holder hands the lease over (nothing of its own is in
--               flight: the next holder may claim the store's fence with its first commit),
--               else "". Recorded only when the lease is deleted here.
--
-- Returns one number per lease: 1 when deleted, 0 when it expired or another holder has it.

local released = {}
for i = 1, #KEYS / 3 do
  local lease, witness, handed = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  if redis.call('GET', lease) == ARGV[3 * i] then
    released[i] = redis.call('DEL', lease)
    if ARGV[3 * i + 2] ~= '' then
      redis.call('SET', handed, ARGV[3 * i + 2], 'PX', ARGV[2])
    end
  else
    released[i] = 0
  end
  local committed = tonumber(ARGV[3 * i + 1])
  if committed and committed > tonumber(redis.call('GET', witness) or '-1') then
    redis.call('SET', witness, ARGV[3 * i + 1], 'PX', ARGV[1])
  end
end
return released
