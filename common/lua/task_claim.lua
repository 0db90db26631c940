#!lua flags=allow-oom
-- task_claim: ARGV producer id, now_ms, lease_ms, and optionally
-- need_room. Reaps expired task leases, then claims the next waiting task
-- under a lease. Returns {'task', 'epoch:shard', definition, attempt,
-- batch_size, epochs, resume} (resume: the first seq to push, where a
-- producer that handed the task back stopped), {'wait'} when every
-- remaining task is claimed by someone else, {'done'} when the job is
-- finished, {'nojob'} when there is none, and with need_room '1'
-- {'full'} when the queue is at its budget (nothing claimed).
--! include lib
local now = tonumber(ARGV[2])
if redis.call('EXISTS', job) == 0 then return {'nojob'} end
redis.call('HSET', pre .. 'producers', ARGV[1], ARGV[2])
reap_tasks(now)
if ARGV[4] == '1' and redis.call('LLEN', pre .. 'tasks') > 0 then
  local m = redis.call('HMGET', meta, 'max_batches', 'max_bytes')
  if redis.call('HLEN', pre .. 'dlv') >= tonumber(m[1]) or
     tonumber(redis.call('GET', pre .. 'bytes') or '0') >= tonumber(m[2]) then
    return {'full'}
  end
end
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
return {'task', t, redis.call('HGET', pre .. 'taskdef', shard), attempt, j[1], j[2],
        tonumber(redis.call('HGET', pre .. 'tresume', t) or '0')}
