#!lua flags=allow-oom
-- ack: ARGV cid, id, epoch, task, seq. Returns 1, or 0 when the consumer
-- no longer held the id (its lease expired and the batch was handed on).
--! include lib
if redis.call('LREM', pre .. 'pending:' .. ARGV[1], -1, ARGV[2]) == 0 then
  return 0
end
local size = forget(ARGV[2])
local bm = pre .. 'acked:' .. ARGV[3] .. ':' .. ARGV[4]
redis.call('SETBIT', bm, ARGV[5], 1)
redis.call('SADD', pre .. 'bitmaps', bm)
redis.call('HINCRBY', pre .. 'stats', 'acked', 1)
redis.call('HINCRBY', pre .. 'stats', 'acked_bytes', size)
redis.call('HINCRBY', pre .. 'estats', ARGV[3] .. ':acked', 1)
wake_producers()
return 1
