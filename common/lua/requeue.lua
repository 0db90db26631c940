#!lua flags=allow-oom
-- requeue: ARGV cid, now_ms, then the ids taken but never handed to the
-- application. Hands back everything the consumer holds (a closing
-- consumer) and unregisters it. Returns how many batches went back.
--! include lib
local unseen = {}
for i = 3, #ARGV do unseen[ARGV[i]] = true end
local maxd = tonumber(redis.call('HGET', meta, 'max_deliveries') or '0')
local n = give_back(ARGV[1], maxd, ARGV[2], unseen)
drop_consumer(ARGV[1])
final_if_drained()
return n
