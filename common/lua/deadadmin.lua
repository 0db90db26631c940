#!lua flags=allow-oom
-- deadadmin: ARGV 'requeue' or 'purge'. Requeue puts every dead letter
-- back in the list of its epoch (rank 0 in a coordinated queue) with its
-- delivery count reset; purge deletes them. Returns how many.
--! include lib
local ids = redis.call('LRANGE', pre .. 'dead', 0, -1)
if ARGV[1] == 'requeue' then
  local ranks = tonumber(redis.call('HGET', meta, 'ranks') or '0')
  for _, id in ipairs(ids) do
    local frame = redis.call('HGET', pre .. 'deaddata', id)
    if frame then
      redis.call('HSET', pre .. 'data', id, frame)
      redis.call('INCRBY', pre .. 'bytes', string.len(frame))
      redis.call('RPUSH', requeue_list(id, ranks > 0 and '0' or nil), id)
    end
  end
end
redis.call('DEL', pre .. 'dead', pre .. 'deadinfo', pre .. 'deaddata')
return #ids
