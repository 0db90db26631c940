#!lua flags=allow-oom
-- requeue: ARGV cid, token, then the ids the closing consumer's
-- application still holds. Hands back everything the consumer holds and
-- unregisters it; what its application received counts a delivery
-- (lib.lua: give_back). A consumer whose id another process took over
-- touches nothing. Returns how many batches went back.
--! include lib
local nq = noqueue() if nq then return nq end
local now = now_ms()
local cid = ARGV[1]
local cur = redis.call('HGET', pre .. 'ctoken', cid)
if cur and cur ~= ARGV[2] then return 0 end
local held = {}
for i = 3, #ARGV do held[ARGV[i]] = true end
local n = give_back(cid, cur and max_deliveries() or 0, now, held)
if cur then drop_consumer(cid) end
final_if_drained()
return n
