#!lua
-- submit: ARGV epochs, ntasks, batch_size, seed, max_attempts, now_us,
-- then ntasks task definitions (shard 0, 1, ...), then one string per
-- epoch with that epoch's task order ("3,0,2,1"), and optionally the
-- shards the definitions are for ("1,4,7": a partition's share of a job
-- whose shards are numbered across the queue). Replaces a finished job
-- once its batches are consumed; refuses while one runs. Returns the number
-- of tasks queued. The same call sent again (its reply was lost) finds its
-- own job by now_us and returns that number again.
--! include lib
if redis.call('EXISTS', meta) == 0 then
  return redis.error_reply('NOQUEUE no such queue')
end
local epochs, ntasks = tonumber(ARGV[1]), tonumber(ARGV[2])
if #ARGV ~= 6 + ntasks + epochs and #ARGV ~= 7 + ntasks + epochs then
  return redis.error_reply('INVALID submit expects ' .. (6 + ntasks + epochs) .. ' arguments')
end
local shards = {}
if #ARGV == 7 + ntasks + epochs then
  for s in string.gmatch(ARGV[#ARGV], '%d+') do shards[#shards + 1] = s end
  if #shards ~= ntasks then
    return redis.error_reply('INVALID submit lists ' .. #shards .. ' shards for ' ..
                             ntasks .. ' definitions')
  end
else
  for s = 0, ntasks - 1 do shards[s + 1] = tostring(s) end
end
if redis.call('EXISTS', job) == 1 then
  local st = redis.call('HMGET', job, 'state', 'epoch_open', 'epochs', 'submitted_us')
  if st[4] == ARGV[6] then
    local n = 0
    for e = 0, epochs - 1 do
      for _ in string.gmatch(ARGV[7 + ntasks + e], '%d+') do n = n + 1 end
    end
    return n
  end
  if st[1] ~= 'finished' then
    return redis.error_reply('JOBEXISTS the queue runs a job (epoch ' .. st[2] .. ' of ' ..
                             st[3] .. '); wait for it to finish or delete the queue')
  end
  -- The new job's batch ids repeat the old one's: batches of the old job
  -- still held would make push drop the new ones as duplicates.
  local held = redis.call('HLEN', pre .. 'dlv')
  if held > 0 then
    return redis.error_reply('JOBEXISTS the previous job is finished but ' .. held ..
                             ' of its batches are not consumed yet; wait for the ' ..
                             'consumers or delete the queue')
  end
  local ranks = tonumber(redis.call('HGET', meta, 'ranks') or '0')
  for e = 0, tonumber(st[3]) - 1 do
    redis.call('DEL', ready_key(e, nil), pre .. 'stage:' .. e)
    for r = 0, ranks - 1 do redis.call('DEL', ready_key(e, r)) end
  end
  for _, k in ipairs(redis.call('SMEMBERS', pre .. 'bitmaps')) do redis.call('DEL', k) end
  for _, s in ipairs({'job', 'taskdef', 'tasks', 'tlease', 'towner', 'tattempts', 'terr',
                      'tbatches', 'tresume', 'failed', 'edone', 'eof', 'estats',
                      'bitmaps'}) do
    redis.call('DEL', pre .. s)
  end
end
redis.call('HSET', job, 'epochs', epochs, 'ntasks', ntasks, 'batch_size', ARGV[3],
           'seed', ARGV[4], 'max_attempts', ARGV[5], 'submitted_us', ARGV[6],
           'epoch_open', 0, 'state', 'running')
for s = 0, ntasks - 1 do
  redis.call('HSET', pre .. 'taskdef', shards[s + 1], ARGV[7 + s])
end
local n = 0
for e = 0, epochs - 1 do
  for s in string.gmatch(ARGV[7 + ntasks + e], '%d+') do
    redis.call('RPUSH', pre .. 'tasks', e .. ':' .. s)
    n = n + 1
  end
end
redis.call('LPUSH', pre .. 'task_wake', 1)
redis.call('LTRIM', pre .. 'task_wake', 0, 15)
return n
