#!lua flags=allow-oom
-- task_renew: ARGV producer id, 'epoch:shard', now_ms, lease_ms.
-- Returns 1, or 0 when the task is no longer this producer's.
local meta = KEYS[1]
local pre = string.sub(meta, 1, -5)
redis.call('EXISTS', meta, pre .. 'guard')   -- migration guard (lib.lua)
redis.call('HSET', pre .. 'producers', ARGV[1], ARGV[3])
if redis.call('HGET', pre .. 'towner', ARGV[2]) ~= ARGV[1] then return 0 end
redis.call('ZADD', pre .. 'tlease', tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2])
return 1
