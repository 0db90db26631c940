#!lua flags=allow-oom
-- beat: ARGV kind ('consumer' or 'producer'), id, now_ms, rank ('' for
-- none), then field/value pairs of the sender's counters. Renews the
-- consumer's lease (or the producer's liveness) and publishes its counters.
--! include lib
local who = ARGV[1] == 'producer' and 'producers' or 'consumers'
local stats = (ARGV[1] == 'producer' and 'pstats:' or 'cstats:') .. ARGV[2]
redis.call('HSET', pre .. who, ARGV[2], ARGV[3])
if ARGV[4] ~= '' then redis.call('HSET', pre .. 'crank', ARGV[2], ARGV[4]) end
if #ARGV >= 6 then
  redis.call('HSET', pre .. stats, unpack(ARGV, 5))
end
return 1
