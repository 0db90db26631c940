#!lua flags=allow-oom
-- task_fail: ARGV producer id, 'epoch:shard', error, handback, and
-- optionally resume. With handback '1' the task goes back untouched (a
-- producer shutting down, or turning to a partition with room); resume is
-- then the seq up to which its batches are known to be stored, where the
-- next claim starts. Otherwise the attempt counts, and after max_attempts
-- the task is failed. Returns 1, or 0 when the task is no longer this
-- producer's.
--! include lib
if redis.call('HGET', pre .. 'towner', ARGV[2]) ~= ARGV[1] then return 0 end
if ARGV[4] == '1' and ARGV[5] and
   tonumber(ARGV[5]) > tonumber(redis.call('HGET', pre .. 'tresume', ARGV[2]) or '0') then
  redis.call('HSET', pre .. 'tresume', ARGV[2], ARGV[5])
end
task_failed(ARGV[2], ARGV[3], ARGV[4] ~= '1')
return 1
