-- Shared helpers, included by the scripts that need them. KEYS[1] is
-- "sluice:{Q}:meta"; every other key is derived from its prefix.
local meta = KEYS[1]
local pre = string.sub(meta, 1, -5)
local job = pre .. 'job'
-- Redis Cluster: while the queue's slot migrates, this fails (the guard
-- key never exists) before the script writes anything, so a script sent
-- again once the slot has moved never ran half.
redis.call('EXISTS', meta, pre .. 'guard')

local function wake_producers()
  redis.call('LPUSH', pre .. 'room', '1')
  redis.call('LTRIM', pre .. 'room', '0', '15')
end

-- The list a batch of epoch e waits in: one per epoch, or one per epoch
-- and rank in a coordinated queue.
local function ready_key(e, rank)
  if rank and rank ~= '' then
    return pre .. 'ready:' .. e .. ':' .. rank
  end
  return pre .. 'ready:' .. e
end

-- Removes a batch from the queue (frame, delivery count, byte budget).
local function forget(id)
  local b = pre .. 'b:' .. id
  local size = redis.call('STRLEN', b)
  redis.call('UNLINK', b)
  redis.call('HDEL', pre .. 'dlv', id)
  redis.call('DECRBY', pre .. 'bytes', size)
  return size
end

-- Moves a batch to the dead-letter list with its reason; its frame is
-- kept as deadb:<id>.
local function dead_letter(id, reason, now)
  local b = pre .. 'b:' .. id
  local size = 0
  if redis.call('EXISTS', b) == 1 then
    size = redis.call('STRLEN', b)
    redis.call('RENAME', b, pre .. 'deadb:' .. id)
  end
  redis.call('HDEL', pre .. 'dlv', id)
  redis.call('DECRBY', pre .. 'bytes', size)
  redis.call('RPUSH', pre .. 'dead', id)
  redis.call('HSET', pre .. 'deadinfo', id, size .. ' ' .. now .. ' ' .. reason)
  redis.call('HINCRBY', pre .. 'stats', 'dead', '1')
  wake_producers()
end

-- Where a batch handed back goes: the list of its epoch, or, when that
-- epoch has ended already, the first epoch still open (it is delivered
-- late, with its delivery count showing it is a redelivery).
local function requeue_list(id, rank)
  local e = string.match(id, '^(%d+):')
  local open = redis.call('HGET', job, 'epoch_open')
  if not e then
    e = open or '0'
  elseif open and redis.call('HEXISTS', pre .. 'eof', e) == 1 then
    local last = tonumber(redis.call('HGET', job, 'epochs')) - 1
    e = tostring(math.min(tonumber(open), last))
  end
  return ready_key(e, rank)
end

-- Hands back every batch consumer cid holds, counting in dlv one more
-- delivery that ended without an acknowledgement, except for the ids in
-- unseen (taken but never handed to the application). A batch delivered
-- maxd times (maxd > 0) goes to the dead-letter list instead.
local function give_back(cid, maxd, now, unseen)
  local pending = pre .. 'pending:' .. cid
  local rank = redis.call('HGET', pre .. 'crank', cid)
  local n = 0
  while true do
    -- Newest first, each to the front: the oldest ends up next in line.
    local id = redis.call('LPOP', pending)
    if not id then break end
    if string.sub(id, 1, 4) == 'eof:' then
      redis.call('RPUSH', ready_key(string.sub(id, 5), rank), id)
    else
      local v = redis.call('HGET', pre .. 'dlv', id)
      local d = tonumber(v or '0')
      -- Only a batch still held (it has a count) is counted.
      if v and not unseen[id] then
        d = d + 1
        redis.call('HSET', pre .. 'dlv', id, d)
      end
      if maxd > 0 and d >= maxd then
        dead_letter(id, 'delivered ' .. d .. ' times without an acknowledgement', now)
      else
        redis.call('RPUSH', requeue_list(id, rank), id)
        n = n + 1
      end
    end
  end
  if n > 0 then redis.call('HINCRBY', pre .. 'stats', 'requeued', n) end
  return n
end

local function drop_consumer(cid)
  redis.call('HDEL', pre .. 'consumers', cid)
  redis.call('HDEL', pre .. 'crank', cid)
  redis.call('DEL', pre .. 'cstats:' .. cid)
end

-- Pushes marker (unless nil: pushed already) into epoch e's list and moves
-- epoch_open past every epoch whose end is posted.
local function post_markers(e, marker)
  if marker then redis.call('LPUSH', ready_key(e, nil), marker) end
  local open = tonumber(redis.call('HGET', job, 'epoch_open') or '0')
  while redis.call('HEXISTS', pre .. 'eof', open) == 1 and
        redis.call('HGET', job, 'final_pending') ~= tostring(open) do
    open = open + 1
  end
  redis.call('HSET', job, 'epoch_open', open)
  if open >= tonumber(redis.call('HGET', job, 'epochs')) then
    redis.call('HSET', job, 'state', 'finished')
    -- Producers waiting for a task learn at once that none will come.
    redis.call('LPUSH', pre .. 'task_wake', 1)
    redis.call('LTRIM', pre .. 'task_wake', 0, 15)
  end
  wake_producers()
