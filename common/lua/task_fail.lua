#!lua flags=allow-oom
-- task_fail: ARGV producer id, 'epoch:shard', error, handback. With
-- handback '1' the task goes back untouched (a producer shutting down);
-- otherwise the attempt counts, and after max_attempts the task is failed.
-- Returns 1, or 0 when the task is no longer this producer's.
--! include lib
if redis.call('HGET', pre .. 'towner', ARGV[2]) ~= ARGV[1] then return 0 end
task_failed(ARGV[2], ARGV[3], ARGV[4] ~= '1')
return 1
