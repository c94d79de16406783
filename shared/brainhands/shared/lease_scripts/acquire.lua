-- Take free leases and hand out their fencing tokens, each atomically: one round trip
-- acquires every lease a batch of callers asks for.
--
-- KEYS[1]       the deployment's went-back flag: while it exists (a worker found the store
--               behind a witness) every acquisition is refused
-- KEYS[4i - 2]  lease key of the i-th resource: "<owner>:<token>" of the current holder,
--               expiring with the lease
-- KEYS[4i - 1]  its fence key: the resource's token counter, expiring ARGV[2] ms after its
--               last use
-- KEYS[4i]      its witness key: what the store had committed for the resource when a
--               holder last released it (release.lua); it lives as long as the counter
-- KEYS[4i + 1]  its handed-over key: the token of the last holder that let go of the lease
--               with nothing of its own in flight (release.lua)
-- ARGV[1]       lease TTL in milliseconds
-- ARGV[2]       counter TTL in milliseconds: an idle resource's counter is forgotten, as in a
--               restart, and the store's refusal raises the next one past its fence
-- ARGV[2i + 1]  owner of the i-th acquisition
-- ARGV[2i + 2]  its floor: the token must be greater than this (the highest fence the store
--               has seen), because the counter starts over when Redis restarts empty
--
-- Returns one triple per resource: {token, witness, handed} with the new token, the witness
-- (nil when none) and 1 when the previous token's holder handed the lease over (its token is
-- the handed-over key's and the counter's: no holder of an earlier token can still be at
-- work either, since the first acquisition after one that was not handed over claims the
-- store's fence at once), else 0; {0, nil, 0} when another holder has the lease, or
-- {-1, flag, 0} for every resource while the went-back flag is set (its value: the
-- evidence, as JSON).

local flag = redis.call('GET', KEYS[1])
local answers = {}
for i = 1, (#KEYS - 1) / 4 do
  local lease, fence = KEYS[4 * i - 2], KEYS[4 * i - 1]
  local witness, handed = KEYS[4 * i], KEYS[4 * i + 1]
  if flag then
    answers[i] = {-1, flag, 0}
  elseif redis.call('EXISTS', lease) == 1 then
    answers[i] = {0, false, 0}
  else
    local counter = tonumber(redis.call('GET', fence) or '0')
    local handed_over = 0
    local floor = tonumber(ARGV[2 * i + 2])
    if counter < floor then
      redis.call('SET', fence, ARGV[2 * i + 2])
    elseif floor == 0 and counter > 0 and tonumber(redis.call('GET', handed) or '0') == counter then
      -- (an acquisition with a floor follows a refusal: Redis was behind the store)
      handed_over = 1
    end
    local token = redis.call('INCR', fence)
    redis.call('PEXPIRE', fence, ARGV[2])
    redis.call('PEXPIRE', witness, ARGV[2])
    -- The token is part of the holder so that a stale Lease of the same owner cannot renew
    -- or release a newer acquisition.
    redis.call('SET', lease, string.format('%s:%d', ARGV[2 * i + 1], token), 'PX', ARGV[1])
    answers[i] = {token, redis.call('GET', witness), handed_over}
  end
end
return answers
