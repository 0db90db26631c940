#!lua flags=allow-oom
-- claim: ARGV cid, token, fresh, id, epoch, rank. For an id that BLMOVE
-- moved from the list of epoch into the consumer's pending list: renews
-- the consumer's lease (lib.lua: enter) and returns the id's delivery
-- count, this one included. The end marker of epoch goes back to its
-- list for the other consumers (returns 0); anything that is not a batch
-- id or a batch the queue holds, and a marker that is not epoch's posted
-- end, goes to the dead letters (returns -1).
--! include lib
local nq = noqueue() if nq then return nq end
local now = now_ms()
local cid, id, ep = ARGV[1], ARGV[4], ARGV[5]
local err = enter(cid, ARGV[2], ARGV[3], ARGV[6], now)
if err then return err end
local pending = pre .. 'pending:' .. cid
if true_marker(id, ep) then
  redis.call('LREM', pending, 1, id)
  redis.call('RPUSH', ready_key(ep, ARGV[6]), id)
  return 0
end
-- dlv counts the deliveries that ended without an acknowledgement.
local d = redis.call('HGET', pre .. 'dlv', id)
if d then return tonumber(d) + 1 end   -- (an id dlv holds is a batch id: take.lua)
redis.call('LREM', pending, 1, id)
if marker_epoch(id) then
  dead_letter(id, 'an end marker in the list of epoch ' .. ep .. ' that is not its posted end', now)
elseif valid_id(id) then
  dead_letter(id, 'not a batch the queue holds', now)
else
  dead_letter(id, 'not a batch id', now)
end
final_if_drained()
return -1
