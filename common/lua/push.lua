#!lua
-- push: ARGV id, frame, epoch, task, seq.
-- Returns 1 stored, 2 duplicate (already queued or acknowledged), 0 full.
local meta = KEYS[1]
local pre = string.sub(meta, 1, -5)
local m = redis.call('HMGET', meta, 'max_batches', 'max_bytes', 'ranks')
if not m[1] then return redis.error_reply('NOQUEUE no such queue') end
local data = pre .. 'data'
local e = ARGV[3]
if redis.call('HEXISTS', data, ARGV[1]) == 1 or
   redis.call('GETBIT', pre .. 'acked:' .. e .. ':' .. ARGV[4], ARGV[5]) == 1 then
  redis.call('HINCRBY', pre .. 'stats', 'dup_dropped', 1)
  return 2
end
local size = string.len(ARGV[2])
local maxn, maxb = tonumber(m[1]), tonumber(m[2])
if size > maxb then
  return redis.error_reply('TOOBIG batch of ' .. size ..
         ' bytes exceeds the queue byte budget of ' .. maxb)
end
-- Batches of an epoch the trainers have not reached get 3/4 of the
-- budgets, so a task of the current epoch that must be redone finds room.
local open = redis.call('HGET', pre .. 'job', 'epoch_open')
if open and tonumber(e) > tonumber(open) then
  maxn = math.max(1, math.floor(maxn * 3 / 4))
  maxb = math.floor(maxb * 3 / 4)
end
local ranks = tonumber(m[3] or '0')
local stage = pre .. 'stage:' .. e
-- A push that completes a round of a coordinated queue is taken even over
-- the budget: the round's other batches wait in stage and only a full
-- round frees them, so refusing it could stall every rank.
local completes = ranks > 0 and redis.call('LLEN', stage) + 1 >= ranks
local used = tonumber(redis.call('GET', pre .. 'bytes') or '0')
if not completes and (redis.call('HLEN', data) + 1 > maxn or used + size > maxb) then
  return 0
end
redis.call('HSET', data, ARGV[1], ARGV[2])
redis.call('INCRBY', pre .. 'bytes', size)
redis.call('HINCRBY', pre .. 'stats', 'pushed', 1)
redis.call('HINCRBY', pre .. 'stats', 'pushed_bytes', size)
redis.call('HINCRBY', pre .. 'estats', e .. ':pushed', 1)
if ranks > 0 then
  redis.call('LPUSH', stage, ARGV[1])
  if completes then
    for r = 0, ranks - 1 do
      redis.call('LMOVE', stage, pre .. 'ready:' .. e .. ':' .. r, 'RIGHT', 'LEFT')
    end
  end
else
  redis.call('LPUSH', pre .. 'ready:' .. e, ARGV[1])
end
return 1
