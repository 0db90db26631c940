#!lua flags=allow-oom
-- deadadmin: ARGV 'requeue' or 'purge'. Takes up to 500 dead letters off
-- the list per call (run it until none is left): requeue puts each back
-- in the list of its epoch (rank 0 in a coordinated queue) with its
-- delivery count reset; purge deletes them. Returns {how many this call,
-- how many are left}.
--! include lib
local nq = noqueue() if nq then return nq end
local ids = redis.call('LPOP', pre .. 'dead', 500) or {}
local ranks = tonumber(redis.call('HGET', meta, 'ranks') or '0')
for _, id in ipairs(ids) do
  local src = pre .. 'deadb:' .. id
  -- An id pushed anew since it died is queued already: only its old frame goes.
  if ARGV[1] == 'requeue' and redis.call('EXISTS', src) == 1 and
     redis.call('HEXISTS', pre .. 'dlv', id) == 0 then
    redis.call('INCRBY', pre .. 'bytes', redis.call('STRLEN', src))
    redis.call('RENAME', src, pre .. 'b:' .. id)
    redis.call('HSET', pre .. 'dlv', id, '0')
    redis.call('RPUSH', requeue_list(id, ranks > 0 and '0' or nil), id)
  else
    redis.call('DEL', src)
  end
  redis.call('HDEL', pre .. 'deadinfo', id)
end
return {#ids, redis.call('LLEN', pre .. 'dead')}
