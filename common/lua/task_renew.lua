#!lua flags=allow-oom
-- task_renew: ARGV producer id, 'epoch:shard', lease_ms. Extends the
-- task's lease on the server's clock, after returning to the waiting
-- lists every task whose lease ran out (producers blocked on room renew
-- while no one claims: a killed producer's task must not wait for a
-- consumer's reap). Returns {1, earlier}, earlier 1 when
-- a task of an epoch below this one waits for a producer (a producer
-- blocked on room with this task then hands it back and takes that one:
-- docs/JOBS.md), or 0 when the task is no longer this producer's.
--! include lib
local nq = noqueue() if nq then return nq end
local now = now_ms()
local pid, t = ARGV[1], ARGV[2]
redis.call('HSET', pre .. 'producers', pid, now)
reap_tasks(now)
if redis.call('HGET', pre .. 'towner', t) ~= pid then return 0 end
redis.call('ZADD', pre .. 'tlease', now + tonumber(ARGV[3]), t)
local earlier = 0
local st = redis.call('HMGET', jrun, 'epoch_open', 'twaiting', 'tscan')
if tonumber(st[2] or '0') > 0 then
  local mine = tonumber(string.match(t, '^(%d+):'))
  local e = math.max(tonumber(st[1] or '0'), tonumber(st[3] or '0'))
  for k = e, math.min(mine - 1, e + 63) do
    if redis.call('LLEN', tasks_key(k)) > 0 then earlier = 1 break end
  end
end
return {1, earlier}
