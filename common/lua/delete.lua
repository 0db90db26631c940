#!lua flags=allow-oom
-- delete: ARGV[1] 'swept' or nothing. Removes the queue in steps of about
-- 1000 keys, so that no queue is big enough to block Redis while it goes.
-- The first step renames meta to 'deleting': from then on the queue does
-- not exist for anybody (every script answers NOQUEUE), and create refuses
-- the name until the last step. Run it until it says it is done: returns
-- {keys removed by this step, 1 while more remain, 2 when only the caller's
-- sweep is left, else 0}. On 2 the caller removes the keys no registry
-- names: the in: keys of pushes whose script never ran and the pgone: and
-- cgone: keys of peers reaped while frozen (SCAN MATCH sluice:{Q}:* and
-- UNLINK of those, from the client: no script walks the key space), then
-- runs it with 'swept'.
--! include lib
local gone = pre .. 'deleting'
if redis.call('EXISTS', meta) == 1 then
  redis.call('RENAME', meta, gone)
  local ep = redis.call('HGET', job, 'epochs')
  local st = redis.call('HMGET', pre .. 'jstage', 'epochs', 'clear_until')
  redis.call('HSET', gone, 'del_e', 0, 'del_until',
             math.max(1, tonumber(ep or '0'), tonumber(st[1] or '0'), tonumber(st[2] or '0')),
             'del_phase', 1)
elseif redis.call('EXISTS', gone) == 0 then
  return redis.error_reply('NOQUEUE no such queue')
end
local ranks = tonumber(redis.call('HGET', gone, 'ranks') or '0')
local budget, n = 1000, 0
local function del(keys)
  if #keys > 0 then
    n = n + redis.call('UNLINK', unpack(keys))
    budget = budget - #keys
  end
end
-- The keys named after the fields of hash h (prefix .. field .. suffix);
-- returns true once h is empty.
local function by_field(h, names)
  local fs = redis.call('HRANDFIELD', pre .. h, math.max(1, math.floor(budget / #names)))
  if #fs == 0 then return true end
  local keys = {}
  for _, f in ipairs(fs) do
    for _, nm in ipairs(names) do keys[#keys + 1] = pre .. nm .. f end
  end
  del(keys)
  redis.call('HDEL', pre .. h, unpack(fs))
  return false
end
local phase = tonumber(redis.call('HGET', gone, 'del_phase'))
while budget > 0 and phase < 9 do
  local done = false
  if phase == 1 then
    done = by_field('consumers', {'pending:', 'cstats:'})
  elseif phase == 2 then
    done = by_field('producers', {'pstats:'})
  elseif phase == 3 then
    local bms = redis.call('SPOP', pre .. 'bitmaps', budget)
    del(bms)
    done = #bms == 0
  elseif phase == 4 then
    done = by_field('dlv', {'b:'})
  elseif phase == 5 then
    local ids = redis.call('LPOP', pre .. 'dead', budget) or {}
    local keys = {}
    for i, id in ipairs(ids) do keys[i] = pre .. 'deadb:' .. id end
    del(keys)
    done = #ids == 0
  elseif phase == 6 then
    local c = redis.call('HMGET', gone, 'del_e', 'del_until')
    local e, stop = tonumber(c[1]), tonumber(c[2])
    while e < stop and budget > 0 do
      local keys = {ready_key(e, nil), pre .. 'stage:' .. e, tasks_key(e)}
      for r = 0, ranks - 1 do keys[#keys + 1] = ready_key(e, r) end
      del(keys)
      e = e + 1
    end
    redis.call('HSET', gone, 'del_e', e)
    done = e >= stop
  elseif phase == 7 then
    -- Checkpoints, and the frames they keep.
    local r = ckpt_clear(budget)
    if r[1] > 0 then
      n = n + r[1]
      budget = budget - r[1]
    end
    done = r[2]
  elseif phase == 8 then
    -- Frames of pushes whose script never ran (a MULTI whose EVALSHA
    -- found no script): the caller's sweep.
    if ARGV[1] ~= 'swept' then
      redis.call('HSET', gone, 'del_phase', phase)
      return {n, 2}
    end
    done = true
  end
  if done then phase = phase + 1 end
end
redis.call('HSET', gone, 'del_phase', phase)
if phase < 9 then return {n, 1} end
local keys = {}
for i, s in ipairs({'dlv', 'bytes', 'room', 'stats', 'estats', 'consumers', 'ctoken', 'crank',
                    'cckpt', 'rholder', 'producers', 'bitmaps', 'dead', 'deadinfo', 'job', 'jrun',
                    'taskdef', 'tlease', 'towner', 'tattempts', 'tcrashes', 'terr', 'tbatches',
                    'tresume', 'trun', 'failed', 'edone', 'eof', 'task_wake', 'jstage',
                    'jstage:taskdef', 'redo', 'recover', 'recover_pause', 'unsure', 'runid', 'dropped',
                    'cowners', 'retained', 'retained_bytes', 'ptoken', 'pstats_gone',
                    'cstats_gone'}) do
  keys[i] = pre .. s
end
n = n + redis.call('UNLINK', unpack(keys))
redis.call('DEL', gone)
return {n + 1, 0}
