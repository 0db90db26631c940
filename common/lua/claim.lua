#!lua flags=allow-oom
-- claim: ARGV cid, id, now_ms, epoch, rank. For an id that BLMOVE moved
-- into the consumer's pending list: registers the consumer and returns the
-- id's delivery count, this one included; an end marker goes back to its
-- list (for the other consumers) and returns 0.
--! include lib
redis.call('HSET', pre .. 'consumers', ARGV[1], ARGV[3])
if ARGV[5] ~= '' then redis.call('HSET', pre .. 'crank', ARGV[1], ARGV[5]) end
if string.sub(ARGV[2], 1, 4) == 'eof:' then
  redis.call('LREM', pre .. 'pending:' .. ARGV[1], 1, ARGV[2])
  redis.call('RPUSH', ready_key(ARGV[4], ARGV[5]), ARGV[2])
  return 0
end
-- dlv counts the deliveries that ended without an acknowledgement.
return tonumber(redis.call('HGET', pre .. 'dlv', ARGV[2]) or '0') + 1
