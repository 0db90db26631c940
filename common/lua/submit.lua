#!lua
-- submit: puts a job into the queue in steps of a few milliseconds each,
-- so that a job of millions of tasks never blocks Redis, and makes it
-- visible at once at the end: all or nothing. ARGV op, token, then:
--   begin  epochs nshards batch_size seed max_attempts max_crashes
--          [shuffle_buffer drop_remainder] (both '0' when left out)
--          checks that the queue takes a job (none runs; the batches of a
--          finished one are all consumed) and claims the staging area
--          (jstage) for token. Returns how many keys left by the previous
--          job (or by a submit that never finished) 'clear' must remove.
--   clear  removes up to 1000 of those keys; returns how many are left.
--   defs   shard def [shard def ...]: up to 1000 task definitions
--   tasks  epoch 'epoch:shard' [...]: up to 1000 tasks, in order, appended
--          to the epoch's waiting list (no one claims them yet: the job is
--          not there)
--   commit replaces the previous job by this one (the counts must add up)
--          and returns its number of tasks; sent again (its reply was
--          lost) it returns that number again.
--   abort  gives the staging area up: removes up to 1000 keys of what it
--          staged per call, and returns how many are left (0: it is gone).
-- A staging area untouched for 10 s belongs to a submit that died: the
-- next begin takes it over.
--! include lib
local nq = noqueue() if nq then return nq end
local op, tok = ARGV[1], ARGV[2]
local stage = pre .. 'jstage'
local now = now_ms()
local ranks = tonumber(redis.call('HGET', meta, 'ranks') or '0')

local function mine()
  if redis.call('HGET', stage, 'token') ~= tok then
    return redis.error_reply('INVALID the staging of this submit was taken over or ' ..
                             'abandoned; submit again')
  end
  redis.call('HSET', stage, 'touched', now)
  return nil
end

-- The keys clear still has to remove: bitmaps, checkpoints and the
-- frames they keep, then per epoch its lists.
local function left()
  local c = redis.call('HMGET', stage, 'clear_e', 'clear_until')
  return redis.call('SCARD', pre .. 'bitmaps') + redis.call('HLEN', pre .. 'retained') +
         redis.call('SCARD', pre .. 'cowners') +
         math.max(0, tonumber(c[2]) - tonumber(c[1])) * (3 + ranks)
end

if op == 'begin' then
  local st = redis.call('HMGET', jrun, 'state', 'epoch_open')
  local jc = redis.call('HMGET', job, 'epochs', 'token')
  st[3], st[4] = jc[1], jc[2]
  if st[4] == tok then return 0 end   -- committed already
  if st[1] and st[1] ~= 'finished' then
    return redis.error_reply('JOBEXISTS the queue runs a job (epoch ' .. st[2] .. ' of ' ..
                             st[3] .. '); wait for it to finish or delete the queue')
  end
  -- The new job's batch ids repeat the old one's: batches of the old job
  -- still held would make push drop the new ones as duplicates. (Those a
  -- producer dropped at the end of a coordinated epoch go now, 1000 a call.)
  forget_dropped(1000)
  local dropped = redis.call('LLEN', pre .. 'dropped')
  if dropped > 0 then
    return redis.error_reply('JOBEXISTS the previous job is finished but ' .. dropped ..
                             ' batches it dropped at the ends of coordinated epochs are ' ..
                             'still to be forgotten (1000 at a time); submit again')
  end
  local held = held_count()
  if held > 0 then
    return redis.error_reply('JOBEXISTS the previous job is finished but ' .. held ..
                             ' of its batches are not consumed yet; wait for the ' ..
                             'consumers or delete the queue')
  end
  local old = redis.call('HMGET', stage, 'token', 'touched', 'epochs', 'clear_until')
  if old[1] and old[1] ~= tok and now - tonumber(old[2]) < 10000 then
    return redis.error_reply('BUSY another submit to this queue is under way (staging ' ..
                             'since ' .. (now - tonumber(old[2])) .. ' ms ago)')
  end
  local until_e = math.max(tonumber(st[3] or '0'), tonumber(old[3] or '0'),
                           tonumber(old[4] or '0'))
  redis.call('UNLINK', stage, pre .. 'jstage:taskdef')
  redis.call('HSET', stage, 'token', tok, 'touched', now, 'epochs', ARGV[3],
             'nshards', ARGV[4], 'batch_size', ARGV[5], 'seed', ARGV[6],
             'max_attempts', ARGV[7], 'max_crashes', ARGV[8], 'defs', 0, 'tasks', 0,
             'clear_e', 0, 'clear_until', until_e,
             'shuffle_buffer', ARGV[9] or '0', 'drop_remainder', ARGV[10] or '0')
  return left()
