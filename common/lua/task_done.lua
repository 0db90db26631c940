#!lua flags=allow-oom
-- task_done: ARGV producer id, 'epoch:shard', batches pushed, and
-- optionally the records it did not push (drop_remainder: its short last
-- batch). Marks the task done (every batch of it is stored), adds those
-- records to the epoch's <e>:dropped_records, and ends its epoch when it
-- was the last. Returns 1, or 0 when the task is no longer this producer's
-- (its lease ran out; whoever redoes it pushes the same ids, which Redis
-- drops as duplicates), or 2, changing nothing, when Redis restarted
-- since the task was claimed or last checked (trun): it may have come
-- back without pushes it had answered, so the producer checks them
-- (task_check) first.
--! include lib
local nq = noqueue() if nq then return nq end
local t = ARGV[2]
local dropped = ARGV[4] or '0'
if not string.match(dropped, '^%d+$') or #dropped > 15 then
  return redis.error_reply('INVALID task_done: dropped records ' .. dropped .. ' is not a count')
end
if redis.call('HGET', pre .. 'towner', t) ~= ARGV[1] then return 0 end
local rid = run_id()
if rid and redis.call('HGET', pre .. 'trun', t) ~= rid then return 2 end
redis.call('ZREM', pre .. 'tlease', t)
redis.call('HDEL', pre .. 'towner', t)
redis.call('HDEL', pre .. 'trun', t)
redis.call('HSET', pre .. 'tbatches', t, ARGV[3])
local e = string.match(t, '^(%d+):')
redis.call('HINCRBY', pre .. 'edone', e, 1)
redis.call('HINCRBY', pre .. 'stats', 'tasks_done', 1)
if tonumber(dropped) > 0 then
  redis.call('HINCRBY', pre .. 'estats', e .. ':dropped_records', dropped)
end
epoch_end(e)
return 1
