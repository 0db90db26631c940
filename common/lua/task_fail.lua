#!lua flags=allow-oom
-- task_fail: ARGV producer id, 'epoch:shard', error, handback, and
-- optionally resume. With handback '1' the task goes back untouched to the
-- front of its epoch's list (a producer shutting down, turning to a
-- partition with room, or making way for an earlier epoch's task); resume
-- is then the seq up to which its batches are known to be stored, where
-- the next claim starts. Otherwise the failure counts an attempt, and
-- after max_attempts the task is failed. Returns 1, or 0 when the task is
-- no longer this producer's.
--! include lib
local nq = noqueue() if nq then return nq end
if redis.call('HGET', pre .. 'towner', ARGV[2]) ~= ARGV[1] then return 0 end
task_failed(ARGV[2], ARGV[3], ARGV[4] ~= '1', ARGV[4] == '1' and ARGV[5] or nil)
return 1
