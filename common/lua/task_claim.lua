#!lua flags=allow-oom
-- task_claim: ARGV producer id, now_ms, lease_ms. Reaps expired task
-- leases, then claims the next waiting task under a lease. Returns
-- {'task', 'epoch:shard', definition, attempt, batch_size, epochs},
-- {'wait'} when every remaining task is claimed by someone else,
-- {'done'} when the job is finished, {'nojob'} when there is none.
--! include lib
local now = tonumber(ARGV[2])
if redis.call('EXISTS', job) == 0 then return {'nojob'} end
redis.call('HSET', pre .. 'producers', ARGV[1], ARGV[2])
reap_tasks(now)
local t = redis.call('LPOP', pre .. 'tasks')
if not t then
  if redis.call('HGET', job, 'state') == 'finished' then return {'done'} end
  return {'wait'}
end
redis.call('ZADD', pre .. 'tlease', now + tonumber(ARGV[3]), t)
redis.call('HSET', pre .. 'towner', t, ARGV[1])
local attempt = redis.call('HINCRBY', pre .. 'tattempts', t, 1)
local shard = string.match(t, ':(%d+)$')
local j = redis.call('HMGET', job, 'batch_size', 'epochs')
return {'task', t, redis.call('HGET', pre .. 'taskdef', shard), attempt, j[1], j[2]}
