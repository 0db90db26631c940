#!lua flags=allow-oom
-- delete: no ARGV. Removes every key of the queue; returns how many.
--! include lib
if redis.call('EXISTS', meta) == 0 then
  return redis.error_reply('NOQUEUE no such queue')
end
local n = 0
local function del(k) n = n + redis.call('DEL', k) end
for _, cid in ipairs(redis.call('HKEYS', pre .. 'consumers')) do
  del(pre .. 'pending:' .. cid)
  del(pre .. 'cstats:' .. cid)
end
for _, pid in ipairs(redis.call('HKEYS', pre .. 'producers')) do
  del(pre .. 'pstats:' .. pid)
end
for _, k in ipairs(redis.call('SMEMBERS', pre .. 'bitmaps')) do del(k) end
local epochs = tonumber(redis.call('HGET', job, 'epochs') or '1')
local ranks = tonumber(redis.call('HGET', meta, 'ranks') or '0')
for e = 0, epochs - 1 do
  del(ready_key(e, nil))
  del(pre .. 'stage:' .. e)
  for r = 0, ranks - 1 do del(ready_key(e, r)) end
end
-- Frames: of every batch held, of every dead letter, and of pushes whose
-- script never ran (a MULTI whose EVALSHA found no script).
for _, id in ipairs(redis.call('HKEYS', pre .. 'dlv')) do del(pre .. 'b:' .. id) end
for _, id in ipairs(redis.call('LRANGE', pre .. 'dead', 0, -1)) do del(pre .. 'deadb:' .. id) end
local cursor = '0'
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', pre .. 'in:*', 'COUNT', '1000')
  cursor = r[1]
  for _, k in ipairs(r[2]) do del(k) end
until cursor == '0'
for _, s in ipairs({'dlv', 'bytes', 'room', 'stats', 'estats', 'consumers', 'crank',
                    'producers', 'bitmaps', 'dead', 'deadinfo', 'job', 'taskdef',
                    'tasks', 'tlease', 'towner', 'tattempts', 'terr', 'tbatches', 'tresume',
                    'failed', 'edone', 'eof', 'task_wake'}) do
  del(pre .. s)
end
del(meta)
return n
