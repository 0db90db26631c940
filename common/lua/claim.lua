#!lua flags=allow-oom
-- claim: ARGV cid, id, now_ms, epoch, rank. Counts a delivery of an id
-- that BLMOVE moved into the consumer's pending list and returns the
-- count; an end marker goes back to its list (for the other consumers) and
-- returns 0.
--! include lib
redis.call('HSET', pre .. 'consumers', ARGV[1], ARGV[3])
if ARGV[5] ~= '' then redis.call('HSET', pre .. 'crank', ARGV[1], ARGV[5]) end
if string.sub(ARGV[2], 1, 4) == 'eof:' then
  redis.call('LREM', pre .. 'pending:' .. ARGV[1], 1, ARGV[2])
  redis.call('RPUSH', ready_key(ARGV[4], ARGV[5]), ARGV[2])
  return 0
end
return redis.call('HINCRBY', pre .. 'dlv', ARGV[2], 1)