end

if op == 'commit' then
  if redis.call('HGET', job, 'token') == tok then
    local j = redis.call('HMGET', job, 'ntasks', 'epochs')
    return tonumber(j[1]) * tonumber(j[2])
  end
  local err = mine()
  if err then return err end
  local s = redis.call('HMGET', stage, 'epochs', 'nshards', 'batch_size', 'seed',
                       'max_attempts', 'max_crashes', 'defs', 'tasks',
                       'shuffle_buffer', 'drop_remainder')
  local epochs, nshards = tonumber(s[1]), tonumber(s[2])
  -- Acknowledgements since the last clear (of batches pushed without a
  -- job, say) may have added a few bitmaps.
  local bms = redis.call('SPOP', pre .. 'bitmaps', 1000)
  if #bms > 0 then redis.call('UNLINK', unpack(bms)) end
  if left() > 0 or tonumber(s[7]) ~= nshards or tonumber(s[8]) ~= nshards * epochs then
    return redis.error_reply('INVALID submit commit: ' .. s[7] .. ' of ' .. nshards ..
                             ' definitions and ' .. s[8] .. ' of ' .. nshards * epochs ..
                             ' tasks staged, ' .. left() .. ' old keys left')
  end
  local st = redis.call('HGET', jrun, 'state')
  if (st and st ~= 'finished') or held_count() > 0 then
    return redis.error_reply('JOBEXISTS the queue took another job meanwhile')
  end
  for _, k in ipairs({'job', 'jrun', 'taskdef', 'tlease', 'towner', 'tattempts', 'tcrashes', 'terr',
                      'tbatches', 'tresume', 'trun', 'failed', 'edone', 'eof', 'estats',
                      'bitmaps', 'redo'}) do
    redis.call('UNLINK', pre .. k)
  end
  if nshards > 0 then redis.call('RENAME', pre .. 'jstage:taskdef', pre .. 'taskdef') end
  redis.call('HSET', job, 'epochs', epochs, 'ntasks', nshards, 'batch_size', s[3],
             'seed', s[4], 'max_attempts', s[5], 'max_crashes', s[6], 'token', tok,
             'submitted_us', now * 1000,
             'shuffle_buffer', s[9] or '0', 'drop_remainder', s[10] or '0')
  redis.call('HSET', jrun, 'epoch_open', 0, 'state', 'running', 'twaiting', nshards * epochs,
             'tscan', 0, 'epochs', epochs)
  redis.call('DEL', stage)
  wake_task_waiters()
  return nshards * epochs
end

local err = mine()
if err then return err end
if op == 'abort' and redis.call('HGET', stage, 'aborting') ~= '1' then
  -- From now on clear removes what this submit staged too.
  redis.call('UNLINK', pre .. 'jstage:taskdef')
  redis.call('HSET', stage, 'aborting', 1, 'clear_e', 0, 'clear_until',
             math.max(tonumber(redis.call('HGET', stage, 'epochs')),
                      tonumber(redis.call('HGET', stage, 'clear_until'))))
end
if op == 'clear' or op == 'abort' then
  local budget = 1000
  local bms = redis.call('SPOP', pre .. 'bitmaps', budget)
  if #bms > 0 then redis.call('UNLINK', unpack(bms)) end
  budget = budget - #bms
  if budget > 0 then budget = budget - ckpt_clear(budget)[1] end
  local c = redis.call('HMGET', stage, 'clear_e', 'clear_until')
  local e, stop = tonumber(c[1]), tonumber(c[2])
  while e < stop and budget > 0 do
    redis.call('UNLINK', ready_key(e, nil), pre .. 'stage:' .. e, tasks_key(e))
    for r = 0, ranks - 1 do redis.call('UNLINK', ready_key(e, r)) end
    budget = budget - 3 - ranks
    e = e + 1
  end
  redis.call('HSET', stage, 'clear_e', e)
  local n = left()
  if n == 0 and op == 'abort' then redis.call('DEL', stage) end
  return n
elseif op == 'defs' then
  if #ARGV > 2 then
    redis.call('HSET', pre .. 'jstage:taskdef', unpack(ARGV, 3))
    redis.call('HINCRBY', stage, 'defs', (#ARGV - 2) / 2)
  end
  return 1
elseif op == 'tasks' then
  if #ARGV > 3 then
    redis.call('RPUSH', tasks_key(ARGV[3]), unpack(ARGV, 4))
    redis.call('HINCRBY', stage, 'tasks', #ARGV - 3)
  end
  return 1
end
return redis.error_reply('INVALID submit: unknown step ' .. op)
