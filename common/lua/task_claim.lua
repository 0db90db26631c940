#!lua flags=allow-oom
-- task_claim: ARGV producer id, lease_ms, and optionally need_room.
-- Reaps expired task leases and silent producers (lib.lua:
-- reap_producers), then claims under a lease the next waiting
-- task of the lowest epoch that has one (the open epoch's first: the
-- consumers wait for it). Returns {'task', 'epoch:shard', definition,
-- attempt, batch_size, epochs, resume, shuffle_buffer, drop_remainder,
-- seed} (resume: the first seq to push, where a producer that handed the
-- task back stopped; the job's shuffle window in records, 0 for none;
-- drop_remainder '1' or '0'; seed '' when the job has none), {'wait'} when
-- every remaining task is claimed by someone else, {'done', failed tasks}
-- when the job is finished, {'nojob'} when there is none, and with need_room '1'
-- {'full'} when the queue is at its budget (nothing claimed).
--! include lib
local nq = noqueue() if nq then return nq end
local now = now_ms()
if redis.call('EXISTS', job) == 0 then return {'nojob'} end
redis.call('HSET', pre .. 'producers', ARGV[1], now)
-- (Before reading the job: a reaped task lowers tscan.)
reap_tasks(now)
reap_producers(now, lease_ms())
local st = redis.call('HMGET', jrun, 'state', 'epoch_open', 'twaiting', 'tscan')
local epochs = redis.call('HGET', job, 'epochs')
local waiting = tonumber(st[3] or '0')
if ARGV[3] == '1' and waiting > 0 then
  local m = redis.call('HMGET', meta, 'max_batches', 'max_bytes')
  if not has_room(held_count(),
                  tonumber(redis.call('GET', pre .. 'bytes') or '0'), 1,
                  tonumber(m[1]), tonumber(m[2]), false) then
    return {'full'}
  end
end
local t
if waiting > 0 then
  -- tscan: no task waits in an epoch below it (a hand-back lowers it).
  local e = math.max(tonumber(st[2] or '0'), tonumber(st[4] or '0'))
  while e < tonumber(epochs) do
    t = redis.call('LPOP', tasks_key(e))
    if t then break end
    e = e + 1
  end
  redis.call('HSET', jrun, 'tscan', e)
end
if not t then
  if redis.call('HGET', jrun, 'state') == 'finished' then
    return {'done', redis.call('LLEN', pre .. 'failed')}
  end
  return {'wait'}
end
redis.call('HINCRBY', jrun, 'twaiting', -1)
redis.call('ZADD', pre .. 'tlease', now + tonumber(ARGV[2]), t)
redis.call('HSET', pre .. 'towner', t, ARGV[1])
-- The server the claim was made on: task_done asks for a check of the
-- task's pushes when Redis restarted since (it may have lost some).
local rid = run_id()
if rid then redis.call('HSET', pre .. 'trun', t, rid) end
local attempt = redis.call('HINCRBY', pre .. 'tattempts', t, 1)
local shard = string.match(t, ':(%d+)$')
local j = redis.call('HMGET', job, 'batch_size', 'epochs', 'shuffle_buffer', 'drop_remainder',
                     'seed')
return {'task', t, redis.call('HGET', pre .. 'taskdef', shard), attempt, j[1], j[2],
        tonumber(redis.call('HGET', pre .. 'tresume', t) or '0'), j[3] or '0', j[4] or '0',
        j[5] or ''}