end

-- Posts the end of epoch e once every task of e is done or failed: in a
-- coordinated queue the last, incomplete round is dropped or padded first;
-- then an end marker goes behind the epoch's last batch in every list.
-- In a free queue the end of the job's last epoch waits until no batch is
-- held (see final_if_drained).
local function epoch_end(e)
  local ntasks = tonumber(redis.call('HGET', job, 'ntasks') or '0')
  if ntasks == 0 then return end
  if tonumber(redis.call('HGET', pre .. 'edone', e) or '0') < ntasks then return end
  if redis.call('HSETNX', pre .. 'eof', e, 1) == 0 then return end
  local cfg = redis.call('HMGET', meta, 'ranks', 'remainder')
  local n = tonumber(cfg[1] or '0')
  local marker = 'eof:' .. e
  if n > 0 then
    local stage = pre .. 'stage:' .. e
    local left = redis.call('LLEN', stage)
    if left > 0 and cfg[2] == 'pad' then
      local k = 0
      while redis.call('LLEN', stage) < n do
        local src = redis.call('LINDEX', stage, -1 - (k % left))
        k = k + 1
        local pad = src .. ':pad' .. k
        redis.call('COPY', pre .. 'b:' .. src, pre .. 'b:' .. pad)
        redis.call('HSET', pre .. 'dlv', pad, '0')
        redis.call('INCRBY', pre .. 'bytes', redis.call('STRLEN', pre .. 'b:' .. pad))
        redis.call('LPUSH', stage, pad)
        redis.call('HINCRBY', pre .. 'estats', e .. ':padded', '1')
      end
      for r = 0, n - 1 do
        redis.call('LMOVE', stage, ready_key(e, r), 'RIGHT', 'LEFT')
      end
    elseif left > 0 then
      for _, id in ipairs(redis.call('LRANGE', stage, 0, -1)) do
        forget(id)
        redis.call('HINCRBY', pre .. 'estats', e .. ':dropped', '1')
      end
      redis.call('DEL', stage)
    end
    for r = 0, n - 1 do redis.call('LPUSH', ready_key(e, r), marker) end
    post_markers(e, nil)
    return
  end
  if tonumber(e) == tonumber(redis.call('HGET', job, 'epochs')) - 1 then
    -- Every task is done: producers may go.
    redis.call('HSET', job, 'state', 'finished')
    redis.call('LPUSH', pre .. 'task_wake', 1)
    redis.call('LTRIM', pre .. 'task_wake', 0, 15)
    if redis.call('HLEN', pre .. 'dlv') > 0 then
      -- The job's last end waits for every batch to be acknowledged: a
      -- consumer that dies holding some hands them back after its lease,
      -- and no epoch would follow to deliver them in. ack, dead, reap and
      -- requeue post it once nothing is held (final_if_drained).
      redis.call('HSET', job, 'final_pending', e)
      return
    end
  end
  post_markers(e, marker)
end

-- Posts the job's last end once no batch is held any more.
local function final_if_drained()
  local e = redis.call('HGET', job, 'final_pending')
  if e and redis.call('HLEN', pre .. 'dlv') == 0 then
    redis.call('HDEL', job, 'final_pending')
    post_markers(e, 'eof:' .. e)
  end
end

-- A task leaves its producer without being done: it is tried again, or,
-- after max_attempts counted attempts, recorded as failed (its epoch can
-- then end without it).
local function task_failed(t, err, counted)
  redis.call('ZREM', pre .. 'tlease', t)
  redis.call('HDEL', pre .. 'towner', t)
  redis.call('HSET', pre .. 'terr', t, err)
  local att = tonumber(redis.call('HGET', pre .. 'tattempts', t) or '0')
  if not counted then
    redis.call('HINCRBY', pre .. 'tattempts', t, -1)
  end
  if counted and att >= tonumber(redis.call('HGET', job, 'max_attempts') or '3') then
    redis.call('RPUSH', pre .. 'failed', t)
    local e = string.match(t, '^(%d+):')
    redis.call('HINCRBY', pre .. 'edone', e, 1)
    redis.call('HINCRBY', pre .. 'estats', e .. ':failed_tasks', 1)
    epoch_end(e)
  else
    redis.call('LPUSH', pre .. 'tasks', t)
  end
  redis.call('LPUSH', pre .. 'task_wake', 1)
  redis.call('LTRIM', pre .. 'task_wake', 0, 15)
end

-- Returns every task whose lease ran out to the waiting list.
local function reap_tasks(now)
  local n = 0
  for _, t in ipairs(redis.call('ZRANGEBYSCORE', pre .. 'tlease', '-inf', now, 'LIMIT', 0, 64)) do
    local owner = redis.call('HGET', pre .. 'towner', t) or '?'
    task_failed(t, 'lease expired: producer ' .. owner .. ' stopped renewing it', true)
    n = n + 1
  end
  if n > 0 then redis.call('HINCRBY', pre .. 'stats', 'tasks_reaped', n) end
  return n
end
